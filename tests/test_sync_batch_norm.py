"""Synchronized batch norm: the two backward ops (bits of FbnFusedBatchNormGradV3 with one
replica, shapes, errors), the functional form outside any strategy (no collective), and under
MirroredStrategy on 2 and 3 logical CPUs and MultiWorkerMirroredStrategy with 2 worker processes
on 127.0.0.1 (tests/sync_bn_worker.py): against a float64 computation on the global batch, the
same bits on every replica and worker and run to run, unequal and empty replica batches, the
ops and collectives of the traced step, Keras' synchronized layer beside ours, and a worker that
dies mid-step.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from worker_processes import run_cluster, run_workers, worker_env
from xla_paths import NO_CUSTOM_CALLS, xla_path  # noqa: F401 - the fixture

import tf_fbn_ops
from tf_fbn_ops import ops as shim_ops
from tf_fbn_ops import sync_batch_norm

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sync_bn_worker.py")
CHANNEL_AXIS = sync_batch_norm.CHANNEL_AXIS
EPSILON = 1e-3
# What the synchronized ops compile to on the custom-call path.
SYNC_TARGETS = ('custom_call_target="tf_fbn_ops_sync_batch_norm_grad_sums"',
                'custom_call_target="tf_fbn_ops_sync_batch_norm_grad_from_sums"')
# x_backprop against float64: a few float32 units of its largest element; the sums are float64.
DX_TOLERANCE = 8 * 2.0**-23
SUM_TOLERANCE = 4 * 2.0**-23


def bits(t) -> bytes:
    return np.asarray(t).tobytes()


def inputs(shape, data_format, dtype, seed=0):
    rng = np.random.default_rng(seed)
    channels = shape[CHANNEL_AXIS[data_format]]
    return dict(
        y_backprop=tf.cast(rng.standard_normal(shape), dtype),
        x=tf.cast(rng.standard_normal(shape) * 2 + 3, dtype),
        scale=tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32),
        mean=tf.constant(rng.uniform(2, 4, channels), tf.float32),
        variance=tf.constant(rng.uniform(3, 5, channels), tf.float32))


SHAPES = [("NHWC", (3, 5, 7, 12)), ("NHWC", (8, 16, 16, 20)), ("NCHW", (3, 12, 5, 7)),
          ("NCHW", (8, 20, 16, 16)), ("NCHW", (40, 6, 3, 3)), ("NDHWC", (2, 3, 4, 5, 12)),
          ("NCDHW", (2, 12, 3, 4, 5)), ("NCDHW", (4, 6, 8, 8, 20))]


@pytest.mark.parametrize("data_format, shape", SHAPES)
@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
def test_one_replica_gives_the_bits_of_v3(data_format, shape, dtype) -> None:
    t = inputs(shape, data_format, dtype)
    whole = tf_fbn_ops.fused_batch_norm_grad_v3(
        t["y_backprop"], t["x"], t["scale"], t["mean"], t["variance"], tf.zeros([0]),
        epsilon=EPSILON, data_format=data_format, is_training=True)
    sums = shim_ops.sync_batch_norm_grad_sums(t["y_backprop"], t["x"], t["mean"],
                                              data_format=data_format)
    assert sums.sum_dy.dtype == tf.float64 and sums.sum_dy_xc.dtype == tf.float64
    count = int(np.prod(shape)) // shape[CHANNEL_AXIS[data_format]]
    staged = shim_ops.sync_batch_norm_grad_from_sums(
        t["y_backprop"], t["x"], t["scale"], t["mean"], t["variance"], sums.sum_dy,
        sums.sum_dy_xc, count, epsilon=EPSILON, data_format=data_format)
    for ours, theirs in zip(staged, whole[:3]):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert bits(ours) == bits(theirs)


def test_sums_are_float64_sums_of_the_batch() -> None:
    t = inputs((4, 6, 5, 8), "NHWC", tf.float32, seed=3)
    sums = shim_ops.sync_batch_norm_grad_sums(t["y_backprop"], t["x"], t["mean"])
    dy, x = (np.asarray(t[k], np.float64) for k in ("y_backprop", "x"))
    mean = np.asarray(t["mean"], np.float64)
    np.testing.assert_allclose(sums.sum_dy, dy.sum((0, 1, 2)), rtol=1e-14, atol=1e-13)
    np.testing.assert_allclose(sums.sum_dy_xc, (dy * (x - mean)).sum((0, 1, 2)), rtol=1e-14,
                               atol=1e-13)


@pytest.mark.parametrize("device", ["CPU", "GPU"])
def test_scale_and_offset_gradients_are_the_replicas_share(device) -> None:
    """From the replica's own sums, each rounded once: the shares of several replicas add up
    to the whole batch's. x_backprop depends on the global sums only."""
    if device == "GPU" and not tf.config.list_physical_devices("GPU"):
        pytest.skip("no GPU")
    t = inputs((4, 6, 5, 8), "NHWC", tf.float32, seed=4)
    with tf.device(device):
        own = shim_ops.sync_batch_norm_grad_sums(t["y_backprop"], t["x"], t["mean"])
        global_dy, global_dy_xc = own.sum_dy * 2.5 - 1.0, own.sum_dy_xc * 2.5 + 3.0
        args = (t["y_backprop"], t["x"], t["scale"], t["mean"], t["variance"], global_dy,
                global_dy_xc, tf.constant(4 * 6 * 5 * 3, tf.int64))
        share = shim_ops.sync_batch_norm_grad_from_sums(
            *args, epsilon=EPSILON, replica_sum_dy=own.sum_dy, replica_sum_dy_xc=own.sum_dy_xc)
        whole = shim_ops.sync_batch_norm_grad_from_sums(*args, epsilon=EPSILON)
    inv_std = 1.0 / np.sqrt(np.asarray(t["variance"], np.float64) + np.float64(np.float32(EPSILON)))
    assert bits(share.offset_backprop) == bits(np.float32(own.sum_dy))
    assert bits(share.scale_backprop) == bits(np.float32(own.sum_dy_xc * inv_std))
    assert bits(whole.offset_backprop) == bits(np.float32(global_dy))
    assert bits(whole.scale_backprop) == bits(np.float32(global_dy_xc * inv_std))
    assert bits(share.x_backprop) == bits(whole.x_backprop)


