"""Synchronized batch norm under a tf.distribute strategy, in a process of its own: the
functional form in a custom step and the Keras 3 layer with ``synchronized=True`` (ours and
Keras'), results saved for tests/test_sync_batch_norm.py to compare.

Usage: python sync_bn_worker.py
           {mirrored2|mirrored3|mirrored2-onedevice|multiworker|dies|dies-mid-step} OUT.npz
("multiworker", "dies" and "dies-mid-step" read TF_CONFIG; run one process per worker. In
"dies" worker 1 exits before the first collective, in "dies-mid-step" inside a step, after the
forward's all-reduce and before the backward's; worker 0 must fail with an error, not hang.)
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

mode, out_path = sys.argv[1], sys.argv[2]
if mode.startswith("mirrored"):
    # mirrored2, mirrored3, or mirrored2-onedevice: the all-reduce gathered on one device and
    # broadcast (ReductionToOneDevice) instead of TensorFlow's collectives.
    count, _, algorithm = mode[len("mirrored"):].partition("-")
    replicas = int(count)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    cross_device_ops = tf.distribute.ReductionToOneDevice() if algorithm == "onedevice" else None
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)],
                                              cross_device_ops=cross_device_ops)
else:
    # A bounded wait for a peer that is gone: the dying-worker case must end, not hang.
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=60)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    replicas = strategy.num_replicas_in_sync
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0)

import keras  # noqa: E402

import tf_fbn_ops  # noqa: E402
import tf_fbn_ops.keras  # noqa: E402
from tf_fbn_ops import sync_batch_norm  # noqa: E402

results: dict[str, np.ndarray] = {"replicas": np.array(replicas), "task": np.array(task)}
# Per-replica batches of the global batch; an empty one among them. Over workers (one replica
# each) the cut is the same: replica r of the global count takes rows [starts[r], starts[r+1]).
SPLITS = {2: [9, 0], 3: [4, 0, 5]}[replicas] if replicas in (2, 3) else None
rng = np.random.default_rng(11)
GLOBAL = rng.standard_normal((9, 5, 4, 6)).astype(np.float32) * 3 + 40  # large mean
WEIGHT = rng.standard_normal((9, 5, 4, 6)).astype(np.float32)
SCALE = rng.uniform(0.5, 1.5, 6).astype(np.float32)
results.update(x=GLOBAL, w=WEIGHT, scale=SCALE, splits=np.array(SPLITS))


def local_rows(replica_id):
    starts = np.cumsum([0] + SPLITS)
    return slice(int(starts[replica_id]), int(starts[replica_id + 1]))


def exits_in_backward(y):
    """y, whose gradient ends this process: after y is computed (the forward's collective done)
    and before the backward of what made it."""

    def exit_now(*_):
        print("EXITING IN THE BACKWARD", flush=True)
        os._exit(3)

    @tf.custom_gradient
    def identity(t):
        def backward(upstream):
            return tf.py_function(exit_now, [upstream, t], Tout=upstream.dtype)
        return tf.identity(t), backward

    return identity(y)


def functional_step(exit_in_backward=False):
    """One forward and backward of synchronized_batch_norm per replica; every replica's y, dx,
    dscale, doffset and the global moments, and the step's graph's op counts."""
    scale = tf.Variable(SCALE)
    offset = tf.Variable(tf.zeros([6]))

    def values(context):
        rows = local_rows(context.replica_id_in_sync_group)
        return tf.constant(GLOBAL[rows]), tf.constant(WEIGHT[rows])

    data = strategy.experimental_distribute_values_from_function(values)

    @tf.function
    def step(data):
        def replica_step(x, w):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y, moments = sync_batch_norm.synchronized_batch_norm(x, scale, offset, 1e-3)
                if exit_in_backward:
                    y = exits_in_backward(y)
                loss = tf.reduce_sum(y * w)
            dx, dscale, doffset = tape.gradient(loss, [x, scale, offset])
            return y, dx, dscale, doffset, moments.mean, moments.variance
        return strategy.run(replica_step, args=data)

    outputs = [[t.numpy() for t in strategy.experimental_local_results(o)]
               for o in step(data)]
    again = [[t.numpy() for t in strategy.experimental_local_results(o)] for o in step(data)]
    graph = step.get_concrete_function(data).graph
    counts = op_counts(graph)
    return outputs, again, counts


def op_counts(graph) -> dict[str, int]:
    """Op types of a graph and of every function it calls."""
    counts: dict[str, int] = {}
    seen = set()

    def visit(node_defs):
        for node in node_defs:
            counts[node.op] = counts.get(node.op, 0) + 1

    graph_def = graph.as_graph_def()
    visit(graph_def.node)
    for function in graph_def.library.function:
        if function.signature.name not in seen:
            seen.add(function.signature.name)
            visit(function.node_def)
    return counts


def keras_model(layer_class, synchronized=True, seed=3):
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((6, 6, 3)), keras.layers.Conv2D(5, 3, use_bias=False),
            layer_class(synchronized=synchronized), keras.layers.ReLU(),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.SGD(0.1),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=False)
    return model


def keras_dataset(seed=3):
    """24 images in global batches of 12 (unequal replica batches where 12 does not divide)."""
    data_rng = np.random.default_rng(seed)
    images = data_rng.standard_normal((24, 6, 6, 3)).astype(np.float32)
    labels = data_rng.integers(0, 3, 24)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(12).with_options(options)


def keras_fit(layer_class):
    """Two SGD steps of the convnet with synchronized batch norm: the initial and final
    weights and the loss. Keras' fit under MirroredStrategy; under MultiWorkerMirroredStrategy,
    whose datasets Keras 3.12's fit cannot take (it fails with Keras' own layers too), the same
    steps in a custom training loop."""
    model = keras_model(layer_class)
    initial = [np.asarray(w) for w in model.get_weights()]
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        history = model.fit(keras_dataset(), epochs=1, verbose=0, shuffle=False)
        return initial, [np.asarray(w) for w in model.get_weights()], history.history["loss"]
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    @tf.function
    def train_step(batch):
        def replica_step(images, labels):
            with tf.GradientTape() as tape:
                losses = loss_fn(labels, model(images, training=True))
                loss = tf.reduce_sum(losses) / 12.0  # the global batch
            gradients = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss
        per_replica = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    losses = [float(train_step(batch))
              for batch in strategy.experimental_distribute_dataset(keras_dataset())]
    return initial, [np.asarray(w) for w in model.get_weights()], [float(np.mean(losses))]


def keras_reference(initial):
    """The same two steps in float64 on one replica with the global batches: Keras' own layer
    without synchronization computes the global batch's statistics, the exact target."""
    model = keras.Sequential([
        keras.Input((6, 6, 3), dtype="float64"),
        keras.layers.Conv2D(5, 3, use_bias=False, dtype="float64"),
        keras.layers.BatchNormalization(dtype="float64"), keras.layers.ReLU(dtype="float64"),
        keras.layers.GlobalAveragePooling2D(dtype="float64"),
        keras.layers.Dense(3, dtype="float64")])
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    model.set_weights([w.astype(np.float64) for w in initial])
    dataset = keras_dataset().map(lambda x, y: (tf.cast(x, tf.float64), y))
    model.fit(dataset, epochs=1, verbose=0, shuffle=False)
    return [np.asarray(w) for w in model.get_weights()]


