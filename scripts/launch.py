#!/usr/bin/env python
"""Train and decode a recipe (pe-train / pe-generate): see pe_tools/recipes/launch.py."""
import sys

from pe_tools.recipes.launch import main

if __name__ == "__main__":
    sys.exit(main())
