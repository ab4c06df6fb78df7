"""`benchmark_model`: run a user's model through every strategy and precision that applies."""
from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Iterable

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Precision, Strategy
from suites.records.record import Record
from suites.records.store import DEFAULT_RESULTS_DIR, ResultsStore
from suites.runner.runner import RunContext, Runner
from suites.measure.scratch import run_temp_dir
from suites.strategies.registry import find_plugin, is_combination
from suites.workloads import workload_class
from suites.workloads.user_model import UserModel

#: What `batch` accepts: train_step's own parameter (a whole number >= 1); `n_devices` the same.
TRAIN_STEP_BATCH = next(param for param in workload_class("train_step").params if param.name == "batch")


def cases_for(model: UserModel, batch: int, devices: Iterable[str] = ("cpu", "gpu"),
              strategies: Iterable[str] | None = None, precisions: Iterable[str] | None = None,
              n_devices: int = 2) -> list[Case]:
    """Every (framework, device, strategy, precision) the model has a builder for, less the
    framework x device x strategy combinations that exist nowhere or do not train
    (`is_combination`: torch `towers` splits a matmul); strategies that spread work get
    `n_devices` devices, `single` gets one. Strategies named in `strategies` that some of the
    model's framework x device pairs skip are said in one warning."""
    _check_sizes(batch, n_devices)
    chosen_strategies = [Strategy(s) for s in strategies] if strategies else list(Strategy)
    chosen_precisions = [Precision(p) for p in precisions] if precisions else list(Precision)
    train_step = workload_class("train_step")
    cases, skipped = [], []
    for framework, device, strategy in itertools.product(model.builders, map(DeviceKind, devices),
                                                         chosen_strategies):
        if not is_combination(framework, device, strategy, train_step):
            skipped.append(f"{framework}/{device}/{strategy}")
            continue
        count = 1 if find_plugin(framework, strategy).rules.one_device else n_devices
        cases += [Case.make("train_step", framework, device, strategy, precision, count,
                            {"model": model.model_name, "batch": batch}) for precision in chosen_precisions]
    if strategies and skipped:
        warnings.warn(f"benchmark_model: skipped {len(skipped)} framework/device/strategy combination(s) "
                      f"that do not apply to a training step: {', '.join(skipped)}", stacklevel=2)
    return cases


def _check_sizes(batch: object, n_devices: object) -> None:
    """A ValueError naming `batch` or `n_devices` where either makes no case, before any case runs
    (a batch of 0 would fail every case, one after another)."""
    for name, value in (("batch", batch), ("n_devices", n_devices)):
        problem = TRAIN_STEP_BATCH.problem(value)
        if problem:
            raise ValueError(f"benchmark_model: {name} {problem}: give a whole number >= 1")


def benchmark_model(model: UserModel, batch: int = 32, *, devices: Iterable[str] = ("cpu", "gpu"),
                    strategies: Iterable[str] | None = None, precisions: Iterable[str] | None = None,
                    n_devices: int = 2, results: Path | str = DEFAULT_RESULTS_DIR,
                    label: str | None = None, timing: TimingConfig | None = None) -> list[Record]:
    """Time one training step of `model` per applicable case; store and return the records.

    Cases that cannot run here come back `unavailable` with the reason (e.g. no GPU,
    DataParallel on CPU), so the returned list covers every combination that applies;
    combinations that never apply are not generated (`cases_for` says which, once).
    """
    store = ResultsStore(results)
    context = RunContext(suite=f"user:{model.model_name}", store=store,
                         timing=timing or TimingConfig(budget_s=2.0), label=label)
    cases = cases_for(model, batch, devices, strategies, precisions, n_devices)
    with run_temp_dir():  # what the frameworks leave in the temp folder goes with it
        return list(Runner.storing(context).run_all(cases))
