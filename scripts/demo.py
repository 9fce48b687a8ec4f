#!/usr/bin/env python
"""The demo (pe-demo): see pe_tools/demo.py.
Kept beside pe-demo: `make demo` (Makefile) and docs/demo.md run it from a checkout."""
import sys

from pe_tools.demo import main

if __name__ == "__main__":
    sys.exit(main())
