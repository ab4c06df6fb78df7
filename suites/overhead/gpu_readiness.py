"""`python -m suites.overhead.gpu_readiness`: the old module path of `parbench ready`
(`suites.selfchecks.readiness`), kept working for scripts that use it."""
from __future__ import annotations

import sys

from suites.selfchecks.readiness import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
