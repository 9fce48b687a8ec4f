#!/usr/bin/env python
"""Train short, test long (pe-length): see pe_tools/length_experiment.py.
Kept beside pe-length: `make length` (Makefile) runs it from a checkout."""
import sys

from pe_tools.length_experiment import main

if __name__ == "__main__":
    sys.exit(main())
