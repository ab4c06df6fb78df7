"""Front ends: the `parbench` CLI and its commands, `benchmark_model`, and the asv and
pytest-benchmark adapters, all generated from the one registry. The top layer.

Nothing here imports a framework at import time: asv imports `benchmarks/` (and so this
package) just to discover benchmarks, and pytest loads the plugin for every test run.
"""
