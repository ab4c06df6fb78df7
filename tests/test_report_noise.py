"""The noise rule: Mann-Whitney U on raw samples, IQR overlap without them."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from suites.report.analyses.noise import MIN_SAMPLES, mann_whitney_p, slower_beyond, verdict


def _normal_approximation_p(a, b) -> float:
    """The textbook two-sided p-value: U's normal approximation with tie and continuity correction."""
    n1, n2 = len(a), len(b)
    combined = np.concatenate([a, b])
    u = stats.rankdata(combined)[:n1].sum() - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    _, ties = np.unique(combined, return_counts=True)
    variance = n1 * n2 / 12.0 * ((n + 1) - (ties**3 - ties).sum() / (n * (n - 1)))
    z = (abs(u - n1 * n2 / 2.0) - 0.5) / math.sqrt(variance)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("ties", [True, False])
def test_mann_whitney_is_scipys_asymptotic_test(seed, ties):
    """Also without ties and at these small sizes, where scipy's default would be its exact test."""
    rng = np.random.default_rng(seed)
    a = rng.normal(1.0, 0.1, 12)
    b = rng.normal(1.05, 0.1, 15)
    if ties:
        a, b = a.round(2), b.round(2)
    expected = stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic").pvalue
    assert mann_whitney_p(a, b) == pytest.approx(expected, rel=1e-9)
    assert mann_whitney_p(a, b) == pytest.approx(_normal_approximation_p(a, b), rel=1e-9)


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


def quartiles(samples: np.ndarray) -> tuple[float, float]:
    return tuple(np.percentile(samples, [25, 75]))


def noisy_steps(median: float, seed: int, n: int = 30) -> np.ndarray:
    """Step times of a shared machine: ±25% jitter around `median`."""
    return median * np.random.default_rng(seed).uniform(0.75, 1.25, n)


def test_overlapping_noisy_samples_ten_percent_apart_are_no_regression_at_five_percent():
    a, b = noisy_steps(1.0, seed=9), noisy_steps(1.0, seed=109)
    b = b * (1.10 * np.median(a) / np.median(b))  # medians exactly 10% apart
    assert np.median(b) / np.median(a) == pytest.approx(1.10)
    assert mann_whitney_p(a, b) < 0.01  # "different", but not by 5% beyond the noise
    assert not slower_beyond(0.05, a, quartiles(a), b, quartiles(b))


def test_a_contended_run_slowing_some_steps_is_no_regression():
    """Interference only adds time: B's best steps are as fast as A's, its median is not."""
    a = noisy_steps(1.0, seed=3) * 0.2 + 0.8  # a quiet run: ±5%
    b = a.copy()
    b[::2] *= 1.6  # every other step waited for a busy neighbour
    assert np.median(b) > 1.1 * np.median(a) and mann_whitney_p(a, b) < 0.01
    assert not slower_beyond(0.05, a, quartiles(a), b, quartiles(b))


def test_a_clear_regression_fails_and_a_noisy_flag_needs_iqrs_apart():
    a = noisy_steps(1.0, seed=4)
    assert slower_beyond(0.05, a, quartiles(a), a * 1.5, quartiles(a * 1.5))
    assert slower_beyond(0.05, a, quartiles(a), a * 1.5, quartiles(a * 1.5), noisy=True)
    # 20% slower beyond noise by the test, but the noisy side's IQRs still overlap A's scaled ones
    assert slower_beyond(0.05, a, quartiles(a), a * 1.2, quartiles(a * 1.2))
    assert not slower_beyond(0.05, a, quartiles(a), a * 1.2, quartiles(a * 1.2), noisy=True)


def test_without_samples_a_regression_needs_iqrs_apart_by_the_threshold():
    assert slower_beyond(0.05, (), (1.0, 1.1), (), (1.2, 1.3))
    assert not slower_beyond(0.05, (), (1.0, 1.1), (), (1.15, 1.3))  # 1.15 < 1.1 * 1.05
    assert not slower_beyond(0.05, (), (float("nan"),) * 2, (), (1.2, 1.3))


@pytest.mark.parametrize("flag", ["noisy", "contended", "contended_base"])
def test_compare_treats_a_contended_record_like_a_noisy_one(flag):
    """A record taken while other work competed for the CPU needs its IQRs apart, like a noisy one."""
    import pandas as pd

    from suites.report.analyses.runs import regressions

    a = noisy_steps(1.0, seed=4)
    b = a * 1.2
    row = {"case_id": "c", "verdict": "B slower", "status": "ok", "status_base": "ok",
           "samples_s": list(b), "q1_s": quartiles(b)[0], "q3_s": quartiles(b)[1],
           "samples_s_base": list(a), "q1_s_base": quartiles(a)[0], "q3_s_base": quartiles(a)[1],
           "noisy": False, "noisy_base": False, "contended": False, "contended_base": False}
    assert len(regressions(pd.DataFrame([row]), 0.05)) == 1
    assert regressions(pd.DataFrame([{**row, flag: True}]), 0.05).empty


def test_the_vectorised_verdicts_equal_one_test_per_pair():
    """`verdicts` (one scipy call per sample-count shape) gives each pair the verdict and p-value
    `verdict` gives it alone: few-sample pairs by IQR overlap, all-equal samples p = 1."""
    import numpy as np

    from suites.report.analyses.noise import verdict, verdicts

    rng = np.random.default_rng(7)
    pairs = []
    for index in range(120):
        a = list(rng.normal(1.0, 0.05, int(rng.choice([3, 8, 9, 15]))))
        b = list(rng.normal(1.0 + float(rng.choice([0.0, 0.02, 0.2])), 0.05, int(rng.choice([8, 9, 15]))))
        if index % 17 == 0:
            a, b = [1.0] * 9, [1.0] * 9
        pairs.append((a, tuple(np.percentile(a, [25, 75])), b, tuple(np.percentile(b, [25, 75]))))
    one_by_one, together = [verdict(*pair) for pair in pairs], verdicts(pairs)
    assert [(v.beyond_noise, v.method) for v in one_by_one] == [(v.beyond_noise, v.method) for v in together]
    assert all(a.p_value == pytest.approx(b.p_value, abs=1e-12) for a, b in zip(one_by_one, together)
               if a.p_value is not None)
    assert together[0].p_value == 1.0 and {v.method for v in together} == {"mann-whitney", "iqr-overlap"}
