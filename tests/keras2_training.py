"""A small Keras 2 (tf_keras) CNN trained step by step with Keras' fused BatchNormalization: what
the shim_gradients() tests compare with and without the shim, eagerly traced or under XLA."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# Losses and weights after 20 steps, shim against TensorFlow's own gradient.
KERAS_TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def train_keras2_cnn(tf_keras, steps: int = 20,
                     jit_compile: bool = False) -> tuple[list, list, set]:
    """(loss per step, final weights, op types of the traced training step and its functions)."""
    tf_keras.utils.set_random_seed(11)
    rng = np.random.default_rng(11)
    data = rng.standard_normal((8 * steps, 8, 8, 3)).astype(np.float32)
    labels = rng.integers(0, 3, 8 * steps)
    model = tf_keras.Sequential([
        tf_keras.layers.Conv2D(6, 3, input_shape=(8, 8, 3)),
        tf_keras.layers.BatchNormalization(fused=True),
        tf_keras.layers.ReLU(),
        tf_keras.layers.Conv2D(4, 3, data_format="channels_last"),
        tf_keras.layers.BatchNormalization(fused=True),
        tf_keras.layers.GlobalAveragePooling2D(),
        tf_keras.layers.Dense(3)])
    model.compile(tf_keras.optimizers.SGD(0.05),
                  tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)
    losses = []
    for step in range(steps):
        batch = slice(8 * step, 8 * step + 8)
        losses.append(float(model.train_on_batch(data[batch], labels[batch])))
    batches = iter(tf.data.Dataset.from_tensors((data[:8], labels[:8])).repeat())
    graph_def = model.train_function.get_concrete_function(batches).graph.as_graph_def()
    types = {n.op for n in graph_def.node}
    types |= {n.op for f in graph_def.library.function for n in f.node_def}
    return losses, model.get_weights(), types