def keras_step_ops(layer_class, synchronized=True) -> dict[str, int]:
    """Op counts of one training step as Keras runs it (train_step in strategy.run), traced."""
    model = keras_model(layer_class, synchronized)
    batch = next(iter(strategy.experimental_distribute_dataset(keras_dataset())))
    step = tf.function(lambda data: strategy.run(model.train_step, args=(data,)))
    return op_counts(step.get_concrete_function(batch).graph)


if mode in ("dies", "dies-mid-step"):
    if mode == "dies" and task == 1:
        os._exit(3)  # before any collective: the chief must notice
    start = time.time()
    try:
        functional_step(exit_in_backward=mode == "dies-mid-step" and task == 1)
    except Exception as error:  # noqa: BLE001 - any error is the expected outcome
        print(f"WORKER FAILED after {time.time() - start:.0f} s: {type(error).__name__}: "
              f"{str(error)[:300]}")
        sys.exit(0)
    print("WORKER DID NOT FAIL")
    sys.exit(1)

outputs, again, counts = functional_step()
names = ["y", "dx", "dscale", "doffset", "mean", "variance"]
for name, per_replica, repeat in zip(names, outputs, again):
    for r, (a, b) in enumerate(zip(per_replica, repeat)):
        results[f"{name}_{r}"] = a
        results[f"{name}_again_{r}"] = b
results["functional_ops"] = np.array(json.dumps(counts))
for label, layer_class in (("ours", tf_fbn_ops.keras.BatchNormalization),
                           ("keras", keras.layers.BatchNormalization)):
    initial, final, losses = keras_fit(layer_class)
    for i, w in enumerate(initial):
        results[f"{label}_initial_{i}"] = w
    for i, w in enumerate(final):
        results[f"{label}_final_{i}"] = w
    results[f"{label}_losses"] = np.array(losses)
    if isinstance(strategy, tf.distribute.MirroredStrategy):  # Keras' own step, traced
        results[f"{label}_ops"] = np.array(json.dumps(keras_step_ops(layer_class)))
for i, w in enumerate(keras_reference(initial)):
    results[f"reference_final_{i}"] = w
if isinstance(strategy, tf.distribute.MirroredStrategy):
    results["unsynchronized_ops"] = np.array(json.dumps(
        keras_step_ops(keras.layers.BatchNormalization, synchronized=False)))
np.savez(out_path, **results)
print("WORKER DONE")
