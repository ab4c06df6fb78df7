"""parbench: time kernels, collectives and training steps across frameworks, devices,
parallelism strategies and precisions. The import package is `suites`; the CLI is `parbench`.

Importing this package imports neither torch nor TensorFlow.
"""
__version__ = "0.1.0"

# First of all, for the `parbench` command only: a signal while it starts says one line (suites.startup).
from suites.startup import guard_startup as _guard_startup  # noqa: E402

_guard_startup()

# The frameworks' descriptors, registered with device discovery (`suites.hardware.devices`, a
# layer below the frameworks that names none of them): cheap, no framework is imported.
from suites import frameworks as _frameworks  # noqa: E402,F401


#: Public functions, imported on first use so `import suites` stays free of pandas and frameworks.
_LAZY = {
    "load_results": "suites.frontends.results",
    "benchmark_model": "suites.frontends.benchmark_model",
    "user_model": "suites.workloads.user_model",
}


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy attribute
    if name not in _LAZY:
        raise AttributeError(f"module 'suites' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
