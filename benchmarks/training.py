"""asv benchmarks of the training-step workloads in the selected suite."""
from suites.frontends.asv_support import benchmark_classes

# The classes are generated from the registry; asv finds them among this module's globals.
globals().update(benchmark_classes("training", __name__))
