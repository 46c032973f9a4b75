"""Whether another process competed for the cores while a batch was timed.

On a shared 2-core machine one busy process (a compile, another benchmark) is enough to stall
2-thread spin-barrier code for whole scheduler slices (milliseconds per call), so each visit
records how many cores other processes kept busy: the machine's busy CPU time (/proc/stat)
minus the worker's own (getrusage), over the batch's wall time. /proc/stat counts in clock ticks
(10 ms), so the figure is only meaningful for batches of at least MIN_WINDOW_NS.
"""

from __future__ import annotations

import os

MIN_WINDOW_NS = 50e6
# Slack, in cores, before a visit counts as contended: the estimate is only good to about a
# tick per CPU, and the parent and idle workers use a little CPU too.
SLACK_CORES = 0.5
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_cpu_s() -> float | None:
    """CPU seconds all CPUs spent busy since boot (user, nice, system, irq, softirq, steal);
    None where /proc/stat is not available."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICKS_PER_S


def other_cores(busy_s: float | None, own_cpu_s: float, wall_ns: float) -> float | None:
    """Cores kept busy by other processes over a window, or None if it cannot be told."""
    if busy_s is None or wall_ns < MIN_WINDOW_NS:
        return None
    return max(0.0, (busy_s - own_cpu_s) / (wall_ns / 1e9))


def usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def is_contended(others: float | None, threads: int, cores: int) -> bool:
    """Whether the other processes plus the worker's threads wanted more cores than there
    are (False when unknown)."""
    return others is not None and others + threads > cores + SLACK_CORES
