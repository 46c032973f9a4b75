"""Calling the shim and TensorFlow's built-in ops on a parity case, eagerly."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import tf_fbn_ops
from cases import EPSILON, OPS, Case, make_inputs
from tf_fbn_ops import reference

# Op version -> the shim's wrapper and TensorFlow's raw op.
SHIM = {"V1": tf_fbn_ops.fused_batch_norm_grad, "V2": tf_fbn_ops.fused_batch_norm_grad_v2,
        "V3": tf_fbn_ops.fused_batch_norm_grad_v3}
BUILTIN = {v: getattr(tf.raw_ops, name) for v, name in OPS.items()}
NHWC_ONLY = "only support NHWC tensor format"


def _kwargs(case: Case, inputs: dict, data_format: str | None = None) -> dict:
    kwargs = {k: tf.constant(v) for k, v in inputs.items()}
    if case.op != "V3":
        del kwargs["reserve_space_3"]
    kwargs.update(epsilon=EPSILON, data_format=data_format or case.data_format,
                  is_training=case.is_training)
    return kwargs


def run_shim(case: Case, inputs: dict) -> list[np.ndarray]:
    return [t.numpy() for t in SHIM[case.op](**_kwargs(case, inputs))]


def run_tf(case: Case, inputs: dict) -> tuple[list[np.ndarray], str]:
    """TensorFlow's answer and how it was obtained.

    Channels-first inference is refused by TF's stock kernel; there TF's own Python gradient
    transposes to channels last, runs the op and transposes back, so that is TF's answer too.
    """
    op = BUILTIN[case.op]
    try:
        return [t.numpy() for t in op(**_kwargs(case, inputs))], "direct"
    except tf.errors.InvalidArgumentError as e:
        if case.is_training or NHWC_ONLY not in e.message:
            raise
    rank = len(case.shape)
    to_last = [0, *range(2, rank), 1]
    to_first = [0, rank - 1, *range(1, rank - 1)]
    moved = dict(inputs)
    for k in ("y_backprop", "x"):
        moved[k] = np.transpose(inputs[k], to_last)
    last_format = "NHWC" if rank == 4 else "NDHWC"
    outs = [t.numpy() for t in op(**_kwargs(case, moved, last_format))]
    outs[0] = np.transpose(outs[0], to_first)
    return outs, "transposed"


def run_oracle(case: Case, inputs: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return reference.batch_norm_grad(
        inputs["y_backprop"], inputs["x"], inputs["scale"], inputs["reserve_space_1"],
        inputs["reserve_space_2"], EPSILON, case.data_format, case.is_training)


def tf_outputs_for(cases: list[Case]) -> dict:
    """run_tf for many cases, flattened into one dict of arrays (for np.savez)."""
    results = {}
    for case in cases:
        outs, route = run_tf(case, make_inputs(case))
        for i, value in enumerate(outs):
            results[f"{case.id}/{i}"] = np.asarray(value, np.float64)
        results[f"{case.id}/route"] = np.array(route)
    return results
