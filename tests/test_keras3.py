"""tf_fbn_ops.keras.BatchNormalization against Keras 3's own layer.

Every comparison builds the same model twice, once with each class, from the same seed and
data. Fused paths (4-D/5-D, channel axis last or 1) compute in a different order than Keras'
separate ops, so they agree to float32 rounding (TOLERANCE); fallback paths run Keras' own code
and must agree exactly. Each fused case also checks that the shim's op is in the traced step.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import config as tf_config

keras = pytest.importorskip("keras", minversion="3",
                            reason="Keras 3 is the `keras` that tensorflow-cpu installs")

import tf_fbn_ops.keras as fbn_keras  # noqa: E402
from fresh_process import run_python  # noqa: E402
from keras3_models import data_for, float64_model, small_cnn  # noqa: E402
from tf_fbn_ops import _loader  # noqa: E402

# Float32 rounding of two summation orders, compounded over a few training steps.
TOLERANCE = dict(rtol=1e-4, atol=1e-5)
SHIM_OP = "FbnFusedBatchNormGradV3"
LAYERS = {"keras": keras.layers.BatchNormalization, "shim": fbn_keras.BatchNormalization}


def graph_op_types(concrete_function) -> set[str]:
    graph_def = concrete_function.graph.as_graph_def()
    types = {n.op for n in graph_def.node}
    return types | {n.op for f in graph_def.library.function for n in f.node_def}


@contextlib.contextmanager
def op_determinism():
    """TensorFlow's op determinism for the block (process-wide while it lasts)."""
    was_on = tf_config.is_op_determinism_enabled()
    tf_config.enable_op_determinism()
    try:
        yield
    finally:
        if not was_on:
            tf_config.disable_op_determinism()


def compile_sgd(model, jit_compile) -> None:
    model.compile(keras.optimizers.SGD(0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)


def train_step_ops(model, x, y, jit_compile: bool) -> set[str]:
    """Op types of the model's training step, traced as fit traces it."""
    step = tf.function(model.train_step, jit_compile=jit_compile)
    return graph_op_types(step.get_concrete_function((tf.constant(x), tf.constant(y))))


def assert_weights_close(theirs, ours, **tolerance) -> None:
    assert [w.name for w in theirs.weights] == [w.name for w in ours.weights]
    for a, b in zip(theirs.get_weights(), ours.get_weights()):
        np.testing.assert_allclose(b, a, **(tolerance or TOLERANCE))


def assert_weights_as_accurate(theirs, ours, float64) -> None:
    """Per weight tensor, our largest distance from the float64 model's no more than twice Keras'
    layer's, give or take four float32 roundings of the tensor's largest value: two float32
    implementations of the same order of error (both are noise where Adam meets a near-zero
    gradient), where a wrong gradient would be off by whole updates."""
    assert [w.name for w in theirs.weights] == [w.name for w in ours.weights]
    for w, a, b, r in zip(ours.weights, theirs.get_weights(), ours.get_weights(),
                          float64.get_weights()):
        theirs_off, ours_off = np.max(np.abs(a - r)), np.max(np.abs(b - r))
        slack = 4 * np.finfo(np.float32).eps * np.max(np.abs(r))
        assert ours_off <= 2 * theirs_off + slack, (w.path, ours_off, theirs_off, slack)


# ----------------------------------------------------------------------------------------------
# The layer's own contract: constructor, weights, config.

def test_same_constructor_weights_and_config():
    theirs = keras.layers.BatchNormalization(axis=1, momentum=0.8, epsilon=2e-3, center=False,
                                             gamma_regularizer="l2", name="bn")
    ours = fbn_keras.BatchNormalization(axis=1, momentum=0.8, epsilon=2e-3, center=False,
                                        gamma_regularizer="l2", name="bn")
    for layer in (theirs, ours):
        layer.build((2, 4, 5, 5))
    assert isinstance(ours, keras.layers.BatchNormalization)
    assert ours.get_config() == theirs.get_config()
    assert [(w.name, w.shape, w.dtype, w.trainable) for w in ours.weights] == \
           [(w.name, w.shape, w.dtype, w.trainable) for w in theirs.weights]
    clone = fbn_keras.BatchNormalization.from_config(ours.get_config())
    assert type(clone) is fbn_keras.BatchNormalization
    assert clone.get_config() == ours.get_config()
    assert keras.saving.get_registered_name(fbn_keras.BatchNormalization) == \
        "tf_fbn_ops>BatchNormalization"


def test_forward_choice_is_saved_and_checked():
    kept = fbn_keras.BatchNormalization(forward="tensorflow")
    assert kept.get_config()["forward"] == "tensorflow"
    assert fbn_keras.BatchNormalization.from_config(kept.get_config()).forward == "tensorflow"
    assert "forward" not in fbn_keras.BatchNormalization().get_config()
    with pytest.raises(ValueError, match="forward must be one of"):
        fbn_keras.BatchNormalization(forward="cudnn")


@pytest.mark.parametrize("forward", ["auto", "tensorflow"])
def test_training_outputs_with_either_forward(forward):
    """The layer's training output and moving statistics with the library's forward (the CPU
    default) and with TensorFlow's, against Keras' own layer."""
    x = tf.constant(np.random.default_rng(2).standard_normal((4, 5, 6, 3)) * 2 + 1, tf.float32)
    theirs = keras.layers.BatchNormalization()
    ours = fbn_keras.BatchNormalization(forward=forward)
    outputs = [layer(x, training=True) for layer in (ours, theirs)]
    np.testing.assert_allclose(outputs[0].numpy(), outputs[1].numpy(), rtol=1e-5, atol=1e-5)
    for a, b in zip(ours.weights, theirs.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, axis, data_format", [
    ((2, 3, 4, 5), -1, "NHWC"), ((2, 3, 4, 5), 3, "NHWC"), ((2, 3, 4, 5), 1, "NCHW"),
    ((2, 3, 4, 5), -3, "NCHW"), ((2, 3, 4, 5, 6), -1, "NDHWC"), ((2, 3, 4, 5, 6), 1, "NCDHW"),
    ((2, 3, 4, 5), 2, None), ((2, 3), -1, None), ((2, 3, 4), -1, None),
    ((2, 3, 4, 5, 6, 7), -1, None)])
