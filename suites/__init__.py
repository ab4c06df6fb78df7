"""parbench: time kernels, collectives and training steps across frameworks, devices,
parallelism strategies and precisions. The import package is `suites`; the CLI is `parbench`.

Importing this package imports neither torch nor TensorFlow.
"""
__version__ = "0.1.0"
