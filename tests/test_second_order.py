"""Second-order gradients of the shim's ops equal TensorFlow's for its built-in ops."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops
from tf_calls import BUILTIN, SHIM

CASES = [(op, dtype, fmt, training)
         for op in ("V1", "V2", "V3")
         for dtype in ((tf.float32,) if op == "V1" else (tf.float32, tf.float16))
         for fmt in ("NHWC", "NCHW")
         for training in (True, False)]


def _inputs(op: str, dtype, data_format: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    shape = (2, 3, 4, 3) if data_format == "NHWC" else (2, 3, 3, 4)
    kwargs = {"y_backprop": tf.cast(rng.standard_normal(shape), dtype),
              "x": tf.cast(rng.standard_normal(shape) + 0.5, dtype),
              "scale": tf.constant(rng.uniform(0.5, 1.5, 3), tf.float32),
              "reserve_space_1": tf.constant(rng.uniform(0.3, 0.7, 3), tf.float32),
              "reserve_space_2": tf.constant(rng.uniform(0.8, 1.2, 3), tf.float32)}
    if op == "V3":
        kwargs["reserve_space_3"] = tf.zeros([0])
    return kwargs


def _second_order(fn, kwargs: dict, attrs: dict, weights: list) -> list:
    """d/d(y_backprop, x, scale) of a weighted sum of the three first-order outputs."""
    watched = [kwargs["y_backprop"], kwargs["x"], kwargs["scale"]]
    with tf.GradientTape() as tape:
        tape.watch(watched)
        out = fn(**kwargs, **attrs)
        loss = sum(tf.reduce_sum(tf.cast(o, tf.float32) * w) for o, w in zip(out[:3], weights))
    return tape.gradient(loss, watched + [kwargs["reserve_space_1"]])


def _weights(kwargs: dict, seed: int = 1) -> list:
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.standard_normal(kwargs["x"].shape), tf.float32),
            tf.constant(rng.standard_normal([3]), tf.float32),
            tf.constant(rng.standard_normal([3]), tf.float32)]


@pytest.mark.parametrize("op,dtype,data_format,is_training", CASES)
def test_second_order_equals_tensorflow(op, dtype, data_format, is_training) -> None:
    kwargs = _inputs(op, dtype, data_format)
    attrs = dict(epsilon=1e-3, data_format=data_format, is_training=is_training)
    weights = _weights(kwargs)
    ours = _second_order(SHIM[op], kwargs, attrs, weights)
    if data_format == "NCHW" and not is_training:
        # TF's kernel refuses this case; its second-order rule handles it, so compare with the
        # same computation done on NHWC-transposed inputs through TF's op.
        to_nhwc = dict(kwargs, y_backprop=tf.transpose(kwargs["y_backprop"], [0, 2, 3, 1]),
                       x=tf.transpose(kwargs["x"], [0, 2, 3, 1]))
        nhwc_weights = [tf.transpose(weights[0], [0, 2, 3, 1])] + weights[1:]
        theirs = _second_order(BUILTIN[op], to_nhwc, dict(attrs, data_format="NHWC"),
                               nhwc_weights)
        theirs[:2] = [tf.transpose(t, [0, 3, 1, 2]) for t in theirs[:2]]
    else:
        theirs = _second_order(BUILTIN[op], kwargs, attrs, weights)
    assert ours[3] is None and theirs[3] is None  # no gradient for the reserve spaces
    tolerance = 1e-5 if dtype == tf.float32 else 2e-3
    for name, a, b in zip(("y_backprop", "x", "scale"), ours[:3], theirs[:3]):
        assert a is not None and b is not None, name
        assert a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                   rtol=tolerance, atol=tolerance, err_msg=name)


def test_v3_returns_six_gradients() -> None:
    from tensorflow.python.framework import ops

    kwargs = _inputs("V3", tf.float32, "NHWC")

    @tf.function
    def grads():
        out = tf_fbn_ops.fused_batch_norm_grad_v3(**kwargs)
        return tf.gradients(out.x_backprop, list(kwargs.values()))

    result = grads()
    assert len(result) == 6
    assert [g is None for g in result] == [False, False, False, True, True, True]
    assert ops._gradient_registry.lookup("FbnFusedBatchNormGradV3") is not None


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("output", [0, 1])
def test_compute_gradient_float32(data_format: str, is_training: bool, output: int) -> None:
    """tf.test.compute_gradient: the theoretical Jacobians equal TensorFlow's, and agree with
    the numerical ones (float32, central differences).

    In training mode the second-order rule treats the batch statistics as functions of x, as
    they are in a real forward pass; the numerical check therefore feeds the op the mean and
    variance of x computed inside the function (with fixed statistics it would differentiate
    another function, for TensorFlow's op as for ours).
    """
    kwargs = _inputs("V2", tf.float32, data_format, seed=7)
    attrs = dict(epsilon=1e-3, data_format=data_format, is_training=is_training)
    axes = [0, 1, 2] if data_format == "NHWC" else [0, 2, 3]
    point = [kwargs["y_backprop"], kwargs["x"], kwargs["scale"]]

    def as_function(fn):
        def f(dy, x, scale):
            stats = {}
            if is_training:
                mean, variance = tf.nn.moments(x, axes)
                stats = dict(reserve_space_1=mean, reserve_space_2=variance)
            return fn(**dict(kwargs, y_backprop=dy, x=x, scale=scale, **stats), **attrs)[output]
        return f

    ours_theory, ours_numeric = tf.test.compute_gradient(as_function(SHIM["V2"]), point)
    for t, n in zip(ours_theory, ours_numeric):
        np.testing.assert_allclose(t, n, rtol=2e-2, atol=2e-2)
    if not (data_format == "NCHW" and not is_training):
        theirs_theory, theirs_numeric = tf.test.compute_gradient(as_function(BUILTIN["V2"]),
                                                                 point)
        for a, b in zip(ours_theory, theirs_theory):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(ours_numeric, theirs_numeric):
            np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("is_training", [True, False])
def test_compute_gradient_half(is_training: bool) -> None:
    """float16: the theoretical Jacobians equal TensorFlow's (the numerical ones of a half op
    are too coarse to compare with)."""
    kwargs = _inputs("V3", tf.float16, "NHWC", seed=9)
    attrs = dict(epsilon=1e-3, data_format="NHWC", is_training=is_training)
    point = [kwargs["y_backprop"], kwargs["x"]]

    def as_function(fn):
        return lambda dy, x: fn(**dict(kwargs, y_backprop=dy, x=x), **attrs)[0]

    ours, _ = tf.test.compute_gradient(as_function(SHIM["V3"]), point)
    theirs, _ = tf.test.compute_gradient(as_function(BUILTIN["V3"]), point)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3)