def test_empty_batch() -> None:
    x = tf.zeros([0, 4, 4, 3])
    sums = shim_ops.sync_batch_norm_grad_sums(x, x, tf.ones([3]))
    assert bits(sums.sum_dy) == bits(np.zeros(3)) and bits(sums.sum_dy_xc) == bits(np.zeros(3))
    global_sums = tf.constant([1.0, -2.0, 0.5], tf.float64)
    dx, dscale, doffset = shim_ops.sync_batch_norm_grad_from_sums(
        x, x, tf.ones([3]), tf.zeros([3]), tf.fill([3], 3.0), global_sums, global_sums,
        tf.constant(40, tf.int64), epsilon=1.0)
    assert dx.shape == (0, 4, 4, 3)
    np.testing.assert_array_equal(doffset, [1.0, -2.0, 0.5])
    np.testing.assert_array_equal(dscale, np.float32(np.array([1.0, -2.0, 0.5]) / 2.0))


def test_static_shapes() -> None:
    @tf.function(input_signature=[tf.TensorSpec([None, 5, None, 7]),
                                  tf.TensorSpec([None]), tf.TensorSpec([], tf.int64)])
    def both(x, vector, count):
        sums = shim_ops.sync_batch_norm_grad_sums(x, x, vector)
        assert sums.sum_dy.shape.as_list() == [7] and sums.sum_dy_xc.shape.as_list() == [7]
        out = shim_ops.sync_batch_norm_grad_from_sums(x, x, vector, vector, vector, sums.sum_dy,
                                                      sums.sum_dy_xc, count)
        assert out.x_backprop.shape.as_list() == [None, 5, None, 7]
        assert out.scale_backprop.shape.as_list() == [7]
        return out

    both.get_concrete_function()


