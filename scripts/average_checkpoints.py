#!/usr/bin/env python
"""Average fairseq checkpoints (pe-average): see pe_tools/average.py.
Kept beside pe-average: docs/fairseq.md, docs/tools.md and examples/wmt14/README.md run it from a checkout."""
import sys

from pe_tools.average import main

if __name__ == "__main__":
    sys.exit(main())
