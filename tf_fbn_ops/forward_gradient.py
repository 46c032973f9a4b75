"""The gradient of a batch-norm forward op, TensorFlow's ``FusedBatchNorm{,V2,V3}`` or the
library's ``FbnFusedBatchNorm{,V2,V3}``, in terms of the library's gradient ops.

Registered for the library's forward ops when the library loads (``_registrations``), swapped in
for TensorFlow's by `shim_gradients()`, and used by `fused_batch_norm`'s own backward. The op
module is passed in (``library``), so this module imports nothing of the package.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

TF_FORWARD_OPS = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
SHIM_FORWARD_OPS = ("FbnFusedBatchNorm", "FbnFusedBatchNormV2", "FbnFusedBatchNormV3")
# Version suffix of a forward op -> the library's op computing its gradient.
_GRADIENT_OP = {"": "fbn_fused_batch_norm_grad", "V2": "fbn_fused_batch_norm_grad_v2",
                "V3": "fbn_fused_batch_norm_grad_v3"}


def version(forward_type: str) -> str:
    """"", "V2" or "V3"."""
    return forward_type[-2:] if forward_type[-2:] in ("V2", "V3") else ""


def forward_op_gradient(library, forward_type: str, grad_y, x, scale, saved_or_population_mean,
                        saved_or_population_variance, reserve_space_3, epsilon: float,
                        data_format: str, is_training: bool):
    """(dx, dscale, doffset) for a forward op of type `forward_type`.

    In training mode the statistics are the forward's saved reserve spaces; in inference mode
    the population mean and variance it was given. No transposes are needed for channels-first
    inference, unlike TensorFlow's own gradient. The library's forward has no GPU kernel, so
    eagerly and in graphs it runs on the CPU and its reserve_space_2 holds the CPU contract's
    variance: its gradient runs on the CPU too, where the gradient op reads a variance (on a GPU
    it would read an inverse standard deviation). Under XLA the pair compiles for one device, and
    the forward saves what the gradient compiled there reads.
    """
    kwargs = dict(y_backprop=grad_y, x=x, scale=scale, reserve_space_1=saved_or_population_mean,
                  reserve_space_2=saved_or_population_variance, epsilon=epsilon,
                  data_format=data_format, is_training=is_training)
    suffix = version(forward_type)
    if suffix == "V3":
        kwargs["reserve_space_3"] = reserve_space_3
    gradient_op = getattr(library, _GRADIENT_OP[suffix])
    in_xla = control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
    if forward_type in SHIM_FORWARD_OPS and not in_xla:
        # The device type only: under tf.distribute a replica keeps its own CPU.
        with tf.device("CPU"):
            return tuple(gradient_op(**kwargs)[:3])
    return tuple(gradient_op(**kwargs)[:3])


def _attr_text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def op_gradient(library, op, *grads):
    """The gradient function of a forward op (``functools.partial(op_gradient, library)`` is
    what TensorFlow's registry holds); no gradient for mean and variance, as TensorFlow's."""
    is_training = op.get_attr("is_training")
    if is_training:
        stats = (op.outputs[3], op.outputs[4])  # saved batch mean and variance / inverse std
    else:
        stats = (op.inputs[3], op.inputs[4])  # population mean and variance
    reserve_space_3 = op.outputs[5] if version(op.type) == "V3" else None
    dx, dscale, doffset = forward_op_gradient(
        library, op.type, grads[0], op.inputs[0], op.inputs[1], *stats, reserve_space_3,
        op.get_attr("epsilon"), _attr_text(op.get_attr("data_format")), is_training)
    return dx, dscale, doffset, None, None
