"""The shim's OpDefs equal TensorFlow's in everything but the name."""

import pytest
from tensorflow.python.framework import op_def_registry

import tf_fbn_ops

PAIRS = [("FbnFusedBatchNormGrad", "FusedBatchNormGrad"),
         ("FbnFusedBatchNormGradV2", "FusedBatchNormGradV2"),
         ("FbnFusedBatchNormGradV3", "FusedBatchNormGradV3")]


@pytest.mark.parametrize("shim_name,tf_name", PAIRS)
def test_op_def_equals_tensorflow(shim_name: str, tf_name: str) -> None:
    tf_fbn_ops.load_library()
    shim = op_def_registry.get(shim_name)
    builtin = op_def_registry.get(tf_name)
    assert shim is not None and builtin is not None
    # Field by field, so a difference names the field.
    assert [a for a in shim.input_arg] == [a for a in builtin.input_arg]
    assert [a for a in shim.output_arg] == [a for a in builtin.output_arg]
    assert [a for a in shim.attr] == [a for a in builtin.attr]
    for field in ("deprecation", "summary", "description", "is_commutative", "is_aggregate",
                  "is_stateful", "allows_uninitialized_input", "is_distributed_communication"):
        assert getattr(shim, field) == getattr(builtin, field), field
    # And as whole protos, which also covers any field added in a later TensorFlow.
    shim_copy = type(shim)()
    shim_copy.CopyFrom(shim)
    shim_copy.name = tf_name
    assert shim_copy == builtin
