"""The small Keras 3 model and data the layer tests train, its float64 twin, shared with
tools/keras_step_errors.py, which asks the same model where its gradients drift."""

from __future__ import annotations

import keras
import numpy as np


def small_cnn(layer_class, data_format: str = "channels_last", rank: int = 4):
    """Conv -> BN -> ReLU -> Conv -> BN -> pooling -> Dense, seeded identically per call.

    Channels-first batch norm sits between Permute layers: TensorFlow's CPU convolutions are
    channels-last only. The convolutions have no bias, as before any batch norm: its gradient
    is zero up to rounding, which an optimizer like Adam would amplify.
    """
    keras.utils.set_random_seed(7)
    conv = keras.layers.Conv2D if rank == 4 else keras.layers.Conv3D
    pool = (keras.layers.GlobalAveragePooling2D if rank == 4
            else keras.layers.GlobalAveragePooling3D)
    if data_format == "channels_last":
        to_bn, from_bn, axis = [], [], -1
    else:
        to_bn = [keras.layers.Permute((rank - 1, *range(1, rank - 1)))]
        from_bn = [keras.layers.Permute((*range(2, rank), 1))]
        axis = 1
    return keras.Sequential([
        keras.Input((6,) * (rank - 2) + (3,)),
        conv(5, 3, padding="same", use_bias=False),
        *to_bn, layer_class(axis=axis), *from_bn,
        keras.layers.ReLU(),
        conv(4, 3, use_bias=False),
        *to_bn, layer_class(axis=axis, momentum=0.9), *from_bn,
        pool(),
        keras.layers.Dense(3)])


def data_for(model, count: int = 32, seed: int = 3):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((count, *model.input_shape[1:])) * 2 + 0.5).astype(np.float32)
    return x, rng.integers(0, 3, count)


def float64_model(data_format: str = "channels_last", rank: int = 4):
    """small_cnn in float64 with Keras' layer (its own code, as the fused op has no float64),
    from the same initial weights as every float32 small_cnn: the reference a float32 model's
    training is measured against."""
    start = small_cnn(keras.layers.BatchNormalization, data_format, rank).get_weights()
    # Keras caches its default dtype policy at the first layer: set the policy, not floatx.
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float64")
    try:
        model = small_cnn(keras.layers.BatchNormalization, data_format, rank)
    finally:
        keras.config.set_dtype_policy(policy)
    model.set_weights([w.astype(np.float64) for w in start])
    if any(v.dtype != "float64" for v in model.weights):
        raise RuntimeError("the reference model did not build in float64")
    return model