def test_fused_layouts(shape, axis, data_format):
    layer = fbn_keras.BatchNormalization(axis=axis)
    assert layer.fused_data_format(tf.zeros(shape)) == data_format


@pytest.mark.parametrize("setting", [
    dict(renorm=True), dict(epsilon=1e-6), dict(epsilon=1e-5)])
def test_fallback_settings(setting):
    assert fbn_keras.BatchNormalization(**setting).fused_data_format(tf.zeros([2, 3, 3, 4])) \
        is None


def test_synchronized_fuses_except_under_xla_in_a_strategy():
    """synchronized=True runs the synchronized ops (tests/test_sync_batch_norm.py), under XLA
    too outside a strategy (no collectives); under XLA inside one, the layer is Keras' own."""
    layer = fbn_keras.BatchNormalization(synchronized=True)
    assert layer.fused_data_format(tf.zeros([2, 3, 3, 4])) == "NHWC"

    @tf.function(jit_compile=True)
    def compiled(x):
        return tf.constant(layer.fused_data_format(x) is None)

    assert not bool(compiled(tf.zeros([2, 3, 3, 4])))
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        assert bool(compiled(tf.zeros([2, 3, 4, 4])))


def test_fallback_dtypes_and_masks():
    layer = fbn_keras.BatchNormalization()
    assert layer.fused_data_format(tf.zeros([2, 3, 3, 4], tf.float64)) is None
    assert layer.fused_data_format(tf.zeros([2, 3, 3, 4]), mask=tf.ones([2, 3, 3], bool)) \
        is None
    for dtype in (tf.float16, tf.bfloat16, tf.float32):
        assert layer.fused_data_format(tf.zeros([2, 3, 3, 4], dtype)) == "NHWC"


# ----------------------------------------------------------------------------------------------
# Layer outputs, gradients and moving statistics against Keras' layer.

LAYOUT_CASES = [((4, 5, 6, 3), -1), ((4, 3, 5, 6), 1), ((2, 3, 4, 5, 3), -1),
                ((2, 3, 4, 5, 6), 1), ((6, 3), -1), ((2, 3, 4, 5), 2)]


