"""The GPU kernels: registration (wherever the library was built with CUDA) and parity with
tf.raw_ops on a GPU (wherever TensorFlow sees one; skipped, with the reason, elsewhere).

TensorFlow's GPU contract: in training mode reserve_space_2 is the inverse standard deviation
that the GPU forward saves, so the parity tests take the reserve spaces from a real GPU forward.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

import tf_fbn_ops
from parity import RTOL, assert_parity, sum_rtol
from tf_fbn_ops import _build_info, reference

DTYPE_ENUMS = {tf.float32.as_datatype_enum: "float32", tf.float16.as_datatype_enum: "float16",
               tf.bfloat16.as_datatype_enum: "bfloat16"}
EXPECTED = {"FbnFusedBatchNormGrad": {"float32"},
            "FbnFusedBatchNormGradV2": {"float32", "float16", "bfloat16"},
            "FbnFusedBatchNormGradV3": {"float32", "float16", "bfloat16"},
            "FbnSyncBatchNormGradSums": {"float32", "float16", "bfloat16"},
            "FbnSyncBatchNormGradFromSums": {"float32", "float16", "bfloat16"}}
GPUS = tf.config.list_physical_devices("GPU")
needs_gpu = pytest.mark.skipif(not GPUS, reason="no GPU visible to TensorFlow: GPU parity "
                                                "tests run only on a machine with one")


@pytest.mark.skipif(not _build_info.CUDA, reason="library built without CUDA (no nvcc found, "
                                                 "or TF_FBN_OPS_CUDA=0)")
@pytest.mark.parametrize("op", sorted(EXPECTED))
def test_gpu_kernels_registered_for_every_dtype(op: str) -> None:
    tf_fbn_ops.load_library()
    registered: dict[str, set] = {"CPU": set(), "GPU": set()}  # and XLA's (see test_xla.py)
    for kernel in kernels.get_registered_kernels_for_op(op).kernel:
        for constraint in kernel.constraint:
            if constraint.name == "T":
                for t in constraint.allowed_values.list.type:
                    registered.setdefault(kernel.device_type, set()).add(DTYPE_ENUMS[t])
    assert registered["GPU"] == EXPECTED[op]
    assert registered["CPU"] == EXPECTED[op]


def _gpu_case(dtype, data_format: str, is_training: bool, shape, seed: int = 0) -> tuple:
    """Inputs on the GPU, with reserve spaces from TF's own GPU forward in training mode."""
    rng = np.random.default_rng(seed)
    channel_axis = len(shape) - 1 if data_format in ("NHWC", "NDHWC") else 1
    channels = shape[channel_axis]
    with tf.device("/GPU:0"):
        x = tf.cast(0.5 + 2.0 * rng.standard_normal(shape), dtype)
        dy = tf.cast(rng.standard_normal(shape), dtype)
        scale = tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32)
        if is_training:
            forward = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=scale, offset=tf.zeros([channels]), mean=tf.zeros([0]),
                variance=tf.zeros([0]), epsilon=1e-3, data_format=data_format, is_training=True)
            mean, inv_std, rs3 = forward.reserve_space_1, forward.reserve_space_2, forward[5]
            variance_for_oracle = 1.0 / np.square(inv_std.numpy().astype(np.float64)) - 1e-3
        else:
            mean = tf.constant(rng.standard_normal(channels) * 0.1 + 0.5, tf.float32)
            inv_std = tf.constant(rng.uniform(3.0, 5.0, channels), tf.float32)  # a variance here
            rs3 = tf.zeros([0])
            variance_for_oracle = inv_std.numpy()
    kwargs = dict(y_backprop=dy, x=x, scale=scale, reserve_space_1=mean,
                  reserve_space_2=inv_std, reserve_space_3=rs3, epsilon=1e-3,
                  data_format=data_format, is_training=is_training)
    oracle = reference.batch_norm_grad(dy.numpy(), x.numpy(), scale.numpy(), mean.numpy(),
                                       variance_for_oracle, 1e-3, data_format, is_training)
    return kwargs, oracle


GPU_CASES = [(dtype, fmt, training, shape)
             for dtype in (tf.float32, tf.float16, tf.bfloat16)
             for fmt, shape in (("NHWC", (4, 8, 8, 32)), ("NCHW", (4, 32, 8, 8)),
                                ("NDHWC", (2, 4, 8, 8, 16)), ("NHWC", (3, 5, 7, 3)),
                                ("NCHW", (2, 3, 5, 7)))
             for training in (True, False)]


