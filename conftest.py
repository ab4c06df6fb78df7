"""Repository-wide pytest set-up: parbench's pytest-benchmark front end (options, hooks, gate),
and pytester, which the front end's own tests use to run pytest sessions.

The front end's options (--parbench-suite, --heavy, --parbench-gate-*) are in `pytest --help`.
"""
pytest_plugins = ["suites.frontends.pytest_plugin", "pytester"]
