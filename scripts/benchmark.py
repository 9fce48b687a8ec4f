#!/usr/bin/env python
"""Speed and memory benchmarks (pe-bench): see pe_tools/bench/cli.py."""
import sys

from pe_tools.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
