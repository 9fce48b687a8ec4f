#!/usr/bin/env python
"""Average fairseq checkpoints (pe-average): see pe_tools/average.py."""
import sys

from pe_tools.average import main

if __name__ == "__main__":
    sys.exit(main())
