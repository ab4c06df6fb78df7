"""Copies of a variable (towers' replicated variables) must stay together: rounding apart is no
divergence (Grappler may rewrite each tower's identical update differently), a copy that missed
an update is."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from suites.frameworks.tf.training import COPY_RTOL, TfTrainStep  # noqa: E402


def diverged(copies):
    step = SimpleNamespace(_describe=lambda work: "towers")
    return TfTrainStep._copies_diverged(step, copies, work=None)


def copies_apart(by: float, scale: float = 0.5):
    weights = {"w": np.full((4, 4), scale, dtype=np.float32), "b": np.zeros(4, dtype=np.float32)}
    other = {name: values.copy() for name, values in weights.items()}
    other["w"][1, 2] += by
    return [weights, other]


def test_identical_copies_and_copies_apart_by_rounding_pass():
    assert diverged(copies_apart(0.0)) is None
    assert diverged(copies_apart(1.49e-8)) is None  # what towers fp16 with momentum gave
    assert diverged(copies_apart(3 * COPY_RTOL, scale=100.0)) is None  # relative to the largest weight
    assert diverged([copies_apart(0.0)[0]]) is None  # one copy: nothing to compare


def test_a_copy_that_missed_an_update_fails_with_the_tolerance_named():
    check = diverged(copies_apart(1e-3))
    assert check is not None and not check.passed and check.metric == "copy_max_abs_diff"
    assert check.value == pytest.approx(1e-3, rel=1e-3) and check.tolerance == pytest.approx(COPY_RTOL)
    assert "copies of the variables diverged" in check.detail
