#!/usr/bin/env python
"""The mutation check (not part of `make test`, not installed): see devtools/mutation.py and docs/dev/testing.md."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's devtools/

from devtools.mutation import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
