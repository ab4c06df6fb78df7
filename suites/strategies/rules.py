"""A strategy plugin's rules, as data: which cases exist under it, how they launch, how its
step computes batch statistics.

A plugin declares them in one value, `rules = Rules(...)` (or its base's `rules.but(...)`),
validated when it is built: a value no runner could act on (a compiler mode outside the
framework's compilers, a batch-statistics split nobody reads, a coordinated launch that is not
rank processes) raises at import of the plugin, naming the field. The docs' rules table
(`suites.strategies.rule_table`) is rendered from these values and the fields' own documentation
below (`RULE_DOCS`), not from the plugins' source.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping

from suites.cases.vocabulary import Compile, DeviceKind
from suites.measure.launch import Launch
from suites.workloads.base import WORKLOAD_KINDS

#: The values of `Rules.statistics_split` a runnable acts on (None: not declared).
STATISTICS_SPLITS = ("whole", "replicas")


def rule(default: Any, doc: str) -> Any:
    """A field of the rules with its documentation (rendered into docs/strategy-hooks.md); a
    mapping's default is built anew for each value."""
    metadata = {"doc": " ".join(doc.split())}
    if isinstance(default, Mapping):
        return field(default_factory=lambda: MappingProxyType(dict(default)), metadata=metadata)
    return field(default=default, metadata=metadata)


class RulesError(ValueError):
    """A plugin's rules that contradict themselves, said with the field and the way out."""


@dataclass(frozen=True)
class Rules:
    """What a strategy plugin declares without code. Every field has a default that suits a
    data-parallel training strategy run in the parbench process; a plugin names only those it
    changes."""

    devices: frozenset[DeviceKind] = rule(
        frozenset({DeviceKind.CPU, DeviceKind.GPU}),
        "Device kinds the strategy can use at all: a case outside them exists nowhere. A case inside them may still "
        "be unavailable on a given machine, with the reason (the plugin's `requirements`).")
    kinds: frozenset[str] = rule(
        frozenset({"training"}), "Workload kinds (kernel, training, collective) the strategy spreads.")
    compilers: frozenset[Compile] = rule(
        frozenset({Compile.NONE}),
        "The compilers of the strategy's framework (set by the framework's base class): a case pairing a framework "
        "with another's compiler (torch with xla) is no case at all.")
    compile_modes: frozenset[Compile] = rule(
        frozenset({Compile.NONE}),
        "Of `compilers`, those this strategy's step has been made to run under: a compiled case outside them is "
        "unavailable, with the reason, until the plugin's author declares (and tests) the compiler.")
    compile_limits: Mapping[Compile, str] = rule(
        MappingProxyType({}), "Why a compiler of the framework is not in `compile_modes`, where the strategy knows.")
    statistics_split: str | None = rule(
        None,
        "Over which samples a training step computes batch statistics (batch norm): `whole`, one forward over the "
        "global batch; `replicas`, each device over its own equal shard (data parallelism); none declared: a model "
        "with batch norm is unavailable under it.")
    synchronized_statistics: bool = rule(
        False, "Whether it can compute them over the global batch across replicas (batch norm `sync`).")
    no_sync_statistics: str = rule(
        "it has no synchronized batch norm here", "Why not, where it cannot (the reason a `sync` case gets).")
    shares_gpus: bool = rule(
        False,
        "Whether the case's devices can be emulated on fewer GPUs than it spans, as they are on one CPU: rank "
        "processes sharing a GPU over gloo (torch), logical GPUs split from one (TF); such a case runs `emulated`.")
    one_device: bool = rule(False, "Whether the strategy runs on one device whatever is at hand (`single`).")
    launch: Launch = rule(
        Launch.IN_PROCESS,
        "How a case is launched: in the parbench process, in a fresh one, or as rank processes "
        "(`suites.runner.launchers`).")
    startup_allowance_s: float | None = rule(
        None,
        "Seconds a launched process may take before its first step, where the launcher's default "
        "(`suites.measure.timing.STARTUP_ALLOWANCE_S`) is too short (tpu: loading libtpu, initialising the TPU "
        "system).")

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise RulesError(f"{type(self).__name__}: {'; '.join(problems)}")
        object.__setattr__(self, "compile_limits", MappingProxyType(dict(self.compile_limits)))

    def problems(self) -> list[str]:
        """What contradicts itself in these rules, one sentence each (none for valid rules)."""
        found = [f"{name} holds {sorted(map(str, set(values) - set(allowed)))}, none of "
                 f"{', '.join(map(str, allowed))}"
                 for name, values, allowed in (("devices", self.devices, tuple(DeviceKind)),
                                               ("kinds", self.kinds, WORKLOAD_KINDS),
                                               ("compilers", self.compilers, tuple(Compile)))
                 if not set(values) <= set(allowed)]
        found += [f"{name} is empty: a strategy with none exists nowhere"
                  for name, values in (("devices", self.devices), ("kinds", self.kinds)) if not values]
        if Compile.NONE not in self.compile_modes:
            found.append("compile_modes leaves out 'none': every strategy runs uncompiled")
        if not self.compile_modes <= self.compilers:
            found.append(f"compile_modes {sorted(map(str, self.compile_modes - self.compilers))} are not among "
                         f"the framework's compilers ({', '.join(sorted(map(str, self.compilers)))})")
        explained = set(self.compile_limits) - (self.compilers - self.compile_modes)
        if explained:
            found.append(f"compile_limits explains {sorted(map(str, explained))}, which is not a compiler of the "
                         "framework left out of compile_modes")
        if self.statistics_split not in (None, *STATISTICS_SPLITS):
            found.append(f"statistics_split {self.statistics_split!r} is none of {', '.join(STATISTICS_SPLITS)} "
                         "(or None: not declared)")
        if self.synchronized_statistics and self.statistics_split != "replicas":
            found.append("synchronized_statistics needs statistics_split 'replicas': only replicas have "
                         "statistics to synchronise")
        if not isinstance(self.launch, Launch):
            found.append(f"launch {self.launch!r} is none of {', '.join(launch.value for launch in Launch)}")
        if self.startup_allowance_s is not None and not self.startup_allowance_s > 0:
            found.append(f"startup_allowance_s {self.startup_allowance_s!r} is not a positive number of seconds")
        if self.shares_gpus and DeviceKind.GPU not in self.devices:
            found.append("shares_gpus is set, but GPU is not among its devices")
        return found

    def statistics_groups(self, n_devices: int) -> int | None:
        """Into how many equal parts of the global batch a step over `n_devices` computes batch
        statistics, each part on its own, where they are not synchronised; None where
        `statistics_split` is not declared."""
        return {"whole": 1, "replicas": n_devices}.get(self.statistics_split or "")

    def no_sync_reason(self, n_devices: int) -> str | None:
        """Why a step over `n_devices` cannot compute batch statistics over the global batch, or
        None (also where one forward sees the whole batch: local and synchronised are the same)."""
        if self.statistics_groups(n_devices) == 1 or self.synchronized_statistics:
            return None
        return self.no_sync_statistics

    def but(self, **changes: Any) -> "Rules":
        """These rules with `changes` (a base's rules, changed where a plugin differs); validated anew."""
        return replace(self, **changes)


def rule_docs(rules_type: type[Rules]) -> dict[str, str]:
    """Each field of `rules_type` with its documentation, in declaration order."""
    return {each.name: each.metadata.get("doc", "") for each in fields(rules_type)}


#: The framework-neutral rules' documentation, field by field.
RULE_DOCS = rule_docs(Rules)
