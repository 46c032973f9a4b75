"""What TensorFlow must know about the shim's ops beyond their kernels: their gradients (the
second-order gradients of batch norm) and their vectorization rule for tf.vectorized_map.
Registered once, when the library is loaded (see _loader.py).
"""

from __future__ import annotations

from tensorflow.python.framework import ops
from tensorflow.python.ops import nn_fused_batch_norm_grad

SHIM_OPS = ("FbnFusedBatchNormGrad", "FbnFusedBatchNormGradV2", "FbnFusedBatchNormGradV3")

# TensorFlow's second-order rules read only the op's inputs and attrs, which the shim's ops
# share name for name: training recomputes the batch statistics from x, the reserve spaces get
# no gradient, and V3 returns one more None (for reserve_space_3).
_SECOND_ORDER = {
    "FbnFusedBatchNormGrad": nn_fused_batch_norm_grad._FusedBatchNormGradGrad,
    "FbnFusedBatchNormGradV2": nn_fused_batch_norm_grad._FusedBatchNormGradGradV2,
    "FbnFusedBatchNormGradV3": nn_fused_batch_norm_grad._FusedBatchNormGradGradV3,
}


def _register_gradients() -> None:
    for op_type, grad_fn in _SECOND_ORDER.items():
        ops.RegisterGradient(op_type)(grad_fn)


def _register_vectorization() -> None:
    """tf.vectorized_map: the loop dimension is folded into the channel dimension, exactly as
    TensorFlow does for FusedBatchNormGradV3 (its converter is generic over the op type). The
    rule holds for V1 and V2 too, whose inputs have the same layout."""
    from tensorflow.python.ops.parallel_for import pfor  # noqa: PLC0415

    convert = getattr(pfor, "_convert_fused_batch_norm_grad", None)
    if convert is not None:  # present in every TensorFlow this project builds against
        for op_type in SHIM_OPS:
            pfor.RegisterPFor(op_type)(convert)


def register_all() -> None:
    _register_gradients()
    _register_vectorization()
