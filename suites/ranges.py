"""A number's type and range, declared once where a setting is declared (a `PARBENCH_*` knob in
`suites.knobs`, a command's numeric option, a grid's `[timing]` field) and checked where its value
enters: text from the environment or the command line (`Range.parse`, `Range.argument`), or a value
a TOML or JSON file gave (`Range.check`). nan, inf, a fraction where a whole number is meant and
anything outside the range are refused there, before any work, with what is accepted.
"""
from __future__ import annotations

import argparse
import math
import numbers
from dataclasses import dataclass


class Refused(ValueError):
    """A value that is not accepted; the message says what is (`expected ...`)."""


@dataclass(frozen=True)
class Range:
    #: int: whole numbers only (1.5 and True are refused); float: any finite number.
    kind: type
    #: The smallest value accepted, and whether it is itself refused (`> low` rather than `>= low`).
    low: float = -math.inf
    low_excluded: bool = False
    high: float = math.inf
    #: What the number counts ("seconds", "bytes"), said in `accepted`.
    unit: str = ""
    #: Why `high` is where it is ("this machine's memory"), said in `accepted`.
    high_reason: str = ""

    @property
    def accepted(self) -> str:
        """What a valid value is, e.g. "a whole number from 1 to 100000", "a finite number of seconds > 0"."""
        what = ("a whole number" if self.kind is int else "a finite number") + (f" of {self.unit}" if self.unit else "")
        high = f"{_shown(self.high)}" + (f" ({self.high_reason})" if self.high_reason else "")
        if self.low > -math.inf and not self.low_excluded and self.high < math.inf:
            return f"{what} from {_shown(self.low)} to {high}"
        bounds = []
        if self.low > -math.inf:
            bounds.append(f"{'>' if self.low_excluded else '>='} {_shown(self.low)}")
        if self.high < math.inf:
            bounds.append(f"<= {high}")
        return " ".join([what, " and ".join(bounds)]).strip()

    def check(self, value: object) -> int | float:
        """`value` (from a TOML or JSON file, or code) if it is of this kind and in range; else Refused."""
        if isinstance(value, bool) or not isinstance(value, numbers.Integral if self.kind is int else numbers.Real):
            raise Refused(self.accepted)
        number = self.kind(value)
        too_low = number <= self.low if self.low_excluded else number < self.low
        if not math.isfinite(number) or too_low or number > self.high:
            raise Refused(self.accepted)
        return number

    def parse(self, text: str) -> int | float:
        """The number `text` writes, checked; Refused if it writes none or one out of range."""
        try:
            number = self.kind(text.strip())
        except ValueError:
            raise Refused(self.accepted) from None
        return self.check(number)

    def argument(self, text: str) -> int | float:
        """`parse` as an argparse `type`: argparse names the option beside the message."""
        try:
            return self.parse(text)
        except Refused as error:
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise argparse.ArgumentTypeError(f"{shown!r} is not valid: expected {error}") from None


def _shown(bound: float) -> str:
    """A bound as written: 100000, 25276502016, 0.5."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"