@needs_gpu
@pytest.mark.parametrize("dtype,data_format,is_training,shape", GPU_CASES)
def test_gpu_parity_with_tf_raw_ops(dtype, data_format, is_training, shape) -> None:
    kwargs, oracle = _gpu_case(dtype, data_format, is_training, shape)
    with tf.device("/GPU:0"):
        ours = tf_fbn_ops.fused_batch_norm_grad_v3(**kwargs)
        again = tf_fbn_ops.fused_batch_norm_grad_v3(**kwargs)
        try:
            theirs = tf.raw_ops.FusedBatchNormGradV3(**kwargs)
        except tf.errors.InvalidArgumentError:  # channels-first inference: TF refuses
            theirs = None
    assert "GPU" in ours.x_backprop.device
    rest = int(np.prod(shape)) // shape[-1 if data_format.endswith("C") else 1]
    for i, name in enumerate(("x_backprop", "scale_backprop", "offset_backprop")):
        out_dtype = dtype.name if i == 0 else "float32"
        assert ours[i].numpy().tobytes() == again[i].numpy().tobytes(), "not deterministic"
        rtol = RTOL[out_dtype] if i == 0 else sum_rtol(rest)
        if theirs is None:
            error = np.max(np.abs(ours[i].numpy().astype(np.float64) - oracle[i]))
            assert error <= rtol * np.max(np.abs(oracle[i])), name
        else:
            assert_parity(name, ours[i], theirs[i], oracle[i], out_dtype, "tf gpu",
                          None if i == 0 else rtol)


@needs_gpu
def test_gpu_empty_input_gives_zeros() -> None:
    with tf.device("/GPU:0"):
        out = tf_fbn_ops.fused_batch_norm_grad_v3(
            tf.zeros([0, 4, 4, 3]), tf.zeros([0, 4, 4, 3]), tf.ones([3]), tf.zeros([3]),
            tf.ones([3]), tf.zeros([0]))
    assert out.x_backprop.shape == (0, 4, 4, 3)
    assert not np.any(out.scale_backprop.numpy()) and not np.any(out.offset_backprop.numpy())


# --- XLA:GPU and the Keras 3 layer, on the GPU ---------------------------------------------

# Inference only: there the statistics are the population's on every device, eagerly and
# compiled, so the same inputs feed both. In training a compiled gradient reads what the forward
# compiled with it writes, which on a GPU is not what the eager forward writes
# (cc/kernels/saved_statistics.h); test_compiled_pairs.py compiles the two together on the GPU.
JIT_CASES = [(dtype, fmt, False, shape)
             for dtype in (tf.float32, tf.float16)
             for fmt, shape in (("NHWC", (4, 8, 8, 32)), ("NCHW", (4, 32, 8, 8)),
                                ("NDHWC", (2, 4, 8, 8, 16)))]


@needs_gpu
@pytest.mark.parametrize("lowering", ["custom_call", "hlo"])
@pytest.mark.parametrize("dtype,data_format,is_training,shape", JIT_CASES)
def test_gpu_under_xla(dtype, data_format, is_training, shape, lowering, monkeypatch) -> None:
    """tf.function(jit_compile=True) on the GPU, inference: the custom call runs the CUDA
    kernels through XLA's FFI (the eager GPU kernel's bits); the HLO lowering stays within the
    parity bounds."""
    from tf_fbn_ops import _loader
    if _loader.xla_missing_reason() is not None:
        pytest.skip(f"no XLA lowerings in this build: {_loader.xla_missing_reason()}")
    monkeypatch.delenv(_loader.XLA_LOWERING_VARIABLE, raising=False)
    if lowering == "hlo":
        monkeypatch.setenv(_loader.XLA_LOWERING_VARIABLE, "hlo")
    elif _loader.xla_ffi_missing_reason() is not None:
        pytest.skip(f"no custom calls in this build: {_loader.xla_ffi_missing_reason()}")
    kwargs, oracle = _gpu_case(dtype, data_format, is_training, shape, seed=4)
    with tf.device("/GPU:0"):
        eager = tf_fbn_ops.fused_batch_norm_grad_v3(**kwargs)
        compiled = tf.function(lambda: tf_fbn_ops.fused_batch_norm_grad_v3(**kwargs),
                               jit_compile=True)
        hlo = compiled.experimental_get_compiler_ir()(stage="hlo")
        jit = compiled()
    assert ('custom_call_target="tf_fbn_ops_batch_norm_grad"' in hlo) == (lowering ==
                                                                          "custom_call")
    assert "GPU" in jit.x_backprop.device
    rest = int(np.prod(shape)) // shape[-1 if data_format.endswith("C") else 1]
    for i, name in enumerate(("x_backprop", "scale_backprop", "offset_backprop")):
        got = jit[i].numpy()
        if lowering == "custom_call":
            assert got.tobytes() == eager[i].numpy().tobytes(), f"{name}: bits differ"
        out_dtype = dtype.name if i == 0 else "float32"
        rtol = RTOL[out_dtype] if i == 0 else sum_rtol(rest)
        error = np.max(np.abs(got.astype(np.float64) - oracle[i]))
        assert error <= rtol * np.max(np.abs(oracle[i])), name


