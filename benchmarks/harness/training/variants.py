"""The four variants of each model: which Keras, which batch norm, which backward op.

* ``keras3``: Keras 3 with its own BatchNormalization. On TensorFlow it is not fused: its
  backward is a graph of elementwise and reduction ops, not FusedBatchNormGradV3.
* ``keras3_shim``: Keras 3 with ``tf_fbn_ops.keras.BatchNormalization`` (TensorFlow's
  FusedBatchNormV3 forward, the shim's FbnFusedBatchNormGradV3 backward).
* ``keras2``: Keras 2 (``tf_keras``) with ``BatchNormalization(fused=True)``: TensorFlow's
  FusedBatchNormV3 forward and FusedBatchNormGradV3 backward.
* ``keras2_shim``: the same Keras 2 model, its train function traced inside
  ``tf_fbn_ops.shim_gradients()``, which makes the backward FbnFusedBatchNormGradV3.
* ``keras3_jit`` and ``keras3_shim_jit``: the two Keras 3 variants compiled with
  ``jit_compile=True`` (XLA: Keras 3's default on GPUs), where the shim's backward compiles to a
  custom call of its kernel.

Each shim variant is compared with the baseline of the same Keras, timed side by side in the same
worker. The frameworks are imported only when a variant is loaded, in the worker.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ContextManager

# The backward kinds the isolated-op timing knows (see isolated.py).
TF_FUSED = "tf_fused"  # tf.raw_ops.FusedBatchNormGradV3
SHIM = "shim"  # tf_fbn_ops.fused_batch_norm_grad_v3
KERAS3_UNFUSED = "keras3_unfused"  # Keras 3's own layer: its gradient graph

# Op types of the batch-norm backward in a traced training step.
TF_GRAD_OP = "FusedBatchNormGradV3"
SHIM_GRAD_OP = "FbnFusedBatchNormGradV3"


@dataclass(frozen=True)
class Variant:
    """How one variant builds its model and what its batch-norm backward is."""

    name: str
    keras_module: str  # "keras" (Keras 3) or "tf_keras" (Keras 2)
    baseline: str | None  # the variant it is compared with; None for a baseline
    backward: str  # TF_FUSED, SHIM or KERAS3_UNFUSED
    # The backward op the traced training step must contain (None: neither fused gradient op).
    expected_op: str | None
    jit_compile: bool = False  # model.compile(jit_compile=...)


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("keras3", "keras", None, KERAS3_UNFUSED, None),
    Variant("keras3_shim", "keras", "keras3", SHIM, SHIM_GRAD_OP),
    Variant("keras2", "tf_keras", None, TF_FUSED, TF_GRAD_OP),
    Variant("keras2_shim", "tf_keras", "keras2", SHIM, SHIM_GRAD_OP),
    Variant("keras3_jit", "keras", None, KERAS3_UNFUSED, None, jit_compile=True),
    Variant("keras3_shim_jit", "keras", "keras3_jit", SHIM, SHIM_GRAD_OP, jit_compile=True),
)}
NAMES: tuple[str, ...] = tuple(VARIANTS)


@dataclass
class Loaded:
    """A variant's framework objects, in the worker."""

    variant: Variant
    keras: ModuleType
    batch_norm: Callable[[], Any]  # a fresh batch-norm layer per call
    batch_norm_class: type  # to find the model's batch-norm layers
    # Entered around the first training steps, which trace the train function.
    trace_context: Callable[[], ContextManager[None]]


def load(name: str) -> Loaded:
    """Imports the variant's Keras (and tf_fbn_ops.keras for keras3_shim)."""
    variant = VARIANTS[name]
    keras = importlib.import_module(variant.keras_module)
    context: Callable[[], ContextManager[None]] = contextlib.nullcontext
    if name in ("keras3_shim", "keras3_shim_jit"):
        shim_keras = importlib.import_module("tf_fbn_ops.keras")
        layer_class = shim_keras.BatchNormalization
        factory: Callable[[], Any] = layer_class
    elif name in ("keras3", "keras3_jit"):
        layer_class = keras.layers.BatchNormalization
        factory = layer_class
    else:
        layer_class = keras.layers.BatchNormalization
        factory = lambda: layer_class(fused=True)  # noqa: E731
        if name == "keras2_shim":
            import tf_fbn_ops  # noqa: PLC0415

            context = tf_fbn_ops.shim_gradients
    return Loaded(variant, keras, factory, layer_class, context)
