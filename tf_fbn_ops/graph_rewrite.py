"""Swap TensorFlow's FusedBatchNormGrad* nodes for the shim's ops in a GraphDef, and back."""

from __future__ import annotations

from tensorflow.core.framework import graph_pb2

from tf_fbn_ops._loader import load_library

TO_SHIM = {"FusedBatchNormGrad": "FbnFusedBatchNormGrad",
           "FusedBatchNormGradV2": "FbnFusedBatchNormGradV2",
           "FusedBatchNormGradV3": "FbnFusedBatchNormGradV3"}
TO_BUILTIN = {shim: builtin for builtin, shim in TO_SHIM.items()}


def rewrite_graph_def(graph_def: graph_pb2.GraphDef, to: str = "shim") -> graph_pb2.GraphDef:
    """Returns a copy of `graph_def` with every batch-norm gradient node swapped.

    Args:
      graph_def: the graph; nodes in its function library are rewritten too.
      to: "shim" (FusedBatchNormGrad* -> FbnFusedBatchNormGrad*) or "builtin" (the reverse).

    Only the op type changes: inputs, attrs and device assignments are kept, which is valid
    because the shim's op definitions equal TensorFlow's. Rewriting to the shim loads the
    library, so the result can be imported at once.
    """
    if to not in ("shim", "builtin"):
        raise ValueError(f'`to` must be "shim" or "builtin", got {to!r}')
    mapping = TO_SHIM if to == "shim" else TO_BUILTIN
    if to == "shim":
        load_library()
    result = graph_pb2.GraphDef()
    result.CopyFrom(graph_def)
    nodes = list(result.node)
    for function in result.library.function:
        nodes.extend(function.node_def)
    for node in nodes:
        node.op = mapping.get(node.op, node.op)
    return result
