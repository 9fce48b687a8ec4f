#!/usr/bin/env python3
"""Prepare parallel text as fairseq binaries (pe-prepare): see pe_tools/data/cli.py.
Kept beside pe-prepare: examples/wmt14/prepare.sh and docs/tools.md run it from a checkout."""
import sys

from pe_tools.data.cli import main

if __name__ == "__main__":
    sys.exit(main())
