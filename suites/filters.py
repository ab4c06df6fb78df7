"""`--filter EXPR`: choose cases of a suite.

EXPR is space-separated terms, all of which must match:
  key=value[,value...]   a case field (workload, framework, device, strategy, precision,
                         n_devices) or a workload parameter (m, batch, layout, ...)
  anything else          a glob on the case id (`*` added at both ends when it has no wildcard)
e.g. `--filter "framework=torch precision=fp32,bf16 matmul"`.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Callable, Sequence

from .case import Case
from .errors import UserError

FIELDS = ("workload", "framework", "device", "strategy", "precision", "n_devices")


def _term(term: str) -> Callable[[Case], bool]:
    if "=" in term:
        key, _, value = term.partition("=")
        wanted = set(value.split(","))

        def by_value(case: Case) -> bool:
            actual = getattr(case, key) if key in FIELDS else case.param_dict.get(key)
            return actual is not None and str(actual) in wanted
        return by_value
    pattern = term if any(ch in term for ch in "*?[") else f"*{term}*"
    return lambda case: fnmatchcase(case.id, pattern)


def select(cases: Sequence[Case], expression: str | None, suite_name: str) -> list[Case]:
    if not expression or not expression.strip():
        return list(cases)
    terms = [_term(term) for term in expression.split()]
    chosen = [case for case in cases if all(term(case) for term in terms)]
    if not chosen:
        raise UserError(f"filter {expression!r} matches none of the {len(cases)} cases of suite "
                        f"{suite_name}; see them with `parbench list --suite {suite_name}`")
    return chosen
