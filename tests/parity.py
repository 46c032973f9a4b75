"""The one parity criterion every numeric test uses.

For each output, against a float64 oracle:
  1. accuracy:  max|shim - oracle| <= max|tf - oracle| + 1 ulp of the output type at the
                output's magnitude (max|oracle|): never less accurate than TensorFlow;
  2. agreement: max|shim - tf| <= rtol * max|oracle| + 1 ulp, normwise, where rtol is
                RTOL[type] for x_backprop: float32 1e-5, float16 2^-10, bfloat16 2^-7 (one unit
                of the type, as x_backprop is rounded once to it and TF may round the other
                way), and for the per-channel sums (scale_backprop, offset_backprop, float32)
                1e-5 * max(1, sqrt(R / 1000)): TensorFlow adds the R terms of each channel one
                by one in float, whose error grows like sqrt(R) (about 6e-5 at R = 1e6, while
                the shim's sums stay near 3e-8 there).
These rules are the ones the README documents.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

RTOL = {"float32": 1e-5, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def ulp(dtype: str, magnitude: float) -> float:
    """Unit in the last place of `dtype` at `magnitude` (its smallest subnormal at 0)."""
    info = ml_dtypes.finfo(dtype)
    if not magnitude or not math.isfinite(magnitude):
        return float(info.smallest_subnormal)
    exponent = max(math.floor(math.log2(magnitude)), int(info.minexp))
    return 2.0 ** (exponent - int(info.nmant))


def sum_rtol(rest: int) -> float:
    """Agreement tolerance for an output that sums `rest` terms per channel."""
    return 1e-5 * max(1.0, math.sqrt(rest / 1000.0))


def assert_parity(name: str, shim, tf_value, oracle, dtype: str, against: str = "tf",
                  rtol: float | None = None, agreement: bool = True) -> None:
    """Asserts criterion 1 and (if `agreement`) 2 for one output; `dtype` is the output's
    element type and `rtol` overrides RTOL[dtype] (for the per-channel sums, pass
    sum_rtol(R))."""
    shim64 = np.asarray(shim, np.float64)
    tf64 = np.asarray(tf_value, np.float64).reshape(shim64.shape)
    oracle64 = np.asarray(oracle, np.float64)
    assert shim64.shape == oracle64.shape, f"{name}: shape {shim64.shape} != {oracle64.shape}"
    if shim64.size == 0:
        return
    magnitude = float(np.max(np.abs(oracle64)))
    unit = ulp(dtype, magnitude)
    err_shim = float(np.max(np.abs(shim64 - oracle64)))
    err_tf = float(np.max(np.abs(tf64 - oracle64)))
    assert err_shim <= err_tf + unit, (
        f"{name}: shim error {err_shim:.3g} > {against} error {err_tf:.3g} + 1 ulp {unit:.3g} "
        f"(magnitude {magnitude:.3g})")
    if not agreement:
        return
    diff = float(np.max(np.abs(shim64 - tf64)))
    bound = (RTOL[dtype] if rtol is None else rtol) * magnitude + unit
    assert diff <= bound, f"{name}: |shim - {against}| = {diff:.3g} > {bound:.3g}"
