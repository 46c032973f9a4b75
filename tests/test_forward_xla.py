"""The forward ops (FbnFusedBatchNorm, V2, V3) under XLA (tf.function(jit_compile=True)), on both
paths of cc/xla/xla_op_kernels.cc: the custom call of the core's CPU forward (the non-jit
kernel's bits) and the HLO lowering in double (TF_FBN_OPS_XLA_LOWERING=hlo; within a rounding of
the kernel). Every version, layout, dtype and mode; the forward and its gradient compiled
together; the Keras 3 layer compiled; empty input; bad shapes with the kernel's text; and
auto-clustering."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops
from forward_cases import (BAD, DTYPES, EPSILON, FORMATS, VERSIONS, forward_cases, make_inputs,
                           max_error, oracle, outcome)
from fresh_process import run_python
from tf_fbn_ops import _loader
from xla_paths import auto_clustering_environment, clusters_by_op, xla_path  # noqa: F401

pytestmark = pytest.mark.skipif(
    _loader.xla_missing_reason() is not None,
    reason=f"no XLA lowerings in this build: {_loader.xla_missing_reason()}")

FORWARD_TARGET = 'custom_call_target="tf_fbn_ops_batch_norm_forward"'
# Bits of the significand per dtype: y of the HLO lowering and of the kernel are each the
# double result rounded once, from statistics that differ by a few double roundings.
SIGNIFICAND_BITS = {tf.float32: 24, tf.float16: 11, tf.bfloat16: 8}


def assert_forward_compiled_by(path: str, hlo: str, empty: bool = False) -> None:
    """A call of our target, or the lowering's double arithmetic (constants, for an empty x)."""
    if path == "custom_call":
        assert FORWARD_TARGET in hlo and "f64" not in hlo
    else:
        assert FORWARD_TARGET not in hlo and ("f64" in hlo) != empty


def compiled_forward(fn, kwargs: dict, path: str, empty: bool = False):
    compiled = tf.function(lambda: fn(**kwargs), jit_compile=True)
    assert_forward_compiled_by(path, compiled.experimental_get_compiler_ir()(stage="hlo"), empty)
    return compiled()


