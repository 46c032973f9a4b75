"""Batch normalization with the library's forward and backward.

`fused_batch_norm` is ``tf.compat.v1.nn.fused_batch_norm`` on the library's ops: the forward
``FbnFusedBatchNormV3`` where it has a kernel (or TensorFlow's ``FusedBatchNormV3``, on request
or where ours has none), the backward ``FbnFusedBatchNormGradV3`` (`forward_gradient`).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from tf_fbn_ops import _loader, forward_gradient
from tf_fbn_ops import ops as shim_ops
from tf_fbn_ops._loader import load_library

TensorLike = Any

# cuDNN's smallest epsilon; tf.compat.v1.nn.fused_batch_norm raises smaller values to it.
MIN_EPSILON = 1.001e-5
# Which forward `fused_batch_norm` runs: the library's where it has a kernel ("auto"), always the
# library's, or always TensorFlow's.
FORWARDS = ("auto", "tf_fbn_ops", "tensorflow")


def forward_op_gradient(*args, **kwargs):
    """`forward_gradient.forward_op_gradient` on the loaded library (one name for this module's
    backward passes to call)."""
    return forward_gradient.forward_op_gradient(load_library(), *args, **kwargs)


def shim_forward_available() -> bool:
    """Whether the library's forward op has a kernel where `fused_batch_norm` would run it now:
    on the CPU, eagerly, in graphs, and under XLA compilation where the library has its XLA
    lowerings; not where a GPU is visible (no CUDA kernel in TensorFlow yet)."""
    if tf.config.list_logical_devices("GPU"):
        return False
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return _loader.xla_missing_reason() is None
    return True


def inference_gradient(grad_y, x, scale, mean, variance, epsilon: float, data_format: str):
    """Gradients of an inference-mode batch norm (FusedBatchNormV3's arithmetic, given mean and
    variance) with respect to x, scale, offset, mean and variance.

    The first three are the shim's op. TensorFlow's own gradient leaves the statistics out;
    Keras' unfused layer has them, so a model whose population statistics are differentiated
    gets the same answer from either. With y = scale * (x - mean) * r + offset and
    r = (variance + epsilon)^-1/2, both are per-channel rescalings of the other two gradients:
    d/dmean = -offset_backprop * scale * r and d/dvariance = -scale_backprop * scale * r^2 / 2.
    """
    unused_reserve_space_3 = tf.zeros([0], tf.float32)  # the shim ignores it, as TF's CPU kernel
    dx, dscale, doffset = forward_op_gradient(
        "FusedBatchNormV3", grad_y, x, scale, mean, variance, unused_reserve_space_3, epsilon,
        data_format, is_training=False)
    inverse_std = tf.math.rsqrt(variance + epsilon)
    return (dx, dscale, doffset, -doffset * scale * inverse_std,
            -0.5 * dscale * scale * tf.square(inverse_std))


def fused_batch_norm(
    x: TensorLike,
    scale: TensorLike,
    offset: TensorLike,
    mean: TensorLike | None = None,
    variance: TensorLike | None = None,
    epsilon: float = 0.001,
    data_format: str = "NHWC",
    is_training: bool = True,
    name: str | None = None,
    exponential_avg_factor: float = 1.0,
    forward: str = "auto",
):
    """``tf.compat.v1.nn.fused_batch_norm`` on tf-fbn-ops' forward and backward.

    Same arguments and results: ``(y, batch_mean, batch_variance)`` (in inference mode the given
    mean and variance). Works eagerly, in tf.function and in Keras layers; NCHW/NCDHW work in
    inference mode too. Gradients flow to x, scale and offset, as with TensorFlow's op, and in
    inference mode to mean and variance as well (TensorFlow's gradient has none for them).

    ``forward`` picks the forward op: ``"auto"`` the library's ``FbnFusedBatchNormV3`` where it
    has a kernel (the CPU, compiled by XLA or not: `shim_forward_available`) and TensorFlow's
    ``FusedBatchNormV3`` elsewhere; ``"tf_fbn_ops"`` always the library's; ``"tensorflow"``
    always TensorFlow's. The library's forward gives the same bits for any thread count; with
    TensorFlow's (oneDNN on, its default) a training step does not.
    """
    if forward not in FORWARDS:
        raise ValueError(f"forward must be one of {FORWARDS}, got {forward!r}")
    x = tf.convert_to_tensor(x, name="x")
    scale = tf.convert_to_tensor(scale, name="scale")
    offset = tf.convert_to_tensor(offset, name="offset")
    if (not is_training or exponential_avg_factor != 1.0) and (mean is None or variance is None):
        raise ValueError("Both `mean` and `variance` must be a 1D tensor when is_training is "
                         "False or exponential_avg_factor != 1.0.")
    mean = tf.constant([], tf.float32) if mean is None else tf.convert_to_tensor(mean)
    variance = tf.constant([], tf.float32) if variance is None else tf.convert_to_tensor(variance)
    epsilon = max(float(epsilon), MIN_EPSILON)

    ours = forward == "tf_fbn_ops" or (forward == "auto" and shim_forward_available())
    forward_op = shim_ops.fused_batch_norm_forward_v3 if ours else tf.raw_ops.FusedBatchNormV3
    forward_type = "FbnFusedBatchNormV3" if ours else "FusedBatchNormV3"

    @tf.custom_gradient
    def normalize(x, scale, offset, mean, variance):
        out = forward_op(
            x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=epsilon,
            exponential_avg_factor=exponential_avg_factor, data_format=data_format,
            is_training=is_training, name=name)

        def backward(grad_y, unused_grad_mean, unused_grad_variance):
            if not is_training:
                return inference_gradient(grad_y, x, scale, mean, variance, epsilon, data_format)
            dx, dscale, doffset = forward_op_gradient(
                forward_type, grad_y, x, scale, out.reserve_space_1, out.reserve_space_2,
                out.reserve_space_3, epsilon, data_format, is_training)
            return dx, dscale, doffset, None, None  # mean and variance feed running averages

        return (out.y, out.batch_mean, out.batch_variance), backward

    return normalize(x, scale, offset, mean, variance)