@pytest.mark.parametrize("call, message", [
    (lambda: shim_ops.sync_batch_norm_grad_sums(tf.zeros([2, 3, 4]), tf.zeros([2, 3, 4]),
                                                tf.zeros([4])), "rank 4|4-dimensional"),
    (lambda: shim_ops.sync_batch_norm_grad_sums(tf.zeros([2, 3, 4, 5]), tf.zeros([2, 3, 4, 6]),
                                                tf.zeros([5])), "same shape|Dimensions must"),
    (lambda: shim_ops.sync_batch_norm_grad_sums(tf.zeros([2, 3, 4, 5]), tf.zeros([2, 3, 4, 5]),
                                                tf.zeros([4])), "mean|Dimensions must"),
    (lambda: shim_ops.sync_batch_norm_grad_sums(tf.zeros([2, 3, 4, 5]), tf.zeros([2, 3, 4, 5]),
                                                tf.zeros([5]), data_format="NCDHW"),
     "rank 5|5-dimensional"),
    (lambda: shim_ops.sync_batch_norm_grad_from_sums(
        tf.zeros([2, 3, 4, 5]), tf.zeros([2, 3, 4, 5]), tf.zeros([5]), tf.zeros([5]),
        tf.zeros([5]), tf.zeros([5], tf.float64), tf.zeros([5], tf.float64),
        tf.constant(23, tf.int64)), r"count \(23\) must be at least this replica's 24"),
    (lambda: shim_ops.sync_batch_norm_grad_from_sums(
        tf.zeros([2, 3, 4, 5]), tf.zeros([2, 3, 4, 5]), tf.zeros([5]), tf.zeros([5]),
        tf.zeros([5]), tf.zeros([5], tf.float64), tf.zeros([4], tf.float64),
        tf.constant(24, tf.int64)), "sum_dy_xc|Dimensions must"),
    (lambda: shim_ops.sync_batch_norm_grad_from_sums(
        tf.zeros([2, 3, 4, 5]), tf.zeros([2, 3, 4, 5]), tf.zeros([5]), tf.zeros([5]),
        tf.zeros([5]), tf.zeros([5], tf.float64), tf.zeros([5], tf.float64),
        tf.constant([24], tf.int64)), "count must be a scalar|rank 0"),
    (lambda: shim_ops.sync_batch_norm_grad_from_sums(
        tf.zeros([2, 3, 4, 5]), tf.zeros([2, 3, 4, 5]), tf.zeros([5]), tf.zeros([5]),
        tf.zeros([5]), tf.zeros([5], tf.float64), tf.zeros([5], tf.float64),
        tf.constant(24, tf.int64), replica_sum_dy=tf.zeros([4], tf.float64)),
     "replica_sum_dy|Dimensions must"),
    (lambda: shim_ops.sync_batch_norm_grad_sums(tf.zeros([2, 3, 4, 5]), tf.zeros([2, 3, 4, 5]),
                                                tf.zeros([5]), data_format="HWCN"),
     "data_format"),
])
def test_bad_inputs_are_refused(call, message) -> None:
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        call()


