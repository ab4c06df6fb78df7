"""`--filter EXPR`: choose cases of a suite.

EXPR is space-separated terms, all of which must match:
  key=value[,value...]   a case field (workload, framework, device, strategy, precision,
                         n_devices, compile) or a workload parameter (m, batch, layout, ...)
  anything else          a glob on the case id (`*` added at both ends when it has no wildcard)
e.g. `--filter "framework=torch precision=fp32,bf16 matmul"`, `--filter "compile=none,inductor"`.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Callable, Sequence

from suites.cases.case import Case
from suites.errors import UserError

FIELDS = ("workload", "framework", "device", "strategy", "precision", "n_devices", "compile")


def _value(case: Case, key: str) -> object | None:
    return getattr(case, key) if key in FIELDS else case.param_dict.get(key)


def _term(term: str) -> Callable[[Case], bool]:
    if "=" in term:
        key, _, value = term.partition("=")
        wanted = set(value.split(","))

        def by_value(case: Case) -> bool:
            actual = _value(case, key)
            return actual is not None and str(actual) in wanted
        return by_value
    pattern = term if any(ch in term for ch in "*?[") else f"*{term}*"
    return lambda case: fnmatchcase(case.id, pattern)


def _keys(cases: Sequence[Case]) -> list[str]:
    """What a key=value term may name here: the case fields, then the cases' parameter names."""
    return [*FIELDS, *sorted({name for case in cases for name in case.param_dict})]


def _occurring(cases: Sequence[Case], key: str) -> list[str]:
    """The values of `key` in `cases`, in the suite's order."""
    return list(dict.fromkeys(str(value) for case in cases if (value := _value(case, key)) is not None))


def _check_keys(cases: Sequence[Case], terms: list[str], expression: str, suite_name: str) -> None:
    keys = _keys(cases)
    for key in (term.partition("=")[0] for term in terms if "=" in term):
        if key not in keys:
            raise UserError(f"filter {expression!r}: unknown key {key!r}; keys of suite {suite_name}: "
                            f"{', '.join(keys)}")


def _absent_values(cases: Sequence[Case], terms: list[str]) -> str:
    """Why a filter matches nothing, where one term alone explains it: none of its values occurs."""
    for key, _, value in (term.partition("=") for term in terms if "=" in term):
        occurring = _occurring(cases, key)
        if not set(value.split(",")) & set(occurring):
            return (f": no case has {key} {' or '.join(value.split(','))}; the suite's {key} values: "
                    f"{', '.join(occurring)}")
    return ""


def select(cases: Sequence[Case], expression: str | None, suite_name: str) -> list[Case]:
    if not expression or not expression.strip():
        return list(cases)
    terms = expression.split()
    _check_keys(cases, terms, expression, suite_name)
    matchers = [_term(term) for term in terms]
    chosen = [case for case in cases if all(match(case) for match in matchers)]
    if not chosen:
        raise UserError(f"filter {expression!r} matches none of the {len(cases)} cases of suite "
                        f"{suite_name}{_absent_values(cases, terms)}; see them with "
                        f"`parbench list --suite {suite_name}`")
    return chosen
