"""Where x_backprop's memory comes from, and that the bits do not depend on it.

Three sources, in the kernel's order of preference: y_backprop's own buffer when TensorFlow says
nothing else reads it; on CPU with TensorFlow's malloc allocator (oneDNN off), blocks the library
keeps mapped between calls; else TensorFlow's allocator. The buffers are observed through a TF1
session's step stats (each output's allocator and address), page faults through getrusage.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops
from fresh_process import run_python

GRAD_NAME = "grad"
RETAINED_ALLOCATOR = "tf_fbn_ops_retained_cpu"
# 8x56x56x64 float32: 6.4 MB per tensor, 1568 pages.
SHAPE = (8, 56, 56, 64)
CASES = [("NHWC", True, tf.float32), ("NCHW", True, tf.float32), ("NHWC", False, tf.float32),
         ("NCHW", False, tf.float32), ("NHWC", True, tf.bfloat16), ("NCHW", False, tf.float16)]


def _inputs(data_format: str, dtype, shape=SHAPE, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    channels = shape[-1] if data_format == "NHWC" else shape[1]
    return {"dy": rng.standard_normal(shape).astype(dtype.as_numpy_dtype),
            "x": rng.standard_normal(shape).astype(dtype.as_numpy_dtype),
            "scale": rng.uniform(0.5, 1.5, channels).astype(np.float32),
            "mean": rng.standard_normal(channels).astype(np.float32) * 0.1,
            "variance": rng.uniform(0.5, 1.5, channels).astype(np.float32)}


def _session_run(data_format: str, is_training: bool, dtype, dy_is_dead: bool,
                 values: dict) -> tuple[np.ndarray, dict]:
    """x_backprop from a TF1 session, and each node's output 0 (allocator, address)."""
    graph = tf.Graph()
    with graph.as_default():
        feeds = {k: tf.compat.v1.placeholder(tf.as_dtype(v.dtype), v.shape, name=k)
                 for k, v in values.items()}
        # dy * 2 is read by the op alone: TensorFlow may hand its buffer over. A fed dy is held
        # by the session: it may not.
        dy = tf.multiply(feeds["dy"], tf.constant(2, dtype), name="dead_dy") if dy_is_dead \
            else feeds["dy"]
        grad = tf_fbn_ops.fused_batch_norm_grad_v3(
            y_backprop=dy, x=feeds["x"], scale=feeds["scale"], reserve_space_1=feeds["mean"],
            reserve_space_2=feeds["variance"], reserve_space_3=tf.zeros([0]), epsilon=1e-3,
            data_format=data_format, is_training=is_training, name=GRAD_NAME)
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True  # keep dy * 2 as it is
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        x_backprop = session.run(
            grad.x_backprop, {feeds[k]: v for k, v in values.items()},
            options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
            run_metadata=metadata)
    outputs = {}
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            for output in node.output:
                if output.slot == 0:
                    description = output.tensor_description.allocation_description
                    outputs[node.node_name] = (description.allocator_name, description.ptr)
    return x_backprop, outputs


def _expected(data_format: str, is_training: bool, dtype, values: dict, dy_scale: int):
    return tf_fbn_ops.fused_batch_norm_grad_v3(
        y_backprop=tf.constant(values["dy"]) * tf.constant(dy_scale, dtype), x=values["x"],
        scale=values["scale"], reserve_space_1=values["mean"], reserve_space_2=values["variance"],
        reserve_space_3=tf.zeros([0]), epsilon=1e-3, data_format=data_format,
        is_training=is_training).x_backprop.numpy()


@pytest.mark.parametrize("data_format, is_training, dtype", CASES)
def test_x_backprop_takes_over_a_dead_y_backprop(data_format, is_training, dtype):
    values = _inputs(data_format, dtype)
    got, outputs = _session_run(data_format, is_training, dtype, True, values)
    assert outputs[GRAD_NAME][1] == outputs["dead_dy"][1] != 0  # the same buffer
    np.testing.assert_array_equal(got, _expected(data_format, is_training, dtype, values, 2))


@pytest.mark.parametrize("data_format, is_training, dtype", CASES)
def test_x_backprop_of_a_held_y_backprop_is_retained_memory(data_format, is_training, dtype):
    """The tests run with oneDNN off (conftest.py): TensorFlow's CPU allocator is malloc."""
    values = _inputs(data_format, dtype)
    got, outputs = _session_run(data_format, is_training, dtype, False, values)
    assert outputs[GRAD_NAME][0] == RETAINED_ALLOCATOR
    np.testing.assert_array_equal(got, _expected(data_format, is_training, dtype, values, 1))