def test_bad_inputs_are_refused_by_the_kernel_too() -> None:
    """The kernel's own checks, where the shape function cannot see the shapes."""
    @tf.function(input_signature=[tf.TensorSpec(None), tf.TensorSpec(None)])
    def sums(x, mean):
        return shim_ops.sync_batch_norm_grad_sums(x, x, mean)

    with pytest.raises(tf.errors.InvalidArgumentError, match="4-dimensional for data_format NHWC"):
        sums(tf.zeros([2, 3, 4]), tf.zeros([4]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="mean must be a vector of the 5"):
        sums(tf.zeros([2, 3, 4, 5]), tf.zeros([4]))


def test_outside_a_strategy_no_collective_and_v3_gradients() -> None:
    t = inputs((6, 4, 5, 8), "NHWC", tf.float32, seed=4)
    x, dy, scale, offset = t["x"], t["y_backprop"], t["scale"], tf.zeros([8])

    @tf.function
    def step(x, scale, offset):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y, moments = sync_batch_norm.synchronized_batch_norm(x, scale, offset, EPSILON)
            loss = tf.reduce_sum(y * dy)
        return (y, moments, *tape.gradient(loss, [x, scale, offset]))

    y, moments, dx, dscale, doffset = step(x, scale, offset)
    graph_ops = {op.type for op in step.get_concrete_function(x, scale, offset).graph
                 .get_operations()}
    assert not any("Collective" in op for op in graph_ops)
    x64 = np.asarray(x, np.float64)
    np.testing.assert_allclose(moments.mean, x64.mean((0, 1, 2)), rtol=1e-15)
    np.testing.assert_allclose(moments.variance, x64.var((0, 1, 2)), rtol=1e-13)
    assert int(moments.count) == 6 * 4 * 5
    mean32, var32 = tf.cast(moments.mean, tf.float32), tf.cast(moments.variance, tf.float32)
    whole = tf_fbn_ops.fused_batch_norm_grad_v3(dy, x, scale, mean32, var32, tf.zeros([0]),
                                                epsilon=EPSILON, is_training=True)
    for ours, theirs in zip((dx, dscale, doffset), whole[:3]):
        assert bits(ours) == bits(theirs)
    forward = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=tf.zeros([0]),
                                          variance=tf.zeros([0]), epsilon=EPSILON,
                                          is_training=True)
    np.testing.assert_allclose(y, forward.y, rtol=1e-5, atol=1e-5)


def test_moments_of_a_large_mean_keep_the_variance() -> None:
    """Chan's combination in float64: no E[x²] − E[x]² cancellation."""
    rng = np.random.default_rng(9)
    x = (1e4 + rng.standard_normal((16, 8, 8, 4))).astype(np.float32)
    moments = sync_batch_norm.global_moments(tf.constant(x), "NHWC")
    np.testing.assert_allclose(moments.variance, x.astype(np.float64).var((0, 1, 2)),
                               rtol=1e-12)


def test_functional_form_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="data_format"):
        sync_batch_norm.synchronized_batch_norm(tf.zeros([2, 3, 4, 5]), tf.ones([5]),
                                                tf.zeros([5]), data_format="HWCN")
    with pytest.raises(ValueError, match="4-D for data_format NHWC"):
        sync_batch_norm.synchronized_batch_norm(tf.zeros([2, 3, 5]), tf.ones([5]), tf.zeros([5]))


# ---- under tf.distribute, in processes of their own ------------------------------------------

def reference(results) -> dict[str, np.ndarray]:
    """The float64 batch-norm gradients of the worker's global batch, one replica."""
    x, w = results["x"].astype(np.float64), results["w"].astype(np.float64)
    scale = results["scale"].astype(np.float64)
    mean, variance = x.mean((0, 1, 2)), x.var((0, 1, 2))
    inverse_std = 1.0 / np.sqrt(variance + np.float64(np.float32(EPSILON)))
    normalized = (x - mean) * inverse_std
    count = x.size // x.shape[-1]
    dscale, doffset = (w * normalized).sum((0, 1, 2)), w.sum((0, 1, 2))
    dx = scale * inverse_std * (w - doffset / count - normalized * dscale / count)
    return dict(mean=mean, variance=variance, dx=dx, dscale=dscale, doffset=doffset)


