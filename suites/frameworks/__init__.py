"""Framework implementations: one subpackage per framework, whose `__init__` is its
`DESCRIPTOR` (`suites.hardware.devices.FrameworkDescriptor`), registered with device discovery
when imported, and imports no framework. Importing this package registers every framework's
descriptor (the package `suites` does it first thing)."""
from suites.frameworks import tf, torch  # noqa: F401  (each registers its descriptor)
