"""Front ends other than the CLI: asv and pytest-benchmark, both generated from the one registry.

Nothing here imports a framework at import time: asv imports `benchmarks/` (and so this
package) just to discover benchmarks, and pytest loads the plugin for every test run.
"""