def check_functional(per_worker: list[dict]) -> None:
    """Every replica's outputs (over all workers, in replica order) against float64, and the
    same bits everywhere and run to run."""
    first = per_worker[0]
    replicas = int(first["replicas"])
    outputs = {}
    for name in ("y", "dx", "dscale", "doffset", "mean", "variance"):
        if len(per_worker) == 1:
            outputs[name] = [first[f"{name}_{r}"] for r in range(replicas)]
            again = [first[f"{name}_again_{r}"] for r in range(replicas)]
        else:  # one replica per worker
            outputs[name] = [w[f"{name}_0"] for w in per_worker]
            again = [w[f"{name}_again_0"] for w in per_worker]
        for a, b in zip(outputs[name], again):
            assert bits(a) == bits(b), f"{name} differs run to run"
    want = reference(first)
    for name in ("mean", "variance"):
        for value in outputs[name]:
            assert bits(value) == bits(outputs[name][0]), f"replicas' {name} differ"
        np.testing.assert_allclose(outputs[name][0], want[name], rtol=1e-14)
    dx = np.concatenate(outputs["dx"])
    assert dx.shape == want["dx"].shape
    assert np.max(np.abs(dx - want["dx"])) <= DX_TOLERANCE * np.max(np.abs(want["dx"]))
    for name in ("dscale", "doffset"):
        total = np.sum(np.asarray(outputs[name], np.float64), 0)  # tf.distribute's sum
        assert np.max(np.abs(total - want[name])) <= \
            replicas * SUM_TOLERANCE * np.max(np.abs(want[name]))
    splits = first["splits"]
    assert 0 in splits and len(set(splits.tolist())) > 1  # unequal, one empty


def check_keras(results) -> None:
    """Our layer's two steps against float64 on one replica: never more than two float32
    roundings of a weight further from it than Keras' synchronized layer."""
    for i in range(sum(1 for k in results.keys() if k.startswith("reference_final_"))):
        want = results[f"reference_final_{i}"]
        ours = np.max(np.abs(results[f"ours_final_{i}"] - want))
        theirs = np.max(np.abs(results[f"keras_final_{i}"] - want))
        slack = 2 * np.max(np.spacing(np.abs(want).astype(np.float32)))
        assert ours <= theirs + slack, (i, ours, theirs)
    np.testing.assert_allclose(results["ours_losses"], results["keras_losses"], rtol=1e-5)


def op_counts(results, name) -> dict[str, int]:
    return json.loads(str(results[name]))


def collectives(counts: dict[str, int]) -> int:
    return sum(n for op, n in counts.items() if "Collective" in op or "AllReduce" in op)


@pytest.mark.parametrize("replicas", [2, 3])
def test_mirrored_strategy(replicas, tmp_path) -> None:
    out = tmp_path / "mirrored.npz"
    (returncode, stdout, stderr), = run_workers(
        [[sys.executable, WORKER, f"mirrored{replicas}", str(out)]], [worker_env()])
    assert returncode == 0 and "WORKER DONE" in stdout, stderr[-3000:]
    with np.load(out) as results:
        check_functional([results])
        check_keras(results)
        functional = op_counts(results, "functional_ops")
        # One collective forward and one backward per replica; the two ops once per replica.
        assert collectives(functional) == 2 * replicas
        assert functional.get("FbnSyncBatchNormGradSums") == replicas
        assert functional.get("FbnSyncBatchNormGradFromSums") == replicas
        ours, theirs = op_counts(results, "ours_ops"), op_counts(results, "keras_ops")
        plain = op_counts(results, "unsynchronized_ops")
        assert collectives(ours) == collectives(plain) + 2 * replicas
        assert ours.get("FbnSyncBatchNormGradSums") == replicas
        assert collectives(theirs) > collectives(ours)


def test_the_same_bits_whatever_the_all_reduce(tmp_path) -> None:
    """TensorFlow's collectives and a reduction gathered on one device add in other orders; the
    exchange (each replica's row, zeros elsewhere) makes the results identical anyway."""
    outs = {}
    for mode in ("mirrored2", "mirrored2-onedevice"):
        outs[mode] = tmp_path / f"{mode}.npz"
        (returncode, stdout, stderr), = run_workers(
            [[sys.executable, WORKER, mode, str(outs[mode])]], [worker_env()])
        assert returncode == 0 and "WORKER DONE" in stdout, stderr[-3000:]
    with np.load(outs["mirrored2"]) as collective, np.load(outs["mirrored2-onedevice"]) as gathered:
        for name in collective.files:
            if name.split("_")[0] in ("y", "dx", "dscale", "doffset", "mean", "variance"):
                assert bits(collective[name]) == bits(gathered[name]), name
        assert collectives(op_counts(collective, "functional_ops")) == 4
        assert collectives(op_counts(gathered, "functional_ops")) == 0


