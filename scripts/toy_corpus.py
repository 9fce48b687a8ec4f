#!/usr/bin/env python
"""Write the toy corpus: see pe_tools/synthetic/toy.py."""
import sys

from pe_tools.synthetic.toy import main

if __name__ == "__main__":
    sys.exit(main())
