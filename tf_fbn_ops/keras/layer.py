"""Keras 3's BatchNormalization with tf-fbn-ops' fused forward and backward.

Keras 3 computes batch norm from separate ops (moments, rsqrt, multiply, add), so there is no
``FusedBatchNorm*`` op for `shim_gradients()` to reach. This layer is Keras' own class with one
method changed: where the input fits the fused ops, training's ``call`` runs the library's
``FbnFusedBatchNormV3`` forward (TensorFlow's ``FusedBatchNormV3`` where ours has no kernel yet,
on a GPU, or when asked for) and ``FbnFusedBatchNormGradV3`` backward (with
``synchronized=True``, in training, the
statistics of every replica and the synchronized backward of tf_fbn_ops.sync_batch_norm);
everywhere else it is Keras' code unchanged.
Constructor, weights, config, regularizers, constraints and the moving-statistics update are
inherited or mirrored line for line, so a model can switch classes without any other change.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from tf_fbn_ops import _loader
from tf_fbn_ops.batch_norm import FORWARDS, MIN_EPSILON, fused_batch_norm, inference_gradient
from tf_fbn_ops.sync_batch_norm import synchronized_batch_norm

# Input dtypes TensorFlow's fused op takes; its statistics and parameters stay float32, as
# Keras' layer computes in float32 for 16-bit inputs.
FUSED_DTYPES = (tf.float16, tf.bfloat16, tf.float32)
# (rank, channel axis) -> data_format of the fused op.
FUSED_LAYOUTS = {(4, 3): "NHWC", (4, 1): "NCHW", (5, 4): "NDHWC", (5, 1): "NCDHW"}


@keras.saving.register_keras_serializable(package="tf_fbn_ops")
class BatchNormalization(keras.layers.BatchNormalization):
    """Drop-in for ``keras.layers.BatchNormalization`` whose backward is tf-fbn-ops' kernel.

    Same arguments, defaults, weights and behaviour as Keras' layer (see its documentation).
    4-D and 5-D inputs normalized over their last axis or axis 1 (NHWC, NCHW, NDHWC, NCDHW),
    float16, bfloat16 or float32, run a fused forward and the shim's
    ``FbnFusedBatchNormGradV3`` backward, in training and in inference mode. Training's forward is
    ``forward`` as `tf_fbn_ops.fused_batch_norm` takes it: by default (``"auto"``) the library's
    ``FbnFusedBatchNormV3`` on the CPU, compiled by XLA or not, which makes a training step the
    same bits for any thread count, and TensorFlow's ``FusedBatchNormV3`` elsewhere;
    ``"tensorflow"`` keeps TensorFlow's everywhere. With
    ``synchronized=True`` training takes its statistics over every replica of the
    ``tf.distribute`` strategy it runs under (one all-reduce forward, one backward;
    `tf_fbn_ops.sync_batch_norm`); outside a strategy it is the layer without the flag. These
    fall back to Keras' own computation: other ranks or axes, float64, a mask, ``renorm=True``,
    ``epsilon`` below 1.001e-5 (the fused op's smallest on GPU), XLA compilation when the
    library was built without its XLA lowerings, and ``synchronized=True`` under XLA inside a
    ``tf.distribute`` strategy.

    Saved models name the class ``tf_fbn_ops>BatchNormalization``; ``import tf_fbn_ops.keras``
    before ``keras.models.load_model``.
    """

    def __init__(self, *args, forward: str = "auto", **kwargs):
        if forward not in FORWARDS:
            raise ValueError(f"forward must be one of {FORWARDS}, got {forward!r}")
        super().__init__(*args, **kwargs)
        self.forward = forward

    def get_config(self):
        # Only a choice other than the default is saved: the default config stays Keras' own, so
        # a model can switch between the two classes.
        config = super().get_config()
        if self.forward != "auto":
            config["forward"] = self.forward
        return config

    def call(self, inputs, training=None, mask=None):
        data_format = self.fused_data_format(inputs, mask)
        if data_format is None:
            return super().call(inputs, training=training, mask=mask)

        # Keras' layer casts its weights to the float32 it computes in; the fused op wants
        # float32 parameters whatever the input's dtype.
        channels = inputs.shape[self.axis]
        scale = (tf.cast(self.gamma, tf.float32) if self.scale
                 else tf.ones([channels], tf.float32))
        offset = (tf.cast(self.beta, tf.float32) if self.center
                  else tf.zeros([channels], tf.float32))
        moving_mean = tf.cast(self.moving_mean, tf.float32)
        moving_variance = tf.cast(self.moving_variance, tf.float32)

        if training and self.trainable and self.synchronized:
            outputs, moments = synchronized_batch_norm(inputs, scale, offset,
                                                       epsilon=self.epsilon,
                                                       data_format=data_format)
            self._update_moving_statistics(moving_mean, moving_variance,
                                           tf.cast(moments.mean, tf.float32),
                                           tf.cast(moments.variance, tf.float32))
        elif training and self.trainable:  # Keras' own test: a frozen layer runs in inference
            outputs, mean, corrected_variance = fused_batch_norm(
                inputs, scale, offset, epsilon=self.epsilon, data_format=data_format,
                is_training=True, forward=self.forward)
            variance = corrected_variance * _bessel_to_population(inputs, self.axis)
            self._update_moving_statistics(moving_mean, moving_variance, mean, variance)
        else:
            outputs = self._inference(inputs, scale, offset, moving_mean, moving_variance,
                                      data_format)
        return tf.cast(outputs, self.compute_dtype)

    def _update_moving_statistics(self, moving_mean, moving_variance, mean, variance) -> None:
        """Keras' moving averages of the batch's mean and population variance."""
        self.moving_mean.assign(moving_mean * self.momentum + mean * (1.0 - self.momentum))
        self.moving_variance.assign(
            moving_variance * self.momentum + variance * (1.0 - self.momentum))

    def _inference(self, inputs, scale, offset, mean, variance, data_format: str):
        """Keras' own inference arithmetic forward, so predictions are bit for bit Keras'; the
        shim's inference-mode gradient backward (the gradients of the population statistics
        included, for a tape that watches them)."""

        @tf.custom_gradient
        def normalize(x, scale, offset, mean, variance):
            outputs = keras.ops.batch_normalization(
                tf.cast(x, tf.float32), mean, variance, axis=self.axis,
                offset=offset if self.center else None, scale=scale if self.scale else None,
                epsilon=self.epsilon)

            def backward(grad_outputs):
                return inference_gradient(tf.cast(grad_outputs, x.dtype), x, scale, mean,
                                          variance, self.epsilon, data_format)

            return outputs, backward

        return normalize(inputs, scale, offset, mean, variance)

    def fused_data_format(self, inputs, mask=None) -> str | None:
        """The fused op's data_format for these inputs, or None where Keras' code must run."""
        rank = inputs.shape.rank
        if rank is None or inputs.dtype not in FUSED_DTYPES:
            return None
        # Keras 3.12 (the last for Python 3.10) has no renorm: getattr.
        renorm = getattr(self, "renorm", False)
        if mask is not None or renorm or self.epsilon < MIN_EPSILON:
            return None
        # Collectives inside an XLA-compiled replica step are untested (tf.distribute does not
        # compile Keras' own layers there either); outside a strategy there are none.
        synchronized_step = self.synchronized and tf.distribute.has_strategy()
        if ((_loader.xla_missing_reason() is not None or synchronized_step)
                and _in_xla_compilation()):
            return None
        return FUSED_LAYOUTS.get((rank, self.axis % rank))


def _bessel_to_population(inputs, axis: int):
    """(n - 1) / n for the n values per channel: the fused op returns the variance with Bessel's
    correction, Keras' moving average takes the population variance. 0 when n <= 1, where both
    variances are 0."""
    count = tf.cast(tf.size(inputs, out_type=tf.int64), tf.float32)
    channels = tf.cast(tf.maximum(tf.shape(inputs, out_type=tf.int64)[axis], 1), tf.float32)
    per_channel = count / channels
    return tf.maximum(per_channel - 1.0, 0.0) / tf.maximum(per_channel, 1.0)


def _in_xla_compilation() -> bool:
    """Whether the op being built will be compiled by XLA (tf.function(jit_compile=True))."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
