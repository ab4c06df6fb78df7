"""Is a difference between two measurements larger than their spread?

Rule, per comparison:
- both sides have at least `MIN_SAMPLES` raw samples: a two-sided Mann-Whitney U test on them
  (`scipy.stats.mannwhitneyu`, `method="asymptotic"`: the normal approximation with tie and
  continuity correction, whatever the sample sizes); beyond noise when p < `ALPHA`.
- otherwise (asv or pytest-benchmark results saved without samples, tiny runs): the
  interquartile ranges [q1, q3]; beyond noise when they do not overlap.

A regression (`slower_beyond`) must be beyond noise *and* beyond its threshold in the same test.

Step times are compared per unit of work (seconds / work per step), so that two cases doing
different amounts of work per step (weak scaling's global batch grows with N) compare fairly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_SAMPLES = 8
ALPHA = 0.01


@dataclass(frozen=True)
class Verdict:
    beyond_noise: bool
    method: str  # "mann-whitney", "iqr-overlap" or "" when there was nothing to compare
    p_value: float | None = None

    def __str__(self) -> str:
        if not self.method:
            return "no spread known"
        if self.method == "mann-whitney":
            return f"{'beyond' if self.beyond_noise else 'within'} noise (Mann-Whitney p={self.p_value:.2g})"
        return "beyond noise (IQRs apart)" if self.beyond_noise else "within noise (IQRs overlap)"


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test, normal approximation with tie and continuity
    correction; 1.0 where it is undefined (every sample equal)."""
    from scipy.stats import mannwhitneyu  # here: scipy.stats takes ~0.5 s to import

    p = float(mannwhitneyu(np.asarray(a, dtype=float), np.asarray(b, dtype=float),
                           alternative="two-sided", method="asymptotic", use_continuity=True).pvalue)
    return 1.0 if math.isnan(p) else min(1.0, p)


def slower_beyond(threshold: float, a_samples: Sequence[float], a_quartiles: tuple[float, float],
                  b_samples: Sequence[float], b_quartiles: tuple[float, float], noisy: bool = False) -> bool:
    """Whether B's step times exceed A's by more than `threshold` (0.05 = 5%) beyond noise.

    The threshold is part of the test, not applied to medians afterwards: A's samples are scaled
    by 1 + threshold and B must still be slower by the Mann-Whitney test, in median, and in its
    fastest sample (interference only ever adds time, so a busy neighbour during one run slows
    its median but rarely its best step). A side flagged noisy must moreover have
    its interquartile range apart from the other's scaled one; without raw samples that is the
    whole rule. `why_not_slower_beyond` says which part failed.
    """
    return not why_not_slower_beyond(threshold, a_samples, a_quartiles, b_samples, b_quartiles, noisy)


def why_not_slower_beyond(threshold: float, a_samples: Sequence[float], a_quartiles: tuple[float, float],
                          b_samples: Sequence[float], b_quartiles: tuple[float, float], noisy: bool = False) -> str:
    """'' where B is slower than A by more than `threshold` beyond noise (`slower_beyond`), else
    which part of the rule it misses, in words (what `parbench compare` prints beside a slowdown
    that is no regression)."""
    scale = 1.0 + threshold
    limit = f"the --fail-on-regression threshold of {threshold:.0%}"
    (a1, a3), (b1, b3) = a_quartiles, b_quartiles
    apart = b1 > a3 * scale  # False when a quartile is NaN
    if len(a_samples) < MIN_SAMPLES or len(b_samples) < MIN_SAMPLES:
        if apart:
            return ""
        if any(math.isnan(v) for v in (a1, a3, b1, b3)):
            return "no spread known (no raw samples, no quartiles)"
        return f"without raw samples: B's IQR is not above A's by {limit}"
    a, b = np.asarray(a_samples, dtype=float), np.asarray(b_samples, dtype=float)
    a_scaled = a * scale
    slower = float(np.median(b) / np.median(a) - 1.0)
    if slower <= threshold:
        return f"below {limit} ({slower:.1%} slower in median)"
    if not (mann_whitney_p(a_scaled, b) < ALPHA and np.median(b) > np.median(a_scaled)):
        return f"{slower:.1%} slower in median, but not beyond noise once {limit} is allowed"
    if not b.min() > a_scaled.min():
        return (f"B's fastest step is within {limit} of A's: interference (which only adds time), "
                f"not a slower case")
    if noisy and not apart:
        return f"a side is noisy or contended and the IQRs are not apart by {limit}"
    return ""


def verdicts(pairs: Sequence[tuple[Sequence[float], tuple[float, float], Sequence[float], tuple[float, float]]]
             ) -> list[Verdict]:
    """`verdict` of many pairs at once: the Mann-Whitney tests of pairs whose sample counts agree
    run as one vectorised scipy call (a fleet's copies of a case have equal counts), so a report
    over hundreds of pairs pays scipy's per-call cost a few times, not per pair."""
    from scipy.stats import mannwhitneyu  # here: scipy.stats takes ~0.5 s to import

    results: list[Verdict | None] = [None] * len(pairs)
    by_counts: dict[tuple[int, int], list[int]] = {}
    for index, (a, _, b, _) in enumerate(pairs):
        if len(a) >= MIN_SAMPLES and len(b) >= MIN_SAMPLES:
            by_counts.setdefault((len(a), len(b)), []).append(index)
        else:
            results[index] = verdict(*pairs[index])
    for indices in by_counts.values():
        a = np.array([pairs[index][0] for index in indices], dtype=float)
        b = np.array([pairs[index][2] for index in indices], dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            p_values = np.atleast_1d(mannwhitneyu(a, b, axis=1, alternative="two-sided", method="asymptotic",
                                                  use_continuity=True).pvalue)
        for index, p in zip(indices, p_values):
            p = 1.0 if math.isnan(p) else min(1.0, float(p))
            results[index] = Verdict(p < ALPHA, "mann-whitney", p)
    return [result for result in results if result is not None]


def verdict(a_samples: Sequence[float], a_quartiles: tuple[float, float],
            b_samples: Sequence[float], b_quartiles: tuple[float, float]) -> Verdict:
    """Samples and quartiles of two measurements, already in the same unit."""
    if len(a_samples) >= MIN_SAMPLES and len(b_samples) >= MIN_SAMPLES:
        p = mann_whitney_p(a_samples, b_samples)
        return Verdict(p < ALPHA, "mann-whitney", p)
    (a1, a3), (b1, b3) = a_quartiles, b_quartiles
    if any(math.isnan(v) for v in (a1, a3, b1, b3)):
        return Verdict(False, "")
    return Verdict(a3 < b1 or b3 < a1, "iqr-overlap")
