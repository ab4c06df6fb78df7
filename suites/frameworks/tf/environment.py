"""The environment TensorFlow reads when it loads, for every process parbench runs it in.

TensorFlow reads these variables once, when it loads or initialises its devices, so they must be
in `os.environ` before `import tensorflow`: `suites.frameworks.tf.backend` applies them before
its own import of TensorFlow, and every module of this package that uses TensorFlow imports
`backend` first. This module imports no TensorFlow, so the launcher and the TPU probe can name a
TPU process's environment without loading it.
"""
from __future__ import annotations

import os

#: Set in a process unless its environment already says otherwise; the processes parbench
#: starts inherit them.
DEFAULTS = {
    # Keep TF's C++ banner out of reports.
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # At initialisation TF otherwise maps nearly all the memory of every GPU it sees for the
    # life of the process; torch cases, DDP ranks and TF workers after it would run out.
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    # Loading libtpu locks /tmp/libtpu_lockfile for the life of the process: the parbench
    # process must leave it to the TPU probe and the TPU worker (`TPU_PROCESS`).
    "TPU_LOAD_LIBRARY": "0",
}

#: The environment of a process that must use the TPU (the probe, a `tpu` strategy worker):
#: explicit, because it inherits "0" from a parent that has loaded TensorFlow. "1" makes TF load
#: libtpu without taking its lockfile; the parbench process never holds the TPU, and the probe
#: exits before a worker starts.
TPU_PROCESS = {"TPU_LOAD_LIBRARY": "1"}


def apply_defaults() -> None:
    """Put `DEFAULTS` into this process's environment where it does not set them already."""
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)
