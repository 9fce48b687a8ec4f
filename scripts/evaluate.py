#!/usr/bin/env python
"""Score translations against a reference and a baseline (pe-evaluate): see pe_tools/scoring/cli.py.
Kept beside pe-evaluate: docs/tools.md, docs/recipes.md and the examples' READMEs run it from a checkout."""
import sys

from pe_tools.scoring.cli import main

if __name__ == "__main__":
    sys.exit(main())
