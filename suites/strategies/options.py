"""A strategy's (or a compiler's) options: one frozen dataclass, one declaration.

Its fields are the grid parameters the plugin takes (`params_of` derives each `Param` from a
field: its name, its default's type and value, the help, choices and minimum in its metadata),
so what a grid may set and what a plugin reads are declared once. A job carries the built
instance (`options_from`), and plugins read `job.options.reshard`, never a string key.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from suites.cases.case import ParamValue
from suites.workloads.base import Param


def option(default: ParamValue, *, help: str = "", choices: tuple[ParamValue, ...] | None = None,
           minimum: int | None = 1) -> Any:
    """A field of an options dataclass: its default, and what `Param` says of it to a grid."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices, "minimum": minimum})


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a plugin (or compiler) that takes none."""


def params_of(options: type) -> tuple[Param, ...]:
    """The grid parameters an options dataclass declares, in field order."""
    return tuple(Param(field.name, type(field.default), field.default, choices=field.metadata.get("choices"),
                       minimum=field.metadata.get("minimum", 1), help=field.metadata.get("help", ""))
                 for field in dataclasses.fields(options))


def options_from(options: type, values: Mapping[str, ParamValue]) -> Any:
    """The options in `values` (a case's parameters; the others are the workload's), the
    defaults for the rest. Raises ValueError where a value is not allowed."""
    given = {}
    for param in params_of(options):
        if param.name in values:
            problem = param.problem(values[param.name])
            if problem:
                raise ValueError(f"{param.name}: {problem}")
            given[param.name] = values[param.name]
    return options(**given)
