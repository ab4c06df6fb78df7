"""Comparison reports: every front end's results in one tidy pandas table, analysed and rendered.

loading (files -> table, each row's comparability flags decided once: comparability) ->
analysis modules (speedup, scaling, cost, relative performance,
choice) -> figures (matplotlib, Agg) -> html (one self-contained file). Importing this package
imports neither pandas nor a framework; each module imports what it needs.
"""
