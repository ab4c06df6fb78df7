"""A STREAM-like memory bandwidth measurement of the CPU: the roofline's slope on this machine.

STREAM's "add" kernel, a[i] = b[i] + c[i], on float64 arrays far larger than the last-level
cache, split into one contiguous slice per thread (NumPy releases the GIL inside a ufunc, so the
threads run on every core at once). Bytes counted as STREAM counts them: two arrays read, one
written, 24 bytes per element (the write-allocate read of `a` is not counted). The best of
`repeats` passes is kept, as STREAM reports it: the bandwidth the machine can sustain.
"""
from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np

#: Each of the three arrays, MiB, where the last-level cache's size is unknown: 256 MiB each,
#: 768 MiB together, well past any L3.
ARRAY_MIB = 256
#: STREAM's rule: each array at least this many times the last-level cache, so that what is
#: measured is the memory's bandwidth, not the cache's.
CACHE_MULTIPLE = 4
#: The smallest array sized from the cache, MiB (a tiny L3 still streams from memory).
MIN_ARRAY_MIB = 16
REPEATS = 10
BYTES_PER_ELEMENT = 3 * 8

#: Told after each timed pass: (threads, passes done, passes in all) of the thread count being measured.
PassDone = Callable[[int, int, int], None]


def array_mib_for(cache_bytes: int | None) -> int:
    """Each array's size, MiB: CACHE_MULTIPLE x the last-level cache (at least MIN_ARRAY_MIB);
    ARRAY_MIB where the cache's size is unknown."""
    if not cache_bytes:
        return ARRAY_MIB
    return max(MIN_ARRAY_MIB, math.ceil(CACHE_MULTIPLE * cache_bytes / 2**20))


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


def thread_counts() -> list[int]:
    """The thread counts `best_stream_bandwidth` measures, in order: one per usable core, then one."""
    return sorted({usable_cores(), 1}, reverse=True)


def best_stream_bandwidth(array_mib: int = ARRAY_MIB, repeats: int = REPEATS,
                          on_pass: PassDone | None = None) -> StreamResult:
    """The faster of one thread per usable core and a single thread: on a shared or virtual
    machine one thread can stream faster than several contending for the memory bus."""
    return max((stream_bandwidth(array_mib, threads, repeats, on_pass) for threads in thread_counts()),
               key=lambda r: r.gbs)


def stream_bandwidth(array_mib: int = ARRAY_MIB, threads: int | None = None, repeats: int = REPEATS,
                     on_pass: PassDone | None = None) -> StreamResult:
    """The best GB/s (1e9 bytes/s) of `repeats` passes of STREAM add over `threads` threads
    (default: the cores this process may use); `on_pass` is told after each pass."""
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
        for done in range(1, repeats + 1):
            start = time.perf_counter()
            list(pool.map(add, slices))
            best = min(best, time.perf_counter() - start)
            if on_pass is not None:
                on_pass(threads, done, repeats)
    return StreamResult(BYTES_PER_ELEMENT * elements / best / 1e9, array_mib, threads, repeats)