FORWARDS = {"V1": tf_fbn_ops.fused_batch_norm_forward,
            "V2": tf_fbn_ops.fused_batch_norm_forward_v2,
            "V3": tf_fbn_ops.fused_batch_norm_forward_v3}


@needs_gpu
@pytest.mark.parametrize("version", sorted(FORWARDS))
@pytest.mark.parametrize("data_format,shape", [("NHWC", (4, 8, 8, 32)), ("NCHW", (4, 32, 8, 8))])
def test_gpu_forward_ops_and_their_gradient_compiled_together(version, data_format,
                                                                shape) -> None:
    """The library's forward op and its registered gradient in one jit_compile=True program on
    the GPU: the forward compiles to its HLO lowering there (no custom call until a GPU has run
    its CUDA core) and saves in reserve_space_2 what the gradient compiled with it reads (the
    variance for V3, 1/sqrt(var + eps) for V1 and V2): the step agrees with the same step run
    eagerly on the CPU."""
    from tf_fbn_ops import _loader
    if _loader.xla_missing_reason() is not None:
        pytest.skip(f"no XLA lowerings in this build: {_loader.xla_missing_reason()}")
    rng = np.random.default_rng(5)
    channels = shape[-1] if data_format == "NHWC" else shape[1]
    x = tf.constant(rng.standard_normal(shape) * 2 + 1, tf.float32)
    w = tf.constant(rng.standard_normal(shape), tf.float32)
    scale = tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32)
    offset = tf.constant(rng.standard_normal(channels), tf.float32)
    forward = FORWARDS[version]

    def step():
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            out = forward(x, scale, offset, tf.zeros([0]), tf.zeros([0]), epsilon=1e-3,
                          data_format=data_format)
            loss = tf.reduce_sum(out[0] * w)
        return [out[0], out[1], out[2], *tape.gradient(loss, [x, scale, offset])]

    with tf.device("/GPU:0"):
        compiled = tf.function(step, jit_compile=True)
        hlo = compiled.experimental_get_compiler_ir()(stage="hlo")
        jit = compiled()
    with tf.device("/CPU:0"):
        eager = step()
    assert 'custom_call_target="tf_fbn_ops_batch_norm_forward"' not in hlo
    assert "GPU" in jit[0].device
    for k, (got, want) in enumerate(zip(jit, eager)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-5,
                                   err_msg=f"result {k}")


@needs_gpu
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape, axis", [((4, 6, 6, 8), -1), ((4, 8, 6, 6), 1),
                                         ((2, 3, 4, 5, 8), -1)])
def test_gpu_keras3_layer_matches_keras(shape, axis, training) -> None:
    """The Keras 3 layer on the GPU: its gradient op placed there, and outputs, gradients and
    moving statistics as Keras' own layer gives them on the same GPU."""
    keras = pytest.importorskip("keras", minversion="3")
    from test_keras3 import LAYERS, TOLERANCE, run_layer
    rng = np.random.default_rng(1)
    with tf.device("/GPU:0"):
        x = tf.constant((rng.standard_normal(shape) * 3 + 1).astype(np.float32))
        dy = tf.constant(rng.standard_normal(shape).astype(np.float32))
        theirs = run_layer(LAYERS["keras"], x, dy, training, axis=axis)
        ours = run_layer(LAYERS["shim"], x, dy, training, axis=axis)
    assert keras.backend.backend() == "tensorflow"
    assert "GPU" in ours[1][0].device
    np.testing.assert_allclose(ours[0], theirs[0], **TOLERANCE)
    for a, b in zip(theirs[1] + theirs[2], ours[1] + ours[2]):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(b, a, **TOLERANCE)



@needs_gpu
@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
@pytest.mark.parametrize("data_format, shape", [("NHWC", (4, 9, 9, 24)), ("NCHW", (4, 24, 9, 9)),
                                                ("NDHWC", (2, 3, 8, 8, 16)),
                                                ("NCDHW", (2, 16, 3, 8, 8))])
