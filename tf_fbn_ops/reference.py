"""A float64 NumPy oracle for the three gradients, for parity checks and the demo.

It computes the exact math of TensorFlow's ops from the given inputs (mean and variance are
used as given, never recomputed), with every product in float64 and every per-channel sum
correctly rounded (``math.fsum``), so it stands for the true result against which both
TensorFlow and tf-fbn-ops are measured, also on ill-conditioned sums (1e15 next to 1e-3)
where a plain float64 sum would lose the small terms.
"""

from __future__ import annotations

import math

import numpy as np


def _channel_sums(terms: np.ndarray) -> np.ndarray:
    """Sum over axis 0 of a [rest, channels] array, each column correctly rounded.

    Columns with an infinity or NaN are summed plainly, which gives the inf or NaN that
    TensorFlow's sum gives (``math.fsum`` would raise on inf - inf).
    """
    sums = terms.sum(axis=0)
    for c in range(terms.shape[1]):
        column = terms[:, c]
        if np.isfinite(column).all():
            sums[c] = math.fsum(column)
    return sums


def channel_axis(rank: int, data_format: str) -> int:
    """Axis of the channels, keyed like TensorFlow on the data format's channel position."""
    return rank - 1 if data_format in ("NHWC", "NDHWC") else 1


def batch_norm_grad(
    y_backprop: np.ndarray,
    x: np.ndarray,
    scale: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    epsilon: float,
    data_format: str,
    is_training: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns ``(x_backprop, scale_backprop, offset_backprop)`` in float64.

    ``epsilon`` is rounded to float32 first, as the op's attr is a float32.
    """
    axis = channel_axis(np.ndim(x), data_format)
    dy = np.moveaxis(np.asarray(y_backprop, np.float64), axis, -1)
    xs = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    channels = xs.shape[-1]
    rest = int(np.prod(xs.shape[:-1]))
    dy2 = dy.reshape(rest, channels)
    with np.errstate(all="ignore"):  # inf - inf and negative variances give NaN, as in TF
        xc = xs.reshape(rest, channels) - np.asarray(mean, np.float64)
        inv_std = 1.0 / np.sqrt(np.asarray(variance, np.float64) + float(np.float32(epsilon)))
    scale64 = np.asarray(scale, np.float64)

    # Grouped exactly as TensorFlow's expressions, so infinities and NaNs propagate alike.
    with np.errstate(all="ignore"):
        offset_backprop = _channel_sums(dy2)
        sum_dy_xc = _channel_sums(dy2 * xc)
        if is_training:
            scale_backprop = _channel_sums(dy2 * (xc * inv_std))
        else:
            scale_backprop = sum_dy_xc * inv_std
        if is_training and rest > 0:
            coef2 = inv_std * inv_std * (sum_dy_xc / rest)
            dx = (scale64 * inv_std) * ((dy2 - offset_backprop / rest) - xc * coef2)
        else:
            dx = dy2 * (inv_std * scale64)
    x_backprop = np.moveaxis(dx.reshape(dy.shape), -1, axis)
    return x_backprop, scale_backprop, offset_backprop
