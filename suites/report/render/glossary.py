"""The first screen's key: what each mark and term it shows means (issue 47 item 9).

A term enters the key only when the screen's text shows it, so a page without emulated rows
does not explain 'emu'. Each entry is (term, meaning); `key` keeps this order.
"""
from __future__ import annotations

import re
from typing import Iterable

#: (term, a pattern that finds it in the screen's text, its meaning), in the order the key lists them.
TERMS: tuple[tuple[str, str, str], ...] = (
    ("–", r"(^|\s)–(\s|$)", "no figure to show here: not measured by both sides, not comparable, or no value "
                           "(hover a cell for its reason)"),
    ("k/K", r"\b\d+/\d+\b", "problems both device types measured / problems of the family the reference measured"),
    ("†", r"†", "paired across runs: no run held both sides, so two runs in one environment were paired"),
    ("emu", r"\bemu\b", "emulated devices: ranks sharing one CPU or GPU; the figure measures the emulation, "
                        "never hardware"),
    ("no base", r"\bno base\b", "no single-device fp32 eager run of that framework on that machine to divide by"),
    ("1 device", r"\b1 device\b(?! type)", "a multi-device strategy on one device measures its wrapper's "
                                            "overhead; never a strategy's win"),
    ("superseded", r"\bsuperseded\b", "older records of a case that ran again later; the latest one counts"),
    ("launch-bound", r"launch-bound|bound_by", "what limits a figure (parbench's limit verdict, `bound_by`): a "
                                              "launch-bound step measures the host launching kernels, not the device"),
    ("n/a (1 rank)", r"n/a \(1 rank\)", "an all-reduce over one rank moves no data: no bus bandwidth to report"),
    ("contended", r"\bcontended\b", "other processes took the cores or the GPU while it ran: not a figure of the "
                                    "hardware"),
    ("PROJECTED", r"\bPROJECTED\b", "computed by `parbench predict` from a base and the catalogue, never measured; "
                                    "shown with its band"),
)


def key(texts: Iterable[str]) -> list[tuple[str, str]]:
    """The key entries of the terms found in `texts` (the first screen's strings)."""
    screen = "\n".join(texts)
    return [(term, meaning) for term, pattern, meaning in TERMS if re.search(pattern, screen, re.MULTILINE)]
