#!/usr/bin/env python
"""Score translations against a reference and a baseline (pe-evaluate): see pe_tools/scoring/cli.py."""
import sys

from pe_tools.scoring.cli import main

if __name__ == "__main__":
    sys.exit(main())
