#!/usr/bin/env python
"""Train short, test long (pe-length): see pe_tools/length_experiment.py."""
import sys

from pe_tools.length_experiment import main

if __name__ == "__main__":
    sys.exit(main())
