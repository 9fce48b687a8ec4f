#!/usr/bin/env python
"""Write the grammar corpus: see pe_tools/synthetic/grammar.py."""
import sys

from pe_tools.synthetic.grammar import main

if __name__ == "__main__":
    sys.exit(main())
