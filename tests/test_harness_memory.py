"""The harness's memory is not the training's: the numerics check's float32 copy of the initial weights
is freed once the check is done, before the timed steps, so the strategies compare on the training's
own bytes (issue 46, 9: FSDP's per-rank memory read 0.76x DDP's with 196 MiB of it held); where no
check ran (asv, pytest), the breakdown still files them as harness."""
from __future__ import annotations

import numpy as np
import pytest

from suites.cases.case import Case
from suites.strategies.jobs import job_for

torch = pytest.importorskip("torch")

CASE = Case.make("train_step", "torch", "cpu", params={"model": "mlp", "batch": 2, "hidden": 16, "depth": 1})


@pytest.fixture
def runnable():
    job = job_for(CASE)
    made = job.runnable_class(job)
    made.setup()
    yield made
    made.teardown()


def test_the_check_frees_the_initial_weights_before_the_timed_steps(runnable):
    held = {name: array.copy() for name, array in runnable.weights.items()}
    assert runnable._weights is not None and sum(a.nbytes for a in held.values()) > 0
    assert runnable.check().passed
    assert runnable._weights is None  # gone before the timed steps
    again = runnable.weights  # a second check draws the same weights again
    assert all(np.array_equal(again[name], held[name]) for name in held)


def test_the_breakdown_files_kept_weights_as_harness_and_freed_ones_as_nothing(runnable):
    kept = sum(array.nbytes for array in runnable.weights.values())
    (before,) = runnable.memory_tracker()()
    assert before.harness == kept  # no check ran (asv, pytest): still held, the harness's
    runnable.release_initial_weights()
    (after,) = runnable.memory_tracker()()
    assert after.harness == 0
