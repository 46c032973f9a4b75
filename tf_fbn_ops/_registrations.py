"""What TensorFlow must know about the shim's ops beyond their kernels: their gradients (of the
forward ops: the gradient ops; of the gradient ops: the second-order gradients of batch norm)
and the gradient ops' vectorization rule for tf.vectorized_map.
Registered once, when the library is loaded (see _loader.py).
"""

from __future__ import annotations

import functools

from tensorflow.python.framework import ops

from tf_fbn_ops.forward_gradient import SHIM_FORWARD_OPS, op_gradient

try:  # TensorFlow >= 2.13 keeps the second-order rules in their own module
    from tensorflow.python.ops import nn_fused_batch_norm_grad as _second_order
except ImportError:
    from tensorflow.python.ops import nn_grad as _second_order

SHIM_OPS = ("FbnFusedBatchNormGrad", "FbnFusedBatchNormGradV2", "FbnFusedBatchNormGradV3")


def _register_gradients(library) -> None:
    """TensorFlow's second-order rules read only the op's inputs and attrs, which the shim's
    ops share name for name: training recomputes the batch statistics from x, the reserve
    spaces get no gradient, and V3 returns one more None (for reserve_space_3)."""
    for op_type, rule in zip(SHIM_OPS, ("_FusedBatchNormGradGrad", "_FusedBatchNormGradGradV2",
                                        "_FusedBatchNormGradGradV3")):
        ops.RegisterGradient(op_type)(getattr(_second_order, rule))
    for op_type in SHIM_FORWARD_OPS:
        ops.RegisterGradient(op_type)(functools.partial(op_gradient, library))


def _register_vectorization() -> None:
    """tf.vectorized_map: the loop dimension is folded into the channel dimension, exactly as
    TensorFlow does for FusedBatchNormGradV3 and FusedBatchNormV3 (its converters are generic
    over the op type). The gradient rule holds for V1 and V2 too, whose inputs have the same
    layout; the forward rule returns V3's six outputs, so it is V3's only, as in TensorFlow."""
    from tensorflow.python.ops.parallel_for import pfor  # noqa: PLC0415

    convert = getattr(pfor, "_convert_fused_batch_norm_grad", None)
    if convert is not None:  # present in every TensorFlow this project builds against
        for op_type in SHIM_OPS:
            pfor.RegisterPFor(op_type)(convert)
    convert_forward = getattr(pfor, "_convert_fused_batch_norm", None)
    if convert_forward is not None:
        pfor.RegisterPFor("FbnFusedBatchNormV3")(convert_forward)


def register_all(library) -> None:
    """Everything, for the op module `library` (just loaded)."""
    _register_gradients(library)
    _register_vectorization()
