"""The library's ops: the three gradient ops, with the signatures of
``tf.raw_ops.FusedBatchNormGrad*``, the three forward ops, with those of
``tf.raw_ops.FusedBatchNorm*``, and synchronized batch norm's two backward halves.

Each function returns the op's namedtuple of outputs and works in eager mode, inside
``tf.function`` and in ``tf.compat.v1`` graphs. The gradient ops also compile with
``jit_compile=True`` (the library has XLA lowerings); the forward ops have CPU kernels only so far.

Under XLA the ops compile to custom calls of the library's own kernels (TensorFlow 2.20 and
later), so XLA's auto-clustering (``tf.config.optimizer.set_jit``,
``TF_XLA_FLAGS=--tf_xla_auto_jit=...``) may put them in its clusters. Where they would compile to
the HLO lowering instead, a graph pass of the library marks their nodes ``_XlaCompile=False`` and
clustering leaves them to the kernels (cc/xla/xla_auto_clustering.cc).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tf_fbn_ops._loader import load_library

TensorLike = Any  # a tf.Tensor, or anything tf.convert_to_tensor accepts


def _call_op(op_name: str, **kwargs: Any) -> NamedTuple:
    """Runs the library's op `op_name` (eagerly) or adds it to the graph."""
    return getattr(load_library(), op_name)(**kwargs)


def fused_batch_norm_grad(
    y_backprop: TensorLike,
    x: TensorLike,
    scale: TensorLike,
    reserve_space_1: TensorLike,
    reserve_space_2: TensorLike,
    epsilon: float = 0.0001,
    data_format: str = "NHWC",
    is_training: bool = True,
    name: str | None = None,
) -> NamedTuple:
    """Gradient of batch normalization, as ``tf.raw_ops.FusedBatchNormGrad`` (float32 only).

    Args:
      y_backprop: 4-D gradient of the batch-norm output.
      x: 4-D input of the forward pass, same shape as ``y_backprop``.
      scale: 1-D ``[C]`` scale (gamma).
      reserve_space_1: 1-D ``[C]`` mean: the batch mean in training, the population mean in
        inference.
      reserve_space_2: 1-D ``[C]`` variance (batch or population), as the CPU forward saves it.
      epsilon: added to the variance.
      data_format: ``"NHWC"`` or ``"NCHW"``.
      is_training: True for the training gradient (batch statistics depend on x), False for
        the inference gradient (statistics are constants). Unlike TensorFlow's CPU kernel,
        NCHW works in inference mode too.
      name: optional op name.

    Returns:
      ``(x_backprop, scale_backprop, offset_backprop, reserve_space_3, reserve_space_4)``.
    """
    return _call_op(
        "fbn_fused_batch_norm_grad",
        y_backprop=y_backprop, x=x, scale=scale, reserve_space_1=reserve_space_1,
        reserve_space_2=reserve_space_2, epsilon=epsilon, data_format=data_format,
        is_training=is_training, name=name)


def fused_batch_norm_grad_v2(
    y_backprop: TensorLike,
    x: TensorLike,
    scale: TensorLike,
    reserve_space_1: TensorLike,
    reserve_space_2: TensorLike,
    epsilon: float = 0.0001,
    data_format: str = "NHWC",
    is_training: bool = True,
    name: str | None = None,
) -> NamedTuple:
    """As ``tf.raw_ops.FusedBatchNormGradV2``: like V1, but x and y_backprop may be float16,
    bfloat16 or float32 while ``scale``, the reserve spaces and the scale/offset gradients stay
    float32. ``x_backprop`` has x's dtype, rounded once to nearest-even from float32 arithmetic.

    Returns:
      ``(x_backprop, scale_backprop, offset_backprop, reserve_space_3, reserve_space_4)``.
    """
    return _call_op(
        "fbn_fused_batch_norm_grad_v2",
        y_backprop=y_backprop, x=x, scale=scale, reserve_space_1=reserve_space_1,
        reserve_space_2=reserve_space_2, epsilon=epsilon, data_format=data_format,
        is_training=is_training, name=name)


