"""Our FbnFusedBatchNormGradV3 against TensorFlow's FusedBatchNormGradV3 (or, with --op forward,
our FbnFusedBatchNormV3 against FusedBatchNormV3) in one process, on any shapes, the two visited
in alternation round by round: a spot check on shapes of one's own choosing, beside `make
bench`'s fixed cases. Which TensorFlow kernel runs is the process's choice: oneDNN by default,
the stock (Eigen) kernel with TF_ENABLE_ONEDNN_OPTS=0.

    .venv/bin/python benchmarks/tf_kernels_interleaved.py --threads 2 24x14x14x384 48x7x7x768
    TF_ENABLE_ONEDNN_OPTS=0 .venv/bin/python benchmarks/tf_kernels_interleaved.py ...
    .venv/bin/python benchmarks/tf_kernels_interleaved.py --op forward 16x14x14x512

With --chain N each timed call is N calls in a row, each fed the one before's output (the
forward's y as the next x, the gradient's x_backprop as the next y_backprop), and the cell is
the time per call: a call then reads its input from wherever the call before left it, as a
network's next layer does, where repeated calls on one input read it cache-warm. The two can
disagree on what helps: on an Intel Xeon with a 300 MiB L3 the forward's y streamed past the
caches made repeated calls faster and chained ones slower (benchmarks/RESULTS.md). With
--centred the gradient's y_backprop is centred per channel, so that its sums cancel (as a 1x1
convolution's gradient of a training batch norm's x_backprop does): TensorFlow's kernels take
the same time on any data, where ours sums such channels' Σ y_backprop again.

Shapes are NHWC (N x spatial... x C, 4-D or 5-D); --formats NHWC,NCHW also times the
channels-first layout of the same tensors, as NDHWC and NCDHW for 5-D shapes (TensorFlow's stock
kernel refuses channels-first inference: n/a). Each cell: median over --rounds rounds of each
round's median per-call time (eager calls, ~20 ms of calls per round and implementation).
"""

import argparse
import os
import statistics
import time

import numpy as np
import tensorflow as tf

import tf_fbn_ops
from harness.machine import cpu_model


def timed(fn, calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="+", help="NHWC shapes such as 32x14x14x512")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    parser.add_argument("--formats", default="NHWC", help="NHWC, NCHW or both (comma-separated)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--op", choices=("gradient", "forward"), default="gradient")
    parser.add_argument("--chain", type=int, default=1,
                        help="calls per timed call, each fed the one before's output (default 1)")
    parser.add_argument("--centred", action="store_true",
                        help="the gradient's y_backprop centred per channel (its sums cancel)")
    args = parser.parse_args()
    if args.chain < 1:
        parser.error("--chain takes a count of 1 or more")
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    kernel = "stock" if os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0" else "oneDNN"
    print(f"{cpu_model()}; TensorFlow {tf.__version__}, its {kernel} kernel, {args.threads} "
          f"thread(s); "
          f"{args.op}{f', chains of {args.chain} calls, time per call' if args.chain > 1 else ''}"
          f"{', y_backprop centred per channel' if args.centred else ''}; "
          f"ratio = TensorFlow's time / ours (above 1: ours is faster)")
    for text in args.shapes:
        dims = [int(v) for v in text.split("x")]
        channels = dims[-1]
        mbytes = np.prod(dims) * 4 / 1e6
        for layout in args.formats.split(","):
            shape = dims if layout == "NHWC" else [dims[0], channels, *dims[1:-1]]
            # A 5-D shape takes the 5-D name of the same layout (NDHWC, NCDHW).
            data_format = layout if len(dims) == 4 else {"NHWC": "NDHWC", "NCHW": "NCDHW"}[layout]
            rng = np.random.default_rng(0)
            x = tf.constant(rng.standard_normal(shape, dtype=np.float32))
            scale = tf.constant(rng.random(channels, dtype=np.float32) + 0.5)
            mean = tf.constant(rng.standard_normal(channels, dtype=np.float32))
            variance = tf.constant(rng.random(channels, dtype=np.float32) + 0.5)
            if args.op == "forward":
                tensors = dict(x=x, scale=scale, offset=mean, mean=mean, variance=variance)
                pair = (tf_fbn_ops.fused_batch_norm_forward_v3, tf.raw_ops.FusedBatchNormV3)
            else:
                dy = rng.standard_normal(shape, dtype=np.float32)
                if args.centred:  # each channel's Σ y_backprop about zero
                    channel_axis = len(shape) - 1 if layout == "NHWC" else 1
                    axes = tuple(a for a in range(len(shape)) if a != channel_axis)
                    dy = (dy - dy.mean(axis=axes, keepdims=True)).astype(np.float32)
                tensors = dict(y_backprop=tf.constant(dy), x=x, scale=scale,
                               reserve_space_1=mean, reserve_space_2=variance,
                               reserve_space_3=tf.zeros([0]))
                pair = (tf_fbn_ops.fused_batch_norm_grad_v3, tf.raw_ops.FusedBatchNormGradV3)
            for training in (True, False):
                ops = dict(zip(("ours", "tf"), pair))

                # The input a chained call takes from the one before: y or x_backprop.
                fed = "x" if args.op == "forward" else "y_backprop"

                def call(op, training=training, data_format=data_format):
                    inputs = dict(tensors)
                    for _ in range(args.chain):
                        inputs[fed] = op(**inputs, epsilon=1e-3, data_format=data_format,
                                         is_training=training)[0]
                    return inputs[fed]
                fns = {name: (lambda op=op: call(op)) for name, op in ops.items()}
                for name in list(fns):
                    try:
                        fns[name]()
                        fns[name]()
                    except tf.errors.InvalidArgumentError:
                        del fns[name]  # the stock kernel's channels-first inference
                calls = max(3, int(0.02 / timed(fns["ours"], 3)))
                per_round = {name: [] for name in fns}
                for _ in range(args.rounds):
                    for name, fn in fns.items():
                        per_round[name].append(timed(fn, calls))
                us = {name: statistics.median(v) * 1e6 / args.chain
                      for name, v in per_round.items()}
                theirs = f"{us['tf']:9.0f} us  {us['tf'] / us['ours']:5.2f}x" if "tf" in us \
                    else "      n/a"
                print(f"{text:>16} {mbytes:5.1f} MB {data_format} "
                      f"{'train' if training else 'infer'}  ours {us['ours']:8.0f} us  "
                      f"{kernel} {theirs}", flush=True)


if __name__ == "__main__":
    main()
