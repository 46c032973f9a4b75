"""Synchronized batch normalization: batch statistics over every replica of a ``tf.distribute``
strategy, the shim's fused backward, one collective per direction, the same bits on every
replica and run to run.

Forward: each replica's count, mean and sum of squared deviations (M2) per channel in float64,
exchanged in one all-reduce, combined in replica order with Chan's pairwise formula (not
E[x²] − E[x]², which cancels where the mean is large next to the spread); then TensorFlow's
fused op normalizes with the global mean and variance.

Backward: `sync_batch_norm_grad_sums` (this replica's Σ dy and Σ dy·(x − mean) in float64), one
all-reduce, the sums added in replica order, then `sync_batch_norm_grad_from_sums` (x_backprop
from the global sums). Every all-reduce carries a zero ``[replicas, ...]`` float64 tensor in which
each replica has written only its own row, so the reduction adds each value to zeros alone and
its result is exact whatever the all-reduce's algorithm or order; the rows are then combined
locally in one fixed order. A replica with an empty batch joins both collectives. Outside any
strategy (one replica) nothing is exchanged.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from tf_fbn_ops import ops as shim_ops
from tf_fbn_ops.batch_norm import MIN_EPSILON

TensorLike = Any
# data_format -> position of the channel axis, for the ranks the fused ops take.
CHANNEL_AXIS = {"NHWC": 3, "NCHW": 1, "NDHWC": 4, "NCDHW": 1}


class GlobalMoments(NamedTuple):
    """Batch statistics over every replica, per channel."""

    mean: tf.Tensor  # float64
    variance: tf.Tensor  # float64, biased (M2 / count)
    count: tf.Tensor  # int64: elements per channel over every replica


def _replica_context() -> tf.distribute.ReplicaContext | None:
    """The replica context with more than one replica in sync, else None (no exchange)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return None
    return context


def exchange(value: tf.Tensor, context: tf.distribute.ReplicaContext | None) -> tf.Tensor:
    """Every replica's float64 `value`, stacked in replica order: ``[replicas, *value.shape]``.

    One all-reduce of a zero tensor in which this replica wrote its own row; each element of
    the sum is one replica's value plus zeros, so it is exact whatever the reduction's order.
    """
    if context is None:
        return value[tf.newaxis]
    replicas = context.num_replicas_in_sync
    rows = tf.tensor_scatter_nd_update(
        tf.zeros([replicas, *value.shape], tf.float64),
        tf.reshape(tf.cast(context.replica_id_in_sync_group, tf.int32), [1, 1]),
        value[tf.newaxis])
    return context.all_reduce(tf.distribute.ReduceOp.SUM, rows)


def global_moments(x: TensorLike, data_format: str,
                   context: tf.distribute.ReplicaContext | None = None) -> GlobalMoments:
    """Mean and biased variance per channel over every replica's batch (float64), with one
    all-reduce when `context` has several replicas."""
    x64 = tf.cast(x, tf.float64)
    axis = CHANNEL_AXIS[data_format]
    axes = [a for a in range(len(data_format)) if a != axis]
    channels = x.shape[axis]
    count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x, out_type=tf.int64), axes)), tf.float64)
    mean = tf.reduce_sum(x64, axes) / tf.maximum(count, 1.0)  # 0 for an empty batch
    shape = [channels if a == axis else 1 for a in range(len(data_format))]
    m2 = tf.reduce_sum(tf.square(x64 - tf.reshape(mean, shape)), axes)
    rows = exchange(tf.concat([count[tf.newaxis], mean, m2], 0), context)
    # Chan, Golub and LeVeque's pairwise update, replica after replica.
    total, total_mean, total_m2 = rows[0, 0], rows[0, 1:channels + 1], rows[0, channels + 1:]
    for r in range(1, rows.shape[0]):
        n, row_mean, row_m2 = rows[r, 0], rows[r, 1:channels + 1], rows[r, channels + 1:]
        combined = total + n
        weight = n / tf.maximum(combined, 1.0)
        delta = row_mean - total_mean
        total_mean = total_mean + delta * weight
        total_m2 = total_m2 + row_m2 + tf.square(delta) * total * weight
        total = combined
    variance = total_m2 / tf.maximum(total, 1.0)
    return GlobalMoments(total_mean, variance, tf.cast(total, tf.int64))


def synchronized_batch_norm(
    x: TensorLike,
    scale: TensorLike,
    offset: TensorLike,
    epsilon: float = 0.001,
    data_format: str = "NHWC",
) -> tuple[tf.Tensor, GlobalMoments]:
    """Training-mode batch normalization with statistics over every replica in sync.

    For use inside ``strategy.run`` (a custom training loop) or a Keras layer; outside any
    strategy it is plain batch normalization with no collective. Gradients flow to x, scale
    and offset; those of scale and offset are each replica's own share, which tf.distribute
    sums over replicas as it does every mirrored variable's gradient.

    Args:
      x: float32, float16 or bfloat16, 4-D or 5-D as `data_format` names.
      scale, offset: ``[C]`` float32.
      epsilon: added to the variance (raised to 1.001e-5, as the fused op does).
      data_format: ``"NHWC"``, ``"NCHW"``, ``"NDHWC"`` or ``"NCDHW"``.

    Returns:
      ``(y, moments)``: y in x's dtype, and the global moments (for moving averages).
    """
    if data_format not in CHANNEL_AXIS:
        raise ValueError(f"data_format must be one of {sorted(CHANNEL_AXIS)}, got "
                         f"{data_format!r}")
    x = tf.convert_to_tensor(x, name="x")
    if x.shape.rank != len(data_format):
        raise ValueError(f"x must be {len(data_format)}-D for data_format {data_format}, got "
                         f"shape {x.shape}")
    if x.shape[CHANNEL_AXIS[data_format]] is None:
        raise ValueError(f"x's channel dimension must be known, got shape {x.shape}")
    scale = tf.convert_to_tensor(scale, tf.float32, name="scale")
    offset = tf.convert_to_tensor(offset, tf.float32, name="offset")
    epsilon = max(float(epsilon), MIN_EPSILON)
    context = _replica_context()
    moments = global_moments(x, data_format, context)
    mean = tf.cast(moments.mean, tf.float32)
    variance = tf.cast(moments.variance, tf.float32)

    @tf.custom_gradient
    def normalize(x, scale, offset):
        y = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=epsilon,
            data_format=data_format, is_training=False).y

        def backward(grad_y):
            return synchronized_gradient(grad_y, x, scale, mean, variance, moments.count,
                                         epsilon, data_format, context)

        return y, backward

    return normalize(x, scale, offset), moments


def synchronized_gradient(grad_y, x, scale, mean, variance, count, epsilon: float,
                          data_format: str, context: tf.distribute.ReplicaContext | None):
    """(dx, dscale, doffset) of `synchronized_batch_norm`: the two ops around one exchange.
    dscale and doffset are this replica's share (with one replica, the whole)."""
    local = shim_ops.sync_batch_norm_grad_sums(grad_y, x, mean, data_format=data_format)
    rows = exchange(tf.stack([local.sum_dy, local.sum_dy_xc]), context)
    total = rows[0]
    for r in range(1, rows.shape[0]):  # replica order: the same bits on every replica
        total = total + rows[r]
    return tuple(shim_ops.sync_batch_norm_grad_from_sums(
        grad_y, x, scale, mean, variance, total[0], total[1], count, epsilon=epsilon,
        data_format=data_format, replica_sum_dy=local.sum_dy,
        replica_sum_dy_xc=local.sum_dy_xc))
