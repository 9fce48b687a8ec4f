#!/usr/bin/env python
"""Train and decode a recipe (pe-train / pe-generate): see pe_tools/recipes/launch.py.
Kept beside pe-train / pe-generate: the recipes (examples/wmt14/*.sh, docs/recipes.md) run it from a checkout."""
import sys

from pe_tools.recipes.launch import main

if __name__ == "__main__":
    sys.exit(main())
