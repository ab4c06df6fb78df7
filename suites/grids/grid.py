"""Suites: TOML grids of cases. Parsing and validation, with one clear error per problem.

Grid syntax (see README and suites/grids/*.toml)::

    description = "what this suite answers"
    [timing]                 # optional: any TimingConfig field
    budget_s = 2.0

    [[grid]]                 # each [[grid]] table is a cartesian product
    workload = "matmul"
    framework = ["torch", "tf"]
    device = ["cpu", "gpu"]
    strategy = "single"      # optional, default "single"
    precision = ["fp32", "bf16"]
    n_devices = [1, 2]       # optional, default 1
    compile = ["none", "xla", "inductor"]   # optional, default "none"; each framework gets its
                                            # own compilers (torch: inductor, tf: xla)
    params = { m = [512, 1024], n = 512, k = "=m" }   # a table: product of its lists;
                                                      # "=m" ties k to m in each point
    # or params = [{ m = 512, n = 512, k = 512 }, { m = 4096, n = 32, k = 4096 }]  # explicit points
"""
from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig, TimingFieldError
from suites.errors import GridError, UserError
from suites.strategies.options import NoOptions, options_from
from suites.strategies.registry import (compile_params, compilers_of, devices_of, find_plugin, frameworks_of,
                                          is_combination, strategies_for, strategies_of, strategy_params)
from suites.cases.vocabulary import Compile, DeviceKind, Framework, Precision, Strategy
from suites.workloads import WORKLOADS, workload_class

GRID_KEYS = {"workload", "framework", "device", "strategy", "precision", "n_devices", "compile", "params"}
TOP_KEYS = {"description", "timing", "grid"}
DEFAULT_SUITE = "quick"


@dataclass(frozen=True)
class Suite:
    name: str
    source: str
    description: str
    cases: tuple[Case, ...]
    timing: TimingConfig = field(default_factory=TimingConfig)


def builtin_suite_names() -> list[str]:
    return sorted(p.name.removesuffix(".toml") for p in resources.files("suites.grids").iterdir()
                  if p.name.endswith(".toml"))


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name, or a user's grid file by path."""
    shown = name_or_path if len(name_or_path) <= 80 else f"{name_or_path[:60]}... ({len(name_or_path)} characters)"
    path = Path(name_or_path)
    try:
        is_file = path.is_file()
    except OSError as error:  # a name longer than the file system takes, ...
        raise UserError(f"--suite {shown!r} is neither a built-in suite nor a readable path "
                        f"({error.strerror}); built-in suites: {', '.join(builtin_suite_names())}") from None
    if name_or_path.endswith(".toml") or is_file:
        if not is_file:
            raise UserError(f"grid file {shown} does not exist; pass a built-in suite "
                            f"({', '.join(builtin_suite_names())}) or the path of a .toml grid")
        try:
            text = path.read_text(encoding="utf-8-sig")  # a byte-order mark some editors write is not TOML
        except UnicodeDecodeError as error:
            raise UserError(f"grid file {shown} is not UTF-8 text (byte {error.start}); a grid is a TOML "
                            f"file: save it as UTF-8") from None
        except OSError as error:
            raise UserError(f"grid file {shown} cannot be read ({error.strerror})") from None
        return parse_suite(text, source=str(path), name=path.stem)
    if name_or_path not in builtin_suite_names() and path.is_dir():
        raise UserError(f"--suite {shown!r} is a folder, not a suite (a folder of records is read by `parbench "
                        f"report` or written by --results): give a built-in suite "
                        f"({', '.join(builtin_suite_names())}) or the path of a .toml grid")
    if name_or_path not in builtin_suite_names():
        raise UserError(f"unknown suite {shown!r}; built-in suites: "
                        f"{', '.join(builtin_suite_names())} (or pass the path of a .toml grid)")
    text = resources.files("suites.grids").joinpath(f"{name_or_path}.toml").read_text()
    return parse_suite(text, source=f"suites/grids/{name_or_path}.toml", name=name_or_path)


