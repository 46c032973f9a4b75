"""The shim where real training happens: fused_batch_norm, shim_gradients (also under Keras'
fused BatchNormalization), GraphDef rewriting, and SavedModels in fresh processes."""

from __future__ import annotations


import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import tf_fbn_ops
from fresh_process import run_python
from keras2_training import KERAS_TOLERANCE, train_keras2_cnn
from tf_fbn_ops import reference


def _bn_problem(data_format: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    shape = (4, 5, 6, 3) if data_format == "NHWC" else (4, 3, 5, 6)
    x = tf.constant(rng.standard_normal(shape) * 2 + 0.5, tf.float32)
    weights = tf.constant(rng.standard_normal(shape), tf.float32)
    scale = tf.constant([1.0, 2.0, 0.5])
    offset = tf.constant([0.1, -0.2, 0.3])
    return x, weights, scale, offset


def _grads(fn, x, weights, scale, offset, data_format, is_training):
    mean = None if is_training else tf.constant([0.4, 0.5, 0.6])
    variance = None if is_training else tf.constant([3.0, 4.0, 5.0])
    with tf.GradientTape() as tape:
        tape.watch([x, scale, offset])
        y = fn(x, scale, offset, mean, variance, data_format=data_format,
               is_training=is_training)[0]
        loss = tf.reduce_sum(y * weights)
    return tape.gradient(loss, [x, scale, offset])


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_fused_batch_norm_matches_tensorflow(data_format, is_training, mode) -> None:
    x, weights, scale, offset = _bn_problem(data_format)

    def run(fn):
        call = lambda: _grads(fn, x, weights, scale, offset, data_format, is_training)  # noqa
        return call() if mode == "eager" else tf.function(call)()

    ours = run(tf_fbn_ops.fused_batch_norm)
    theirs = run(tf.compat.v1.nn.fused_batch_norm)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    forward_theirs = tf.compat.v1.nn.fused_batch_norm(x, scale, offset, data_format=data_format)
    kept = tf_fbn_ops.fused_batch_norm(x, scale, offset, data_format=data_format,
                                       forward="tensorflow")
    for a, b in zip(kept, forward_theirs):
        np.testing.assert_array_equal(a, b)  # forward="tensorflow": TensorFlow's own kernel
    # By default (on the CPU) the library's forward op, whose own tests hold it to TensorFlow's
    # accuracy and better (test_forward.py).
    forward_ours = tf_fbn_ops.fused_batch_norm(x, scale, offset, data_format=data_format)
    op = tf_fbn_ops.fused_batch_norm_forward_v3(x, scale, offset, tf.constant([]),
                                                tf.constant([]), epsilon=0.001,
                                                data_format=data_format)
    for a, b in zip(forward_ours, op[:3]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(forward_ours, forward_theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_fused_batch_norm_inference_statistics_gradients(data_format) -> None:
    """TensorFlow's gradient has none for the population mean and variance; ours equals the
    unfused computation's (tf.nn.batch_normalization, in float64)."""
    x, weights, scale, offset = _bn_problem(data_format)
    mean, variance = tf.constant([0.4, 0.5, 0.6]), tf.constant([3.0, 4.0, 5.0])
    with tf.GradientTape() as tape:
        tape.watch([mean, variance])
        y = tf_fbn_ops.fused_batch_norm(x, scale, offset, mean, variance,
                                        data_format=data_format, is_training=False)[0]
        ours = tape.gradient(tf.reduce_sum(y * weights), [mean, variance])
    channel_shape = [1, 1, 1, 3] if data_format == "NHWC" else [1, 3, 1, 1]
    as_channels = lambda t: tf.reshape(tf.cast(t, tf.float64), channel_shape)  # noqa: E731
    mean64, variance64 = tf.cast(mean, tf.float64), tf.cast(variance, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch([mean64, variance64])
        y = tf.nn.batch_normalization(tf.cast(x, tf.float64), as_channels(mean64),
                                      as_channels(variance64), as_channels(offset),
                                      as_channels(scale), 0.001)
        expected = tape.gradient(tf.reduce_sum(y * tf.cast(weights, tf.float64)),
                                 [mean64, variance64])
    for a, b in zip(ours, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_fused_batch_norm_backward_is_the_shim() -> None:
    x, weights, scale, offset = _bn_problem("NHWC")
    f = tf.function(lambda: _grads(tf_fbn_ops.fused_batch_norm, x, weights, scale, offset,
                                   "NHWC", True))
    types = {op.type for op in f.get_concrete_function().graph.get_operations()}
    assert "FbnFusedBatchNormGradV3" in types and "FusedBatchNormGradV3" not in types


def test_fused_batch_norm_in_a_keras_layer() -> None:
    """A Keras 3 layer built on fused_batch_norm trains, with the shim in its backward pass."""

    class Norm(tf.keras.layers.Layer):
        def build(self, input_shape):
            c = input_shape[-1]
            self.gamma = self.add_weight(shape=(c,), initializer="ones")
            self.beta = self.add_weight(shape=(c,), initializer="zeros")

        def call(self, inputs):
            return tf_fbn_ops.fused_batch_norm(inputs, self.gamma, self.beta)[0]

    rng = np.random.default_rng(3)
    data = rng.standard_normal((32, 6, 6, 3)).astype(np.float32)
    labels = rng.integers(0, 2, 32)
    model = tf.keras.Sequential([tf.keras.Input((6, 6, 3)), tf.keras.layers.Conv2D(4, 3), Norm(),
                                 tf.keras.layers.GlobalAveragePooling2D(),
                                 tf.keras.layers.Dense(2)])
    model.compile(tf.keras.optimizers.SGD(0.1),
                  tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.layers[1].gamma.numpy().copy()
    history = model.fit(data, labels, batch_size=8, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert not np.array_equal(before, model.layers[1].gamma.numpy())


def test_nchw_inference_gradient_against_the_oracle() -> None:
    x, weights, scale, offset = _bn_problem("NCHW")
    dx, dscale, doffset = _grads(tf_fbn_ops.fused_batch_norm, x, weights, scale, offset, "NCHW",
                                 False)
    expected = reference.batch_norm_grad(weights.numpy(), x.numpy(), scale.numpy(),
                                         np.array([0.4, 0.5, 0.6], np.float32),
                                         np.array([3.0, 4.0, 5.0], np.float32), 1e-3, "NCHW",
                                         False)
    for got, want in zip((dx, dscale, doffset), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _builtin_fused_batch_norm(x, scale, offset, mean, variance, **kw):
    return tf.compat.v1.nn.fused_batch_norm(x, scale, offset, mean, variance, **kw)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("is_training", [True, False])
def test_shim_gradients_swaps_and_restores(data_format, is_training) -> None:
    x, weights, scale, offset = _bn_problem(data_format, seed=4)
    args = (x, weights, scale, offset, data_format, is_training)
    theirs = _grads(_builtin_fused_batch_norm, *args)
    assert not tf_fbn_ops.shim_gradients_enabled()
    with tf_fbn_ops.shim_gradients():
        assert tf_fbn_ops.shim_gradients_enabled()
        ours = _grads(_builtin_fused_batch_norm, *args)
        graph = tf.function(lambda: _grads(_builtin_fused_batch_norm, *args))
        types = {op.type for op in graph.get_concrete_function().graph.get_operations()}
    assert not tf_fbn_ops.shim_gradients_enabled()
    assert "FbnFusedBatchNormGradV3" in types and "FusedBatchNormGradV3" not in types
    after = tf.function(lambda: _grads(_builtin_fused_batch_norm, *args))
    types = {op.type for op in after.get_concrete_function().graph.get_operations()}
    assert "FusedBatchNormGradV3" in types and "FbnFusedBatchNormGradV3" not in types
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_shim_gradients_nests_and_enable_disable() -> None:
    tf_fbn_ops.enable_shim_gradients()
    try:
        with tf_fbn_ops.shim_gradients():
            with tf_fbn_ops.shim_gradients():
                pass
            assert tf_fbn_ops.shim_gradients_enabled()
        assert tf_fbn_ops.shim_gradients_enabled()  # enabled before the block: stays enabled
    finally:
        tf_fbn_ops.disable_shim_gradients()
    assert not tf_fbn_ops.shim_gradients_enabled()


@pytest.mark.parametrize("op_type", ["FusedBatchNorm", "FusedBatchNormV2"])
def test_shim_gradients_cover_v1_and_v2_forward_ops(op_type: str) -> None:
    x, weights, scale, offset = _bn_problem("NHWC", seed=5)
    forward = getattr(tf.raw_ops, op_type)

    def grads():
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y = forward(x=x, scale=scale, offset=offset, mean=tf.constant([]),
                        variance=tf.constant([]), epsilon=1e-3, is_training=True)[0]
            loss = tf.reduce_sum(y * weights)
        return tape.gradient(loss, [x, scale, offset])

    theirs = grads()
    with tf_fbn_ops.shim_gradients():
        ours = grads()
        types = {op.type for op in tf.function(grads).get_concrete_function().graph
                 .get_operations()}
    shim_op = "FbnFusedBatchNormGrad" + ("V2" if op_type.endswith("V2") else "")
    assert shim_op in types
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# Training parity under Keras' fused BatchNormalization (Keras 2: Keras 3 has no fused path).
def test_keras_fused_batch_norm_training_parity() -> None:
    tf_keras = pytest.importorskip("tf_keras", reason="tf_keras (Keras 2) not installed; "
                                                      "`make test` installs it")
    losses_tf, weights_tf, types_tf = train_keras2_cnn(tf_keras)
    with tf_fbn_ops.shim_gradients():
        losses_shim, weights_shim, types_shim = train_keras2_cnn(tf_keras)
    assert "FusedBatchNormGradV3" in types_tf and "FbnFusedBatchNormGradV3" not in types_tf
    assert "FbnFusedBatchNormGradV3" in types_shim and "FusedBatchNormGradV3" not in types_shim
    np.testing.assert_allclose(losses_shim, losses_tf, **KERAS_TOLERANCE)
    for a, b in zip(weights_shim, weights_tf):
        np.testing.assert_allclose(a, b, **KERAS_TOLERANCE)


def _tf1_training_graph() -> tuple[tf.Graph, list, dict]:
    """A TF1 graph with TensorFlow's own batch-norm gradient nodes, placed on the CPU."""
    graph = tf.Graph()
    rng = np.random.default_rng(6)
    feed = {"x:0": rng.standard_normal((4, 3, 5, 5)).astype(np.float32)}
    with graph.as_default(), tf.device("/device:CPU:0"):
        x = tf.compat.v1.placeholder(tf.float32, (4, 3, 5, 5), name="x")
        scale = tf.constant([1.0, 2.0, 0.5])
        offset = tf.zeros([3])
        y = tf.compat.v1.nn.fused_batch_norm(x, scale, offset, data_format="NCHW")[0]
        loss = tf.reduce_sum(y * tf.constant(rng.standard_normal((4, 3, 5, 5)), tf.float32))
        grads = tf.gradients(loss, [x, scale, offset])
    return graph, [g.name for g in grads], feed


def _run(graph_def: graph_pb2.GraphDef, fetches: list, feed: dict) -> list:
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as session:
        return session.run(fetches, feed)


def test_rewrite_graph_def_round_trip() -> None:
    graph, fetches, feed = _tf1_training_graph()
    original = graph.as_graph_def()
    shim = tf_fbn_ops.rewrite_graph_def(original, to="shim")
    builtin_nodes = [n for n in original.node if n.op == "FusedBatchNormGradV3"]
    shim_nodes = [n for n in shim.node if n.op == "FbnFusedBatchNormGradV3"]
    assert builtin_nodes and len(shim_nodes) == len(builtin_nodes)
    for a, b in zip(builtin_nodes, shim_nodes):
        assert (a.name, list(a.input), a.device, dict(a.attr)) == \
               (b.name, list(b.input), b.device, dict(b.attr))
        assert "CPU" in b.device
    assert original.node[0].op != "FbnFusedBatchNormGradV3"  # the input is left alone
    for got, want in zip(_run(shim, fetches, feed), _run(original, fetches, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert tf_fbn_ops.rewrite_graph_def(shim, to="builtin") == original


def test_rewrite_graph_def_reaches_the_function_library() -> None:
    graph_def = graph_pb2.GraphDef()
    function = graph_def.library.function.add()
    function.signature.name = "f"
    function.node_def.add(name="g", op="FusedBatchNormGradV2")
    graph_def.node.add(name="h", op="FusedBatchNormGrad")
    shim = tf_fbn_ops.rewrite_graph_def(graph_def)
    assert shim.node[0].op == "FbnFusedBatchNormGrad"
    assert shim.library.function[0].node_def[0].op == "FbnFusedBatchNormGradV2"
    with pytest.raises(ValueError, match='"shim" or "builtin"'):
        tf_fbn_ops.rewrite_graph_def(graph_def, to="cuda")


SAVE = """
    import numpy as np, tensorflow as tf, tf_fbn_ops
    class Grads(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2, 3, 4, 4], tf.float32)] * 2)
        def __call__(self, dy, x):
            return tf_fbn_ops.fused_batch_norm_grad_v3(
                dy, x, tf.constant([1.0, 2.0, 3.0]), tf.zeros([3]), tf.ones([3]), tf.zeros([0]),
                data_format="NCHW", is_training=False)[:3]
    rng = np.random.default_rng(0)
    dy, x = (rng.standard_normal((2, 3, 4, 4)).astype(np.float32) for _ in range(2))
    model = Grads()
    np.savez(r"{dir}/expected.npz", dy=dy, x=x, *[t.numpy() for t in model(dy, x)])
    tf.saved_model.save(model, r"{dir}/model")
"""
LOAD = """
    {imports}
    import numpy as np
    data = np.load(r"{dir}/expected.npz")
    model = tf.saved_model.load(r"{dir}/model")
    got = model(data["dy"], data["x"])
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g.numpy(), data["arr_%d" % i])
    print("LOADED AND RAN")
"""



def test_saved_model_reloads_in_a_fresh_process(tmp_path) -> None:
    saved = run_python(SAVE.format(dir=tmp_path))
    assert saved.returncode == 0, saved.stderr[-2000:]
    for imports in ("import tensorflow as tf\n    import tf_fbn_ops",
                    "import tf_fbn_ops\n    import tensorflow as tf"):
        loaded = run_python(LOAD.format(dir=tmp_path, imports=imports))
        assert "LOADED AND RAN" in loaded.stdout, loaded.stderr[-2000:]
    # Without the library TensorFlow cannot know the op; its error names it, and the README
    # says which package provides it.
    missing = run_python(LOAD.format(dir=tmp_path, imports="import tensorflow as tf"))
    assert missing.returncode != 0
    assert "Op type not registered 'FbnFusedBatchNormGradV3'" in missing.stderr
