"""oneDNN Graph's BatchNormTrainingBackprop-1 as a Python API over the shim's ops.

Operation spec (oneDNN Graph, opset 1): inputs input_forward (T1), output_delta (T1), mean
(T2), variance (T2), optional gamma (T2); attributes epsilon (required, positive) and
data_format ("NXC" or "NCX"); outputs input_delta (T1), gamma_delta (T2), beta_delta (T2).
T1 is float32, float16 or bfloat16; T2 is float32, or bfloat16 when T1 is bfloat16. mean and
variance are the batch statistics of the forward pass (training mode).
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from tf_fbn_ops import ops as shim_ops

TensorLike = Any
_T1 = (tf.float32, tf.float16, tf.bfloat16)
# Spatial dims -> the 4-D/5-D data_format the shim op is called with.
_FORMATS = {("NXC", 2): "NHWC", ("NCX", 2): "NCHW", ("NXC", 3): "NDHWC", ("NCX", 3): "NCDHW"}


def batch_norm_training_backprop(
    input_forward: TensorLike,
    output_delta: TensorLike,
    mean: TensorLike,
    variance: TensorLike,
    gamma: TensorLike | None = None,
    *,
    epsilon: float,
    data_format: str = "NXC",
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Returns ``(input_delta, gamma_delta, beta_delta)`` of training-mode batch norm.

    Args:
      input_forward: x, [N, spatial..., C] ("NXC") or [N, C, spatial...] ("NCX"), with 1, 2 or
        3 spatial dims.
      output_delta: gradient of the output, same shape and dtype as input_forward.
      mean, variance: [C] batch mean and variance of the forward pass, dtype T2.
      gamma: [C] scale, dtype T2; ones when omitted.
      epsilon: added to the variance; must be positive.
      data_format: "NXC" (channels last) or "NCX" (channels first).

    Raises:
      TypeError: a dtype outside the spec, or inputs whose dtypes disagree.
      ValueError: a bad rank, data_format, epsilon, or per-channel size.
    """
    x = tf.convert_to_tensor(input_forward, name="input_forward")
    dy = tf.convert_to_tensor(output_delta, name="output_delta")
    mean = tf.convert_to_tensor(mean, name="mean")
    variance = tf.convert_to_tensor(variance, name="variance")
    if x.dtype not in _T1:
        raise TypeError(f"input_forward must be float32, float16 or bfloat16, got {x.dtype.name}")
    if dy.dtype != x.dtype:
        raise TypeError(f"output_delta must have input_forward's dtype {x.dtype.name}, "
                        f"got {dy.dtype.name}")
    t2 = mean.dtype
    if t2 not in (tf.float32, tf.bfloat16) or (t2 == tf.bfloat16 and x.dtype != tf.bfloat16):
        raise TypeError(f"mean must be float32, or bfloat16 when input_forward is bfloat16; got "
                        f"{t2.name} with input_forward {x.dtype.name}")
    gamma = tf.ones_like(mean) if gamma is None else tf.convert_to_tensor(gamma, name="gamma")
    for name, t in (("variance", variance), ("gamma", gamma)):
        if t.dtype != t2:
            raise TypeError(f"{name} must have mean's dtype {t2.name}, got {t.dtype.name}")
    if data_format not in ("NXC", "NCX"):
        raise ValueError(f'data_format must be "NXC" or "NCX", got {data_format!r}')
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or \
            not math.isfinite(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    rank = x.shape.rank
    if rank not in (3, 4, 5):
        raise ValueError(f"input_forward must have 1, 2 or 3 spatial dims (rank 3 to 5), got "
                         f"shape {x.shape}")
    if dy.shape.rank != rank or not dy.shape.is_compatible_with(x.shape):
        raise ValueError(f"output_delta shape {dy.shape} differs from input_forward {x.shape}")
    channel_axis = rank - 1 if data_format == "NXC" else 1
    channels = x.shape[channel_axis]
    for name, t in (("mean", mean), ("variance", variance), ("gamma", gamma)):
        if t.shape.rank != 1 or (channels is not None and t.shape[0] not in (None, channels)):
            raise ValueError(f"{name} must have shape [{channels}] (the channels of "
                             f"input_forward {x.shape}), got {t.shape}")

    original_shape = tf.shape(x)
    if rank == 3:  # one spatial dim: view it as 2-D with a height of 1
        insert_at = 1 if data_format == "NXC" else 2
        x = tf.expand_dims(x, insert_at)
        dy = tf.expand_dims(dy, insert_at)
    # Synchronized batch norm's two stages with one replica: one gradient call's bits, and
    # they read a variance on every device, compiled or not (the gradient op's reserve_space_2
    # is, on a GPU, whatever TensorFlow's forward there saves).
    data_format_4d = _FORMATS[(data_format, max(rank, 4) - 2)]
    mean = tf.cast(mean, tf.float32)
    sums = shim_ops.sync_batch_norm_grad_sums(y_backprop=dy, x=x, mean=mean,
                                              data_format=data_format_4d)
    channel_axis = x.shape.rank - 1 if data_format == "NXC" else 1
    per_channel = tf.size(x, out_type=tf.int64) // tf.maximum(
        tf.shape(x, out_type=tf.int64)[channel_axis], 1)
    out = shim_ops.sync_batch_norm_grad_from_sums(
        y_backprop=dy, x=x, scale=tf.cast(gamma, tf.float32), mean=mean,
        variance=tf.cast(variance, tf.float32), sum_dy=sums[0], sum_dy_xc=sums[1],
        count=per_channel, epsilon=epsilon, data_format=data_format_4d)
    return (tf.reshape(out.x_backprop, original_shape), tf.cast(out.scale_backprop, t2),
            tf.cast(out.offset_backprop, t2))
