"""Timing a batch of back-to-back calls, with the evidence of what else happened meanwhile.

Shared by the op harness's worker and the training benchmark's: per-call wall times, and over
the whole batch this process's CPU time, the cores other processes kept busy (contention.py),
involuntary context switches and minor page faults (fresh memory touched for the first time).
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness import contention


@dataclass
class Batch:
    samples_ns: list[int]  # one wall time per call
    cpu_ns: int  # this process, all threads
    others_cores: float | None  # None where /proc/stat cannot be read
    involuntary_switches: int
    minor_faults: int

    @property
    def batch_ns(self) -> int:
        return sum(self.samples_ns)


def time_batch(function: Callable[[], object], reps: int) -> Batch:
    """Calls ``function`` ``reps`` times, timing each call."""
    samples: list[int] = []
    # A garbage collection inside the batch would be charged to whichever call it hit.
    gc.disable()
    busy_before = contention.busy_cpu_s()
    before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        for _ in range(reps):
            start = time.perf_counter_ns()
            function()
            samples.append(time.perf_counter_ns() - start)
    finally:
        after = resource.getrusage(resource.RUSAGE_SELF)
        busy_after = contention.busy_cpu_s()
        gc.enable()
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    busy_s = None if busy_before is None or busy_after is None else busy_after - busy_before
    return Batch(samples_ns=samples, cpu_ns=round(cpu_s * 1e9),
                 others_cores=contention.other_cores(busy_s, cpu_s, sum(samples)),
                 involuntary_switches=after.ru_nivcsw - before.ru_nivcsw,
                 minor_faults=after.ru_minflt - before.ru_minflt)
