"""The two models the training benchmark trains, and their data.

Each model is built by one function that takes the Keras module (``keras`` or ``tf_keras``) and a
batch-norm factory, so that the four variants differ in nothing but the framework and the batch
norm: same layers, same shapes, same seeds. Functional models, so that each batch-norm layer's
input shape can be read back (``bn_input_shapes``) for timing its backward op in isolation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

BatchNormFactory = Callable[[], Any]  # a fresh batch-norm layer per call
CLASSES = 10


@dataclass(frozen=True)
class ModelSpec:
    """One model at one batch size: what a worker builds, feeds and reports."""

    name: str
    input_shape: tuple[int, ...]  # one sample, channels last
    batch: int
    data_format: str  # of its batch-norm layers' fused ops
    description: str

    def to_json(self) -> dict:
        return {"model": self.name, "input_shape": list(self.input_shape), "batch": self.batch,
                "data_format": self.data_format, "description": self.description}


def resnet2d(keras: ModuleType, batch_norm: BatchNormFactory, spec: ModelSpec) -> Any:
    """A small ResNet: conv stem, 3 stages of 2 residual blocks (16/32/64 channels, stride 2
    between stages, 1x1 projection + batch norm where the shape changes), global average
    pooling, dense. 15 batch-norm layers."""
    layers = keras.layers

    def conv(filters: int, size: int, strides: int = 1) -> Any:
        return layers.Conv2D(filters, size, strides=strides, padding="same", use_bias=False)

    inputs = keras.Input(shape=spec.input_shape)
    x = layers.ReLU()(batch_norm()(conv(16, 3)(inputs)))
    for stage, width in enumerate((16, 32, 64)):
        for block in range(2):
            strides = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            if strides != 1 or x.shape[-1] != width:
                shortcut = batch_norm()(conv(width, 1, strides)(x))
            y = layers.ReLU()(batch_norm()(conv(width, 3, strides)(x)))
            y = batch_norm()(conv(width, 3)(y))
            x = layers.ReLU()(layers.Add()([shortcut, y]))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(CLASSES)(x))


def conv3d(keras: ModuleType, batch_norm: BatchNormFactory, spec: ModelSpec) -> Any:
    """A small volumetric net: 4 Conv3D-BN-ReLU blocks (8/16/32/64 channels), 2x2x2 max pooling
    after the first three, global average pooling, dense. 4 batch-norm layers."""
    layers = keras.layers
    inputs = keras.Input(shape=spec.input_shape)
    x = inputs
    for index, width in enumerate((8, 16, 32, 64)):
        x = layers.Conv3D(width, 3, padding="same", use_bias=False)(x)
        x = layers.ReLU()(batch_norm()(x))
        if index < 3:
            x = layers.MaxPooling3D(2)(x)
    x = layers.GlobalAveragePooling3D()(x)
    return keras.Model(inputs, layers.Dense(CLASSES)(x))


BUILDERS: dict[str, Callable[[ModuleType, BatchNormFactory, ModelSpec], Any]] = {
    "resnet2d": resnet2d,
    "conv3d": conv3d,
}
MODELS: tuple[str, ...] = tuple(BUILDERS)


def spec(name: str, quick: bool = False) -> ModelSpec:
    """The model at the batch size a CPU user would train it with; a tiny batch with quick."""
    if name == "resnet2d":
        return ModelSpec(name, (32, 32, 3), 4 if quick else 64, "NHWC",
                         "ResNet-style CNN, 3x2 residual blocks 16/32/64, 32x32x3 input")
    if name == "conv3d":
        return ModelSpec(name, (16, 32, 32, 1), 2 if quick else 8, "NDHWC",
                         "3-D CNN, 4 Conv3D-BN-ReLU blocks 8/16/32/64, 16x32x32x1 input")
    raise ValueError(f"unknown model {name!r}; choose from {','.join(MODELS)}")


def build(keras: ModuleType, batch_norm: BatchNormFactory, model_spec: ModelSpec,
          seed: int, jit_compile: bool = False) -> Any:
    """The model, compiled for plain SGD training (with XLA if ``jit_compile``), its weights drawn
    from ``seed`` (the same weights for both variants of one Keras version)."""
    keras.utils.set_random_seed(seed)
    model = BUILDERS[model_spec.name](keras, batch_norm, model_spec)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)
    return model


def batch(model_spec: ModelSpec, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch (x, labels) from ``seed``, fed to every variant at every step."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((model_spec.batch, *model_spec.input_shape)).astype(np.float32)
    return x, rng.integers(0, CLASSES, model_spec.batch).astype(np.int32)


def bn_input_shapes(model: Any, batch_norm_class: type, batch_size: int) -> list[tuple]:
    """(input shape at ``batch_size``, epsilon) of every batch-norm layer, in model order."""
    shapes = []
    for layer in model.layers:
        if isinstance(layer, batch_norm_class):
            shape = (batch_size, *(int(d) for d in tuple(layer.input.shape)[1:]))
            shapes.append((shape, float(layer.epsilon)))
    return shapes