def run_layer(layer_class, x, dy, training, **layer_args):
    """(outputs, [dx, dgamma, dbeta, dmoving_mean, dmoving_variance], weights after the call)."""
    keras.utils.set_random_seed(5)
    layer = layer_class(**layer_args)
    layer.build(x.shape)
    rng = np.random.default_rng(9)
    for weight in layer.weights:  # non-trivial parameters and statistics
        weight.assign(rng.uniform(0.5, 1.5, weight.shape).astype(weight.dtype))
    statistics = [layer.moving_mean.value, layer.moving_variance.value]
    with tf.GradientTape() as tape:
        tape.watch(x)
        tape.watch(statistics)
        y = layer(x, training=training)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * dy)
    sources = [x] + [w.value for w in layer.trainable_weights] + statistics
    return y, tape.gradient(loss, sources), [w.numpy() for w in layer.weights]


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape, axis", LAYOUT_CASES)
@pytest.mark.parametrize("affine", [dict(), dict(center=False, scale=False)])
def test_outputs_gradients_and_statistics(shape, axis, training, affine):
    rng = np.random.default_rng(1)
    x = tf.constant((rng.standard_normal(shape) * 3 + 1).astype(np.float32))
    dy = tf.constant(rng.standard_normal(shape).astype(np.float32))
    fused = fbn_keras.BatchNormalization(axis=axis).fused_data_format(x) is not None
    tolerance = TOLERANCE if fused else dict(rtol=0, atol=0)
    theirs = run_layer(LAYERS["keras"], x, dy, training, axis=axis, **affine)
    ours = run_layer(LAYERS["shim"], x, dy, training, axis=axis, **affine)
    if training:
        np.testing.assert_allclose(ours[0], theirs[0], **tolerance)
    else:  # inference runs Keras' own forward arithmetic
        np.testing.assert_array_equal(ours[0], theirs[0])
    assert len(ours[1]) == len(theirs[1])
    for a, b in zip(theirs[1], ours[1]):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(b, a, **tolerance)
    for a, b in zip(theirs[2], ours[2]):  # moving statistics updated (or not) alike
        np.testing.assert_allclose(b, a, **tolerance)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_inputs(dtype):
    rng = np.random.default_rng(2)
    x = tf.cast(rng.standard_normal((4, 5, 6, 3)) * 2, dtype)
    dy = tf.constant(rng.standard_normal((4, 5, 6, 3)).astype(np.float32))
    for training in (True, False):
        theirs = run_layer(LAYERS["keras"], x, dy, training, dtype=dtype)
        ours = run_layer(LAYERS["shim"], x, dy, training, dtype=dtype)
        assert ours[0].dtype == theirs[0].dtype == dtype
        ulp = 2.0 ** -10 if dtype == "float16" else 2.0 ** -7
        np.testing.assert_allclose(tf.cast(ours[0], tf.float32), tf.cast(theirs[0], tf.float32),
                                   rtol=2 * ulp, atol=2 * ulp)
        for a, b in zip(theirs[1], ours[1]):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_allclose(tf.cast(b, tf.float32), tf.cast(a, tf.float32),
                                           rtol=4 * ulp, atol=4 * ulp)
        for a, b in zip(theirs[2], ours[2]):
            np.testing.assert_allclose(b, a, **TOLERANCE)


def test_training_none_is_inference_and_frozen_layer_runs_inference():
    rng = np.random.default_rng(4)
    x = tf.constant(rng.standard_normal((4, 5, 6, 3)).astype(np.float32))
    dy = tf.constant(rng.standard_normal((4, 5, 6, 3)).astype(np.float32))
    inference = run_layer(LAYERS["shim"], x, dy, training=False)
    np.testing.assert_array_equal(run_layer(LAYERS["shim"], x, dy, training=None)[0],
                                  inference[0])
    frozen = run_layer(LAYERS["shim"], x, dy, training=True, trainable=False)
    np.testing.assert_array_equal(frozen[0], inference[0])
    for a, b in zip(inference[2], frozen[2]):
        np.testing.assert_array_equal(b, a)  # moving statistics untouched
    keras_frozen = run_layer(LAYERS["keras"], x, dy, training=True, trainable=False)
    np.testing.assert_array_equal(frozen[0], keras_frozen[0])
    np.testing.assert_allclose(frozen[1][0], keras_frozen[1][0], **TOLERANCE)