def test_gpu_synchronized_halves_match_the_oracle(dtype, data_format, shape) -> None:
    """On the GPU the halves take the variance (their forward is ours, not cuDNN's); with one
    replica they give the float64 oracle's gradients. That they give the bits of one whole call
    is the CUDA core's own test (cc/tests/gpu_core_test.cu, RunStages)."""
    from tf_fbn_ops import ops as shim_ops  # noqa: PLC0415
    rng = np.random.default_rng(5)
    channel_axis = -1 if data_format.endswith("C") else 1
    channels = shape[channel_axis]
    with tf.device("/GPU:0"):
        dy = tf.cast(rng.standard_normal(shape), dtype)
        x = tf.cast(rng.standard_normal(shape) * 2 + 3, dtype)
        scale = tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32)
        mean = tf.constant(rng.uniform(2, 4, channels), tf.float32)
        variance = tf.constant(rng.uniform(3, 5, channels), tf.float32)
        sums = shim_ops.sync_batch_norm_grad_sums(dy, x, mean, data_format=data_format)
        count = int(np.prod(shape)) // channels
        staged = shim_ops.sync_batch_norm_grad_from_sums(
            dy, x, scale, mean, variance, sums.sum_dy, sums.sum_dy_xc, count, epsilon=1e-3,
            data_format=data_format)
        assert staged.x_backprop.device.endswith("GPU:0")
    oracle = reference.batch_norm_grad(*(np.asarray(tf.cast(t, tf.float32), np.float64)
                                         for t in (dy, x, scale, mean, variance)), 1e-3,
                                       data_format, True)
    for ours, want in zip(staged, oracle):
        scale_of = max(np.max(np.abs(want)), 1e-30)
        got = np.asarray(tf.cast(ours, tf.float32), np.float64)
        assert np.max(np.abs(got - want)) <= 4 * RTOL[dtype.name] * scale_of


@needs_gpu
@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
@pytest.mark.parametrize("data_format, shape", [("NHWC", (4, 9, 9, 24)),
                                                ("NCDHW", (2, 16, 3, 8, 8))])
def test_gpu_synchronized_halves_under_xla(dtype, data_format, shape) -> None:
    """jit_compile=True on the GPU, the count a run-time value on the device: the halves compile
    to their CUDA custom calls, with the eager GPU kernels' bits; a count below this replica's
    elements makes every output NaN (no error can come back from the device)."""
    from tf_fbn_ops import _loader
    from tf_fbn_ops import ops as shim_ops  # noqa: PLC0415
    if _loader.xla_ffi_missing_reason() is not None:
        pytest.skip(f"no custom calls in this build: {_loader.xla_ffi_missing_reason()}")
    rng = np.random.default_rng(7)
    channels = shape[-1 if data_format.endswith("C") else 1]
    rest = int(np.prod(shape)) // channels

    def halves(dy, x, scale, mean, variance, count):
        sums = shim_ops.sync_batch_norm_grad_sums(dy, x, mean, data_format=data_format)
        out = shim_ops.sync_batch_norm_grad_from_sums(
            dy, x, scale, mean, variance, sums.sum_dy * 2.0, sums.sum_dy_xc * 2.0, count,
            epsilon=1e-3, data_format=data_format, replica_sum_dy=sums.sum_dy,
            replica_sum_dy_xc=sums.sum_dy_xc)
        return (sums.sum_dy, sums.sum_dy_xc, *out)

    with tf.device("/GPU:0"):
        args = (tf.cast(rng.standard_normal(shape), dtype),
                tf.cast(rng.standard_normal(shape) * 2 + 3, dtype),
                tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32),
                tf.constant(rng.uniform(2, 4, channels), tf.float32),
                tf.constant(rng.uniform(3, 5, channels), tf.float32))
        eager = halves(*args, tf.constant(2 * rest, tf.int64))
        compiled = tf.function(halves, jit_compile=True)
        count = tf.constant(2 * rest, tf.int64)
        hlo = compiled.experimental_get_compiler_ir(*args, count)(stage="hlo")
        jit = compiled(*args, count)
        low = compiled(*args, tf.constant(rest - 1, tf.int64))
    for target in ("sums", "from_sums"):
        assert f'custom_call_target="tf_fbn_ops_sync_batch_norm_grad_{target}"' in hlo
    assert "GPU" in jit[2].device
    for i, (want, got) in enumerate(zip(eager, jit)):
        assert got.numpy().tobytes() == want.numpy().tobytes(), i
    for out in low[2:]:
        assert np.all(np.isnan(np.asarray(tf.cast(out, tf.float32))))
