"""The seeded inputs of a case, identical in every worker process.

Each worker builds its own copy (no tensors cross the pipes), so the generator is seeded from the
run's seed and the case name: the same case gets the same data whatever ``--filter`` selected.
Values are held as float32 arrays already rounded to the case's dtype, so converting them to a
framework's bfloat16/float16 is exact and every implementation sees the same numbers.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from harness.cases import Case


@dataclass
class Inputs:
    """Arrays in the case's physical layout (x, dy) or per channel (scale, mean, variance)."""

    x: np.ndarray
    dy: np.ndarray
    scale: np.ndarray
    mean: np.ndarray
    variance: np.ndarray


def round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still as float32."""
    bits = values.astype(np.float32).view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit, then truncating, rounds to nearest even.
    bits = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def round_to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to ``dtype`` and back, so the conversion later is exact."""
    if dtype == "float16":
        return values.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        return round_to_bfloat16(values)
    return values.astype(np.float32, copy=False)


def storage_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """The array as the framework would store it: float32, or the 16-bit patterns of a 2-byte
    dtype as uint16 (what the streaming kernel moves)."""
    if dtype == "float16":
        return values.astype(np.float16).view(np.uint16)
    if dtype == "bfloat16":
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    return values


def _generator(case: Case, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(case.name.encode())])


def make_inputs(case: Case, seed: int) -> Inputs:
    """x ~ 2·N(0,1) + 0.5, dy ~ N(0,1), scale ~ U(0.5, 1.5); mean and variance are x's
    per-channel batch statistics (float32), as the forward pass would have saved them."""
    rng = _generator(case, seed)
    shape = case.physical_shape
    x = round_to_dtype(rng.standard_normal(shape, dtype=np.float32) * 2.0 + 0.5, case.dtype)
    dy = round_to_dtype(rng.standard_normal(shape, dtype=np.float32), case.dtype)
    scale = rng.uniform(0.5, 1.5, case.channels).astype(np.float32)
    axes = tuple(a for a in range(len(shape)) if a != case.channel_axis)
    mean = x.mean(axis=axes, dtype=np.float64)
    variance = x.var(axis=axes, dtype=np.float64)
    return Inputs(x=x, dy=dy, scale=scale, mean=mean.astype(np.float32),
                  variance=variance.astype(np.float32))
