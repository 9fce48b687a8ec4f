#!/usr/bin/env python
"""Identical-word probing of a checkpoint (pe-probe): see pe_tools/probe.py.
Kept beside pe-probe: examples/multi30k/analysis/README.md runs it from a checkout."""
import sys

from pe_tools.probe import main

if __name__ == "__main__":
    sys.exit(main())
