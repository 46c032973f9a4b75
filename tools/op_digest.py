"""The ops' output bits on fixed inputs, one hash per case, to compare two machines (the
platform test compares an AArch64 root under qemu with this x86-64 machine).

Every op, dtype, layout (5-D too for V3) and mode, on a shape of the exact family (fewer than
1024 elements per channel) and one of the streaming family, eagerly and, where the library has
XLA, under jit_compile; the forward ops likewise, in training with a running average;
synchronized batch norm's two ops likewise (its sums, then x_backprop and the gradients from
twice those sums and twice the count, as two replicas with the same batch would give). Inputs are built from integers (numpy's PCG64 stream, scaled by powers
of two), so they are the same bits everywhere; the saved statistics are made up the same way
rather than taken from TensorFlow's forward op, whose own bits may differ between machines.

Usage: python op_digest.py [--no-xla]   prints "case sha256" lines and a last "digest" line.
"""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

OPS = {"V1": ("float32",), "V2": ("float32", "float16", "bfloat16"),
       "V3": ("float32", "float16", "bfloat16")}
CHANNELS_LAST = {"NHWC": True, "NCHW": False, "NDHWC": True, "NCDHW": False}
# (N, spatial..., C) in channels-last order; exact family, then streaming family.
SHAPES_4D = ((3, 5, 7, 12), (8, 16, 16, 20))
SHAPES_5D = ((2, 3, 4, 5, 12), (4, 4, 8, 16, 20))
EPSILON = 1e-3


def inputs(tf, dtype: str, shape: tuple[int, ...], channels_last: bool, seed: int) -> dict:
    rng = np.random.Generator(np.random.PCG64(seed))
    channels = shape[-1]

    def exact(size, low: int, high: int, scale_bits: int) -> np.ndarray:
        return (rng.integers(low, high, size, dtype=np.int64) / 2.0**scale_bits).astype(
            np.float32)

    x = exact(shape, -2**14, 2**14, 12) + np.float32(0.75)
    dy = exact(shape, -2**14, 2**14, 13)
    if not channels_last:
        order = (0, len(shape) - 1, *range(1, len(shape) - 1))
        x, dy = x.transpose(order).copy(), dy.transpose(order).copy()
    return {"y_backprop": tf.cast(dy, dtype), "x": tf.cast(x, dtype),
            "scale": tf.constant(exact(channels, 2**11, 2**13, 12)),
            "reserve_space_1": tf.constant(exact(channels, 2**10, 2**12, 12)),
            "reserve_space_2": tf.constant(exact(channels, 2**12, 2**15, 12))}


def cases():
    seed = 0
    for op, dtypes in OPS.items():
        for dtype in dtypes:
            for layout, channels_last in CHANNELS_LAST.items():
                if len(layout) == 5 and op != "V3":
                    continue
                for shape in SHAPES_5D if len(layout) == 5 else SHAPES_4D:
                    for training in (True, False):
                        seed += 1
                        yield op, dtype, layout, channels_last, shape, training, seed


def forward_cases():
    for op, dtype, layout, channels_last, shape, training, seed in cases():
        yield "forward " + op, dtype, layout, channels_last, shape, training, seed + 500


def forward_call(tf_fbn_ops, op: str, args: dict, layout: str, training: bool):
    """The forward op's five (V3: six) outputs on a case's inputs: its x, scale, and the
    saved statistics as offset, mean and variance."""
    forward = {"V1": tf_fbn_ops.fused_batch_norm_forward,
               "V2": tf_fbn_ops.fused_batch_norm_forward_v2,
               "V3": tf_fbn_ops.fused_batch_norm_forward_v3}[op]
    return lambda: forward(args["x"], args["scale"], args["reserve_space_1"],
                           args["reserve_space_1"], args["reserve_space_2"], epsilon=EPSILON,
                           exponential_avg_factor=0.5, data_format=layout, is_training=training)


def sync_cases():
    seed = 1000
    for dtype in OPS["V3"]:
        for layout, channels_last in CHANNELS_LAST.items():
            for shape in SHAPES_5D if len(layout) == 5 else SHAPES_4D:
                seed += 1
                yield "sync", dtype, layout, channels_last, shape, True, seed


def sync_halves(ops, layout: str):
    """Both synchronized ops, as one replica of two with the same batch: their five outputs."""

    def halves(y_backprop, x, scale, reserve_space_1, reserve_space_2):
        sums = ops.sync_batch_norm_grad_sums(y_backprop, x, reserve_space_1, data_format=layout)
        count = 2 * (elements(x) // scale.shape[0])
        out = ops.sync_batch_norm_grad_from_sums(
            y_backprop, x, scale, reserve_space_1, reserve_space_2, 2.0 * sums.sum_dy,
            2.0 * sums.sum_dy_xc, count, epsilon=EPSILON, data_format=layout)
        return (sums.sum_dy, sums.sum_dy_xc, *out)

    return halves


def elements(x) -> int:
    return int(np.prod(x.shape))


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # noqa: PLC0415

    import tf_fbn_ops  # noqa: PLC0415
    from tf_fbn_ops import _loader  # noqa: PLC0415

    tf_fbn_ops.load_library()
    xla = "--no-xla" not in argv and _loader.xla_missing_reason() is None
    shims = {"V1": tf_fbn_ops.fused_batch_norm_grad, "V2": tf_fbn_ops.fused_batch_norm_grad_v2,
             "V3": tf_fbn_ops.fused_batch_norm_grad_v3}
    total = hashlib.sha256()
    count = 0
    for op, dtype, layout, channels_last, shape, training, seed in (*cases(), *forward_cases(),
                                                                     *sync_cases()):
        args = inputs(tf, dtype, shape, channels_last, seed)
        if op.startswith("forward"):
            forward = forward_call(tf_fbn_ops, op.split()[1], args, layout, training)
            runs = {"eager": forward}
            if xla:
                runs["xla"] = tf.function(forward, jit_compile=True)
        elif op == "sync":
            halves = sync_halves(tf_fbn_ops.ops, layout)
            runs = {"eager": lambda: halves(**args)}
            if xla:
                runs["xla"] = tf.function(lambda: halves(**args), jit_compile=True)
        else:
            if op == "V3":
                args["reserve_space_3"] = tf.zeros([0])
            attrs = {"epsilon": EPSILON, "data_format": layout, "is_training": training}
            runs = {"eager": lambda: shims[op](**args, **attrs)[:3]}
            if xla:
                runs["xla"] = tf.function(lambda: shims[op](**args, **attrs)[:3],
                                          jit_compile=True)
        for how, call in runs.items():
            digest = hashlib.sha256()
            for output in call():
                digest.update(output.numpy().tobytes())
            name = f"{op} {dtype} {layout} {'x'.join(map(str, shape))} training={training} {how}"
            print(f"{name} {digest.hexdigest()[:16]}", flush=True)
            total.update(digest.digest())
            count += 1
    print(f"digest {count} cases {total.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
