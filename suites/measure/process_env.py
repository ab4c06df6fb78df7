"""What a launcher and the worker processes it starts agree on: the signal that dumps a worker's
stacks, the cores a rank process pins itself to, and whether the case is a rehearsal."""
from __future__ import annotations

import contextlib
import os
import signal
from typing import Iterator

from suites import knobs

#: A worker dumps every Python thread's stack to its log on this signal (`faulthandler`): the
#: launcher sends it to the processes still running at a case's deadline, to say where they hung.
STACKS_SIGNAL = signal.SIGUSR1
#: The cores a rank process pins itself to (comma-separated), set by `run_ranks`.
CPUS_ENV = "PARBENCH_CPUS"
#: A case's deadline in seconds (`suites.runner.deadline.case_timeout` of the worker's timing), set
#: by the worker process for what it runs: the longest a `multiworker` worker waits for its peers
#: in a collective (`suites.frameworks.tf.cluster.collective_timeout_s`).
CASE_TIMEOUT_ENV = "PARBENCH_CASE_TIMEOUT_S"


def pin_from_env() -> list[int] | None:
    """In a rank process: pin to the cores the launcher chose (before any framework starts
    its threads, which inherit the affinity). Returns them, or None when not pinned."""
    cpus = knobs.read(CPUS_ENV)
    if not cpus:
        return None
    os.sched_setaffinity(0, cpus)
    return cpus


#: Set to 1 in a rehearsal's processes (`suites.runner.rehearsal`), inherited by its rank
#: processes: a training step builds its optimizer with the implementation CUDA would pick.
REHEARSAL_ENV = "PARBENCH_REHEARSAL"


def rehearsing() -> bool:
    """Whether this process runs a rehearsal of a GPU case on the CPU (`REHEARSAL_ENV`)."""
    return bool(knobs.read(REHEARSAL_ENV))


@contextlib.contextmanager
def env_set(name: str, value: str) -> Iterator[None]:
    """`name`=`value` in this process's environment (and so in every process started from it)
    for the block; the previous value, or its absence, afterwards."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
