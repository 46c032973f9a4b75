"""The shim's ops under XLA (tf.function(jit_compile=True)), on both paths of
cc/xla/xla_op_kernels.cc: custom calls of the kernels (XLA FFI; bit-identical to the
non-jit kernels) and the HLO lowering (TF_FBN_OPS_XLA_LOWERING=hlo; within an ulp of the float64
oracle). Against the oracle, the non-jit kernels and TensorFlow's own ops, and the ways users
reach them (fused_batch_norm, functions traced before, SavedModels, second-order gradients,
bad shapes, auto-clustering). The forward and the gradient compiled together, on every device,
and shim_gradients() in a compiled Keras 2 training step: test_compiled_pairs.py."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops
from cases import LARGE_SHAPE, Case, make_inputs, parity_cases
from fresh_process import run_python
from parity import assert_parity, sum_rtol, ulp
from tf_calls import BUILTIN, SHIM, _kwargs, run_oracle, run_shim, run_tf
from xla_paths import (NO_CUSTOM_CALLS, assert_compiled_by, auto_clustering_environment,
                       clusters_by_op, xla_path)  # noqa: F401 - the fixture
from tf_fbn_ops import _loader

pytestmark = pytest.mark.skipif(
    _loader.xla_missing_reason() is not None,
    reason=f"no XLA lowerings in this build: {_loader.xla_missing_reason()}")

CASES = parity_cases()
OUTPUTS = ("x_backprop", "scale_backprop", "offset_backprop")


def assert_bits_equal(got: np.ndarray, want: np.ndarray, name: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, name
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"{name}: bits differ"


def assert_within_an_ulp(got: np.ndarray, oracle: np.ndarray, dtype: str, name: str) -> None:
    """Normwise, at the output's magnitude: the lowering rounds double results once."""
    if got.size:
        magnitude = float(np.max(np.abs(oracle)))
        error = float(np.max(np.abs(got.astype(np.float64) - oracle)))
        assert error <= ulp(dtype, magnitude), f"{name}: error {error:.3g}"


