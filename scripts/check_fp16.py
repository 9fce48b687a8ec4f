#!/usr/bin/env python
"""fp16 (fast attention) against the fp32 reference, every encoding: ``pe-bench fp16`` (pe_tools/bench/fp16_check.py)."""
import sys

from pe_tools.bench.cli import main

if __name__ == "__main__":
    sys.exit(main(["fp16", *sys.argv[1:]]))
