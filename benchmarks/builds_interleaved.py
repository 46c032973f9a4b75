"""Several builds of the op library against each other through TensorFlow: one process per
build, the builds' processes alternated --repeats times, each timing eager
FbnFusedBatchNormGradV3 calls (with --op forward, FbnFusedBatchNormV3) on the given cases (5
rounds of ~30 ms of calls, median). For
bisecting a speed change across commits, each built the same way in a worktree:

    git worktree add /tmp/wt_old c950073 && py=$PWD/.venv/bin/python
    (cd /tmp/wt_old && TF_FBN_OPS_CUDA=0 TF_FBN_OPS_XLA=0 $py setup.py -q build_ext --inplace)
    .venv/bin/python benchmarks/builds_interleaved.py --threads 2 \\
        old=/tmp/wt_old/tf_fbn_ops/_fbn_ops.so new=/tmp/wt_new/tf_fbn_ops/_fbn_ops.so \\
        16x56x56x160:NCHW:T 16x14x14x512:NHWC:I

A build may carry environment settings after its library, comma-separated, so that one
library can be timed against itself with a setting changed:
`streamed=/tmp/wt_new/tf_fbn_ops/_fbn_ops.so,TF_FBN_OPS_STREAMING_MIB=0`.

Cases are SHAPE:FORMAT:MODE with the shape channels-last (NxHxWxC), FORMAT NHWC or NCHW, MODE
T (training) or I (inference). Prints each build's median over its processes, in µs, and its
ratio to the first build's. With --chain N each timed call is N calls in a row, each fed the one
before's output (the gradient's x_backprop as its y_backprop, the forward's y as its x), and the
time is per call: a call then reads its input from wherever the call before left it, as a
network's next layer does (tf_kernels_interleaved.py says why that can disagree with repeated
calls on one input). With --centred the gradient's y_backprop is centred per channel, so that
its sums cancel (as a 1x1 convolution's gradient of a batch norm's x_backprop nearly does).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def time_one_build(library: str, op_name: str, threads: int, chain: int, centred: bool,
                   cases: list[str]) -> dict[str, float]:
    """In this process: every case's median per-call time with the library at `library`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    forward = op_name == "forward"
    module = tf.load_op_library(library)
    op = module.fbn_fused_batch_norm_v3 if forward else module.fbn_fused_batch_norm_grad_v3
    fed_input = "x" if forward else "y_backprop"  # what a chained call takes from the one before
    times = {}
    for case in cases:
        text, data_format, mode = case.split(":")
        dims = [int(v) for v in text.split("x")]
        channels = dims[-1]
        shape = dims if data_format == "NHWC" else [dims[0], channels, *dims[1:-1]]
        rng = np.random.default_rng(0)
        x = tf.constant(rng.standard_normal(shape, dtype=np.float32))
        scale = tf.constant(rng.random(channels, dtype=np.float32) + 0.5)
        mean = tf.constant(rng.standard_normal(channels, np.float32))
        variance = tf.constant(rng.random(channels, np.float32) + 0.5)
        if forward:
            inputs = dict(x=x, scale=scale, offset=mean, mean=mean, variance=variance)
        else:
            dy = rng.standard_normal(shape, dtype=np.float32)
            if centred:  # each channel's Σ y_backprop about zero
                channel_axis = len(shape) - 1 if data_format == "NHWC" else 1
                axes = tuple(a for a in range(len(shape)) if a != channel_axis)
                dy = (dy - dy.mean(axis=axes, keepdims=True)).astype(np.float32)
            inputs = dict(y_backprop=tf.constant(dy), x=x, scale=scale, reserve_space_1=mean,
                          reserve_space_2=variance, reserve_space_3=tf.zeros([0]))

        def call():  # eager CPU ops run before they return; no copy out to numpy in the time
            fed = dict(inputs)
            for _ in range(chain):
                fed[fed_input] = op(**fed, epsilon=1e-3, data_format=data_format,
                                    is_training=mode == "T")[0]
            return fed[fed_input]

        for _ in range(3):
            call()
        start = time.perf_counter()
        call()
        calls = max(5, int(0.03 / (time.perf_counter() - start)))
        rounds = []
        for _ in range(5):
            samples = []
            for _ in range(calls):
                start = time.perf_counter()
                call()
                samples.append(time.perf_counter() - start)
            rounds.append(statistics.median(samples))
        times[case] = statistics.median(rounds) * 1e6 / chain
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("items", nargs="+", help="LABEL=LIBRARY ... then cases")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5, help="processes per build")
    parser.add_argument("--op", choices=("gradient", "forward"), default="gradient")
    parser.add_argument("--centred", action="store_true",
                        help="the gradient's y_backprop centred per channel (its sums cancel)")
    parser.add_argument("--chain", type=int, default=1,
                        help="calls per timed call, each fed the one before's output")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    builds = dict(item.split("=", 1) for item in args.items if "=" in item)
    cases = [item for item in args.items if "=" not in item]
    settings = {}
    for label, spec in builds.items():
        library, *assignments = spec.split(",")
        builds[label] = library
        settings[label] = dict(a.split("=", 1) for a in assignments)
    if args.chain < 1:
        parser.error("--chain takes a count of 1 or more")
    if args.child:
        print(json.dumps(time_one_build(args.child, args.op, args.threads, args.chain,
                                        args.centred, cases)))
        return
    runs: dict[str, list[dict]] = {label: [] for label in builds}
    for _ in range(args.repeats):
        for label, library in builds.items():
            command = [sys.executable, __file__, "--child", library, "--op", args.op,
                       "--threads", str(args.threads), "--chain", str(args.chain),
                       *(["--centred"] if args.centred else []), *cases]
            out = subprocess.run(command, capture_output=True, text=True, check=True,
                                 timeout=600, env={**os.environ, **settings[label]})
            runs[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
    labels = list(builds)
    chained = f", chains of {args.chain} calls, per call" if args.chain > 1 else ""
    print(f"{args.op}, {args.threads} thread(s), {args.repeats} processes per build{chained}; "
          f"µs (ratio to {labels[0]})")
    print(f"{'case':24s} " + " ".join(f"{label:>16s}" for label in labels))
    for case in cases:
        medians = [statistics.median(r[case] for r in runs[label]) for label in labels]
        print(f"{case:24s} " + " ".join(f"{m:9.0f} ({m / medians[0]:4.2f})" for m in medians))


if __name__ == "__main__":
    main()
