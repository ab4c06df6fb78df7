"""Analyses: pandas in, pandas out. Which rows may be compared (`comparability`), the views of the
records a report reads (`selection`, `frame.ReportFrame`), pairs and noise (`comparison`, `noise`),
the choice per problem, relative performance, scaling, compilation, limits, published references
and prices. Reads the tidy table of `suites.report.load`; renders nothing."""
