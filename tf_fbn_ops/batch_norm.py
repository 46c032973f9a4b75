"""Batch normalization whose backward pass runs through the shim's gradient ops.

`fused_batch_norm` is the forward of ``tf.compat.v1.nn.fused_batch_norm`` (TensorFlow's own
``FusedBatchNormV3`` kernel); its gradient is ``FbnFusedBatchNormGradV3``. The helper
`forward_op_gradient` is the backward of TensorFlow's FusedBatchNorm{,V2,V3} ops in terms of the
shim's ops, shared by this module and by `shim_gradients()`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tf_fbn_ops import ops as shim_ops

TensorLike = Any

# TensorFlow's forward op -> the shim op computing its gradient.
GRADIENT_OF = {"FusedBatchNorm": shim_ops.fused_batch_norm_grad,
               "FusedBatchNormV2": shim_ops.fused_batch_norm_grad_v2,
               "FusedBatchNormV3": shim_ops.fused_batch_norm_grad_v3}
# cuDNN's smallest epsilon; tf.compat.v1.nn.fused_batch_norm raises smaller values to it.
MIN_EPSILON = 1.001e-5


def forward_op_gradient(forward_type: str, grad_y, x, scale, saved_or_population_mean,
                        saved_or_population_variance, reserve_space_3, epsilon: float,
                        data_format: str, is_training: bool):
    """(dx, dscale, doffset) for a FusedBatchNorm* forward op, computed by the shim.

    In training mode the statistics are the forward's saved reserve spaces; in inference mode
    the population mean and variance it was given. No transposes are needed for channels-first
    inference, unlike TensorFlow's own gradient.
    """
    kwargs = dict(y_backprop=grad_y, x=x, scale=scale, reserve_space_1=saved_or_population_mean,
                  reserve_space_2=saved_or_population_variance, epsilon=epsilon,
                  data_format=data_format, is_training=is_training)
    if forward_type == "FusedBatchNormV3":
        kwargs["reserve_space_3"] = reserve_space_3
    return tuple(GRADIENT_OF[forward_type](**kwargs)[:3])


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
):
    """``tf.compat.v1.nn.fused_batch_norm``, with the backward pass of tf-fbn-ops.

    Same arguments and results: ``(y, batch_mean, batch_variance)`` (in inference mode the given
    mean and variance). Works eagerly, in tf.function and in Keras layers; NCHW/NCDHW work in
    inference mode too. Gradients flow to x, scale and offset, as with TensorFlow's op, and in
    inference mode to mean and variance as well (TensorFlow's gradient has none for them).
    """
    x = tf.convert_to_tensor(x, name="x")
    scale = tf.convert_to_tensor(scale, name="scale")
    offset = tf.convert_to_tensor(offset, name="offset")
    if (not is_training or exponential_avg_factor != 1.0) and (mean is None or variance is None):
        raise ValueError("Both `mean` and `variance` must be a 1D tensor when is_training is "
                         "False or exponential_avg_factor != 1.0.")
    mean = tf.constant([], tf.float32) if mean is None else tf.convert_to_tensor(mean)
    variance = tf.constant([], tf.float32) if variance is None else tf.convert_to_tensor(variance)
    epsilon = max(float(epsilon), MIN_EPSILON)

    @tf.custom_gradient
    def forward(x, scale, offset, mean, variance):
        out = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=epsilon,
            exponential_avg_factor=exponential_avg_factor, data_format=data_format,
            is_training=is_training, name=name)

        def backward(grad_y, unused_grad_mean, unused_grad_variance):
            if not is_training:
                return inference_gradient(grad_y, x, scale, mean, variance, epsilon, data_format)
            dx, dscale, doffset = forward_op_gradient(
                "FusedBatchNormV3", grad_y, x, scale, out.reserve_space_1, out.reserve_space_2,
                out.reserve_space_3, epsilon, data_format, is_training)
            return dx, dscale, doffset, None, None  # mean and variance feed running averages

        return (out.y, out.batch_mean, out.batch_variance), backward

    return forward(x, scale, offset, mean, variance)
