"""A float64 NumPy oracle for the three gradients and the forward, for parity checks and the demo.

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


def batch_norm_forward(
    x: np.ndarray,
    scale: np.ndarray,
    offset: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    epsilon: float,
    data_format: str,
    is_training: bool,
    exponential_avg_factor: float = 1.0,
    save_inv_std: bool = False,
) -> list[np.ndarray]:
    """The forward's five outputs in float64: ``[y, batch_mean, batch_variance,
    reserve_space_1, reserve_space_2]``.

    Training: the batch mean and biased variance (each sum correctly rounded); batch_variance
    with Bessel's correction n/(n-1) (1 for n = 1), both running-averaged with the given mean
    and variance when ``exponential_avg_factor`` != 1; the reserve spaces the mean and the
    biased variance, or 1/sqrt(var + eps) with ``save_inv_std``. Inference: the given
    statistics. An empty x: NaN batch statistics, zero reserve spaces. ``epsilon`` and the
    factor are rounded to float32 first, as the op's attrs are float32.
    """
    axis = channel_axis(np.ndim(x), data_format)
    xs = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    channels = xs.shape[-1]
    count = int(np.prod(xs.shape[:-1]))
    if count == 0:
        nan, zero = np.full(channels, np.nan), np.zeros(channels)
        return [np.moveaxis(xs, -1, axis), nan, nan, zero, zero]
    rows = xs.reshape(count, channels)
    eps = float(np.float32(epsilon))
    given_mean, given_variance = (np.asarray(v, np.float64) for v in (mean, variance))
    with np.errstate(all="ignore"):
        if is_training:
            batch_mean = _channel_sums(rows) / count
            biased = _channel_sums((rows - batch_mean) ** 2) / count
            unbiased = biased * (count / (count - 1) if count > 1 else 1.0)
            f = float(np.float32(exponential_avg_factor))
            outputs = ([batch_mean, unbiased] if exponential_avg_factor == 1.0 else
                       [(1 - f) * given_mean + f * batch_mean,
                        (1 - f) * given_variance + f * unbiased])
            used_mean, used_variance = batch_mean, biased
            saved = 1.0 / np.sqrt(biased + eps) if save_inv_std else biased
            outputs += [batch_mean, saved]
        else:
            used_mean, used_variance = given_mean, given_variance
            outputs = [given_mean, given_variance, given_mean, given_variance]
        y = ((rows - used_mean) / np.sqrt(used_variance + eps) * np.asarray(scale, np.float64)
             + np.asarray(offset, np.float64))
    return [np.moveaxis(y.reshape(xs.shape), -1, axis), *outputs]
