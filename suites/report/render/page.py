"""What the page template draws (templates/report.html.j2): the first screen (`Overview` and its
`Grid`s) and the sections of evidence below it (`Section`), gathered in one `ReportContent`.
Filled by `suites.report.overview` and the section modules of `suites.report.sections`; nothing
here computes a figure, and the template escapes every text."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from suites.report.render.tables import Table


@dataclass
class Section:
    """One section of evidence: a collapsed view of the page, opened on demand."""
    title: str
    anchor: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)  # (base64 PNG, alt text)
    nav: str = ""  # short name in the page's navigation bar ('' = title)


@dataclass(frozen=True)
class GridCell:
    text: str
    title: str = ""
    css: str = ""
    note: str = ""


@dataclass
class Grid:
    """A small matrix: a header row and rows of cells (the first cell the row's label)."""
    key: str
    title: str
    headers: list[str]
    rows: list[list[GridCell]]
    caption: str = ""


@dataclass
class Overview:
    """The first screen: header counts, the verdict, the device-type matrices and strategy grids."""
    header: list[str]
    verdict: list[str]
    reference: str | None
    matrices: list[Grid] = field(default_factory=list)
    metric_choices: list[tuple[str, str]] = field(default_factory=list)
    precision_choices: list[tuple[str, str]] = field(default_factory=list)
    no_matrix: str = ""
    strategy_grids: list[Grid] = field(default_factory=list)
    not_comparable: str = ""
    #: One caveat shared by several verdict sentences, said once under them.
    verdict_note: str = ""
    #: What a buyer needs that no ratio says: memory capacity, multi-GPU evidence, prices
    #: (`suites.report.equal_terms.buyer_facts`), under the verdict.
    facts: list[str] = field(default_factory=list)
    #: Device types in the header's count but in no matrix row, and why ('' when none).
    not_in_matrix: str = ""
    #: (term, meaning) of each mark and term the first screen shows (`render.glossary.key`).
    key: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class ReportContent:
    """Everything the page shows; `frame` is every record as the report read it (the exports')."""
    sections: list[Section]
    problems: list[Section]
    counts: dict[str, int]
    machines: list[str]
    formulas: dict[str, str]
    prices: str
    frame: pd.DataFrame
    overview: Overview
