"""Parity smoke test against the installed TensorFlow's tf.raw_ops (run by tools/tf_matrix.py
in each version's environment; needs only NumPy and TensorFlow): all three ops, float32 and
float16/bfloat16, NHWC and NCHW, training and inference. A case passes when the shim's error
against a float64 oracle is at most TensorFlow's plus one unit of the output type, and a graph
whose y_backprop dies at the op (x_backprop may take over its buffer) gives the same bits. Where the
loaded library has XLA lowerings, every case runs once more under tf.function(jit_compile=True)
with the same bound. Prints "SMOKE passed/total" and "XLA passed/total" (or "XLA none") and exits
non-zero on any failure.

Usage: python tf_matrix_smoke.py [LIBRARY.so]  (a library built elsewhere, e.g. by Bazel)
"""

import os
import sys

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if len(sys.argv) > 1:
    os.environ["TF_FBN_OPS_LIBRARY"] = os.path.abspath(sys.argv[1])

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_fbn_ops  # noqa: E402
from tf_fbn_ops import reference  # noqa: E402

UNIT = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
OPS = [("V1", ("float32",)), ("V2", ("float32", "float16", "bfloat16")),
       ("V3", ("float32", "float16", "bfloat16"))]


def has_xla_lowerings() -> bool:
    """Whether the loaded library registered kernels for XLA's CPU device (asked of TensorFlow's
    kernel registry, so it holds for a library built by Bazel too)."""
    from tensorflow.python.framework import kernels

    tf_fbn_ops.load_library()
    registered = kernels.get_registered_kernels_for_op("FbnFusedBatchNormGradV3").kernel
    return any(k.device_type == "XLA_CPU_JIT" for k in registered)


def as_bits(t):
    """The tensor's bytes, for an exact comparison that NaNs and signed zeros cannot fool."""
    return np.frombuffer(t.numpy().tobytes(), np.uint8)


def run_case(op, dtype, data_format, is_training, rng, jit=False):
    shape = (4, 6, 5, 8) if data_format == "NHWC" else (4, 8, 6, 5)
    kwargs = {"y_backprop": tf.cast(rng.standard_normal(shape), dtype),
              "x": tf.cast(rng.standard_normal(shape) * 2 + 0.5, dtype),
              "scale": tf.constant(rng.uniform(0.5, 1.5, 8), tf.float32),
              "reserve_space_1": tf.constant(rng.uniform(0.3, 0.7, 8), tf.float32),
              "reserve_space_2": tf.constant(rng.uniform(3.0, 5.0, 8), tf.float32)}
    if op == "V3":
        kwargs["reserve_space_3"] = tf.zeros([0])
    attrs = dict(epsilon=1e-3, data_format=data_format, is_training=is_training)
    shim = {"V1": tf_fbn_ops.fused_batch_norm_grad, "V2": tf_fbn_ops.fused_batch_norm_grad_v2,
            "V3": tf_fbn_ops.fused_batch_norm_grad_v3}[op]
    builtin = getattr(tf.raw_ops, {"V1": "FusedBatchNormGrad", "V2": "FusedBatchNormGradV2",
                                   "V3": "FusedBatchNormGradV3"}[op])
    ours = (tf.function(lambda: shim(**kwargs, **attrs), jit_compile=True)() if jit
            else shim(**kwargs, **attrs))
    if not jit:
        # In a graph, a y_backprop made there and dead after the op lends x_backprop its buffer
        # (dy + zeros: an Add that no optimizer folds, as zeros is an argument): same bits.
        def in_graph(y_backprop, zeros):
            return shim(**dict(kwargs, y_backprop=y_backprop + zeros), **attrs)
        graph = tf.function(in_graph)(kwargs["y_backprop"], tf.zeros_like(kwargs["y_backprop"]))
        for i in range(3):
            if not np.array_equal(as_bits(graph[i]), as_bits(ours[i])):
                return f"{op} {dtype} {data_format} training={is_training} output {i}: " \
                       "other bits in a graph whose y_backprop dies at the op"
    as64 = lambda t: tf.cast(t, tf.float32).numpy().astype(np.float64)  # noqa: E731
    oracle = reference.batch_norm_grad(*(as64(kwargs[k]) for k in (
        "y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2")), 1e-3, data_format,
        is_training)
    try:
        theirs = builtin(**kwargs, **attrs)
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError):
        theirs = None  # channels-first inference, or no CPU kernel for the dtype in this TF
    for i in range(3):
        out_dtype = dtype if i == 0 else "float32"
        magnitude = np.max(np.abs(oracle[i]))
        error = np.max(np.abs(as64(ours[i]) - oracle[i]))
        allowed = UNIT[out_dtype] * magnitude * 4 if theirs is None else \
            np.max(np.abs(as64(theirs[i]) - oracle[i])) + UNIT[out_dtype] * magnitude
        if not error <= allowed:
            return f"{op} {dtype} {data_format} training={is_training} jit={jit} output {i}: " \
                   f"error {error:.3g} > {allowed:.3g}"
    return None


def main() -> int:
    xla = has_xla_lowerings()
    failures = {False: [], True: []}
    total = 0
    for op, dtypes in OPS:
        for dtype in dtypes:
            for data_format in ("NHWC", "NCHW"):
                for is_training in (True, False):
                    total += 1
                    for jit in (False, True) if xla else (False,):
                        # The same inputs with and without jit.
                        rng = np.random.default_rng(total)
                        failure = run_case(op, dtype, data_format, is_training, rng, jit)
                        if failure:
                            failures[jit].append(failure)
    for failure in failures[False] + failures[True]:
        print("FAIL", failure)
    print(f"library {tf_fbn_ops.library_path()}")
    print(f"SMOKE {total - len(failures[False])}/{total} TensorFlow {tf.__version__}")
    print(f"XLA {total - len(failures[True])}/{total}" if xla else "XLA none")
    return 1 if failures[False] or failures[True] else 0


if __name__ == "__main__":
    sys.exit(main())
