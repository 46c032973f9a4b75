"""tf.vectorized_map over the shim's ops uses a real converter (no while-loop fallback)."""

import numpy as np
import pytest
import tensorflow as tf

from tf_calls import SHIM



@pytest.mark.parametrize("op", ["V1", "V2", "V3"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("is_training", [True, False])
def test_vectorized_map_equals_a_loop(op: str, data_format: str, is_training: bool) -> None:
    rng = np.random.default_rng(2)
    batch = 3
    shape = (2, 4, 5, 3) if data_format == "NHWC" else (2, 3, 4, 5)
    dy = tf.constant(rng.standard_normal((batch, *shape)), tf.float32)
    x = tf.constant(rng.standard_normal((batch, *shape)), tf.float32)
    scale, mean, variance = (tf.constant(rng.uniform(0.5, 1.5, (batch, 3)), tf.float32)
                             for _ in range(3))

    def one(args):
        extra = [tf.zeros([0])] if op == "V3" else []
        return SHIM[op](*args, *extra, epsilon=1e-3, data_format=data_format,
                        is_training=is_training)[:3]

    elems = (dy, x, scale, mean, variance)
    vectorized = tf.vectorized_map(one, elems, fallback_to_while_loop=False)
    looped = [one([e[i] for e in elems]) for i in range(batch)]
    for k in range(3):
        np.testing.assert_allclose(vectorized[k], tf.stack([r[k] for r in looped]),
                                   rtol=1e-5, atol=1e-5)