def fused_batch_norm_grad_v3(
    y_backprop: TensorLike,
    x: TensorLike,
    scale: TensorLike,
    reserve_space_1: TensorLike,
    reserve_space_2: TensorLike,
    reserve_space_3: TensorLike,
    epsilon: float = 0.0001,
    data_format: str = "NHWC",
    is_training: bool = True,
    name: str | None = None,
) -> NamedTuple:
    """As ``tf.raw_ops.FusedBatchNormGradV3``: V2 plus 5-D inputs (``"NDHWC"``, ``"NCDHW"``)
    and a ``reserve_space_3`` input that is accepted and ignored on CPU, as in TensorFlow.

    Returns:
      ``(x_backprop, scale_backprop, offset_backprop, reserve_space_4, reserve_space_5)``.
    """
    return _call_op(
        "fbn_fused_batch_norm_grad_v3",
        y_backprop=y_backprop, x=x, scale=scale, reserve_space_1=reserve_space_1,
        reserve_space_2=reserve_space_2, reserve_space_3=reserve_space_3, epsilon=epsilon,
        data_format=data_format, is_training=is_training, name=name)


def _forward(op_name: str, x, scale, offset, mean, variance, epsilon, exponential_avg_factor,
             data_format, is_training, name) -> NamedTuple:
    return _call_op(op_name, x=x, scale=scale, offset=offset, mean=mean, variance=variance,
                    epsilon=epsilon, exponential_avg_factor=exponential_avg_factor,
                    data_format=data_format, is_training=is_training, name=name)


def fused_batch_norm_forward(
    x: TensorLike,
    scale: TensorLike,
    offset: TensorLike,
    mean: TensorLike,
    variance: TensorLike,
    epsilon: float = 0.0001,
    exponential_avg_factor: float = 1.0,
    data_format: str = "NHWC",
    is_training: bool = True,
    name: str | None = None,
) -> NamedTuple:
    """Batch normalization, as ``tf.raw_ops.FusedBatchNorm`` (float32 only).

    Args:
      x: 4-D input.
      scale, offset: 1-D ``[C]`` scale (gamma) and offset (beta).
      mean, variance: 1-D population statistics in inference; in training the running
        averages that ``exponential_avg_factor != 1`` updates (otherwise unread, any length).
      epsilon: added to the variance.
      exponential_avg_factor: training's outputs 1 and 2 are
        ``(1 - f) * old + f * batch`` (f = 1: the batch's own).
      data_format: ``"NHWC"`` or ``"NCHW"`` (both native, in both modes).
      is_training: normalize with the batch's statistics (True) or the given ones.
      name: optional op name.

    Returns:
      ``(y, batch_mean, batch_variance, reserve_space_1, reserve_space_2)``. In training:
      batch_variance with Bessel's correction, the reserve spaces the batch mean and biased
      variance the gradient ops read. In inference: outputs 1-4 are the given statistics.
      Statistics are accumulated in double in an order fixed by the shape (the same bits for
      any thread count) and every output is rounded once.
    """
    return _forward("fbn_fused_batch_norm", x, scale, offset, mean, variance, epsilon,
                    exponential_avg_factor, data_format, is_training, name)


def fused_batch_norm_forward_v2(
    x: TensorLike,
    scale: TensorLike,
    offset: TensorLike,
    mean: TensorLike,
    variance: TensorLike,
    epsilon: float = 0.0001,
    exponential_avg_factor: float = 1.0,
    data_format: str = "NHWC",
    is_training: bool = True,
    name: str | None = None,
) -> NamedTuple:
    """As ``tf.raw_ops.FusedBatchNormV2``: V1 with x and y float16, bfloat16 or float32, and
    everything per channel float32.

    Returns:
      ``(y, batch_mean, batch_variance, reserve_space_1, reserve_space_2)``.
    """
    return _forward("fbn_fused_batch_norm_v2", x, scale, offset, mean, variance, epsilon,
                    exponential_avg_factor, data_format, is_training, name)