def test_small_outputs_stay_with_tensorflow():
    values = _inputs("NHWC", tf.float32, shape=(2, 8, 8, 16))
    _, outputs = _session_run("NHWC", True, tf.float32, False, values)
    assert outputs[GRAD_NAME][0] != RETAINED_ALLOCATOR


FAULTS_PER_CALL = """
    import json, os, resource
    import numpy as np
    import tensorflow as tf
    import tf_fbn_ops
    rng = np.random.default_rng(0)
    shape = {shape}
    dy = tf.constant(rng.standard_normal(shape).astype(np.float32))
    x = tf.constant(rng.standard_normal(shape).astype(np.float32))
    c = shape[-1]
    mean, variance = tf.zeros([c]), tf.ones([c])
    {call}
    first = call().numpy()
    for _ in range(3):
        call()
    calls = 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        call()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print(json.dumps({{"faults_per_call": faults / calls, "pages": first.nbytes / 4096,
                      "same": bool(np.array_equal(call().numpy(), first))}}))
    """

# Every op with a gradient's outputs, x_backprop as `call()`'s result.
GRADIENT_SHAPED_CALLS = {
    "gradient": """def call():
        return tf_fbn_ops.fused_batch_norm_grad_v3(
            y_backprop=dy, x=x, scale=tf.ones([c]), reserve_space_1=mean,
            reserve_space_2=variance, reserve_space_3=tf.zeros([0]),
            data_format="NHWC", is_training=True).x_backprop""",
    "synchronized_from_sums": """sums = tf_fbn_ops.ops.sync_batch_norm_grad_sums(
        y_backprop=dy, x=x, mean=mean)
    count = tf.constant(int(np.prod(shape)) // c, tf.int64)
    def call():
        return tf_fbn_ops.ops.sync_batch_norm_grad_from_sums(
            y_backprop=dy, x=x, scale=tf.ones([c]), mean=mean, variance=variance,
            sum_dy=sums.sum_dy, sum_dy_xc=sums.sum_dy_xc, count=count,
            epsilon=1e-3).x_backprop""",
}


@pytest.mark.parametrize("op", sorted(GRADIENT_SHAPED_CALLS))
@pytest.mark.parametrize("onednn", ["0", "1"])
def test_few_page_faults_per_call_with_or_without_onednn(op, onednn):
    """x_backprop of 12.8 MB, dy held by the caller: under 5 % of its pages fresh per call."""
    result = run_python(FAULTS_PER_CALL.format(shape=(8, 112, 112, 64),
                                               call=GRADIENT_SHAPED_CALLS[op]),
                        TF_ENABLE_ONEDNN_OPTS=onednn)
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["same"]
    assert measured["faults_per_call"] < 0.05 * measured["pages"], measured


@pytest.mark.parametrize("setting", ["0", "64", "not-a-number"])
def test_retained_memory_setting(setting):
    """TF_FBN_OPS_RETAINED_MIB: 0 turns the retained blocks off (TensorFlow's allocator), a
    number caps them, anything else keeps the default and says so."""
    result = run_python(f"""
        import json, sys
        import numpy as np
        import tensorflow as tf
        import tf_fbn_ops
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from test_output_memory import GRAD_NAME, _inputs, _session_run
        dy = tf.constant(np.arange(8 * 56 * 56 * 64, dtype=np.float32).reshape(8, 56, 56, 64))
        outputs = [tf_fbn_ops.fused_batch_norm_grad_v3(
            y_backprop=dy * 1e-6, x=dy, scale=tf.ones([64]), reserve_space_1=tf.zeros([64]),
            reserve_space_2=tf.ones([64]), reserve_space_3=tf.zeros([0]),
            is_training=True).x_backprop.numpy() for _ in range(3)]
        assert all(np.array_equal(o, outputs[0]) for o in outputs)
        _, allocations = _session_run("NHWC", True, tf.float32, False,
                                      _inputs("NHWC", tf.float32))
        print(json.dumps({{"allocator": allocations[GRAD_NAME][0]}}))
        """, TF_FBN_OPS_RETAINED_MIB=setting, TF_CPP_MIN_LOG_LEVEL="1")
    assert result.returncode == 0, result.stderr
    allocator = json.loads(result.stdout.strip().splitlines()[-1])["allocator"]
    assert (allocator == RETAINED_ALLOCATOR) == (setting != "0"), allocator
    warned = "TF_FBN_OPS_RETAINED_MIB" in result.stderr
    assert warned == (setting == "not-a-number"), result.stderr