def run_jit(fn, case: Case, inputs: dict, path: str | None = None) -> list[np.ndarray]:
    """The op compiled alone; with `path`, first checks what it compiled to."""
    kwargs = _kwargs(case, inputs)
    compiled = tf.function(lambda: fn(**kwargs), jit_compile=True)
    if path is not None:
        assert_compiled_by(path, compiled.experimental_get_compiler_ir()(stage="hlo"))
    return [t.numpy() for t in compiled()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_jit_parity(case: Case, xla_path: str) -> None:
    """Every op, dtype, layout, mode and empty shape, compiled: shapes and dtypes as the
    kernels' and the parity criterion against the oracle and TF's stock kernel. The custom call
    runs the CPU kernel itself, so its bits are the non-jit kernel's; the HLO lowering is within
    one ulp of the oracle (where the CPU kernels' final sweep works in float)."""
    inputs = make_inputs(case)
    jit = run_jit(SHIM[case.op], case, inputs, xla_path)
    eager = run_shim(case, inputs)
    stock, _ = run_tf(case, inputs)
    oracle = run_oracle(case, inputs)

    for got, want in zip(jit, eager):
        assert got.shape == want.shape and got.dtype == want.dtype
    assert jit[3].shape == (0,) and jit[4].shape == (0,)
    if 0 in case.shape:
        assert not np.any(jit[1]) and not np.any(jit[2])
    rest = int(np.prod(case.logical_shape[:-1]))
    for i, name in enumerate(OUTPUTS):
        dtype = case.dtype if i == 0 else "float32"
        assert_parity(name, jit[i], stock[i], oracle[i], dtype, "tf stock",
                      None if i == 0 else sum_rtol(rest))
        if xla_path == "custom_call":
            assert_bits_equal(jit[i], eager[i], name)
        else:
            assert_within_an_ulp(jit[i], oracle[i], dtype, name)


# One mid-sized shape per rank and the R = 1e6 shapes: where the ways of summing differ most.
# (test_jit_parity's one-ulp bound already implies this comparison for every case.)
AGAINST_TF_XLA = [c for c in CASES if c.op == "V3" and c.logical_shape in
                  ((8, 16, 16, 33), (2, 4, 8, 8, 16), LARGE_SHAPE)]


@pytest.mark.parametrize("case", AGAINST_TF_XLA, ids=lambda c: c.id)
def test_jit_at_least_as_accurate_as_tensorflow_under_jit(case: Case, xla_path: str) -> None:
    """TensorFlow's own op compiled by XLA (its lowering accepts channels-first inference)."""
    inputs = make_inputs(case)
    jit = run_jit(SHIM[case.op], case, inputs, xla_path)
    theirs = run_jit(BUILTIN[case.op], case, inputs)
    oracle = run_oracle(case, inputs)
    for i, name in enumerate(OUTPUTS):
        dtype = case.dtype if i == 0 else "float32"
        assert_parity(name, jit[i], theirs[i], oracle[i], dtype, "tf under XLA", agreement=False)


def test_lowerings_registered_for_both_xla_devices() -> None:
    """XLA_CPU_JIT and XLA_GPU_JIT (compiled here, run only where TF has a GPU) accept the same
    types as the CPU kernels."""
    from tensorflow.python.framework import kernels  # noqa: PLC0415

    for op in ("FbnFusedBatchNormGrad", "FbnFusedBatchNormGradV2", "FbnFusedBatchNormGradV3",
               "FbnSyncBatchNormGradSums", "FbnSyncBatchNormGradFromSums",
               "FbnFusedBatchNorm", "FbnFusedBatchNormV2", "FbnFusedBatchNormV3"):
        by_device: dict[str, list] = {}
        for kernel in kernels.get_registered_kernels_for_op(op).kernel:
            constraints = sorted((c.name, tuple(c.allowed_values.list.type))
                                 for c in kernel.constraint)
            by_device.setdefault(kernel.device_type, []).append(constraints)
        for device in ("XLA_CPU_JIT", "XLA_GPU_JIT"):
            assert sorted(by_device.get(device, [])) == sorted(by_device["CPU"]), (op, device)


def _bn_problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.standard_normal((4, 5, 6, 3)) * 2 + 0.5, tf.float32)
    weights = tf.constant(rng.standard_normal((4, 5, 6, 3)), tf.float32)
    return x, weights, tf.constant([1.0, 2.0, 0.5]), tf.constant([0.1, -0.2, 0.3])


