"""A STREAM-like memory bandwidth measurement of the CPU: the roofline's slope on this machine.

STREAM's "add" kernel, a[i] = b[i] + c[i], on float64 arrays far larger than the last-level
cache, split into one contiguous slice per thread (NumPy releases the GIL inside a ufunc, so the
threads run on every core at once). Bytes counted as STREAM counts them: two arrays read, one
written, 24 bytes per element (the write-allocate read of `a` is not counted). The best of
`repeats` passes is kept, as STREAM reports it: the bandwidth the machine can sustain.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

#: Each of the three arrays, MiB by default: 256 MiB each, 768 MiB together, well past any L3.
ARRAY_MIB = 256
REPEATS = 10
BYTES_PER_ELEMENT = 3 * 8


@dataclass(frozen=True)
class StreamResult:
    gbs: float
    array_mib: int
    threads: int
    repeats: int

    @property
    def how(self) -> str:
        return (f"STREAM add a=b+c, float64, 3 x {self.array_mib} MiB, {self.threads} threads, "
                f"best of {self.repeats}")


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def best_stream_bandwidth(array_mib: int = ARRAY_MIB, repeats: int = REPEATS) -> StreamResult:
    """The faster of one thread per usable core and a single thread: on a shared or virtual
    machine one thread can stream faster than several contending for the memory bus."""
    counts = sorted({usable_cores(), 1}, reverse=True)
    return max((stream_bandwidth(array_mib, threads, repeats) for threads in counts), key=lambda r: r.gbs)


def stream_bandwidth(array_mib: int = ARRAY_MIB, threads: int | None = None, repeats: int = REPEATS) -> StreamResult:
    """The best GB/s (1e9 bytes/s) of `repeats` passes of STREAM add over `threads` threads
    (default: the cores this process may use)."""
    threads = threads or usable_cores()
    elements = max(threads, array_mib * 2**20 // 8)
    rng = np.random.default_rng(0)
    b, c = rng.standard_normal(elements), rng.standard_normal(elements)  # never zeros
    a = np.empty_like(b)
    bounds = np.linspace(0, elements, threads + 1).astype(int)
    slices = [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]

    def add(part: slice) -> None:
        np.add(b[part], c[part], out=a[part])

    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(add, slices))  # first touch: page faults are not bandwidth
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(add, slices))
            best = min(best, time.perf_counter() - start)
    return StreamResult(BYTES_PER_ELEMENT * elements / best / 1e9, array_mib, threads, repeats)
