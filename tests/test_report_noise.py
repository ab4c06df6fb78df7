"""The noise rule: Mann-Whitney U on raw samples, IQR overlap without them."""
from __future__ import annotations

import numpy as np
import pytest

from suites.report.noise import MIN_SAMPLES, average_ranks, mann_whitney_p, verdict


def test_average_ranks_share_ties():
    assert list(average_ranks(np.array([3.0, 1.0, 3.0, 2.0]))) == [3.5, 1.0, 3.5, 2.0]


@pytest.mark.parametrize("seed", range(5))
def test_mann_whitney_matches_scipy_asymptotic(seed):
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(seed)
    a = rng.normal(1.0, 0.1, 12).round(2)  # rounding makes ties
    b = rng.normal(1.05, 0.1, 15).round(2)
    expected = stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic").pvalue
    assert mann_whitney_p(a, b) == pytest.approx(expected, rel=1e-9)


def test_identical_samples_are_within_noise():
    same = [1.0] * 10
    assert mann_whitney_p(same, same) == 1.0
    assert not verdict(same, (1.0, 1.0), same, (1.0, 1.0)).beyond_noise


def test_separated_samples_are_beyond_noise():
    a, b = list(np.linspace(1.0, 1.1, 10)), list(np.linspace(1.5, 1.6, 10))
    result = verdict(a, (1.02, 1.08), b, (1.52, 1.58))
    assert result.beyond_noise and result.method == "mann-whitney" and result.p_value < 1e-3


def test_few_samples_fall_back_to_iqr_overlap():
    few = [1.0] * (MIN_SAMPLES - 1)
    assert verdict(few, (1.0, 1.2), [], (1.3, 1.4)).method == "iqr-overlap"
    assert verdict(few, (1.0, 1.2), [], (1.3, 1.4)).beyond_noise
    assert not verdict(few, (1.0, 1.35), [], (1.3, 1.4)).beyond_noise
    assert verdict([], (float("nan"), float("nan")), [], (1.0, 1.1)).method == ""
