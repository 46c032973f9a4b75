"""The main job: load the ops, run them inside a tf.function graph next to tf.raw_ops, and print
how far each is from a float64 oracle.

Each (op, dtype, layout, mode) gets its own graph, traced once and called as a concrete
function: the attributes are Python values, so one tf.function called with all of them would
retrace for each, and TensorFlow would warn about it.

Run with ``python -m tf_fbn_ops demo`` (``make demo`` sets everything up first).
"""

from __future__ import annotations

import os

import numpy as np

from tf_fbn_ops import reference
from tf_fbn_ops._loader import library_path, load_library
from tf_fbn_ops._onednn import onednn_enabled

# (TensorFlow op, the shim's generated function, dtypes, layouts)
OPS = [("FusedBatchNormGrad", "fbn_fused_batch_norm_grad", ("float32",), ("NHWC", "NCHW")),
       ("FusedBatchNormGradV2", "fbn_fused_batch_norm_grad_v2",
        ("float32", "float16", "bfloat16"), ("NHWC", "NCHW")),
       ("FusedBatchNormGradV3", "fbn_fused_batch_norm_grad_v3",
        ("float32", "float16", "bfloat16"), ("NHWC", "NCHW", "NDHWC", "NCDHW"))]
SHAPES = {"NHWC": (8, 12, 12, 32), "NCHW": (8, 32, 12, 12),
          "NDHWC": (4, 6, 8, 8, 16), "NCDHW": (4, 16, 6, 8, 8)}
EPSILON = 1e-3
STAT_INPUTS = ("y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2")


def _inputs(tf, dtype: str, data_format: str, v3: bool, rng: np.random.Generator) -> dict:
    shape = SHAPES[data_format]
    channels = shape[-1] if data_format in ("NHWC", "NDHWC") else shape[1]
    inputs = {
        "y_backprop": tf.cast(rng.standard_normal(shape), dtype),
        "x": tf.cast(0.5 + 2.0 * rng.standard_normal(shape), dtype),
        "scale": tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32),
        "reserve_space_1": tf.constant(0.5 + 0.1 * rng.standard_normal(channels), tf.float32),
        "reserve_space_2": tf.constant(rng.uniform(3.0, 5.0, channels), tf.float32),
    }
    if v3:
        inputs["reserve_space_3"] = tf.zeros([0], tf.float32)
    return inputs


def _max_relative_error(outputs, oracle) -> float:
    """Largest normwise error over x_backprop, scale_backprop and offset_backprop."""
    return max(float(np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want)))
               for got, want in zip(outputs[:3], oracle))


def _graph(tf, op, attrs: dict, kwargs: dict):
    """`op` with `attrs` fixed, as a graph traced once for the tensors of `kwargs`."""
    # Raw ops take keywords only; the attributes are baked into the graph.
    return tf.function(lambda **tensors: op(**tensors, **attrs)).get_concrete_function(**kwargs)


def main() -> None:
    """Prints the parity table."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # noqa: PLC0415

    shim = load_library()
    onednn = {True: "on", False: "off", None: "unknown"}[onednn_enabled()]
    print(f"TensorFlow {tf.__version__} (oneDNN kernels {onednn}); library {library_path()}")
    print("Max normwise error vs a float64 oracle over (x_backprop, scale_backprop, "
          "offset_backprop); each op runs inside a tf.function graph.\n")
    header = f"{'op':<22}{'dtype':<10}{'layout':<8}{'mode':<7}{'shim':>11}{'tf.raw_ops':>13}"
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(2026)
    rows = at_least_as_accurate = 0
    for op, shim_name, dtypes, formats in OPS:
        for dtype in dtypes:
            for data_format in formats:
                for is_training in (True, False):
                    kwargs = _inputs(tf, dtype, data_format, op.endswith("V3"), rng)
                    attrs = dict(epsilon=EPSILON, data_format=data_format,
                                 is_training=is_training)
                    oracle = reference.batch_norm_grad(
                        *(kwargs[k].numpy() for k in STAT_INPUTS), EPSILON, data_format,
                        is_training)
                    shim_error = _max_relative_error(
                        _graph(tf, getattr(shim, shim_name), attrs, kwargs)(**kwargs), oracle)
                    try:
                        tf_error = _max_relative_error(
                            _graph(tf, getattr(tf.raw_ops, op), attrs, kwargs)(**kwargs), oracle)
                        tf_text = f"{tf_error:13.2e}"
                    except tf.errors.InvalidArgumentError:
                        tf_error, tf_text = None, "    (refuses)"
                    rows += 1
                    at_least_as_accurate += tf_error is None or shim_error <= tf_error
                    mode = "train" if is_training else "infer"
                    print(f"{op:<22}{dtype:<10}{data_format:<8}{mode:<7}{shim_error:11.2e}"
                          f"{tf_text}")
    print("\n(refuses): TensorFlow's CPU kernel supports inference mode in NHWC only; the shim "
          "computes channels-first inference too.")
    print(f"The shim was at least as accurate as tf.raw_ops in {at_least_as_accurate} of {rows} "
          "cases.")


if __name__ == "__main__":
    main()
