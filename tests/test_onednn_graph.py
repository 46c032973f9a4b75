"""batch_norm_training_backprop (oneDNN Graph BatchNormTrainingBackprop-1) vs a float64 oracle."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops
from devices import DEVICES
from parity import RTOL, sum_rtol
from tf_fbn_ops import _loader, reference

SPATIAL = {1: (7,), 2: (5, 6), 3: (3, 4, 5)}
TYPES = [("float32", "float32"), ("float16", "float32"), ("bfloat16", "float32"),
         ("bfloat16", "bfloat16")]


def _problem(data_format: str, spatial_dims: int, t1: str, t2: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    c = 4
    shape = ((2, *SPATIAL[spatial_dims], c) if data_format == "NXC"
             else (2, c, *SPATIAL[spatial_dims]))
    axes = tuple(a for a in range(len(shape)) if a != (len(shape) - 1 if data_format == "NXC"
                                                        else 1))
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(ml_dtypes.finfo(t1).dtype)
    dy = rng.standard_normal(shape).astype(x.dtype)
    t2_type = ml_dtypes.finfo(t2).dtype
    mean = x.astype(np.float64).mean(axis=axes).astype(t2_type)
    variance = x.astype(np.float64).var(axis=axes).astype(t2_type)
    gamma = rng.uniform(0.5, 1.5, c).astype(t2_type)
    return x, dy, mean, variance, gamma


@pytest.mark.parametrize("data_format", ["NXC", "NCX"])
@pytest.mark.parametrize("spatial_dims", [1, 2, 3])
@pytest.mark.parametrize("t1,t2", TYPES)
@pytest.mark.parametrize("with_gamma", [True, False])
def test_against_float64_oracle(data_format, spatial_dims, t1, t2, with_gamma) -> None:
    x, dy, mean, variance, gamma = _problem(data_format, spatial_dims, t1, t2)
    if not with_gamma:
        gamma = np.ones_like(gamma)
    got = tf_fbn_ops.batch_norm_training_backprop(
        x, dy, mean, variance, gamma if with_gamma else None, epsilon=1e-3,
        data_format=data_format)
    fmt = "NHWC" if data_format == "NXC" else "NCHW"  # the oracle keys only on channel position
    want = reference.batch_norm_grad(dy, x, gamma, mean.astype(np.float32),
                                     variance.astype(np.float32), 1e-3, fmt, True)
    assert got[0].shape == x.shape and got[0].dtype.name == t1
    assert got[1].dtype.name == t2 and got[2].dtype.name == t2 and got[1].shape == (4,)
    rest = x.size // 4
    for value, expected, dtype, rtol in ((got[0], want[0], t1, RTOL[t1]),
                                         (got[1], want[1], t2, max(RTOL[t2], sum_rtol(rest))),
                                         (got[2], want[2], t2, max(RTOL[t2], sum_rtol(rest)))):
        error = np.max(np.abs(np.asarray(value, np.float64) - expected))
        assert error <= rtol * np.max(np.abs(expected)) + 1e-7, (dtype, error)


def _call(**overrides):
    x, dy, mean, variance, gamma = _problem("NXC", 2, "float32", "float32")
    kwargs = dict(input_forward=x, output_delta=dy, mean=mean, variance=variance, gamma=gamma,
                  epsilon=1e-3, data_format="NXC")
    kwargs.update(overrides)
    return tf_fbn_ops.batch_norm_training_backprop(**kwargs)


@pytest.mark.parametrize("overrides,error,match", [
    (dict(input_forward=np.zeros((2, 5, 6, 4), np.float64)), TypeError, "input_forward must be"),
    (dict(output_delta=np.zeros((2, 5, 6, 4), np.float16)), TypeError, "output_delta must"),
    (dict(mean=np.zeros(4, ml_dtypes.bfloat16)), TypeError, "bfloat16 when input_forward"),
    (dict(mean=np.zeros(4, np.float16)), TypeError, "mean must be float32"),
    (dict(variance=np.ones(4, np.float64)), TypeError, "variance must have mean's dtype"),
    (dict(gamma=np.ones(4, np.float64)), TypeError, "gamma must have mean's dtype"),
    (dict(epsilon=0.0), ValueError, "epsilon must be a positive"),
    (dict(epsilon=-1e-3), ValueError, "epsilon must be a positive"),
    (dict(epsilon=float("nan")), ValueError, "epsilon must be a positive"),
    (dict(epsilon=True), ValueError, "epsilon must be a positive"),
    (dict(epsilon="0.1"), ValueError, "epsilon must be a positive"),
    (dict(data_format="NHWC"), ValueError, "data_format must be"),
    (dict(input_forward=np.zeros((2, 4), np.float32), output_delta=np.zeros((2, 4), np.float32)),
     ValueError, "1, 2 or 3 spatial dims"),
    (dict(input_forward=np.zeros((1, 2, 2, 2, 2, 4), np.float32),
          output_delta=np.zeros((1, 2, 2, 2, 2, 4), np.float32)), ValueError, "spatial dims"),
    (dict(output_delta=np.zeros((2, 5, 7, 4), np.float32)), ValueError, "output_delta shape"),
    (dict(mean=np.zeros(5, np.float32)), ValueError, r"mean must have shape \[4\]"),
    (dict(gamma=np.ones((1, 4), np.float32)), ValueError, r"gamma must have shape \[4\]"),
])
def test_clear_errors(overrides, error, match) -> None:
    with pytest.raises(error, match=match):
        _call(**overrides)


def test_epsilon_is_required() -> None:
    x, dy, mean, variance, _ = _problem("NXC", 2, "float32", "float32")
    with pytest.raises(TypeError, match="epsilon"):
        tf_fbn_ops.batch_norm_training_backprop(x, dy, mean, variance)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_one_contract_on_every_device_compiled_or_not(device, jit_compile) -> None:
    """The API takes a variance everywhere: on a GPU too, and compiled by XLA, where the
    gradient op's reserve_space_2 would mean something else. Its bits are the gradient op's on
    the CPU, and on every device it meets the oracle."""
    if jit_compile and _loader.xla_missing_reason() is not None:
        pytest.skip(f"no XLA lowerings in this build: {_loader.xla_missing_reason()}")
    x, dy, mean, variance, gamma = _problem("NXC", 2, "float32", "float32", seed=5)
    api = tf.function(tf_fbn_ops.batch_norm_training_backprop, jit_compile=jit_compile)
    with tf.device(device):
        got = api(x, dy, mean, variance, gamma, epsilon=1e-3, data_format="NXC")
    assert device in got[0].device
    if device == "CPU":
        op = tf_fbn_ops.fused_batch_norm_grad_v3(dy, x, gamma, mean, variance, tf.zeros([0]),
                                                 epsilon=1e-3, is_training=True)
        for i in range(3):
            assert got[i].numpy().tobytes() == op[i].numpy().tobytes(), f"output {i}"
    want = reference.batch_norm_grad(dy, x, gamma, mean, variance, 1e-3, "NHWC", True)
    for i in range(3):
        error = np.max(np.abs(got[i].numpy().astype(np.float64) - want[i]))
        assert error <= sum_rtol(x.size // 4) * np.max(np.abs(want[i])), f"output {i}"
