#!/usr/bin/env python
"""Word-swap probe of a checkpoint (pe-swap-probe): see pe_tools/swap_probe.py.
Kept beside pe-swap-probe: examples/multi30k/analysis/README.md runs it from a checkout."""
import sys

from pe_tools.swap_probe import main

if __name__ == "__main__":
    sys.exit(main())