def test_frozen_batch_norm_fine_tuning_uses_the_shim():
    """Transfer learning: frozen batch norms (inference mode) with trainable layers around."""
    models = {name: small_cnn(layer, "channels_first") for name, layer in LAYERS.items()}
    x, y = data_for(models["keras"])
    for model in models.values():
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False
        compile_sgd(model, jit_compile=False)
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert_weights_close(models["keras"], models["shim"])
    assert SHIM_OP in train_step_ops(models["shim"], x[:8], y[:8], jit_compile=False)


@pytest.mark.parametrize("setting", [dict(renorm=True, renorm_clipping={"rmax": 2.0}),
                                     dict(epsilon=1e-6)])
def test_fallback_equals_keras_exactly(setting):
    rng = np.random.default_rng(6)
    x = tf.constant(rng.standard_normal((4, 5, 6, 3)).astype(np.float32))
    dy = tf.constant(rng.standard_normal((4, 5, 6, 3)).astype(np.float32))
    theirs = run_layer(LAYERS["keras"], x, dy, True, **setting)
    ours = run_layer(LAYERS["shim"], x, dy, True, **setting)
    np.testing.assert_array_equal(ours[0], theirs[0])
    for a, b in zip(theirs[1] + theirs[2], ours[1] + ours[2]):
        np.testing.assert_array_equal(b, a)


def test_mask_falls_back_to_keras():
    rng = np.random.default_rng(8)
    x = tf.constant(rng.standard_normal((4, 5, 6, 3)).astype(np.float32))
    mask = tf.constant(rng.uniform(size=(4, 5, 6)) > 0.3)
    outputs = []
    for layer_class in LAYERS.values():
        layer = layer_class()
        outputs.append((layer(x, training=True, mask=mask), layer.moving_variance.numpy()))
    np.testing.assert_array_equal(outputs[1][0], outputs[0][0])
    np.testing.assert_array_equal(outputs[1][1], outputs[0][1])


# ----------------------------------------------------------------------------------------------
# Training: model.fit for each jit_compile setting, custom loops, mixed precision.

@pytest.mark.parametrize("jit_compile", [False, "auto", True])
@pytest.mark.parametrize("data_format, rank", [("channels_last", 4), ("channels_first", 4),
                                               ("channels_last", 5), ("channels_first", 5)])
def test_fit_matches_keras(jit_compile, data_format, rank):
    models = {name: small_cnn(layer, data_format, rank) for name, layer in LAYERS.items()}
    x, y = data_for(models["keras"])
    histories = {}
    for name, model in models.items():
        compile_sgd(model, jit_compile)
        histories[name] = model.fit(x, y, batch_size=8, epochs=2, shuffle=False,
                                    verbose=0).history["loss"]
    np.testing.assert_allclose(histories["shim"], histories["keras"], **TOLERANCE)
    assert_weights_close(models["keras"], models["shim"])
    assert models["shim"].jit_compile == models["keras"].jit_compile
    jit = models["shim"].jit_compile
    # Under XLA the layer is fused only where the library has its lowerings (else Keras' code).
    fused = not jit or _loader.xla_missing_reason() is None
    assert (SHIM_OP in train_step_ops(models["shim"], x[:8], y[:8], jit)) == fused
    assert SHIM_OP not in train_step_ops(models["keras"], x[:8], y[:8], jit)


