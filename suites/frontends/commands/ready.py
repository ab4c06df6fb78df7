"""`parbench ready`: is this GPU or TPU machine ready? (`suites.selfchecks.readiness`)."""
from __future__ import annotations

from suites.selfchecks.readiness import SUMMARY, add_arguments, run

KNOBS: tuple[str, ...] = ()

__all__ = ["KNOBS", "SUMMARY", "add_arguments", "run"]