def test_fused_batch_norm_under_jit(xla_path: str) -> None:
    x, weights, scale, offset = _bn_problem()

    def grads():
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y = tf_fbn_ops.fused_batch_norm(x, scale, offset)[0]
            loss = tf.reduce_sum(y * weights)
        return tape.gradient(loss, [x, scale, offset])

    compiled = tf.function(grads, jit_compile=True)
    types = {op.type for op in compiled.get_concrete_function().graph.get_operations()}
    assert "FbnFusedBatchNormGradV3" in types
    for got, want in zip(compiled(), tf.function(grads)()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_function_traced_outside_xla_then_called_from_jit(xla_path: str) -> None:
    case = Case("V3", "float32", "NCHW", False, (2, 4, 5, 3))
    inputs = make_inputs(case)
    kwargs = _kwargs(case, inputs)
    plain = tf.function(lambda dy: SHIM["V3"](**dict(kwargs, y_backprop=dy))[:3])
    dy = kwargs["y_backprop"]
    eager = plain(dy)  # traced and run by the CPU kernel first
    compiled = tf.function(lambda dy: plain(dy), jit_compile=True)
    assert_compiled_by(xla_path, compiled.experimental_get_compiler_ir(dy)(stage="hlo"))
    oracle = run_oracle(case, inputs)
    for i, (got, want) in enumerate(zip(compiled(dy), eager)):
        if xla_path == "custom_call":
            assert_bits_equal(got.numpy(), want.numpy(), OUTPUTS[i])
        else:
            assert_within_an_ulp(got.numpy(), oracle[i], "float32", OUTPUTS[i])


def test_second_order_gradients_under_jit(xla_path: str) -> None:
    rng = np.random.default_rng(4)
    kwargs = {"y_backprop": tf.constant(rng.standard_normal((2, 3, 4, 3)), tf.float32),
              "x": tf.constant(rng.standard_normal((2, 3, 4, 3)) + 0.5, tf.float32),
              "scale": tf.constant([0.7, 1.1, 1.3]),
              "reserve_space_1": tf.constant([0.4, 0.5, 0.6]),
              "reserve_space_2": tf.constant([0.9, 1.0, 1.1]),
              "reserve_space_3": tf.zeros([0])}
    weights = [tf.constant(rng.standard_normal((2, 3, 4, 3)), tf.float32),
               tf.constant(rng.standard_normal(3), tf.float32)]

    def second_order(is_training: bool):
        watched = [kwargs["y_backprop"], kwargs["x"], kwargs["scale"]]
        with tf.GradientTape() as tape:
            tape.watch(watched)
            out = tf_fbn_ops.fused_batch_norm_grad_v3(**kwargs, epsilon=1e-3,
                                                      is_training=is_training)
            loss = tf.reduce_sum(out[0] * weights[0]) + tf.reduce_sum(out[1] * weights[1])
        return tape.gradient(loss, watched)

    for is_training in (True, False):
        compiled = tf.function(lambda: second_order(is_training), jit_compile=True)()
        for got, want in zip(compiled, second_order(is_training)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


BAD_INPUTS = [
    # (what is wrong, shapes of y_backprop, x, scale, reserve_space_1, reserve_space_2)
    ("input must be 4 or 5-dimensional", [(2, 3, 4), (2, 3, 4), (4,), (4,), (4,)]),
    ("x and y_backprop must have same shape", [(2, 3, 4, 5), (2, 3, 4, 6), (6,), (6,), (6,)]),
    ("scale must have the same number of elements as the channels of x",
     [(2, 3, 4, 5), (2, 3, 4, 5), (4,), (5,), (5,)]),
    ("reserve_space_2 must have the same number of elements as the channels of x",
     [(2, 3, 4, 5), (2, 3, 4, 5), (5,), (5,), (7,)]),
    ("saved mean must be 1-dimensional", [(2, 3, 4, 5), (2, 3, 4, 5), (5,), (5, 1), (5,)]),
]


@pytest.mark.parametrize("problem,shapes", BAD_INPUTS, ids=[b[0][:30] for b in BAD_INPUTS])
def test_bad_shapes_under_jit_fail_with_the_kernels_text(problem: str, shapes: list,
                                                        xla_path: str) -> None:
    """Shapes unknown when traced reach the lowering, which rejects them at compile time with
    the text the kernel gives eagerly."""
    args = [tf.zeros(s) for s in shapes]
    compiled = tf.function(
        lambda *a: tf_fbn_ops.fused_batch_norm_grad_v2(*a)[0], jit_compile=True,
        input_signature=[tf.TensorSpec(None, tf.float32)] * 5)
    with pytest.raises(tf.errors.InvalidArgumentError) as eager_error:
        tf_fbn_ops.fused_batch_norm_grad_v2(*args)
    with pytest.raises(tf.errors.InvalidArgumentError) as jit_error:
        compiled(*args)
    # The kernel's own text: without TF's "{{function_node ...}}" prefix and " [Op:...]" suffix.
    kernel_text = re.sub(r"^\{\{[^}]*\}\}\s*", "", eager_error.value.message).split(" [Op:")[0]
    assert problem in kernel_text
    assert kernel_text in jit_error.value.message


SAVE = """
    import numpy as np, tensorflow as tf, tf_fbn_ops
    class Grads(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2, 3, 4, 4], tf.float16)] * 2)
        def plain(self, dy, x):
            return tf_fbn_ops.fused_batch_norm_grad_v3(
                dy, x, tf.constant([1.0, 2.0, 3.0]), tf.zeros([3]), tf.ones([3]), tf.zeros([0]),
                data_format="NCHW", is_training=False)[:3]

        @tf.function(input_signature=[tf.TensorSpec([2, 3, 4, 4], tf.float16)] * 2,
                     jit_compile=True)
        def compiled(self, dy, x):
            return self.plain(dy, x)
    rng = np.random.default_rng(0)
    dy, x = (rng.standard_normal((2, 3, 4, 4)).astype(np.float16) for _ in range(2))
    module = Grads()
    np.savez(r"{dir}/expected.npz", dy=dy, x=x, *[t.numpy() for t in module.plain(dy, x)])
    tf.saved_model.save(module, r"{dir}/model")
"""
LOAD_UNDER_JIT = """
    import numpy as np, tensorflow as tf, tf_fbn_ops
    data = np.load(r"{dir}/expected.npz")
    module = tf.saved_model.load(r"{dir}/model")
    from_jit = tf.function(lambda dy, x: module.plain(dy, x), jit_compile=True)
    for got in (from_jit(data["dy"], data["x"]), module.compiled(data["dy"], data["x"])):
        for i, g in enumerate(got):
            want = data["arr_%d" % i].astype(np.float64)
            scale = max(float(np.max(np.abs(want))), 1e-30)
            assert np.max(np.abs(g.numpy().astype(np.float64) - want)) <= scale * 2.0**-10, i
    print("COMPILED AND RAN")
"""



def test_saved_model_called_under_jit_in_a_fresh_process(tmp_path) -> None:
    saved = run_python(SAVE.format(dir=tmp_path))
    assert saved.returncode == 0, saved.stderr[-2000:]
    loaded = run_python(LOAD_UNDER_JIT.format(dir=tmp_path))
    assert "COMPILED AND RAN" in loaded.stdout, loaded.stderr[-3000:]


AUTO_CLUSTERED = """
    import numpy as np, tensorflow as tf, tf_fbn_ops
    rng = np.random.default_rng(0)
    dy, x = (tf.constant(rng.standard_normal((4, 8, 8, 16)), tf.float32) for _ in range(2))
    stats = [tf.ones([16]), tf.zeros([16]), tf.ones([16]), tf.zeros([0])]
    op = {op}

    def step(dy, x):  # enough element-wise ops on each side to make clusters of their own
        dy = tf.nn.relu(tf.sin(dy * 2.0 + 1.0) - 0.5)
        dx = op(dy, x, *stats)[0]
        return tf.cos(tf.exp(dx) * 3.0 + 1.0) - 2.0

    clustered, eager = tf.function(step)(dy, x), step(dy, x)
    np.testing.assert_allclose(clustered, eager, rtol=1e-5, atol=1e-5)
    print("RAN")
"""
# The op as the public wrapper makes it, and as tf.load_op_library's module does.
NODE_MAKERS = {"wrapper": "tf_fbn_ops.fused_batch_norm_grad_v3",
               "load_op_library": "tf.load_op_library(tf_fbn_ops.library_path())"
                                  ".fbn_fused_batch_norm_grad_v3"}


@pytest.mark.parametrize("maker", sorted(NODE_MAKERS))
def test_auto_clustering(tmp_path, xla_path: str, maker: str) -> None:
    """With XLA auto-clustering on for the CPU, the element-wise ops around a shim op are
    compiled. The shim op joins their cluster where it compiles to a custom call of its kernel,
    and is left to its kernel where it would compile to the HLO lowering: however its node was
    made (a graph pass of the library marks it)."""
    run = run_python(AUTO_CLUSTERED.replace("{op}", NODE_MAKERS[maker]),
                     **auto_clustering_environment(tmp_path, xla_path))
    assert "RAN" in run.stdout, run.stderr[-3000:]
    clusters = clusters_by_op(tmp_path, "FbnFusedBatchNormGradV3")
    assert clusters, "no clustering dump holds the shim op"
    assert "" not in clusters["Sin"] and "" not in clusters["Cos"]
    if xla_path == "hlo":
        assert clusters["FbnFusedBatchNormGradV3"] == {""}
    else:
        assert "" not in clusters["FbnFusedBatchNormGradV3"]
        assert clusters["FbnFusedBatchNormGradV3"] <= clusters["Sin"] | clusters["Cos"]
