"""The report's sections of evidence, a module each, in the order the page shows them.

A section module declares its title and anchor, its columns as data (`render.tables.Column`) and
its prose, and has `build(frame, options) -> Section` over the report's one `ReportFrame`. It
imports the analyses, the renderer's types and `base`, never another section. To add one: write
`sections/<name>.py` and put it in `SECTIONS` where the page should show it. The per-problem
tables (`problems`) are drawn apart, under their own heading.
"""
from __future__ import annotations

from suites.report.sections import (baseline, before_you_rent, compilation, environments, limits, not_ok, peak,
                                    precision, references, relative, roofline, scaling, summary)

#: The sections in page order; the template draws each `build`'s Section in turn.
SECTIONS = (summary, before_you_rent, relative, baseline, scaling, precision, compilation, peak, roofline, limits,
            references, not_ok, environments)
