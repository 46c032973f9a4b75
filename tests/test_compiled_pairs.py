"""The gradient with the forward users pair it with, on every device TensorFlow has, as
programs users run them: eagerly, and the two compiled into one XLA program, as a compiled
training step does (what reserve_space_2 holds differs between the CPU, a GPU and XLA on a GPU,
and a gradient must read what its own forward wrote: cc/kernels/saved_statistics.h). Each pair
of ours against TensorFlow's forward and gradient run the same way, and a float64 oracle from
the batch's own statistics: the op of every version, fused_batch_norm, shim_gradients() in a
compiled Keras 2 training step. The Keras 3 layer's compiled step: test_keras_step_errors.py
and test_keras3.py. tools/tf_cuda_bundle/gpu_checks.sh runs this module on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops
from devices import DEVICES
from parity import assert_parity, sum_rtol
from tf_fbn_ops import _loader, reference
from tf_fbn_ops.cli import self_check
from xla_paths import assert_compiled_by, xla_path  # noqa: F401 - the fixture

EPSILON = 1e-3
THEIR_GRADIENT = {1: tf.raw_ops.FusedBatchNormGrad, 2: tf.raw_ops.FusedBatchNormGradV2,
                  3: tf.raw_ops.FusedBatchNormGradV3}
OUR_GRADIENT = {1: tf_fbn_ops.fused_batch_norm_grad, 2: tf_fbn_ops.fused_batch_norm_grad_v2,
                3: tf_fbn_ops.fused_batch_norm_grad_v3}
OUTPUTS = ("x_backprop", "scale_backprop", "offset_backprop")
# (op version, x's dtype, data_format, shape): every version, 16-bit types, both channel
# positions, 5-D, and a channel count the CPU core takes another schedule for.
PAIRS = [(1, "float32", "NHWC", (8, 6, 6, 4)), (1, "float32", "NCHW", (4, 8, 5, 6)),
         (2, "float16", "NHWC", (8, 6, 6, 4)), (2, "bfloat16", "NCHW", (4, 8, 5, 6)),
         (3, "float32", "NHWC", (8, 6, 6, 4)), (3, "float16", "NCHW", (4, 8, 5, 6)),
         (3, "bfloat16", "NHWC", (4, 5, 6, 8)), (3, "float32", "NDHWC", (2, 3, 4, 5, 6)),
         (3, "float32", "NHWC", (16, 7, 7, 64))]

needs_xla = pytest.mark.skipif(_loader.xla_missing_reason() is not None,
                               reason=f"no XLA lowerings: {_loader.xla_missing_reason()}")


def _problem(dtype: str, shape: tuple, data_format: str, seed: int):
    rng = np.random.default_rng(seed)
    channels = shape[reference.channel_axis(len(shape), data_format)]
    x = tf.cast(rng.standard_normal(shape) * 2 + 0.5, dtype)
    dy = tf.cast(rng.standard_normal(shape), dtype)
    scale = tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32)
    return x, dy, scale


def _oracle(x, dy, scale, data_format: str) -> tuple:
    """The float64 gradients from the batch's own float64 mean and (biased) variance."""
    return self_check.float64_gradients(tf, {"x": x, "y_backprop": dy, "scale": scale},
                                        data_format, training=True)


def _run_pairs(device: str, version: int, dtype: str, data_format: str, shape: tuple,
               jit_compile: bool) -> tuple:
    """TensorFlow's training forward with our gradient and with TensorFlow's, each pair in one
    program (compiled together with `jit_compile`)."""
    x, dy, scale = _problem(dtype, shape, data_format, seed=version + len(shape))
    unused = tf.zeros([0])  # the reserve spaces: the forward's, in the program
    inputs = dict(y_backprop=dy, x=x, scale=scale, reserve_space_1=unused,
                  reserve_space_2=unused, **({"reserve_space_3": unused} if version == 3 else {}))
    attrs = dict(epsilon=EPSILON, data_format=data_format, is_training=True)
    forward = self_check.FORWARD_OPS[f"V{version}"]
    ours, theirs = (tf.function(self_check.with_forward(tf, gradient, forward, inputs, attrs),
                                jit_compile=jit_compile)
                    for gradient in (OUR_GRADIENT[version], THEIR_GRADIENT[version]))
    with tf.device(device):
        hlo = ours.experimental_get_compiler_ir()(stage="hlo") if jit_compile else ""
        got, want = ours(), theirs()
    assert device in got[0].device and device in want[0].device
    return got, want, _oracle(x, dy, scale, data_format), hlo


