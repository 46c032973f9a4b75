"""Bad inputs fail exactly like TensorFlow's stock kernel: same class, same message, same order.

Messages are compared whole after the op name is normalized (the shim's ops are called
Fbn<Name>). Inputs TensorFlow accepts in eager mode must be accepted too, with equal results.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from tf_calls import BUILTIN, SHIM



def inputs(op: str, shape=(2, 4, 5, 3), dy_shape=None, channels=3, scale=None, mean=None,
           var=None, rs3=(0,), dtype=tf.float32, dy_dtype=None, scale_dtype=None, **attrs) -> dict:
    """Keyword arguments for one call; per-channel inputs default to `channels` elements."""
    rng = np.random.default_rng(0)

    def t(s, dt):
        return tf.cast(tf.constant(rng.standard_normal(s), tf.float32), dt)

    per_channel = tf.float32 if op != "V1" else dtype
    kwargs = {
        "y_backprop": t(dy_shape or shape, dy_dtype or dtype),
        "x": t(shape, dtype),
        "scale": t(scale if scale is not None else (channels,), scale_dtype or per_channel),
        "reserve_space_1": t(mean if mean is not None else (channels,), per_channel),
        "reserve_space_2": tf.abs(t(var if var is not None else (channels,), per_channel)),
        **attrs,
    }
    if op == "V3":
        kwargs["reserve_space_3"] = t(rs3, tf.float32)
    return kwargs


def normalized(message: str) -> str:
    return re.sub(r"Fbn(FusedBatchNormGrad)", r"\1", message)


def outcome(fn, kwargs: dict):
    """('ok', outputs) or (exception class, message)."""
    try:
        return "ok", [t.numpy() for t in fn(**kwargs)]
    except (tf.errors.OpError, ValueError, TypeError) as e:
        return type(e), normalized(getattr(e, "message", str(e)))


# (id, op, kwargs-builder arguments). Every row of TF_SEMANTICS.md section 7.3 that fails in
# eager mode, plus combinations that pin the order of the checks.
BAD = [
    ("rank3", "V3", dict(shape=(4, 5, 3))),
    ("dy_rank3", "V1", dict(dy_shape=(4, 5, 3))),
    ("x_rank3", "V2", dict(shape=(4, 5, 3), dy_shape=(2, 4, 5, 3))),
    ("rank6", "V3", dict(shape=(1, 2, 2, 4, 5, 3))),
    ("rank2", "V2", dict(shape=(5, 3))),
    ("scale_rank2", "V1", dict(scale=(1, 3))),
    ("mean_rank2", "V2", dict(mean=(1, 3))),
    ("var_rank0", "V3", dict(var=())),
    ("shape_mismatch", "V3", dict(dy_shape=(2, 4, 6, 3))),
    ("channel_mismatch", "V1", dict(dy_shape=(2, 4, 5, 4))),
    ("scale_size4", "V1", dict(scale=(4,))),
    ("scale_size0", "V2", dict(scale=(0,))),
    ("mean_size4_train", "V3", dict(mean=(4,))),
    ("mean_size4_infer", "V3", dict(mean=(4,), is_training=False)),
    ("var_size4", "V2", dict(var=(4,))),
    ("var_size2_infer", "V1", dict(var=(2,), is_training=False)),
    ("nchw_scale_size", "V3", dict(shape=(2, 3, 4, 5), scale=(5,), data_format="NCHW")),
    ("ndhwc_scale_size", "V3", dict(shape=(2, 2, 4, 5, 3), scale=(4,), data_format="NDHWC")),
    ("ncdhw_var_size", "V3", dict(shape=(2, 3, 2, 4, 5), var=(5,), data_format="NCDHW")),
    ("cve_2021_41223_poc", "V1", dict(shape=(1, 1, 1, 2), dy_shape=(1, 1, 3, 3), channels=1,
                                      var=(3,), data_format="NCHW")),
    ("format_NHCW_v1", "V1", dict(data_format="NHCW")),
    ("format_NHCW_v2", "V2", dict(data_format="NHCW")),
    ("format_NHCW_v3", "V3", dict(data_format="NHCW")),
    ("format_vect_c", "V3", dict(data_format="NCHW_VECT_C")),
    ("format_5d_v1", "V1", dict(data_format="NDHWC")),
    ("v1_half", "V1", dict(dtype=tf.float16)),
    ("v2_double", "V2", dict(dtype=tf.float64, scale_dtype=tf.float32)),
    ("v2_scale_half", "V2", dict(dtype=tf.float16, scale_dtype=tf.float16)),
    ("v3_x_half_dy_float", "V3", dict(dtype=tf.float16, dy_dtype=tf.float32)),
    # Order of the checks: the first failing check in TF's order wins.
    ("order_dy_before_scale", "V3", dict(dy_shape=(4, 5, 3), scale=(1, 3))),
    ("order_scale_before_mean", "V2", dict(scale=(1, 3), mean=(1, 3))),
    ("order_mean_before_var", "V1", dict(mean=(1, 3), var=())),
    ("order_var_rank_before_shape", "V3", dict(var=(), dy_shape=(2, 4, 6, 3))),
    ("order_shape_before_sizes", "V3", dict(dy_shape=(2, 4, 6, 3), scale=(4,))),
    ("order_scale_size_before_mean", "V2", dict(scale=(4,), mean=(5,), var=(6,))),
    ("order_mean_size_before_var", "V3", dict(mean=(5,), var=(6,))),
]

# Inputs TensorFlow accepts in eager mode although the shape function would reject them.
ACCEPTED = [
    ("5d_with_NHWC_v1", "V1", dict(shape=(2, 2, 4, 5, 3))),
    ("5d_with_NCHW_v2", "V2", dict(shape=(2, 3, 2, 4, 5), data_format="NCHW")),
    ("5d_with_NHWC_v3", "V3", dict(shape=(2, 2, 4, 5, 3))),
    ("4d_with_NDHWC_v3", "V3", dict(data_format="NDHWC")),
    ("4d_with_NCDHW_v3_train", "V3", dict(shape=(2, 3, 4, 5), data_format="NCDHW")),
    ("rs3_matrix", "V3", dict(rs3=(2, 7))),
    ("rs3_scalar", "V3", dict(rs3=())),
    ("epsilon_zero", "V3", dict(epsilon=0.0)),
    ("epsilon_negative", "V2", dict(epsilon=-10.0)),
    ("epsilon_negative_infer", "V1", dict(epsilon=-10.0, is_training=False)),
]


@pytest.mark.parametrize("name,op,spec", BAD, ids=[b[0] for b in BAD])
def test_eager_errors_equal_tensorflow(name: str, op: str, spec: dict) -> None:
    kwargs = inputs(op, **spec)
    expected = outcome(BUILTIN[op], kwargs)
    got = outcome(SHIM[op], kwargs)
    assert expected[0] != "ok", f"TF accepted {name}"
    assert got == expected


@pytest.mark.parametrize("name,op,spec", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_eager_accepts_what_tensorflow_accepts(name: str, op: str, spec: dict) -> None:
    kwargs = inputs(op, **spec)
    status, expected = outcome(BUILTIN[op], kwargs)
    assert status == "ok", expected
    status, got = outcome(SHIM[op], kwargs)
    assert status == "ok", got
    for g, e in zip(got[:3], expected[:3]):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_array_equal(np.isnan(g), np.isnan(e))
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
    assert got[3].shape == got[4].shape == (0,)


# Errors that only the kernel can see inside tf.function: the shape function compares channel
# dims only, and partially known shapes pass it.
RUNTIME = [
    ("spatial_mismatch", "V3", dict(dy_shape=(2, 4, 6, 3))),
    ("scale_size", "V1", dict(scale=(4,))),
    ("var_size", "V2", dict(var=(5,))),
]


@pytest.mark.parametrize("name,op,spec", RUNTIME, ids=[r[0] for r in RUNTIME])
def test_graph_runtime_errors_equal_tensorflow(name: str, op: str, spec: dict) -> None:
    kwargs = inputs(op, **spec)
    tensors = {k: v for k, v in kwargs.items() if isinstance(v, tf.Tensor)}
    attrs = {k: v for k, v in kwargs.items() if not isinstance(v, tf.Tensor)}
    _, eager_message = outcome(BUILTIN[op], kwargs)
    core = eager_message.split("{{function_node")[-1].split("}} ")[-1].split(" [Op:")[0]

    def run(fn):
        specs = {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in tensors.items()}
        f = tf.function(lambda **kw: fn(**kw, **attrs)).get_concrete_function(**specs)
        with pytest.raises(tf.errors.InvalidArgumentError) as e:
            f(**tensors)
        return e.value.message

    assert core in run(BUILTIN[op])
    assert core in run(SHIM[op])


def test_nchw_inference_is_a_documented_superset() -> None:
    """TF's stock kernel refuses NCHW with is_training=False; the shim computes it, and agrees
    with TF's own route for it (transpose to NHWC, run, transpose back)."""
    kwargs = inputs("V3", shape=(2, 3, 4, 5), data_format="NCHW", is_training=False)
    status, message = outcome(BUILTIN["V3"], kwargs)
    assert status is tf.errors.InvalidArgumentError and "only support NHWC" in message
    got = SHIM["V3"](**kwargs)
    nhwc = dict(kwargs, data_format="NHWC",
                y_backprop=tf.transpose(kwargs["y_backprop"], [0, 2, 3, 1]),
                x=tf.transpose(kwargs["x"], [0, 2, 3, 1]))
    expected = BUILTIN["V3"](**nhwc)
    np.testing.assert_allclose(got[0], tf.transpose(expected[0], [0, 3, 1, 2]), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[2], expected[2], rtol=1e-5, atol=1e-5)
