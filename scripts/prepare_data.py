#!/usr/bin/env python3
"""Prepare parallel text as fairseq binaries (pe-prepare): see pe_tools/data/cli.py."""
import sys

from pe_tools.data.cli import main

if __name__ == "__main__":
    sys.exit(main())
