"""parbench: time kernels, collectives and training steps across frameworks, devices,
parallelism strategies and precisions. The import package is `suites`; the CLI is `parbench`.

Importing this package imports neither torch nor TensorFlow.
"""
__version__ = "0.1.0"


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy attribute
    """`suites.load_results(paths)`: imported on first use, so `import suites` stays free of pandas."""
    if name == "load_results":
        from .report.loading import load_results

        return load_results
    raise AttributeError(f"module 'suites' has no attribute {name!r}")