def parse_suite(text: str, source: str, name: str) -> Suite:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise GridError(source, "toml", f"not valid TOML ({error})") from None
    _reject_unknown(source, "top level", data, TOP_KEYS)
    grids = data.get("grid")
    if not isinstance(grids, list) or not grids:
        raise GridError(source, "grid", "no [[grid]] tables: a suite needs at least one")
    cases: dict[Case, None] = {}  # ordered and de-duplicated
    for index, grid in enumerate(grids):
        for case in _expand(source, f"grid[{index}]", grid):
            cases[case] = None
    return Suite(name=name, source=source, description=str(data.get("description", "")),
                 cases=tuple(cases), timing=_timing(source, data.get("timing", {})))


def _timing(source: str, table: Any) -> TimingConfig:
    if not isinstance(table, dict):
        raise GridError(source, "timing", "must be a table")
    try:
        return TimingConfig.checked(table)
    except TimingFieldError as error:
        raise GridError(source, f"timing.{error.key}", str(error)) from None


def _reject_unknown(source: str, where: str, table: dict, allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            raise GridError(source, f"{where}.{key}" if where != "top level" else key,
                            f"unknown key; allowed: {', '.join(sorted(allowed))}")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _names(source: str, key: str, value: Any, allowed: Iterable[str]) -> list[str]:
    allowed = list(allowed)
    values = _as_list(value)
    if not values:
        raise GridError(source, key, f"is empty; allowed: {', '.join(allowed)}")
    for item in values:
        if item not in allowed:
            raise GridError(source, key, f"unknown name {item!r}; allowed: {', '.join(allowed)}")
    return values


def _expand(source: str, where: str, grid: Any) -> list[Case]:
    if not isinstance(grid, dict):
        raise GridError(source, where, "must be a table")
    _reject_unknown(source, where, grid, GRID_KEYS)
    for required in ("workload", "framework", "device"):
        if required not in grid:
            raise GridError(source, f"{where}.{required}", "missing")
    workload_names = _names(source, f"{where}.workload", grid["workload"], WORKLOADS)
    frameworks = _names(source, f"{where}.framework", grid["framework"], Framework.names())
    devices = _names(source, f"{where}.device", grid["device"], DeviceKind.names())
    strategies = _names(source, f"{where}.strategy", grid.get("strategy", "single"), Strategy.names())
    precisions = _names(source, f"{where}.precision", grid.get("precision", "fp32"), Precision.names())
    compilers = _names(source, f"{where}.compile", grid.get("compile", "none"), Compile.names())
    _check_compilers(source, f"{where}.compile", compilers, frameworks)
    counts = _as_list(grid.get("n_devices", 1))
    for count in counts:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise GridError(source, f"{where}.n_devices", f"must be a positive integer, got {count!r}")

    cases = []
    for workload_name in workload_names:
        workload = workload_class(workload_name)
        own_params = {(framework, strategy, compiler):
                      strategy_params(Framework(framework), Strategy(strategy))
                      | compile_params(Framework(framework), Strategy(strategy), Compile(compiler))
                      for framework in frameworks for strategy in strategies for compiler in compilers}
        extra = {name: param for params in own_params.values() for name, param in params.items()}
        points = _param_points(source, f"{where}.params", grid.get("params", {}), workload, extra)
        applicable = strategies_for(workload)
        for strategy in strategies:
            if Strategy(strategy) not in applicable:
                raise GridError(source, f"{where}.strategy",
                                f"{strategy!r} does not apply to {workload_name}; allowed: "
                                f"{', '.join(sorted(map(str, applicable)))}")
            _check_pairs(source, f"{where}.strategy", Strategy(strategy), frameworks, devices)
        # A strategy's or compiler's own parameters go only to its cases (ddp cases of an entry
        # that also lists fsdp do not get `reshard`, uncompiled ones no `compile_mode`); the
        # duplicates that leaves collapse into one case.
        added = list(dict.fromkeys(
            Case.make(workload_name, framework, device, strategy, precision, count,
                      {name: value for name, value in params.items()
                       if workload.param(name) or name in own_params[framework, strategy, compiler]},
                      compiler)
            for framework, device, strategy, precision, count, params, compiler in itertools.product(
                frameworks, devices, strategies, precisions, counts, points, compilers)
            if is_combination(Framework(framework), DeviceKind(device), Strategy(strategy), workload,
                              Compile(compiler))))
        for case in added:  # each case's options, built as its job will build them
            _check_options(source, f"{where}.params", case)
        if not added:  # a suite always has cases: `run` and `list` rely on it
            raise GridError(source, where, f"expands to no {workload_name} cases: n_devices, params or a "
                                           f"parameter is an empty list; give each at least one value")
        cases += added
    return cases


def _check_options(source: str, key: str, case: Case) -> None:
    """The case's strategy and compiler options build (`options.options_from`), or one error line."""
    plugin = find_plugin(case.framework, case.strategy)
    try:
        options_from(plugin.options_type, case.param_dict)
        options_from(plugin.compiler_options.get(case.compile, NoOptions), case.param_dict)
    except ValueError as error:
        raise GridError(source, key, str(error)) from None


def _check_pairs(source: str, key: str, strategy: Strategy, frameworks: list[str], devices: list[str]) -> None:
    """A strategy of an entry must pair with one of its frameworks and one of its device kinds.
    Other pairs of the product are dropped (tf x ddp is no case), but a strategy that pairs with
    none would vanish from the suite silently."""
    if not frameworks_of(strategy) & {Framework(name) for name in frameworks}:
        raise GridError(source, key, f"'{strategy}' is not a strategy of {' or '.join(frameworks)}; "
                                     f"allowed framework x strategy combinations: {_framework_strategies()}")
    if not devices_of(strategy) & {DeviceKind(name) for name in devices}:
        runs_on = ", ".join(str(kind) for kind in DeviceKind if kind in devices_of(strategy))
        raise GridError(source, key, f"'{strategy}' does not run on {' or '.join(devices)}; it runs on {runs_on}")


def _check_compilers(source: str, key: str, compilers: list[str], frameworks: list[str]) -> None:
    """Each compiler of an entry must be one of its frameworks' (the other pairs, torch x xla,
    are dropped from the product), or it would vanish from the suite silently."""
    for compiler in compilers:
        if not any(Compile(compiler) in compilers_of(Framework(name)) for name in frameworks):
            owners = "; ".join(f"{framework}: {', '.join(sorted(map(str, compilers_of(framework))))}"
                               for framework in Framework)
            raise GridError(source, key, f"{compiler!r} is not a compiler of {' or '.join(frameworks)}; "
                                         f"each framework's compilers: {owners}")


def _framework_strategies() -> str:
    """Each framework's strategies, e.g. 'torch: single, ddp; tf: single, towers, ...'."""
    return "; ".join(f"{framework}: {', '.join(map(str, strategies_of(framework)))}"
                     for framework in Framework)


def _resolve_ties(source: str, where: str, point: dict[str, Any]) -> dict[str, Any]:
    """`n = "=m"` ties a parameter to another one of the same point (square shapes)."""
    resolved = dict(point)
    for name, value in point.items():
        if isinstance(value, str) and value.startswith("="):
            target = value[1:]
            if target not in point or isinstance(point[target], str) and point[target].startswith("="):
                raise GridError(source, f"{where}.{name}",
                                f"{value!r} names no plain parameter of this point; use one of "
                                f"{', '.join(n for n in point if n != name)}")
            resolved[name] = point[target]
    return resolved


def _param_points(source: str, key: str, value: Any, workload: type,
                  strategy_params: dict[str, Any]) -> list[dict[str, Any]]:
    """The points of a `params` table (or list of tables): the workload's parameters and those
    of the entry's strategies (`strategy_params`), each value checked."""
    tables = value if isinstance(value, list) else [value]
    points: list[dict[str, Any]] = []
    for index, table in enumerate(tables):
        where = f"{key}[{index}]" if isinstance(value, list) else key
        if not isinstance(table, dict):
            raise GridError(source, where, "must be a table of parameter = value(s)")
        known = {p.name for p in workload.params} | set(strategy_params)
        for name in table:
            if name not in known:
                raise GridError(source, f"{where}.{name}",
                                f"unknown parameter of {workload.name}; allowed: {', '.join(sorted(known))}")
        missing = [p.name for p in workload.params if p.default is None and p.name not in table]
        if missing:
            raise GridError(source, where, f"{workload.name} needs {', '.join(missing)}")
        names = list(table)
        for combo in itertools.product(*(_as_list(table[n]) for n in names)):
            point = _resolve_ties(source, where, dict(zip(names, combo)))
            for name, item in point.items():
                problem = (workload.param(name) or strategy_params[name]).problem(item)
                if problem:
                    raise GridError(source, f"{where}.{name}", problem)
            for problem in workload.shape_problems(point):
                raise GridError(source, where, problem)
            points.append(point)
    return points
