"""Trains a small Keras CNN with fused batch norm under a tf.distribute strategy, with or without
the shim's gradients, and saves the losses, the final weights and how many times the shim's
gradient function was called.

Usage: python distribute_worker.py {mirrored|multiworker} {0|1} OUT.npz
("multiworker" reads TF_CONFIG; run one process per worker.)
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

strategy_name, use_shim, out_path = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
if strategy_name == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
else:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

import tf_keras  # noqa: E402

import tf_fbn_ops  # noqa: E402
from tf_fbn_ops import builtin_override  # noqa: E402

calls = [0]
shim_gradient = builtin_override.op_gradient


def counting_shim_gradient(library, op, *grads):
    calls[0] += 1
    return shim_gradient(library, op, *grads)


builtin_override.op_gradient = counting_shim_gradient  # what enable_shim_gradients installs
if use_shim:
    tf_fbn_ops.enable_shim_gradients()

tf_keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
images = rng.standard_normal((128, 8, 8, 3)).astype(np.float32)
labels = rng.integers(0, 3, 128)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(16).with_options(options)

with strategy.scope():
    model = tf_keras.Sequential([
        tf_keras.layers.Conv2D(6, 3, input_shape=(8, 8, 3)),
        tf_keras.layers.BatchNormalization(fused=True),
        tf_keras.layers.ReLU(),
        tf_keras.layers.GlobalAveragePooling2D(),
        tf_keras.layers.Dense(3)])
    model.compile(tf_keras.optimizers.SGD(0.05),
                  tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(dataset, epochs=3, verbose=0)
np.savez(out_path, losses=np.array(history.history["loss"]), calls=calls[0],
         *model.get_weights())
print("WORKER DONE")
