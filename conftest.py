"""Repository-wide pytest set-up: parbench's pytest-benchmark front end (options, hooks, gate).

Its options (--parbench-suite, --heavy, --parbench-gate-*) are in `pytest --help`.
"""
pytest_plugins = ["suites.frontends.pytest_plugin"]
