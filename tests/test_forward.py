"""The forward ops (FbnFusedBatchNorm, V2, V3) against TensorFlow's FusedBatchNorm* and a float64
oracle: op definitions, static shapes, outputs, reserve spaces both gradients read, errors,
empty input, gradients through them, and the same bits for any thread count (a Keras training
step too, in TensorFlow's default build).

TensorFlow's kernel here is the stock one (conftest.py turns oneDNN off, as for the gradient
tests); the thread-count test runs its processes with oneDNN on, TensorFlow's default.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

import tf_fbn_ops
from forward_cases import (BAD, DTYPES, EPSILON, FORMATS, VERSIONS, channel_axis, forward_cases,
                           half_ulp, make_inputs, max_error, oracle, outcome, tf_op)
from fresh_process import run_python


@pytest.mark.parametrize("version", VERSIONS)
def test_op_def_equals_tensorflow(version: str) -> None:
    tf_fbn_ops.load_library()
    ours, theirs = (op_def_registry.get(name) for name in VERSIONS[version][:2])
    copy = type(ours)()
    copy.CopyFrom(ours)
    copy.name = theirs.name
    assert copy == theirs


@pytest.mark.parametrize("version,data_format,dtype,mode", forward_cases())
@pytest.mark.parametrize("x_offset", [0.0, 300.0], ids=["centred", "offset300"])
def test_outputs_at_least_as_accurate_as_tensorflow(version, data_format, dtype, mode,
                                                     x_offset) -> None:
    dtype = DTYPES[dtype]
    x, scale, offset, mean, variance = make_inputs(FORMATS[data_format], data_format, dtype,
                                                   x_offset)
    is_training = mode != "infer"
    factor = 0.3 if mode == "train_factor" else 1.0
    kwargs = dict(x=x, scale=scale, offset=offset, mean=mean, variance=variance,
                  epsilon=EPSILON, exponential_avg_factor=factor, data_format=data_format,
                  is_training=is_training)
    ours = VERSIONS[version][2](**kwargs)
    theirs = tf_op(version)(**kwargs)
    want = oracle(x, scale, offset, mean, variance, data_format, is_training, factor)
    assert ours.y.dtype == dtype and ours.y.shape == x.shape
    for k in range(3 if not is_training else 5):
        out_dtype = dtype if k == 0 else tf.float32
        ours_error = max_error(ours[k], want[k])
        tf_error = max_error(theirs[k], want[k])
        bound = max(tf_error, half_ulp(out_dtype, float(np.max(np.abs(want[k])))))
        assert ours_error <= bound * (1 + 1e-9), (k, ours_error, tf_error)
    if not is_training:  # the given statistics, where TensorFlow's CPU kernel leaves garbage
        np.testing.assert_array_equal(ours.reserve_space_1.numpy(), mean.numpy())
        np.testing.assert_array_equal(ours.reserve_space_2.numpy(), variance.numpy())
    if version == "V3":
        assert ours.reserve_space_3.shape == [] and float(ours.reserve_space_3) == 0.0


@pytest.mark.parametrize("version", ["V2", "V3"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_tensorflow_gradient_reads_our_reserve_spaces(version, data_format) -> None:
    """TensorFlow's own gradient op given our forward's reserve spaces and given its own: the
    same answer (ours saves the mean and biased variance, TensorFlow's CPU contract)."""
    x, scale, offset, mean, variance = make_inputs(FORMATS[data_format], data_format,
                                                   tf.float32, seed=3)
    dy = tf.constant(np.random.default_rng(4).standard_normal(x.shape), tf.float32)
    kwargs = dict(x=x, scale=scale, offset=offset, mean=mean, variance=variance,
                  epsilon=EPSILON, data_format=data_format)
    grads = []
    for out in (VERSIONS[version][2](**kwargs), tf_op(version)(**kwargs)):
        grad_op = getattr(tf.raw_ops, "FusedBatchNormGrad" + version)
        extra = {"reserve_space_3": out.reserve_space_3} if version == "V3" else {}
        grads.append(grad_op(y_backprop=dy, x=x, scale=scale, reserve_space_1=out.reserve_space_1,
                             reserve_space_2=out.reserve_space_2, epsilon=EPSILON,
                             data_format=data_format, **extra)[:3])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_gradient_through_the_forward_op(is_training, data_format) -> None:
    """tf.GradientTape through our forward: our gradient op, matching TensorFlow's pair."""
    x, scale, offset, mean, variance = make_inputs(FORMATS[data_format], data_format,
                                                   tf.float32, seed=5)
    w = tf.constant(np.random.default_rng(6).standard_normal(x.shape), tf.float32)
    kwargs = dict(mean=mean, variance=variance, epsilon=EPSILON, data_format=data_format,
                  is_training=is_training)
    results = []
    for forward in (tf_fbn_ops.fused_batch_norm_forward_v3, tf.raw_ops.FusedBatchNormV3):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y = forward(x=x, scale=scale, offset=offset, **kwargs)[0]
            loss = tf.reduce_sum(y * w)
        results.append(tape.gradient(loss, [x, scale, offset]))
    for a, b in zip(*results):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("version", VERSIONS)
def test_static_shapes_equal_tensorflow(version: str) -> None:
    data_format = "NCDHW" if version == "V3" else "NCHW"

    @tf.function(input_signature=[tf.TensorSpec([None, 3, None, 4, 5][:len(data_format)]),
                                  tf.TensorSpec([None]), tf.TensorSpec([3])])
    def shapes(x, scale, offset):
        empty = tf.constant([], tf.float32)
        kwargs = dict(x=x, scale=scale, offset=offset, mean=empty, variance=empty,
                      data_format=data_format)
        ours = VERSIONS[version][2](**kwargs)
        theirs = tf_op(version)(**kwargs)
        for a, b in zip(ours, theirs):
            assert a.shape.rank == b.shape.rank
            if a.shape.rank is not None:
                assert a.shape.as_list() == b.shape.as_list()
        return tf.constant(0)

    shapes.get_concrete_function()


@pytest.mark.parametrize("case", BAD)
def test_bad_inputs_fail_like_tensorflow(case: str) -> None:
    version, kwargs = BAD[case]
    ours = outcome(VERSIONS[version][2], kwargs)
    theirs = outcome(tf_op(version), kwargs)
    if theirs[0] == "ok":
        assert ours[0] == "ok", ours
        for a, b in zip(ours[1][:3], theirs[1][:3]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    else:
        assert ours == theirs


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("is_training", [True, False])
def test_empty_input(data_format, is_training) -> None:
    shape = list(FORMATS[data_format])
    shape[0] = 0
    x = tf.zeros(shape, tf.float32)
    c = shape[channel_axis(data_format)]
    stats = tf.ones([c], tf.float32)
    out = tf_fbn_ops.fused_batch_norm_forward_v3(
        x, stats, stats, stats, stats, data_format=data_format, is_training=is_training,
        exponential_avg_factor=0.5)
    assert out.y.shape == x.shape
    assert np.isnan(out.batch_mean.numpy()).all() and np.isnan(out.batch_variance.numpy()).all()
    assert (out.reserve_space_1.numpy() == 0).all() and (out.reserve_space_2.numpy() == 0).all()


def test_single_element_per_channel_gives_zero_variance() -> None:
    x = tf.constant([[[[1.0, 2.0, 3.0]]]])
    out = tf_fbn_ops.fused_batch_norm_forward_v3(x, tf.ones([3]), tf.zeros([3]),
                                                 tf.constant([]), tf.constant([]))
    theirs = tf.raw_ops.FusedBatchNormV3(x=x, scale=tf.ones([3]), offset=tf.zeros([3]),
                                         mean=tf.constant([]), variance=tf.constant([]))
    np.testing.assert_array_equal(out.batch_variance.numpy(), theirs.batch_variance.numpy())
    np.testing.assert_array_equal(out.y.numpy(), theirs.y.numpy())


def test_large_offset_keeps_the_variance() -> None:
    """x about 1e4 with std 1: our variance exact to a float rounding."""
    rng = np.random.default_rng(7)
    x64 = np.float32(1e4 + rng.standard_normal((64, 14, 14, 8)))
    out = tf_fbn_ops.fused_batch_norm_forward_v3(tf.constant(x64), tf.ones([8]), tf.zeros([8]),
                                                 tf.constant([]), tf.constant([]))
    exact = np.float64(x64).reshape(-1, 8).var(axis=0)
    np.testing.assert_allclose(out.reserve_space_2.numpy(), exact, rtol=2 ** -23)


@pytest.mark.parametrize("is_training", [True, False])
def test_vectorized_map_equals_a_loop(is_training) -> None:
    """tf.vectorized_map over the V3 forward (TensorFlow's own converter, as for its op)."""
    rng = np.random.default_rng(8)
    xs = tf.constant(rng.standard_normal((3, 2, 4, 4, 5)), tf.float32)
    scale, offset = tf.constant(rng.uniform(0.5, 2, 5), tf.float32), tf.zeros([5])
    mean, variance = tf.zeros([5]), tf.ones([5])

    def one(x):
        return tf_fbn_ops.fused_batch_norm_forward_v3(x, scale, offset, mean, variance,
                                                      is_training=is_training)[0]

    vectorized = tf.vectorized_map(one, xs, fallback_to_while_loop=False)
    looped = tf.stack([one(x) for x in xs])
    np.testing.assert_allclose(vectorized.numpy(), looped.numpy(), rtol=1e-6, atol=1e-6)


_THREADS_SCRIPT = """
import hashlib, numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads({threads})
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras, tf_fbn_ops
from tf_fbn_ops.keras import BatchNormalization
digest = hashlib.sha256()
rng = np.random.default_rng(0)
for shape, fmt in [((32, 28, 28, 128), "NHWC"), ((8, 64, 14, 14), "NCHW")]:
    x = tf.constant(rng.standard_normal(shape) * 2 + 1, tf.float32)
    out = tf_fbn_ops.fused_batch_norm_forward_v3(x, tf.ones([shape[-1] if fmt == "NHWC" else
        shape[1]]), tf.zeros([shape[-1] if fmt == "NHWC" else shape[1]]), tf.constant([]),
        tf.constant([]), data_format=fmt)
    for t in out[:5]:
        digest.update(t.numpy().tobytes())
layer = BatchNormalization()
x = tf.constant(rng.standard_normal((32, 28, 28, 128)), tf.float32)
w = tf.constant(rng.standard_normal((32, 28, 28, 128)), tf.float32)
layer.build(x.shape)
opt = keras.optimizers.SGD(0.1)
for _ in range(2):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x, training=True) * w)
    grads = tape.gradient(loss, layer.trainable_variables)
    opt.apply_gradients(zip(grads, layer.trainable_variables))
for v in layer.weights:
    digest.update(v.numpy().tobytes())
# Keras' default fit: no jit_compile on a CPU-only machine ("auto"), our layer's forward.
model = keras.Sequential([keras.Input((8, 8, 16)), BatchNormalization(),
                          keras.layers.GlobalAveragePooling2D()])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
assert not model.jit_compile
data = rng.standard_normal((64, 8, 8, 16)).astype("float32") * 3 + 2
target = rng.standard_normal((64, 16)).astype("float32")
model.fit(data, target, batch_size=16, epochs=2, shuffle=False, verbose=0)
for v in model.weights:
    digest.update(v.numpy().tobytes())
print(digest.hexdigest())
"""


def test_forward_and_keras_training_step_same_bits_for_1_2_3_threads() -> None:
    """TensorFlow's default build (oneDNN on), where its own forward changes with the threads:
    the forward op, a tape step of the layer, and Keras' default fit of a model of it."""
    digests = {}
    for threads in (1, 2, 3):
        result = run_python(_THREADS_SCRIPT.format(threads=threads), TF_ENABLE_ONEDNN_OPTS="1")
        assert result.returncode == 0, result.stderr[-3000:]
        digests[threads] = result.stdout.strip().splitlines()[-1]
    assert len(digests[1]) == 64
    assert digests[1] == digests[2] == digests[3], digests