def _assert_pairs_agree(got, want, oracle, dtype: str, shape: tuple, data_format: str) -> None:
    rest = int(np.prod(shape)) // shape[reference.channel_axis(len(shape), data_format)]
    for i, name in enumerate(OUTPUTS):
        assert_parity(name, got[i].numpy(), want[i].numpy(), oracle[i],
                      dtype if i == 0 else "float32", "tensorflow's pair",
                      None if i == 0 else sum_rtol(rest))


def _pair_id(pair) -> str:
    version, dtype, data_format, shape = pair
    return f"V{version}-{dtype}-{data_format}-{'x'.join(map(str, shape))}"


@pytest.mark.parametrize("pair", PAIRS, ids=_pair_id)
@pytest.mark.parametrize("device", DEVICES)
def test_with_tensorflows_forward(device: str, pair) -> None:
    version, dtype, data_format, shape = pair
    got, want, oracle, _ = _run_pairs(device, version, dtype, data_format, shape, False)
    _assert_pairs_agree(got, want, oracle, dtype, shape, data_format)


@needs_xla
@pytest.mark.parametrize("pair", PAIRS, ids=_pair_id)
@pytest.mark.parametrize("device", DEVICES)
def test_compiled_with_tensorflows_forward(device: str, pair, xla_path: str) -> None:
    version, dtype, data_format, shape = pair
    got, want, oracle, hlo = _run_pairs(device, version, dtype, data_format, shape, True)
    assert_compiled_by(xla_path, hlo)
    _assert_pairs_agree(got, want, oracle, dtype, shape, data_format)


@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=needs_xla)])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("device", DEVICES)
def test_fused_batch_norm_training_step(device: str, data_format: str, jit_compile: bool) -> None:
    """tf_fbn_ops.fused_batch_norm's gradients in one program with its forward, against
    tf.compat.v1.nn.fused_batch_norm's (TensorFlow's forward and gradient) run the same way."""
    shape = (8, 6, 6, 5) if data_format == "NHWC" else (8, 5, 6, 6)
    x, weights, scale = _problem("float32", shape, data_format, seed=21)
    offset = tf.constant(np.linspace(-0.5, 0.5, scale.shape[0]), tf.float32)

    def step(batch_norm):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y = batch_norm(x, scale, offset, epsilon=EPSILON, data_format=data_format,
                           is_training=True)[0]
            loss = tf.reduce_sum(y * weights)
        return tuple(tape.gradient(loss, [x, scale, offset]))

    with tf.device(device):
        got = tf.function(lambda: step(tf_fbn_ops.fused_batch_norm), jit_compile=jit_compile)()
        want = tf.function(lambda: step(tf.compat.v1.nn.fused_batch_norm),
                           jit_compile=jit_compile)()
    assert device in got[0].device
    _assert_pairs_agree(got, want, _oracle(x, weights, scale, data_format), "float32", shape,
                        data_format)


@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=needs_xla)])
@pytest.mark.parametrize("device", DEVICES)
def test_keras2_training_step_with_shim_gradients(device: str, jit_compile: bool) -> None:
    """A Keras 2 (tf_keras) model with fused batch norm, trained with `compile(jit_compile=...)`
    on `device`, with TensorFlow's gradient and with shim_gradients(): the same losses and
    weights to float32 rounding after 20 steps, and each step runs the gradient it should."""
    tf_keras = pytest.importorskip("tf_keras", reason="tf_keras (Keras 2) not installed; "
                                                      "`make test` installs it")
    from keras2_training import KERAS_TOLERANCE, train_keras2_cnn  # noqa: PLC0415

    with tf.device(device):
        losses_tf, weights_tf, types_tf = train_keras2_cnn(tf_keras, jit_compile=jit_compile)
        with tf_fbn_ops.shim_gradients():
            losses_shim, weights_shim, types_shim = train_keras2_cnn(tf_keras,
                                                                     jit_compile=jit_compile)
    assert "FusedBatchNormGradV3" in types_tf and "FbnFusedBatchNormGradV3" not in types_tf
    assert "FbnFusedBatchNormGradV3" in types_shim and "FusedBatchNormGradV3" not in types_shim
    np.testing.assert_allclose(losses_shim, losses_tf, **KERAS_TOLERANCE)
    for a, b in zip(weights_shim, weights_tf):
        np.testing.assert_allclose(a, b, **KERAS_TOLERANCE)
