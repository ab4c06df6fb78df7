"""What a time or a count read from a results file must be, defined once for every source the
report reads (parbench's records, pytest-benchmark's stats, asv's results), so that each loader
refuses or ignores the same values: a time is a finite number of seconds >= 0 (not inf, -1,
"fast" or true), a count a whole number of at least its least value.

Each `*_problem` function returns '' where the value is usable (or absent: None), and otherwise
why not, naming the field, for the loader's one line about the file.
"""
from __future__ import annotations

import math
from typing import Any


def is_number(value: Any) -> bool:
    """An int or a float; a bool is none (JSON true would read as 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_seconds(value: Any) -> bool:
    return is_number(value) and math.isfinite(value) and value >= 0


def seconds_problem(name: str, value: Any) -> str:
    """Why `value`, the field `name`, is no time in seconds; '' where it is one or None."""
    if value is None or is_seconds(value):
        return ""
    return f"{name} is {value!r:.40}, not a time in seconds (a finite number >= 0)"


def count_problem(name: str, value: Any, least: int = 1) -> str:
    """Why `value`, the field `name`, is no count of at least `least`; '' where it is one or None."""
    if value is None or (is_number(value) and math.isfinite(value) and float(value).is_integer()
                         and value >= least):
        return ""
    return f"{name} is {value!r:.40}, not a count (a whole number >= {least})"
