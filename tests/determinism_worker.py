"""Prints a digest of the shim's outputs on large inputs, with N intra-op threads.

Usage: python determinism_worker.py N. Run by tests/test_determinism.py in fresh processes,
because TensorFlow's thread-pool size can only be set before the first op runs.
"""

import hashlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))

import tf_fbn_ops  # noqa: E402

# Shapes with many work units, in both layouts, and one whose C does not divide evenly.
CASES = [((16, 32, 32, 64), "NHWC"), ((16, 64, 32, 32), "NCHW"), ((4, 8, 16, 16, 24), "NDHWC"),
         ((4, 24, 8, 16, 16), "NCDHW"), ((3, 1, 70001, 1), "NHWC"), ((1, 3, 1, 200000), "NCHW"),
         ((64, 3, 3, 2048), "NHWC")]

if __name__ == "__main__":
    digest = hashlib.sha256()
    rng = np.random.default_rng(42)
    for shape, data_format in CASES:
        c = shape[-1] if data_format in ("NHWC", "NDHWC") else shape[1]
        for dtype in (tf.float32, tf.float16, tf.bfloat16):
            x = tf.cast(rng.standard_normal(shape) * 2 + 0.5, dtype)
            dy = tf.cast(rng.standard_normal(shape), dtype)
            stats = [tf.constant(rng.uniform(0.5, 1.5, c), tf.float32) for _ in range(3)]
            for is_training in (True, False):
                for _ in range(2):  # and run to run
                    out = tf_fbn_ops.fused_batch_norm_grad_v3(
                        dy, x, *stats, tf.zeros([0]), epsilon=1e-3, data_format=data_format,
                        is_training=is_training)
                    for t in out[:3]:
                        digest.update(t.numpy().tobytes())
    print(digest.hexdigest())
