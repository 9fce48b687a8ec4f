#!/usr/bin/env python
"""Identical-word probing of a checkpoint (pe-probe): see pe_tools/probe.py."""
import sys

from pe_tools.probe import main

if __name__ == "__main__":
    sys.exit(main())
