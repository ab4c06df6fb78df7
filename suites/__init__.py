"""parbench: time kernels, collectives and training steps across frameworks, devices,
parallelism strategies and precisions. The import package is `suites`; the CLI is `parbench`.

Importing this package imports neither torch nor TensorFlow.
"""
__version__ = "0.1.0"


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy attribute
    """`suites.load_results(paths)`, `suites.user_model(...)`, `suites.benchmark_model(...)`:
    imported on first use, so `import suites` stays free of pandas."""
    if name == "load_results":
        from .report.loading import load_results

        return load_results
    if name == "benchmark_model":
        from .custom import benchmark_model

        return benchmark_model
    if name == "user_model":
        from .workloads.user_model import user_model

        return user_model
    raise AttributeError(f"module 'suites' has no attribute {name!r}")
