"""What the forward ops' tests share (test_forward.py, test_forward_xla.py): the three versions
with TensorFlow's op beside each, small inputs in every layout and dtype, a float64 oracle of the
five outputs, the version x layout x dtype x mode cases, and inputs TensorFlow's kernel refuses.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops
from tf_fbn_ops import reference

EPSILON = 1e-3
VERSIONS = {"V1": ("FbnFusedBatchNorm", "FusedBatchNorm", tf_fbn_ops.fused_batch_norm_forward),
            "V2": ("FbnFusedBatchNormV2", "FusedBatchNormV2",
                   tf_fbn_ops.fused_batch_norm_forward_v2),
            "V3": ("FbnFusedBatchNormV3", "FusedBatchNormV3",
                   tf_fbn_ops.fused_batch_norm_forward_v3)}
FORMATS = {"NHWC": (2, 5, 6, 3), "NCHW": (2, 3, 5, 6), "NDHWC": (2, 3, 4, 5, 3),
           "NCDHW": (2, 3, 3, 4, 5)}
DTYPES = {"float32": tf.float32, "float16": tf.float16, "bfloat16": tf.bfloat16}


def channel_axis(data_format: str) -> int:
    return 1 if data_format.startswith("NC") else len(data_format) - 1


def tf_op(version: str):
    return getattr(tf.raw_ops, VERSIONS[version][1])


def make_inputs(shape, data_format, dtype, offset=0.0, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[channel_axis(data_format)]
    x = tf.cast(tf.constant(offset + 3.0 * rng.standard_normal(shape), tf.float32), dtype)
    scale, off = (tf.constant(rng.uniform(0.5, 2.0, c), tf.float32),
                  tf.constant(rng.standard_normal(c), tf.float32))
    mean = tf.constant(offset + rng.standard_normal(c), tf.float32)
    variance = tf.constant(rng.uniform(4.0, 16.0, c), tf.float32)
    return x, scale, off, mean, variance


def oracle(x, scale, offset, mean, variance, data_format, is_training, factor):
    """The five outputs in float64 from the (rounded) inputs (tf_fbn_ops.reference)."""
    return reference.batch_norm_forward(
        *(tf.cast(t, tf.float64).numpy() for t in (x, scale, offset, mean, variance)), EPSILON,
        data_format, is_training, factor)


def max_error(got, want) -> float:
    return float(np.max(np.abs(tf.cast(got, tf.float64).numpy() - want), initial=0.0))


def half_ulp(dtype, magnitude: float) -> float:
    bits = {tf.float32: 24, tf.float16: 11, tf.bfloat16: 8}[dtype]
    return 2.0 ** (np.floor(np.log2(max(magnitude, 1e-30))) - bits)


def forward_cases() -> list:
    """pytest params (version, data_format, dtype, mode) of every combination the ops take."""
    return list(_case_params())


def _case_params():
    for version in VERSIONS:
        for data_format in FORMATS:
            if len(data_format) == 5 and version != "V3":
                continue
            for dtype in (["float32"] if version == "V1" else DTYPES):
                for mode in ("train", "train_factor", "infer"):
                    yield pytest.param(version, data_format, dtype, mode,
                                       id=f"{version}-{data_format}-{dtype}-{mode}")


def normalized_error(message: str) -> str:
    """The op name normalized, and the " name: " that generated wrappers append when given
    name=None (TensorFlow's own FusedBatchNorm* wrappers do not) dropped: the kernels' text."""
    return re.sub(r" name: $", "", re.sub(r"FbnFusedBatchNorm", "FusedBatchNorm", message))


def outcome(fn, kwargs):
    """("ok", the outputs as arrays) or (the exception's type, its normalized text)."""
    try:
        return "ok", [t.numpy() for t in fn(**kwargs)]
    except (tf.errors.OpError, ValueError, TypeError) as e:
        return type(e), normalized_error(getattr(e, "message", str(e)))


def bad_call(version="V3", shape=(2, 4, 5, 3), scale=(3,), offset=(3,), mean=(0,),
             variance=(0,), **attrs):
    """(version, the op's keyword arguments) with inputs of the shapes given."""
    rng = np.random.default_rng(0)
    per_channel = tf.float32

    def t(s):
        return tf.constant(np.abs(rng.standard_normal(s)) + 0.5, per_channel)

    return version, dict(x=t(shape), scale=t(scale), offset=t(offset), mean=t(mean),
                         variance=t(variance), **attrs)


BAD = {
    "x_rank3": bad_call(shape=(4, 5, 3)),
    "x_rank6": bad_call(shape=(1, 2, 2, 4, 5, 3)),
    "scale_rank2": bad_call(scale=(1, 3)),
    "offset_rank0": bad_call(offset=()),
    "mean_rank2_in_training": bad_call(mean=(1, 3)),
    "variance_rank0_in_training": bad_call(variance=()),
    "scale_size": bad_call(scale=(4,)),
    "offset_size": bad_call(offset=(2,)),
    "mean_size_inference": bad_call(mean=(4,), variance=(3,), is_training=False),
    "variance_size_inference": bad_call(mean=(3,), variance=(2,), is_training=False),
    "mean_size_factor": bad_call(mean=(2,), variance=(3,), exponential_avg_factor=0.5),
    "variance_size_factor": bad_call(mean=(3,), variance=(5,), exponential_avg_factor=0.5),
    "scale_before_offset": bad_call(scale=(4,), offset=(1, 2)),
    "v1_rank3": bad_call("V1", shape=(4, 5, 3)),
    "v2_offset_size": bad_call("V2", offset=(7,)),
    "any_mean_size_in_training": bad_call(mean=(7,), variance=(1,)),
    "v1_5d_as_nhwc": bad_call("V1", shape=(2, 2, 4, 5, 3)),
}