def test_custom_training_loop_matches_keras():
    """Adam divides each update by the gradient's running magnitude, so a weight whose gradient
    is near zero moves by a full step either way: the two layers' float32 roundings can part
    such a weight by far more than a rounding (on an AMD EPYC: 3.9e-5 in the second kernel,
    with Keras' layer 2.9e-5 from the float64 model and ours 1.0e-5). The losses must match;
    the weights are judged against the float64 model (assert_weights_as_accurate)."""
    models = {name: small_cnn(layer) for name, layer in LAYERS.items()}
    models["float64"] = float64_model()
    results = {}
    for name, model in models.items():
        x, y = data_for(model)
        if name == "float64":
            x = x.astype(np.float64)
        optimizer = keras.optimizers.Adam(0.01)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def step(images, labels, model=model, optimizer=optimizer, loss_fn=loss_fn):
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model(images, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        losses = [float(step(x[i:i + 8], y[i:i + 8])) for i in range(0, 32, 8)]
        ops = graph_op_types(step.get_concrete_function(x[:8], y[:8]))
        results[name] = (losses, model, ops)
    np.testing.assert_allclose(results["shim"][0], results["keras"][0], **TOLERANCE)
    assert_weights_as_accurate(results["keras"][1], results["shim"][1], results["float64"][1])
    assert SHIM_OP in results["shim"][2] and SHIM_OP not in results["keras"][2]


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_fit(policy):
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        models = {name: small_cnn(layer) for name, layer in LAYERS.items()}
        x, y = data_for(models["keras"])
        losses = {}
        for name, model in models.items():
            compile_sgd(model, jit_compile=False)
            losses[name] = model.fit(x, y, batch_size=8, epochs=1, shuffle=False,
                                     verbose=0).history["loss"]
            bn = model.layers[1]
            assert [w.dtype for w in bn.weights] == ["float32"] * 4
            assert bn(tf.zeros([2, 6, 6, 5], bn.compute_dtype)).dtype == bn.compute_dtype
        # 16-bit activations: the two orders of summation round differently at 2^-8 (bfloat16)
        # or 2^-11 (float16); the losses after 4 steps stay within a few of those.
        tolerance = dict(rtol=2e-2, atol=2e-2) if policy == "mixed_bfloat16" \
            else dict(rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(losses["shim"], losses["keras"], **tolerance)
        for a, b in zip(models["keras"].get_weights(), models["shim"].get_weights()):
            np.testing.assert_allclose(b, a, **tolerance)
        assert SHIM_OP in train_step_ops(models["shim"], x[:8], y[:8], jit_compile=False)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


def test_xla_without_lowerings_falls_back(monkeypatch):
    """A library built without XLA lowerings (TF 2.19) still trains under jit_compile=True."""
    monkeypatch.setattr(_loader, "xla_missing_reason", lambda: "not built (test)")
    model, reference = small_cnn(LAYERS["shim"]), small_cnn(LAYERS["keras"])
    x, y = data_for(model)
    for m in (model, reference):
        compile_sgd(m, jit_compile=True)
    assert SHIM_OP not in train_step_ops(model, x[:8], y[:8], jit_compile=True)
    assert SHIM_OP in train_step_ops(model, x[:8], y[:8], jit_compile=False)
    for m in (model, reference):
        m.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert_weights_close(reference, model)


# ----------------------------------------------------------------------------------------------
# Saving, replacing layers in built models, distribution.

def test_save_and_load_in_a_fresh_process(tmp_path):
    """The saved model, loaded in another process, predicts the same bits, by `predict` and
    called eagerly. TensorFlow's op determinism is on in both processes around the predictions
    (it makes cuDNN's convolutions choose among deterministic algorithms; on the CPU it changes
    nothing): the predictions then depend on the saved layers and weights, which are ours to
    get right, and not on a GPU library's per-process choices. On an H200 (2026-11-26) without
    it, `predict` parted by 1.5e-7 across the processes; which algorithm or rewrite parted them
    is for the next GPU run to show (the message gives each way's largest difference)."""
    model = small_cnn(LAYERS["shim"])
    x, y = data_for(model)
    compile_sgd(model, jit_compile=False)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    np.save(tmp_path / "x.npy", x)
    with op_determinism():
        np.save(tmp_path / "predict.npy", model.predict(x, verbose=0))
        np.save(tmp_path / "eager.npy", model(x, training=False).numpy())
    result = run_python(f"""
        import json
        import numpy as np
        import keras
        import tensorflow as tf
        import tf_fbn_ops.keras
        tf.config.experimental.enable_op_determinism()
        model = keras.models.load_model({str(path)!r})
        x = np.load({str(tmp_path / "x.npy")!r})
        got = {{"predict": model.predict(x, verbose=0), "eager": model(x, training=False).numpy()}}
        print(json.dumps({{
            "classes": [type(l).__module__ + "." + type(l).__name__ for l in model.layers],
            "differences": {{way: float(np.max(np.abs(
                value - np.load({str(tmp_path)!r} + f"/{{way}}.npy")))) for way, value in got.items()}},
            "same": {{way: bool(np.array_equal(value, np.load({str(tmp_path)!r} + f"/{{way}}.npy")))
                      for way, value in got.items()}}}}))
        """)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["classes"].count("tf_fbn_ops.keras.layer.BatchNormalization") == 2
    assert loaded["same"] == {"predict": True, "eager": True}, loaded["differences"]


def test_load_without_import_names_the_class(tmp_path):
    model = small_cnn(LAYERS["shim"])
    model.save(tmp_path / "model.keras")
    result = run_python(f"""
        import keras
        keras.models.load_model({str(tmp_path / "model.keras")!r})
        """)
    assert result.returncode != 0
    assert "tf_fbn_ops>BatchNormalization" in result.stderr


def nested_functional_model():
    """A functional model holding a Sequential block, channels-first BN and a BN subclass."""
    keras.utils.set_random_seed(3)

    class CustomBatchNorm(keras.layers.BatchNormalization):
        pass

    block = keras.Sequential([keras.Input((6, 6, 4)), keras.layers.Conv2D(4, 3, padding="same"),
                              keras.layers.BatchNormalization()], name="block")
    inputs = keras.Input((6, 6, 3))
    hidden = keras.layers.Conv2D(4, 1)(inputs)
    hidden = keras.layers.BatchNormalization(momentum=0.5)(hidden)
    hidden = block(hidden)
    side = keras.layers.Permute((3, 1, 2))(hidden)
    side = keras.layers.BatchNormalization(axis=1)(side)
    hidden = keras.layers.Add()([hidden, keras.layers.Permute((2, 3, 1))(side)])
    hidden = CustomBatchNorm()(hidden)
    hidden = keras.layers.Flatten()(hidden)
    outputs = keras.layers.BatchNormalization()(keras.layers.Dense(5)(hidden))
    return keras.Model(inputs, outputs)


def test_replace_batch_norm():
    model = nested_functional_model()
    x, y = data_for(model)
    compile_sgd(model, jit_compile=False)
    model.fit(x, y % 5, batch_size=8, epochs=1, verbose=0)  # moving statistics away from 0/1
    copy = fbn_keras.replace_batch_norm(model)

    def batch_norms(m):
        return [l for l in m._flatten_layers() if isinstance(l, keras.layers.BatchNormalization)]

    kinds = [type(l).__name__ for l in batch_norms(copy)]
    assert kinds.count("BatchNormalization") == 4 and kinds.count("CustomBatchNorm") == 1
    replaced = [l for l in batch_norms(copy) if type(l) is fbn_keras.BatchNormalization]
    assert len(replaced) == 4  # all of Keras' own, the nested block's included
    assert all(type(l) is not fbn_keras.BatchNormalization for l in batch_norms(model))
    for a, b in zip(model.weights, copy.weights):
        np.testing.assert_array_equal(b.numpy(), a.numpy())
    np.testing.assert_array_equal(copy.predict(x, verbose=0), model.predict(x, verbose=0))
    with tf.GradientTape(persistent=True) as tape:
        losses = [tf.reduce_sum(m(x, training=True) ** 2) for m in (model, copy)]
    for a, b in zip(tape.gradient(losses[0], model.trainable_weights),
                    tape.gradient(losses[1], copy.trainable_weights)):
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-4)


def test_replace_batch_norm_sequential_matches_after_training():
    model = small_cnn(LAYERS["keras"])
    x, y = data_for(model)
    copy = fbn_keras.replace_batch_norm(model)
    assert [type(l) for l in copy.layers if isinstance(l, keras.layers.BatchNormalization)] == \
        [fbn_keras.BatchNormalization] * 2
    for m in (model, copy):
        compile_sgd(m, jit_compile=False)
        m.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert_weights_close(model, copy)


def test_replace_batch_norm_errors():
    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.bn = keras.layers.BatchNormalization()

        def call(self, x):
            return self.bn(x)

    subclassed = Subclassed()
    subclassed(tf.zeros([1, 2, 2, 3]))
    with pytest.raises(ValueError, match="subclassed model"):
        fbn_keras.replace_batch_norm(subclassed)
    with pytest.raises(ValueError, match="built model"):
        fbn_keras.replace_batch_norm(keras.Sequential([keras.layers.BatchNormalization()]))
    with pytest.raises(TypeError, match="keras.Model"):
        fbn_keras.replace_batch_norm(keras.layers.BatchNormalization())


MIRRORED_TRAINING = """
    import json
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import tf_fbn_ops.keras as fbn_keras
    from tf_fbn_ops import batch_norm

    calls = [0]
    shim_gradient = batch_norm.forward_op_gradient
    def counting_gradient(*args, **kwargs):
        calls[0] += 1
        return shim_gradient(*args, **kwargs)
    batch_norm.forward_op_gradient = counting_gradient

    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6, 6, 3)).astype(np.float32)
    y = rng.integers(0, 3, 32)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    results = {}
    for name, layer in (("keras", keras.layers.BatchNormalization),
                        ("shim", fbn_keras.BatchNormalization)):
        with strategy.scope():
            keras.utils.set_random_seed(7)
            model = keras.Sequential([keras.Input((6, 6, 3)), keras.layers.Conv2D(4, 3),
                                      layer(), keras.layers.ReLU(),
                                      keras.layers.GlobalAveragePooling2D(),
                                      keras.layers.Dense(3)])
            model.compile(keras.optimizers.SGD(0.1),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        losses = model.fit(x, y, batch_size=8, epochs=2, shuffle=False,
                           verbose=0).history["loss"]
        results[name] = {"losses": losses, "weights": [w.tolist() for w in model.get_weights()]}
    results["shim_gradient_traces"] = calls[0]
    print(json.dumps(results))
    """


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_mirrored_strategy_on_two_cpus(onednn):
    result = run_python(MIRRORED_TRAINING, TF_ENABLE_ONEDNN_OPTS=onednn)
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results["shim_gradient_traces"] >= 2  # one per replica
    np.testing.assert_allclose(results["shim"]["losses"], results["keras"]["losses"],
                               **TOLERANCE)
    for a, b in zip(results["keras"]["weights"], results["shim"]["weights"]):
        np.testing.assert_allclose(b, a, **TOLERANCE)


def test_exported_serving_function(tmp_path):
    """The exported function is the model's inference graph: the same bits as the model traced
    into a graph here, and, on the CPU, as the model called eagerly. On a GPU the eager call
    parted from the exported graph by 1.5e-7 (H200, 2026-11-26, op determinism off), in a
    model whose batch norm in inference is Keras' own arithmetic: the candidates are
    TensorFlow's (the graph optimizer's layout or fusion of the convolutions, cuDNN's choice of
    algorithm), not yet told apart. So on a GPU the eager call must agree to float32 rounding,
    with op determinism on, and the message gives the difference for the next GPU run."""
    model = small_cnn(LAYERS["shim"])
    x, _ = data_for(model)
    model.export(str(tmp_path / "exported"), verbose=False)
    exported = tf.saved_model.load(str(tmp_path / "exported"))  # owns the variables
    with op_determinism():
        served = exported.serve(x).numpy()
        graph = tf.function(lambda images: model(images, training=False))(x).numpy()
        eager = model(x, training=False).numpy()
    np.testing.assert_array_equal(served, graph)
    if not tf.config.list_physical_devices("GPU"):
        np.testing.assert_array_equal(served, eager)
    else:
        magnitude = float(np.max(np.abs(eager)))
        assert np.max(np.abs(served - eager)) <= 4 * np.finfo(np.float32).eps * magnitude, (
            f"exported - eager: {np.max(np.abs(served - eager)):.3g}")


def test_keras_without_renorm_still_fuses():
    """Keras 3.12, the last release for Python 3.10, has no renorm attribute."""
    layer = LAYERS["shim"](axis=-1)
    x = tf.zeros((2, 3, 3, 4))
    layer.build(x.shape)
    if "renorm" in vars(layer):
        object.__delattr__(layer, "renorm")
    assert not hasattr(layer, "renorm")
    assert layer.fused_data_format(x) == "NHWC"
