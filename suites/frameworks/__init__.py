"""Framework implementations: one subpackage per framework, whose `__init__` is its
`DESCRIPTOR` (`suites.hardware.devices.FrameworkDescriptor`) and imports no framework."""
