"""``python -m tf_fbn_ops bench``: the shim against TensorFlow's own op, on this machine.

For users who want to see the speed where they run (an Arm server, their own GPU, a machine we
never had): both ops on the same inputs in one process, in alternating rounds so that the
machine's drift hits both alike, each round's per-call median being one sample; the table gives
the medians over rounds and TensorFlow's time over ours. The device is TensorFlow's default (the
GPU where it sees one; ``--device`` picks). Tensors are built once, on the device, before timing.
The research harness (several processes, oneDNN on and off, PyTorch, a streaming limit) lives in
the repository's benchmarks/harness/ and runs from a checkout (``make bench``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import numpy as np

# (shape NHWC, channels-last?) per --quick or full run: a small and a mid-sized tensor per
# layout; the full run adds the ResNet shapes that dominate training time.
QUICK_SHAPES = ((8, 14, 14, 128), (32, 14, 14, 256))
FULL_SHAPES = QUICK_SHAPES + ((32, 56, 56, 64), (32, 28, 28, 128), (32, 7, 7, 2048))
QUICK_ROUNDS, FULL_ROUNDS = 3, 7
CALLS_PER_ROUND = 10


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tf_fbn_ops bench",
        description="The shim against TensorFlow's own op, on this machine: float32, training "
                    "and inference, NHWC and NCHW, interleaved rounds in one process.")
    parser.add_argument("--quick", action="store_true",
                        help=f"{len(QUICK_SHAPES)} shapes and {QUICK_ROUNDS} rounds (seconds "
                             "on two cores) instead of "
                             f"{len(FULL_SHAPES)} and {FULL_ROUNDS}")
    parser.add_argument("--rounds", type=int, help="alternating rounds per case")
    parser.add_argument("--device", help="e.g. /CPU:0 or /GPU:0 (default: TensorFlow's choice)")
    return parser


def _inputs(tf, shape: tuple, channels_last: bool, training: bool, rng) -> dict:
    channels = shape[-1]
    logical = shape if channels_last else (shape[0], channels, *shape[1:-1])
    data_format = "NHWC" if channels_last else "NCHW"
    x = tf.constant(rng.standard_normal(logical).astype(np.float32))
    dy = tf.constant(rng.standard_normal(logical).astype(np.float32))
    scale = tf.constant(rng.uniform(0.5, 1.5, channels).astype(np.float32))
    axes = [0, 1, 2] if channels_last else [0, 2, 3]
    mean = tf.reduce_mean(x, axes)
    variance = tf.math.reduce_variance(x, axes)
    return dict(y_backprop=dy, x=x, scale=scale, reserve_space_1=mean,
                reserve_space_2=variance, reserve_space_3=tf.zeros([0]), epsilon=1e-3,
                data_format=data_format, is_training=training)


def _round(op, kwargs: dict, sync) -> float:
    """The median seconds of CALLS_PER_ROUND calls, each finished before the next starts (on a
    GPU, the device synchronized: no copy of the outputs to the host is timed)."""
    times = []
    for _ in range(CALLS_PER_ROUND):
        start = time.perf_counter()
        op(**kwargs)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _time_case(tf, ops: dict, kwargs: dict, rounds: int) -> dict:
    """Median seconds per call of each op that accepts the case (None where TF refuses it),
    in rounds that alternate the order of the ops."""
    available = {}
    for name, op in ops.items():  # also the warm-up
        try:
            op(**kwargs)
            available[name] = op
        except tf.errors.InvalidArgumentError:
            pass
    sync = tf.test.experimental.sync_devices
    samples = {name: [] for name in available}
    for r in range(rounds):
        for name in (list(available) if r % 2 == 0 else list(available)[::-1]):
            samples[name].append(_round(available[name], kwargs, sync))
    return {name: statistics.median(samples[name]) if name in samples else None
            for name in ops}


def run(args: argparse.Namespace) -> list[dict]:
    import tensorflow as tf  # noqa: PLC0415

    import tf_fbn_ops  # noqa: PLC0415

    shapes = QUICK_SHAPES if args.quick else FULL_SHAPES
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    rng = np.random.default_rng(0)
    ops = {"ours": tf_fbn_ops.fused_batch_norm_grad_v3,
           "tensorflow": tf.raw_ops.FusedBatchNormGradV3}
    rows = []
    with tf.device(args.device) if args.device else contextlib.nullcontext():
        for shape in shapes:
            for channels_last in (True, False):
                for training in (True, False):
                    kwargs = _inputs(tf, shape, channels_last, training, rng)
                    rows.append({"shape": "x".join(map(str, shape)),
                                 "layout": "NHWC" if channels_last else "NCHW",
                                 "mode": "train" if training else "infer",
                                 **_time_case(tf, ops, kwargs, rounds)})
                    print(_format(rows[-1]), flush=True)
    return rows


def _format(row: dict) -> str:
    ours, theirs = row["ours"], row["tensorflow"]
    cells = [row["shape"], row["layout"], row["mode"], f"{ours * 1e6:9.1f}",
             f"{theirs * 1e6:9.1f}" if theirs else "      n/a",
             f"{theirs / ours:6.2f}x" if theirs else "  (TensorFlow refuses)"]
    return "  ".join(f"{c:<14}" if i == 0 else c for i, c in enumerate(cells))


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    import tensorflow as tf  # noqa: PLC0415

    devices = [d.name for d in tf.config.list_logical_devices()]
    print(f"TensorFlow {tf.__version__}; devices {devices}; float32, median µs per call over "
          "rounds; last column: TensorFlow's time over ours")
    print("shape           layout  mode  ours µs   TF µs     TF/ours")
    run(args)
    return 0
