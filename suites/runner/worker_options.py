"""The worker's `--case` and `--timing` read into their values, with errors that name the option:
`parbench worker` is started by people too (under torchrun, or as a task of a TF cluster), and a
bare "unexpected keyword argument" or "can only concatenate str" said neither which option nor
what it takes."""
from __future__ import annotations

import json
import math
import numbers
from dataclasses import fields
from typing import Any

from suites.cases.case import Case
from suites.cases.timing_config import RANGES, TimingConfig
from suites.errors import UserError

#: What `--timing` takes, said with every error about it.
TIMING_TAKES = 'a JSON object of timing fields, such as {"budget_s": 2.0, "min_samples": 7}'
#: The timing field that may be null: None derives the case's deadline from its budget.
MAY_BE_NULL = ("case_timeout_s",)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:60] + "...")


def case_option(text: str) -> Case:
    """`--case`: the case as JSON (as parbench's launchers pass it) or its id."""
    try:
        return Case.from_dict(json.loads(text)) if text.lstrip().startswith("{") else Case.from_id(text)
    except (UserError, ValueError, TypeError, KeyError) as error:
        raise UserError(f"--case {_shown(text)} is not a case ({error}): give a case id from `parbench list "
                        f"--suite NAME`, such as train_step/torch/cpu:2/ddp/fp32/batch=32,model=mlp") from None


def timing_option(text: str) -> TimingConfig:
    """`--timing`: timing fields as a JSON object, each a number of its field's kind. The values
    are not held to a suite's `[timing]` bounds (`TimingConfig.checked`): parbench's launchers
    pass the timing they run under as it is."""
    try:
        values = json.loads(text)
    except ValueError as error:
        raise UserError(f"--timing {_shown(text)} is not JSON ({error}): give {TIMING_TAKES}") from None
    if not isinstance(values, dict):
        raise UserError(f"--timing {_shown(text)} is not a JSON object: give {TIMING_TAKES}")
    known = [field.name for field in fields(TimingConfig)]
    for key, value in values.items():
        if key not in known:
            raise UserError(f"--timing: unknown field {key!r}; the fields are {', '.join(known)}")
        if not _of_kind(key, value):
            kind = "a whole number" if RANGES[key].kind is int else "a number"
            raise UserError(f"--timing: {key} is {json.dumps(value)}, not {kind}"
                            f"{' or null' if key in MAY_BE_NULL else ''}: give {TIMING_TAKES}")
    return TimingConfig.from_mapping(values)


def _of_kind(key: str, value: Any) -> bool:
    if value is None:
        return key in MAY_BE_NULL
    wanted = numbers.Integral if RANGES[key].kind is int else numbers.Real
    return isinstance(value, wanted) and not isinstance(value, bool) and math.isfinite(value)
