#!/usr/bin/env python
"""The mutation check (not part of `make test`): see pe_tools/mutation.py and docs/testing.md."""
import sys

from pe_tools.mutation import main

if __name__ == "__main__":
    sys.exit(main())
