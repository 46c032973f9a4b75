"""One worker of the synchronized batch-norm benchmark (run.py starts two, MultiWorkerMirrored
on 127.0.0.1): the same training step with tf_fbn_ops' synchronized layer and with Keras', from
the same weights and data, timed in alternating rounds in this one process; the chief writes the
results.

Usage: python worker.py MODEL ROUNDS STEPS OUT.json   (TF_CONFIG names the cluster)
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# No collective timeout: TensorFlow starts a timer thread per collective that has one, and
# hundreds of collectives a step (Keras' layer: five per batch-norm layer) pile up thousands.
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

import keras  # noqa: E402

import tf_fbn_ops.keras  # noqa: E402

model_name, rounds, steps, out_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
BATCH_PER_WORKER = 32
CLASSES = 10
SHAPES = {"convnet": (32, 32, 3), "mobilenet_v2": (64, 64, 3)}


def build(batch_norm):
    """The model with `batch_norm(synchronized=True)` for every batch-norm layer."""
    if model_name == "convnet":
        blocks = []
        for filters in (32, 64, 128):
            blocks += [keras.layers.Conv2D(filters, 3, padding="same", use_bias=False),
                       batch_norm(synchronized=True), keras.layers.ReLU(),
                       keras.layers.Conv2D(filters, 3, padding="same", use_bias=False),
                       batch_norm(synchronized=True), keras.layers.ReLU(),
                       keras.layers.MaxPooling2D()]
        return keras.Sequential([keras.Input(SHAPES[model_name]), *blocks,
                                 keras.layers.GlobalAveragePooling2D(),
                                 keras.layers.Dense(CLASSES)])
    reference = keras.applications.MobileNetV2(input_shape=SHAPES[model_name], alpha=0.35,
                                               weights=None, classes=CLASSES,
                                               classifier_activation=None)

    def clone(layer):
        if isinstance(layer, keras.layers.BatchNormalization):
            config = dict(layer.get_config(), synchronized=True)
            return batch_norm.from_config(config)
        return layer.__class__.from_config(layer.get_config())
    return keras.models.clone_model(reference, clone_function=clone)


def train_step_for(model, optimizer):
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    global_batch = float(BATCH_PER_WORKER * strategy.num_replicas_in_sync)

    @tf.function
    def step(images, labels):
        def replica_step(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(loss_fn(labels, model(images, training=True))) / global_batch
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss
        return strategy.reduce(tf.distribute.ReduceOp.SUM,
                               strategy.run(replica_step, args=(images, labels)), axis=None)
    return step


def collectives(step, images, labels) -> int:
    graph = step.get_concrete_function(images, labels).graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return sum(1 for n in nodes if "Collective" in n.op)


rng = np.random.default_rng(task)
images = tf.constant(rng.standard_normal((BATCH_PER_WORKER, *SHAPES[model_name]), np.float32))
labels = tf.constant(rng.integers(0, CLASSES, BATCH_PER_WORKER))
variants = {}
with strategy.scope():
    keras.utils.set_random_seed(1)
    for name, batch_norm in (("ours", tf_fbn_ops.keras.BatchNormalization),
                             ("keras", keras.layers.BatchNormalization)):
        keras.utils.set_random_seed(1)
        model = build(batch_norm)
        optimizer = keras.optimizers.SGD(0.01)
        variants[name] = train_step_for(model, optimizer)
counts = {name: collectives(step, images, labels) for name, step in variants.items()}
for step in variants.values():  # trace and warm up
    for _ in range(2):
        float(step(images, labels))
times = {name: [] for name in variants}
for _ in range(rounds):
    for name, step in variants.items():
        start = time.perf_counter()
        for _ in range(steps):
            loss = step(images, labels)
        float(loss)
        times[name].append((time.perf_counter() - start) / steps)
if task == 0:
    with open(out_path, "w") as f:
        json.dump({"model": model_name, "collectives": counts, "times": times,
                   "workers": strategy.num_replicas_in_sync,
                   "batch_per_worker": BATCH_PER_WORKER}, f)
print("WORKER DONE")
