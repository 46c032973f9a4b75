"""Make TensorFlow's own batch norm (FusedBatchNorm, V2, V3, and so Keras' fused
BatchNormalization) compute its gradient with the shim's ops.

TensorFlow looks gradient functions up by op type when it builds a backward pass, in eager mode
and when tracing; these functions swap the entries for the three forward ops and put them back.
A tf.function whose backward pass was traced before keeps the gradient it was traced with.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from tensorflow.python.framework import ops

import functools

from tf_fbn_ops._loader import load_library
from tf_fbn_ops.forward_gradient import TF_FORWARD_OPS, op_gradient

_lock = threading.Lock()
_saved: dict = {}  # forward op type -> TensorFlow's gradient function, while enabled


def enable_shim_gradients() -> None:
    """From now on, gradients of FusedBatchNorm{,V2,V3} run through the shim's ops."""
    gradient = functools.partial(op_gradient, load_library())
    registry = ops._gradient_registry._registry  # noqa: SLF001 - TF has no public override
    with _lock:
        for op_type in TF_FORWARD_OPS:
            if op_type not in _saved:
                _saved[op_type] = registry[op_type]["type"]
                registry[op_type]["type"] = gradient


def disable_shim_gradients() -> None:
    """Restores TensorFlow's own gradients of FusedBatchNorm{,V2,V3}."""
    registry = ops._gradient_registry._registry  # noqa: SLF001
    with _lock:
        for op_type, original in _saved.items():
            registry[op_type]["type"] = original
        _saved.clear()


def shim_gradients_enabled() -> bool:
    """Whether gradients of TensorFlow's batch norm currently run through the shim."""
    return bool(_saved)


@contextlib.contextmanager
def shim_gradients() -> Iterator[None]:
    """Within the block, TensorFlow's batch norm gradients run through the shim's ops; on exit
    the previous state (enabled or not) is restored. Nests."""
    was_enabled = shim_gradients_enabled()
    enable_shim_gradients()
    try:
        yield
    finally:
        if not was_enabled:
            disable_shim_gradients()
