"""`parbench worker`: one process of one case, as torchrun or a TF_CONFIG task starts it
(`suites.runner.case_process`)."""
from __future__ import annotations

from suites.runner.case_process import SUMMARY, add_arguments, run

#: The worker checks the case knobs itself, in the process that runs the case.
KNOBS: tuple[str, ...] = ()

__all__ = ["KNOBS", "SUMMARY", "add_arguments", "run"]
