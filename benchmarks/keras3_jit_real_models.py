"""Keras 3 training steps of two keras.applications models compiled with jit_compile=True
(batch 16, weights=None, 10 classes, SGD; 2 intra-op threads): Keras' own BatchNormalization
against tf_fbn_ops.keras.BatchNormalization swapped into the same architecture, and our layer
with TensorFlow's forward (forward="tensorflow", the layer before it had forward ops of its own),
interleaved in rounds in one process. Prints the median step
time of each and the ratio (above 1: ours is faster).

    .venv/bin/python benchmarks/keras3_jit_real_models.py
    .venv/bin/python benchmarks/keras3_jit_real_models.py --no-jit --threads 1

--no-jit compiles the steps as plain tf.functions (TensorFlow's kernels, ours for the
batch-norm backward); --threads sets the intra-op threads (default 2); --bn-share also estimates
the batch-norm backward's share of each step as the training benchmark does: every batch-norm
layer's backward timed alone on its input shape (ours: the shim op; Keras': its gradient graph
minus its forward), summed over the model, over the step time.
"""

import argparse
import time

import keras
import keras.src.layers as keras_layers
import numpy as np
import tensorflow as tf

import tf_fbn_ops.keras as fbn_keras
from harness.training.isolated import LayerBackward
from harness.training.models import bn_input_shapes
from harness.training.variants import KERAS3_UNFUSED, SHIM

MODELS = {"MobileNetV2 96x96": lambda: keras.applications.MobileNetV2(
              input_shape=(96, 96, 3), weights=None, classes=10),
          "ResNet50 64x64": lambda: keras.applications.ResNet50(
              input_shape=(64, 64, 3), weights=None, classes=10)}
ROUNDS, STEPS, WARMUP = 6, 3, 3
ISOLATED_CALLS = 15


def isolated_backward_ms(model, layer_class, kind: str) -> float:
    """The model's batch-norm backward ops timed alone, one layer after another, summed (ms)."""
    total_ns = 0.0
    for index, (shape, epsilon) in enumerate(bn_input_shapes(model, layer_class, 16)):
        total_ns += LayerBackward(kind, shape, epsilon, "NHWC", seed=index).time_ns(ISOLATED_CALLS)
    return total_ns / 1e6


class _OursWithTensorFlowForward(fbn_keras.BatchNormalization):
    """Our layer with TensorFlow's FusedBatchNormV3 as its forward (our gradient only)."""

    def __init__(self, **kwargs):
        super().__init__(forward="tensorflow", **kwargs)


# The layer class each variant swaps in (None: Keras' own).
VARIANTS = {"Keras' BatchNormalization": None,
            "ours, TensorFlow's forward": _OursWithTensorFlowForward,
            "ours": fbn_keras.BatchNormalization}


def build(make, layer_class, jit: bool):
    """The model with Keras' batch norm or the given class (keras.applications builds its
    layers from keras.src.layers, so that is where the class is swapped, for the build only)."""
    keras.utils.set_random_seed(0)
    original = keras_layers.BatchNormalization
    if layer_class is not None:
        keras_layers.BatchNormalization = layer_class
    try:
        model = make()
    finally:
        keras_layers.BatchNormalization = original
    model.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=jit,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-jit", dest="jit", action="store_false",
                        help="plain tf.function steps instead of jit_compile=True")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    parser.add_argument("--bn-share", action="store_true",
                        help="also estimate the batch-norm backward's share of each step")
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    for name, make in MODELS.items():
        side = int(name.split()[-1].split("x")[0])
        rng = np.random.default_rng(0)
        x = rng.standard_normal((16, side, side, 3)).astype(np.float32)
        y = rng.integers(0, 10, 16)
        models = {k: build(make, v, args.jit) for k, v in VARIANTS.items()}
        swapped = sum(isinstance(layer, fbn_keras.BatchNormalization)
                      for layer in models["ours"].layers)
        for model in models.values():
            for _ in range(WARMUP):
                model.train_on_batch(x, y)
        times: dict[str, list[float]] = {k: [] for k in models}
        for _ in range(ROUNDS):
            for key, model in models.items():
                start = time.perf_counter()
                for _ in range(STEPS):
                    model.train_on_batch(x, y)
                times[key].append((time.perf_counter() - start) / STEPS)
        ms = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        theirs_ms, ours_ms = ms["Keras' BatchNormalization"], ms["ours"]
        print(f"{name}, batch 16, jit_compile={args.jit}, {args.threads} thread(s), "
              f"{swapped} layers swapped: " +
              ", ".join(f"{k} {v:.1f} ms ({theirs_ms / v:.2f}x)" for k, v in ms.items()))
        if args.bn_share:
            theirs_bn = isolated_backward_ms(models["Keras' BatchNormalization"],
                                             keras.layers.BatchNormalization, KERAS3_UNFUSED)
            ours_bn = isolated_backward_ms(models["ours"], fbn_keras.BatchNormalization, SHIM)
            print(f"  batch-norm backward, isolated ops (an estimate): Keras' {theirs_bn:.1f} ms "
                  f"({100 * theirs_bn / theirs_ms:.1f} % of its step), ours {ours_bn:.1f} ms "
                  f"({100 * ours_bn / ours_ms:.1f} % of its step)")


if __name__ == "__main__":
    main()