def assert_same_bits(got, want, name: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, name
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"{name}: bits differ"


def assert_within_a_rounding(got, want, dtype, name: str) -> None:
    """Elementwise, one unit in the last place of the larger of the two, in `dtype`."""
    got64, want64 = (tf.cast(t, tf.float64).numpy() for t in (got, want))
    assert got64.shape == want64.shape, name
    if not got64.size:
        return
    magnitude = np.maximum(np.abs(got64), np.abs(want64))
    unit = np.exp2(np.floor(np.log2(np.maximum(magnitude, 1e-30))) - SIGNIFICAND_BITS[dtype] + 1)
    assert np.all(np.abs(got64 - want64) <= unit), \
        f"{name}: {np.max(np.abs(got64 - want64) / unit):.3g} units apart"


@pytest.mark.parametrize("version,data_format,dtype,mode", forward_cases())
def test_compiled_forward_equals_the_kernel(version, data_format, dtype, mode,
                                            xla_path: str) -> None:
    """Outputs 0-4 the kernel's bits (custom call) or within a rounding of them (HLO), both at
    least as accurate as TensorFlow's forward compiled by XLA; V3's reserve_space_3 float [0]
    (TensorFlow's compiled forward's)."""
    dtype = DTYPES[dtype]
    x, scale, offset, mean, variance = make_inputs(FORMATS[data_format], data_format, dtype,
                                                   offset=300.0, seed=11)
    is_training = mode != "infer"
    factor = 0.3 if mode == "train_factor" else 1.0
    kwargs = dict(x=x, scale=scale, offset=offset, mean=mean, variance=variance,
                  epsilon=EPSILON, exponential_avg_factor=factor, data_format=data_format,
                  is_training=is_training)
    op = VERSIONS[version][2]
    jit = compiled_forward(op, kwargs, xla_path)
    eager = op(**kwargs)
    want = oracle(x, scale, offset, mean, variance, data_format, is_training, factor)
    theirs = tf.function(lambda: getattr(tf.raw_ops, VERSIONS[version][1])(**kwargs),
                         jit_compile=True)()
    for k in range(5):
        out_dtype = dtype if k == 0 else tf.float32
        if xla_path == "custom_call":
            assert_same_bits(jit[k], eager[k], f"output {k}")
        else:
            assert_within_a_rounding(jit[k], eager[k], out_dtype, f"output {k}")
        if k < 3 or is_training:
            assert max_error(jit[k], want[k]) <= max_error(theirs[k], want[k]) * (1 + 1e-9) + \
                max_error(eager[k], want[k]), f"output {k} less accurate than TensorFlow's"
    if version == "V3":
        assert jit[5].shape == [0] and jit[5].dtype == tf.float32


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("is_training", [True, False])
def test_compiled_empty_input(data_format, is_training, xla_path: str) -> None:
    shape = list(FORMATS[data_format])
    shape[0] = 0
    x = tf.zeros(shape, tf.float32)
    c = FORMATS[data_format][1 if data_format.startswith("NC") else -1]
    stats = tf.ones([c], tf.float32)
    kwargs = dict(x=x, scale=stats, offset=stats, mean=stats, variance=stats,
                  data_format=data_format, is_training=is_training, exponential_avg_factor=0.5)
    jit = compiled_forward(tf_fbn_ops.fused_batch_norm_forward_v3, kwargs, xla_path, empty=True)
    eager = tf_fbn_ops.fused_batch_norm_forward_v3(**kwargs)
    for k in range(5):
        assert_same_bits(jit[k], eager[k], f"output {k}")


@pytest.mark.parametrize("case", BAD)
def test_bad_inputs_fail_under_jit_with_the_kernels_text(case: str) -> None:
    """The same function with and without jit_compile: the shape function's errors when it is
    traced, the kernel's validation when it runs or is compiled, with the same type and text (or
    the same outputs, where the kernel takes the input)."""
    version, kwargs = BAD[case]
    op = VERSIONS[version][2]
    graph = outcome(tf.function(lambda **k: op(**k)), kwargs)
    jit = outcome(tf.function(lambda **k: op(**k), jit_compile=True), kwargs)
    if graph[0] == "ok":
        assert jit[0] == "ok", jit
        for a, b in zip(jit[1][:5], graph[1][:5]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    else:
        assert jit[0] is graph[0], (jit, graph)
        assert _kernel_text(graph[1]) in jit[1], (jit, graph)


def _kernel_text(message: str) -> str:
    """An error's own text, without the function and node names TensorFlow puts around it."""
    return re.sub(r"^\{\{function_node [^}]*\}\} ", "", message.split("\n")[0])


def _training_step(forward: str, data_format: str):
    rng = np.random.default_rng(12)
    shape = FORMATS[data_format]
    x, scale, offset, _, _ = make_inputs(shape, data_format, tf.float32, offset=2.0, seed=13)
    weights = tf.constant(rng.standard_normal(shape), tf.float32)

    def step():
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y, batch_mean, batch_variance = tf_fbn_ops.fused_batch_norm(
                x, scale, offset, epsilon=EPSILON, data_format=data_format, forward=forward)
            loss = tf.reduce_sum(y * weights)
        return [y, batch_mean, batch_variance, *tape.gradient(loss, [x, scale, offset])]

    return step


@pytest.mark.parametrize("data_format", FORMATS)
def test_forward_and_gradient_compiled_together(data_format, xla_path: str) -> None:
    """fused_batch_norm's default forward under jit is the library's, and the compiled pair (the
    gradient reading the compiled forward's reserve spaces) gives the eager pair's bits through
    the custom calls, and agrees to float rounding through the HLO lowerings."""
    step = _training_step("auto", data_format)
    compiled = tf.function(step, jit_compile=True)
    types = {op.type for op in compiled.get_concrete_function().graph.get_operations()}
    assert {"FbnFusedBatchNormV3", "FbnFusedBatchNormGradV3"} <= types, types
    assert "FusedBatchNormV3" not in types
    for k, (got, want) in enumerate(zip(compiled(), step())):
        if xla_path == "custom_call":
            assert_same_bits(got, want, f"result {k}")
        else:
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, err_msg=f"result {k}")


_KERAS_JIT_SCRIPT = """
import hashlib, numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads({threads})
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras
from tensorflow.python.ops import control_flow_util
from tf_fbn_ops import batch_norm
from tf_fbn_ops.keras import BatchNormalization
# Where the layer's forward op is made: inside XLA compilation or not.
made_in_xla = []
library_forward = batch_norm.shim_ops.fused_batch_norm_forward_v3
def recording_forward(*args, **kwargs):
    graph = tf.compat.v1.get_default_graph()
    made_in_xla.append(control_flow_util.GraphOrParentsInXlaContext(graph))
    return library_forward(*args, **kwargs)
batch_norm.shim_ops.fused_batch_norm_forward_v3 = recording_forward
rng = np.random.default_rng(0)
model = keras.Sequential([keras.Input((8, 8, 16)), BatchNormalization(),
                          keras.layers.GlobalAveragePooling2D()])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=True)
data = rng.standard_normal((64, 8, 8, 16)).astype("float32") * 3 + 2
target = rng.standard_normal((64, 16)).astype("float32")
model.fit(data, target, batch_size=16, epochs=2, shuffle=False, verbose=0)
print("MADE_IN_XLA", bool(made_in_xla) and all(made_in_xla))
digest = hashlib.sha256()
for v in model.weights:
    digest.update(v.numpy().tobytes())
print(digest.hexdigest())
"""


def test_keras_fit_compiled_by_xla_same_bits_for_1_2_3_threads() -> None:
    """Keras' fit with jit_compile=True (its default where a GPU is visible) on the CPU: the
    layer's forward is the library's, made inside XLA compilation, and two epochs give the same
    weights at 1, 2 and 3 threads in TensorFlow's default build (oneDNN on)."""
    if _loader.xla_ffi_missing_reason() is not None:
        pytest.skip(f"no custom calls in this build: {_loader.xla_ffi_missing_reason()}")
    digests = {}
    for threads in (1, 2, 3):
        result = run_python(_KERAS_JIT_SCRIPT.format(threads=threads), TF_ENABLE_ONEDNN_OPTS="1")
        assert result.returncode == 0, result.stderr[-3000:]
        lines = result.stdout.strip().splitlines()
        made = next(line for line in lines if line.startswith("MADE_IN_XLA"))
        assert made == "MADE_IN_XLA True", made
        digests[threads] = lines[-1]
    assert len(digests[1]) == 64
    assert digests[1] == digests[2] == digests[3], digests


_AUTO_CLUSTERED = """
import numpy as np, tensorflow as tf, tf_fbn_ops
x = tf.constant(np.random.default_rng(0).standard_normal((4, 8, 8, 16)), tf.float32)
stats = [tf.ones([16]), tf.zeros([16]), tf.zeros([0]), tf.zeros([0])]

def step(x):  # enough element-wise ops on each side to make clusters of their own
    x = tf.nn.relu(tf.sin(x * 2.0 + 1.0) - 0.5)
    y = tf_fbn_ops.fused_batch_norm_forward_v3(x, *stats)[0]
    return tf.cos(tf.exp(y) * 3.0 + 1.0) - 2.0

np.testing.assert_allclose(tf.function(step)(x), step(x), rtol=1e-5, atol=1e-5)
print("RAN")
"""


def test_auto_clustering(tmp_path, xla_path: str) -> None:
    """With XLA auto-clustering on for the CPU, the forward op joins the cluster of the ops
    around it where it compiles to a custom call of its kernel, and is left to its kernel where
    it would compile to the HLO lowering (the library's graph pass marks it)."""
    run = run_python(_AUTO_CLUSTERED, **auto_clustering_environment(tmp_path, xla_path))
    assert "RAN" in run.stdout, run.stderr[-3000:]
    clusters = clusters_by_op(tmp_path, "FbnFusedBatchNormV3")
    assert clusters, "no clustering dump holds the forward op"
    assert "" not in clusters["Sin"] and "" not in clusters["Cos"]
    if xla_path == "hlo":
        assert clusters["FbnFusedBatchNormV3"] == {""}
    else:
        assert "" not in clusters["FbnFusedBatchNormV3"]
        assert clusters["FbnFusedBatchNormV3"] <= clusters["Sin"] | clusters["Cos"]
