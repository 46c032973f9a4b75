"""Where a Keras 3 model's training drifts: every gradient and loss of a few SGD steps, in
float32 units against the same model computed in float64.

Runs the small model of the layer tests (tests/keras3_models.py) on every device TensorFlow
has, as a plain tf.function and under XLA (jit_compile=True), with Keras' BatchNormalization
and with ours (under XLA, through each lowering: the custom call and HLO); on a GPU, with
TensorFloat-32 on (TensorFlow's default) and off. For each run it prints the worst error of
every trainable variable's gradient after the first batch, and of the loss at every step, in
units of float32's epsilon times the float64 value's magnitude. A
layer or a compiler that moves training away shows as the one row whose units are large; two
implementations that only round differently stay within a few units of float64 each.

Usage: python tools/keras_step_errors.py [--data-format channels_first] [--rank 5]
           [--steps 8] [--devices CPU GPU]
Exit status 0 once the table is printed; it judges nothing (tests/test_keras_step_errors.py
checks the CPU rows).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_fbn_ops.keras as fbn_keras  # noqa: E402
from keras3_models import data_for, float64_model, small_cnn  # noqa: E402
from tf_fbn_ops import _loader  # noqa: E402

BATCH = 8
LEARNING_RATE = 0.1  # the layer tests' SGD
EPSILON32 = float(np.finfo(np.float32).eps)


@dataclass(frozen=True)
class Run:
    device: str
    jit: bool
    layer: str              # "keras" or "ours"
    lowering: str = ""      # ours under XLA: "custom call" or "hlo"
    tf32: bool = False      # GPU: TensorFlow's default, TensorFloat-32 convolutions and matmuls

    @property
    def name(self) -> str:
        compiled = "xla" if self.jit else "graph"
        precision = ("tf32" if self.tf32 else "fp32") if self.device == "GPU" else ""
        return " ".join(filter(None, [self.device, precision, compiled, self.layer,
                                      self.lowering]))


@dataclass
class Trace:
    first_gradients: list[np.ndarray]
    losses: list[float]


def train(model, x, y, steps: int, device: str, jit: bool) -> Trace:
    """`steps` plain SGD steps over x in batches of BATCH, in order, as `fit` takes them
    without shuffling; the gradients of the first step."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables

    @tf.function(jit_compile=jit)
    def step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        gradients = tape.gradient(loss, variables)
        for variable, gradient in zip(variables, gradients):
            variable.assign_sub(LEARNING_RATE * gradient)
        return loss, gradients

    losses, first = [], None
    batches = len(x) // BATCH
    with tf.device(device):
        for i in range(steps):
            begin = (i % batches) * BATCH
            loss, gradients = step(tf.constant(x[begin:begin + BATCH]),
                                   tf.constant(y[begin:begin + BATCH]))
            if first is None:
                first = [g.numpy().astype(np.float64) for g in gradients]
            losses.append(float(loss))
    return Trace(first, losses)


def float64_trace(data_format: str, rank: int, x, y, steps: int) -> tuple[Trace, list[str]]:
    """The reference: Keras' layer in float64 on the CPU, from every run's initial weights."""
    model = float64_model(data_format, rank)
    names = [v.path for v in model.trainable_variables]
    return train(model, x.astype(np.float64), y, steps, "/CPU:0", jit=False), names


def units(value, reference) -> float:
    """Worst |value - reference| in float32 epsilons of the reference's largest magnitude."""
    scale = max(float(np.max(np.abs(reference))), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(np.asarray(value) - reference))) / (EPSILON32 * scale)


def runs_for(devices: list[str]) -> list[Run]:
    """Every layer, compilation and lowering on each device; on a GPU with TensorFloat-32 on
    (TensorFlow's default on Ampere and newer: convolutions round their inputs to 10 bits of
    mantissa, so two programs that pick different algorithms part at about 1e-3) and off."""
    runs = []
    for device in devices:
        for tf32 in (True, False) if device == "GPU" else (False,):
            for jit in (False, True):
                runs.append(Run(device, jit, "keras", tf32=tf32))
                if not jit:
                    runs.append(Run(device, jit, "ours", tf32=tf32))
                elif _loader.xla_missing_reason() is None:
                    runs += [Run(device, jit, "ours", lowering, tf32=tf32)
                             for lowering in ("custom call", "hlo")]
    return runs


def run_one(run: Run, data_format: str, rank: int, x, y, steps: int) -> Trace:
    layer = keras.layers.BatchNormalization if run.layer == "keras" \
        else fbn_keras.BatchNormalization
    saved = os.environ.pop(_loader.XLA_LOWERING_VARIABLE, None)
    if run.lowering == "hlo":  # read each time XLA compiles
        os.environ[_loader.XLA_LOWERING_VARIABLE] = "hlo"
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(run.tf32)
    try:
        with tf.device(f"/{run.device}:0"):
            model = small_cnn(layer, data_format, rank)
        return train(model, x, y, steps, f"/{run.device}:0", run.jit)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        os.environ.pop(_loader.XLA_LOWERING_VARIABLE, None)
        if saved is not None:
            os.environ[_loader.XLA_LOWERING_VARIABLE] = saved


def report(data_format: str, rank: int, steps: int, devices: list[str]) -> list[dict]:
    """Prints the table; returns its rows (run name, gradient units per variable, loss units
    per step) for a caller that judges them."""
    x, y = data_for(small_cnn(keras.layers.BatchNormalization, data_format, rank))
    reference, names = float64_trace(data_format, rank, x, y, steps)
    print(f"float64 losses: {' '.join(f'{v:.6f}' for v in reference.losses)}")
    print("first step's gradients, float32 units of each variable's largest float64 gradient:")
    print("  " + " | ".join(f"{i}: {n}" for i, n in enumerate(names)))
    rows = []
    for run in runs_for(devices):
        trace = run_one(run, data_format, rank, x, y, steps)
        gradient_units = [units(g, r) for g, r in zip(trace.first_gradients,
                                                      reference.first_gradients)]
        loss_units = [units(v, r) for v, r in zip(trace.losses, reference.losses)]
        rows.append(dict(run=run.name, gradients=gradient_units, losses=loss_units))
        print(f"{run.name:37s} gradients " + " ".join(f"{u:8.1f}" for u in gradient_units))
        print(f"{'':37s} losses    " + " ".join(f"{u:8.1f}" for u in loss_units))
    return rows


def main(argv: list[str] | None = None) -> int:
    tf.get_logger().setLevel("ERROR")  # the retracing warnings of one function per run
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-format", default="channels_last",
                        choices=["channels_last", "channels_first"])
    parser.add_argument("--rank", type=int, default=4, choices=[4, 5])
    parser.add_argument("--steps", type=int, default=8, help="SGD steps (default: fit's 2 "
                        "epochs of the layer tests' 32 samples)")
    parser.add_argument("--devices", nargs="+", choices=["CPU", "GPU"],
                        help="default: the CPU and TensorFlow's GPU, if it has one")
    args = parser.parse_args(argv)
    devices = args.devices or ["CPU"] + (["GPU"] if tf.config.list_physical_devices("GPU")
                                         else [])
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}, {args.data_format}, "
          f"rank {args.rank}, {args.steps} steps, devices {' '.join(devices)}")
    report(args.data_format, args.rank, args.steps, devices)
    return 0


if __name__ == "__main__":
    sys.exit(main())
