"""Loading: results files of every front end (parbench JSON Lines, asv, pytest-benchmark) read into
one tidy pandas table, its columns documented once (`columns.COLUMNS`) and the figures each row
derives (`derived`). Imports no analysis and no rendering: the bottom of the report's three layers."""
