"""Memory-traffic model: how many bytes a case must move, and what the streaming kernel moves.

The model follows the performance notes: the training gradient reads x and dy once for the
reductions and again to write dx, so 5 tensor passes when x and dy together exceed what the
cache keeps between the two sweeps (16 MiB here), else 3 (the second sweep hits the cache);
inference is one fused sweep, 3 passes. The streaming-limit kernel always runs both training
sweeps, i.e. always 5 passes in training, whatever the cache would have saved.
"""

from __future__ import annotations

from harness.cases import Case

CACHE_BYTES = 16 * 2**20
FUSED_PASSES = 3  # read x, read dy, write dx
TWO_SWEEP_PASSES = 5  # sweep 1 reads x and dy; sweep 2 reads them again and writes dx


def model_passes(case: Case) -> int:
    """Tensor passes of the roofline model for the case."""
    if case.training and 2 * case.tensor_bytes > CACHE_BYTES:
        return TWO_SWEEP_PASSES
    return FUSED_PASSES


def model_bytes(case: Case) -> int:
    """Bytes the model says one call must move."""
    return model_passes(case) * case.tensor_bytes


def stream_passes(case: Case) -> int:
    """Tensor passes the streaming kernel makes (no cache credit)."""
    return TWO_SWEEP_PASSES if case.training else FUSED_PASSES


def stream_bytes(case: Case) -> int:
    """Bytes the streaming kernel's loops touch in one call."""
    return stream_passes(case) * case.tensor_bytes


def gigabytes_per_second(num_bytes: int, microseconds: float | None) -> float | None:
    """Bytes per microsecond, in GB/s (10^9 bytes); None without a time."""
    if not microseconds:
        return None
    return num_bytes / microseconds / 1e3
