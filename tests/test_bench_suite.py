"""The pytest-benchmark suite: one benchmark per case of --parbench-suite (default quick).

Without --heavy only the smoke subset runs (see suites/frontends/pytest_plugin.py); save the
JSON with --benchmark-json=results/pytest-benchmark/NAME.json or --benchmark-autosave
--benchmark-storage=results/pytest-benchmark.
"""
from suites.frontends.pytest_plugin import benchmark_case


def test_case(benchmark, parbench_case, parbench_suite, parbench_gate):
    benchmark_case(benchmark, parbench_case, parbench_suite.timing, parbench_gate)
