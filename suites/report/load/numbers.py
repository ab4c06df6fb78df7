"""How a figure reads anywhere in the report (report-guide T3): no scientific notation for rates.

It sits at the bottom of the report's sub-layers because every one of them writes figures into
text: the analyses' sentences, the renderer's tables and charts, the first screen.
"""
from __future__ import annotations

import math

#: SI suffixes from a thousand up: 272k samples/s, 1.01M, 2.3G.
SUFFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
#: At or above this a figure takes a suffix ('12.3k'); below it, plain digits ('9,876' reads as '9876').
SUFFIX_FROM = 1e4


def compact(value: float, digits: int = 3) -> str:
    """'272k', '1.01M', '12.3k', '2285', '0.6218': `digits` significant figures with a suffix from
    10,000 up, four below it (the digits a median carries); '–' where there is no number."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    if abs(value) >= SUFFIX_FROM:
        rounded = float(f"{value:.{digits}g}")  # 999,950 -> 1e6: '1M', not '1000k'
        scale, suffix = next((scale, suffix) for scale, suffix in SUFFIXES if abs(rounded) >= scale)
        return f"{rounded / scale:.{digits}g}{suffix}"
    rounded = float(f"{value:.4g}")
    return f"{rounded:.0f}" if abs(rounded) >= 1000 else f"{rounded:.4g}"
