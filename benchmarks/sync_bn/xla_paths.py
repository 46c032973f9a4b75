"""`make bench-sync-xla`: synchronized batch norm's two backward ops (one replica's sums, then
x_backprop from global sums) compiled with jit_compile=True on each XLA path, the custom calls
of the kernels and the HLO lowerings (TF_FBN_OPS_XLA_LOWERING=hlo), beside the same ops run by
their kernels in a tf.function without XLA. Median of alternating rounds in one process, the
ratio against the custom calls; the custom calls' outputs must be the kernels' bits.

Usage: python benchmarks/sync_bn/xla_paths.py [--rounds R] [--dtype float32|float16|bfloat16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

from tf_fbn_ops import _loader
from tf_fbn_ops import ops as shim_ops

SHAPES = (("NHWC", (32, 28, 28, 128)), ("NCHW", (32, 128, 28, 28)), ("NHWC", (8, 7, 7, 2048)),
          ("NDHWC", (2, 8, 28, 28, 64)))


def halves_of(data_format: str):
    def halves(dy, x, scale, mean, variance, count):
        sums = shim_ops.sync_batch_norm_grad_sums(dy, x, mean, data_format=data_format)
        # As if a second replica had brought the same sums.
        return shim_ops.sync_batch_norm_grad_from_sums(
            dy, x, scale, mean, variance, sums.sum_dy * 2.0, sums.sum_dy_xc * 2.0, count,
            epsilon=1e-3, data_format=data_format)

    return halves


def compiled(fn, args, lowering: str | None):
    """fn compiled now under jit_compile=True with the path `lowering` selects (the variable is
    read when XLA compiles)."""
    os.environ.pop(_loader.XLA_LOWERING_VARIABLE, None)
    if lowering:
        os.environ[_loader.XLA_LOWERING_VARIABLE] = lowering
    function = tf.function(fn, jit_compile=True)
    function(*args)
    os.environ.pop(_loader.XLA_LOWERING_VARIABLE, None)
    return function


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args(argv)
    if _loader.xla_ffi_missing_reason() is not None:
        print(f"no custom calls in this build: {_loader.xla_ffi_missing_reason()}")
        return 1
    rng = np.random.default_rng(0)
    print(f"{'layout':6} {'shape':20} {'kernels ms':>10} {'custom call ms':>14} {'HLO ms':>8} "
          f"{'HLO/custom':>10}")
    for data_format, shape in SHAPES:
        channels = shape[-1 if data_format.endswith("C") else 1]
        inputs = (tf.cast(rng.standard_normal(shape), args.dtype),
                  tf.cast(rng.standard_normal(shape) + 0.5, args.dtype),
                  tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32),
                  tf.constant(rng.uniform(0.3, 0.7, channels), tf.float32),
                  tf.constant(rng.uniform(0.5, 2.0, channels), tf.float32),
                  tf.constant(2 * int(np.prod(shape)) // channels, tf.int64))
        halves = halves_of(data_format)
        paths = {"kernels": tf.function(halves), "custom": compiled(halves, inputs, None),
                 "hlo": compiled(halves, inputs, "hlo")}
        kernels_out = paths["kernels"](*inputs)
        custom_out = paths["custom"](*inputs)
        if not all(a.numpy().tobytes() == b.numpy().tobytes()
                   for a, b in zip(kernels_out, custom_out)):
            print(f"FAIL {data_format} {shape}: the custom calls differ from the kernels")
            return 1
        times = {name: [] for name in paths}
        for _ in range(args.rounds):
            for name, function in paths.items():
                start = time.perf_counter()
                function(*inputs)[0].numpy()
                times[name].append(time.perf_counter() - start)
        ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        print(f"{data_format:6} {str(shape):20} {ms['kernels']:10.2f} {ms['custom']:14.2f} "
              f"{ms['hlo']:8.2f} {ms['hlo'] / ms['custom']:9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
