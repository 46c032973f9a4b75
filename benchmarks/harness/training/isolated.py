"""The batch-norm backward of a model, timed op by op outside the training step.

What share of a training step the batch-norm backward takes is estimated, not measured: a step
is one graph, and timing an op inside it would need a profiler that changes what it times. So
the worker times each batch-norm layer's backward alone, on that layer's exact input shape
(float32, training mode, the model's layout), with inputs created once and a tf.function called
many times (median per call), sums over the model's layers and divides by the step time:

* ``tf_fused``: ``tf.raw_ops.FusedBatchNormGradV3``, the backward of Keras 2's fused layer;
* ``shim``: ``tf_fbn_ops.fused_batch_norm_grad_v3``, the shim variants' backward;
* ``keras3_unfused``: Keras 3's own layer has no gradient op, only the gradient graph of its
  moments and normalization; its backward is estimated as (forward + gradient) - forward of one
  such layer in training mode, both tf.functions returning the layer's output so that neither
  drops part of the forward.

A tf.function call costs 100-200 µs of dispatch on a busy 2-core VM, more than a small layer's
backward, where inside the step's graph an op costs a few µs of scheduling. So the fused ops run
as the op harness's chained variant (one tf.function of CHAIN_LENGTH calls, each call's dx the
next one's dy), which spreads the dispatch over CHAIN_LENGTH ops; in Keras 3's difference it
cancels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.batch_timer import time_batch
from harness.cases import Case
from harness.implementations import CHAIN_LENGTH, tf_chain, tf_kwargs, tf_op
from harness.inputs import make_inputs
from harness.stats import median_ns
from harness.training.variants import KERAS3_UNFUSED, SHIM, TF_FUSED

WARMUP_CALLS = 2


def _timed_median_ns(function: Callable[[], Any], calls: int) -> float:
    """Median of ``calls`` timed calls, after WARMUP_CALLS untimed ones."""
    for _ in range(WARMUP_CALLS):
        function()
    return median_ns(time_batch(function, calls).samples_ns)


class LayerBackward:
    """One batch-norm layer's backward, on fixed inputs, ready to be timed."""

    def __init__(self, kind: str, shape: tuple[int, ...], epsilon: float, data_format: str,
                 seed: int):
        if kind not in (TF_FUSED, SHIM, KERAS3_UNFUSED):
            raise ValueError(f"unknown backward kind {kind!r}")
        self.kind = kind
        # The op harness's inputs (x's batch statistics as the reserve spaces) and op wrappers.
        case = Case(tuple(shape), data_format, True, "float32")
        dy, kwargs = tf_kwargs(case, make_inputs(case, seed))
        if kind == KERAS3_UNFUSED:
            self._functions = _keras3_functions(kwargs["x"], dy, epsilon)
            return
        chained = tf_chain(tf_op("shim" if kind == SHIM else "tf_eigen"),
                           {**kwargs, "epsilon": epsilon})
        chained(dy)  # traced here, not in the first timed round
        self._functions = {"chained": lambda: chained(dy)}

    def time_ns(self, calls: int) -> float:
        """Median ns of one backward, from ``calls`` timed calls (never negative)."""
        if self.kind != KERAS3_UNFUSED:
            return _timed_median_ns(self._functions["chained"], calls) / CHAIN_LENGTH
        both = _timed_median_ns(self._functions["forward_backward"], calls)
        forward = _timed_median_ns(self._functions["forward"], calls)
        return max(0.0, both - forward)


def _keras3_functions(x: Any, dy: Any, epsilon: float) -> dict[str, Callable[[], Any]]:
    """Forward, and forward plus gradient, of a Keras 3 BatchNormalization in training mode."""
    import keras  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    layer = keras.layers.BatchNormalization(epsilon=epsilon)
    layer.build(tuple(x.shape))

    @tf.function
    def forward() -> Any:
        return layer(x, training=True)

    @tf.function
    def forward_backward() -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        return y, tape.gradient(y, [x, *layer.trainable_variables], output_gradients=dy)

    forward()
    forward_backward()
    return {"forward": forward, "forward_backward": forward_backward}