def test_multi_worker_mirrored_strategy(tmp_path) -> None:
    outs = [tmp_path / f"worker{i}.npz" for i in range(2)]
    results = run_cluster([[sys.executable, WORKER, "multiworker", str(o)] for o in outs])
    for returncode, stdout, stderr in results:
        assert returncode == 0 and "WORKER DONE" in stdout, stderr[-3000:]
    loaded = [dict(np.load(o)) for o in outs]
    for name in loaded[0]:  # synchronous training: both workers hold the same bits
        if name.startswith(("ours_final", "keras_final", "mean", "variance", "reference")):
            assert bits(loaded[0][name]) == bits(loaded[1][name]), name
    check_functional(loaded)
    check_keras(loaded[0])


@pytest.mark.parametrize("when", ["dies", "dies-mid-step"])
def test_a_worker_that_dies_stops_the_other_with_an_error(tmp_path, when) -> None:
    """Worker 1 exits before the step's first collective, or inside the step between the
    forward's all-reduce and the backward's: worker 0 ends with an error, within the
    collectives' 60 s timeout and the cluster's bound, not a hang."""
    results = run_cluster([[sys.executable, WORKER, when, str(tmp_path / f"w{i}.npz")]
                           for i in range(2)], timeout_s=240)
    (chief_status, chief_out, chief_err), (dead_status, dead_out, _) = results
    assert dead_status == 3
    assert ("EXITING IN THE BACKWARD" in dead_out) == (when == "dies-mid-step")
    assert chief_status == 0 and "WORKER FAILED" in chief_out, chief_out + chief_err[-3000:]