def fused_batch_norm_forward_v3(
    x: TensorLike,
    scale: TensorLike,
    offset: TensorLike,
    mean: TensorLike,
    variance: TensorLike,
    epsilon: float = 0.0001,
    exponential_avg_factor: float = 1.0,
    data_format: str = "NHWC",
    is_training: bool = True,
    name: str | None = None,
) -> NamedTuple:
    """As ``tf.raw_ops.FusedBatchNormV3``: V2 plus 5-D inputs (``"NDHWC"``, ``"NCDHW"``) and a
    sixth output, ``reserve_space_3``, a float32 scalar 0 (as TensorFlow's CPU kernel).

    Returns:
      ``(y, batch_mean, batch_variance, reserve_space_1, reserve_space_2, reserve_space_3)``.
    """
    return _forward("fbn_fused_batch_norm_v3", x, scale, offset, mean, variance, epsilon,
                    exponential_avg_factor, data_format, is_training, name)


def sync_batch_norm_grad_sums(
    y_backprop: TensorLike,
    x: TensorLike,
    mean: TensorLike,
    data_format: str = "NHWC",
    name: str | None = None,
) -> NamedTuple:
    """First half of synchronized batch norm's backward: this replica's per-channel sums.

    Args:
      y_backprop: gradient of the batch-norm output, float32, float16 or bfloat16, 4-D or 5-D
        as ``data_format`` names.
      x: input of the forward pass, same shape and dtype.
      mean: ``[C]`` float32 batch mean over every replica (what the forward normalized with).
      data_format: ``"NHWC"``, ``"NCHW"``, ``"NDHWC"`` or ``"NCDHW"``.
      name: optional op name.

    Returns:
      ``(sum_dy, sum_dy_xc)``: ``[C]`` float64 Σ dy and Σ dy·(x − mean) over this replica's
      batch, unrounded, for adding up across replicas.
    """
    return _call_op("fbn_sync_batch_norm_grad_sums", y_backprop=y_backprop, x=x, mean=mean,
                    data_format=data_format, name=name)


def sync_batch_norm_grad_from_sums(
    y_backprop: TensorLike,
    x: TensorLike,
    scale: TensorLike,
    mean: TensorLike,
    variance: TensorLike,
    sum_dy: TensorLike,
    sum_dy_xc: TensorLike,
    count: TensorLike,
    epsilon: float = 0.0001,
    data_format: str = "NHWC",
    name: str | None = None,
    replica_sum_dy: TensorLike | None = None,
    replica_sum_dy_xc: TensorLike | None = None,
) -> NamedTuple:
    """Second half of synchronized batch norm's backward: x_backprop from the global sums.

    Args:
      y_backprop, x: as for `sync_batch_norm_grad_sums`.
      scale: ``[C]`` float32 scale (gamma).
      mean, variance: ``[C]`` float32 batch mean and (biased) variance over every replica.
      sum_dy, sum_dy_xc: ``[C]`` float64 sums of `sync_batch_norm_grad_sums` over every replica.
      count: int64 scalar, the elements per channel over every replica (at least this
        replica's own).
      epsilon: added to the variance.
      data_format, name: as for `sync_batch_norm_grad_sums`.
      replica_sum_dy, replica_sum_dy_xc: ``[C]`` float64 sums of `sync_batch_norm_grad_sums`
        over this replica's batch; left out, the global ones (one replica).

    Returns:
      ``(x_backprop, scale_backprop, offset_backprop)``: this replica's x gradient, and its
      share of the scale and offset gradients (from its own sums: the replicas' shares add up
      to the whole batch's, as a distribution strategy adds them). With one replica, the bits
      of `fused_batch_norm_grad_v3` in training mode.
    """
    return _call_op("fbn_sync_batch_norm_grad_from_sums", y_backprop=y_backprop, x=x,
                    scale=scale, mean=mean, variance=variance, sum_dy=sum_dy, sum_dy_xc=sum_dy_xc,
                    count=count,
                    replica_sum_dy=sum_dy if replica_sum_dy is None else replica_sum_dy,
                    replica_sum_dy_xc=sum_dy_xc if replica_sum_dy_xc is None else replica_sum_dy_xc,
                    epsilon=epsilon, data_format=data_format, name=name)