def layer_step(layer):
    """A training step of one layer: its outputs and the gradients of x, gamma and beta."""

    def step(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        return y, tape.gradient(y, [x, layer.gamma, layer.beta], output_gradients=dy)

    return step


@pytest.mark.parametrize("jit_compile", [False, True], ids=["eager", "xla"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape, axis", [((4, 5, 6, 3), -1), ((4, 3, 5, 6), 1),
                                         ((2, 3, 4, 5, 6), -1)])
def test_keras_layer_outside_a_strategy_matches_keras(dtype, shape, axis, jit_compile) -> None:
    """synchronized=True with one replica: Keras' synchronized layer's outputs, gradients and
    moving statistics, to the input type's rounding; under XLA ours compiles to the
    synchronized ops' custom calls."""
    import keras  # noqa: PLC0415

    import tf_fbn_ops.keras as fbn_keras  # noqa: PLC0415
    rng = np.random.default_rng(2)
    x = tf.cast(rng.standard_normal(shape) * 3 + 10, dtype)
    dy = tf.cast(rng.standard_normal(shape), dtype)
    results = []
    for layer_class in (keras.layers.BatchNormalization, fbn_keras.BatchNormalization):
        layer = layer_class(axis=axis, synchronized=True, momentum=0.5, dtype=dtype)
        layer.build(shape)
        layer.gamma.assign(rng.uniform(0.5, 1.5, shape[axis]).astype(np.float32)
                           if not results else results[0][-1])
        step = layer_step(layer)
        if jit_compile:
            step = tf.function(step, jit_compile=True)
            if results and NO_CUSTOM_CALLS is None:
                hlo = step.experimental_get_compiler_ir(x, dy)(stage="hlo")
                assert all(target in hlo for target in SYNC_TARGETS)
        y, grads = step(x, dy)
        results.append([np.asarray(tf.cast(t, tf.float32)) for t in
                        (y, *grads, layer.moving_mean, layer.moving_variance)] +
                       [np.asarray(layer.gamma)])
    tolerance = {"float32": 1e-4, "float16": 4e-3, "bfloat16": 3e-2}[dtype]
    for ours, theirs in zip(results[1][:-1], results[0][:-1]):
        np.testing.assert_allclose(ours, theirs, rtol=tolerance,
                                   atol=tolerance * np.max(np.abs(theirs)))


def test_replace_batch_norm_keeps_synchronized() -> None:
    import keras  # noqa: PLC0415

    import tf_fbn_ops.keras as fbn_keras  # noqa: PLC0415
    model = keras.Sequential([keras.Input((4, 4, 3)),
                              keras.layers.BatchNormalization(synchronized=True)])
    copy = fbn_keras.replace_batch_norm(model)
    assert type(copy.layers[0]) is fbn_keras.BatchNormalization
    assert copy.layers[0].synchronized


@pytest.mark.parametrize("data_format, shape", SHAPES[:1] + SHAPES[2:3] + SHAPES[5:7])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
def test_under_xla_the_halves_match_the_kernels(data_format, shape, dtype, xla_path) -> None:
    """jit_compile=True, with the count a run-time value: the custom calls give the kernels'
    bits; the HLO lowerings the sums to double rounding, x_backprop and the gradients to one
    unit of their type."""
    t = inputs(shape, data_format, dtype, seed=6)
    channels = shape[CHANNEL_AXIS[data_format]]
    count = tf.constant(int(np.prod(shape)) // channels * 3, tf.int64)

    def halves(dy, x, scale, mean, variance, count):
        sums = shim_ops.sync_batch_norm_grad_sums(dy, x, mean, data_format=data_format)
        # As if two more replicas had brought the same sums: global sums and count of three.
        out = shim_ops.sync_batch_norm_grad_from_sums(
            dy, x, scale, mean, variance, sums.sum_dy * 3.0, sums.sum_dy_xc * 3.0, count,
            epsilon=EPSILON, data_format=data_format, replica_sum_dy=sums.sum_dy,
            replica_sum_dy_xc=sums.sum_dy_xc)
        return (sums.sum_dy, sums.sum_dy_xc, *out)

    args = (t["y_backprop"], t["x"], t["scale"], t["mean"], t["variance"], count)
    eager = halves(*args)
    compiled_fn = tf.function(halves, jit_compile=True)
    hlo = compiled_fn.experimental_get_compiler_ir(*args)(stage="hlo")
    compiled = compiled_fn(*args)
    if xla_path == "custom_call":
        assert all(target in hlo for target in SYNC_TARGETS), hlo
        for i, (want, got) in enumerate(zip(eager, compiled)):
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), i
        return
    assert not any(target in hlo for target in SYNC_TARGETS)
    unit = {tf.float32: 2.0**-23, tf.float16: 2.0**-10, tf.bfloat16: 2.0**-7}[dtype]
    for i, (want, got) in enumerate(zip(eager, compiled)):
        want64 = np.asarray(tf.cast(want, tf.float64))
        got64 = np.asarray(tf.cast(got, tf.float64))
        bound = (1e-12 if i < 2 else 2 * (unit if i == 2 else 2.0**-23)) * max(
            np.max(np.abs(want64)), 1e-30)
        assert np.max(np.abs(got64 - want64)) <= bound, i


@pytest.mark.skipif(NO_CUSTOM_CALLS is not None, reason=f"no custom calls: {NO_CUSTOM_CALLS}")
def test_under_xla_the_cpu_custom_call_checks_a_run_time_count() -> None:
    @tf.function(jit_compile=True)
    def from_sums(x, count):
        vector = tf.ones([5])
        sums = tf.zeros([5], tf.float64)
        return shim_ops.sync_batch_norm_grad_from_sums(x, x, vector, vector, vector, sums, sums,
                                                       count)

    x = tf.zeros([2, 3, 4, 5])
    assert np.all(from_sums(x, tf.constant(24, tf.int64)).x_backprop.numpy() == 0)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"count \(23\) must be at least this replica's 24 elements"):
        from_sums(x, tf.constant(23, tf.int64))


def test_under_xla_a_constant_count_is_checked() -> None:
    @tf.function(jit_compile=True)
    def from_sums(x):
        vector = tf.ones([5])
        sums = tf.zeros([5], tf.float64)
        return shim_ops.sync_batch_norm_grad_from_sums(x, x, vector, vector, vector, sums, sums,
                                                       tf.constant(3, tf.int64))

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"count \(3\) must be at least"):
        from_sums(tf.zeros([2, 3, 4, 5]))
