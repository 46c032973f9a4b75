"""`make test-large` (not in CI: ~13 GB of memory, minutes): a float16 tensor of more than 2^31
elements through the shim, against a float64 oracle computed chunk by chunk. With 32-bit index
arithmetic anywhere, the elements past 2^31 would be read or written at the wrong places.

Memory: x, dy and x_backprop take 4.3 GB each. The inputs are drawn by one TensorFlow op each
(no temporaries), and the oracle reads row chunks sliced from the tensors (a full .numpy() copy
of each would not fit next to them in 24 GB)."""

import os

import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops

SHAPE = (1, 32768, 32769, 2)  # NHWC, 2,147,549,184 elements > 2^31
CHUNK_ROWS = 1 << 24
MEAN = np.array([0.01, -0.02], np.float32)  # the op takes the statistics as given
VARIANCE = np.array([1.1, 0.9], np.float32)
SCALE = np.array([0.75, 1.25], np.float32)


def _random(seed: int) -> tf.Tensor:
    return tf.raw_ops.StatelessRandomNormal(shape=SHAPE, seed=[seed, 7], dtype=tf.float16)


def _chunks(*tensors):
    """Row chunks of [rows, C] views of the tensors, as float64 arrays."""
    rows = tensors[0].shape[0]
    for start in range(0, rows, CHUNK_ROWS):
        yield [t[start:start + CHUNK_ROWS].numpy().astype(np.float64) for t in tensors]


@pytest.mark.skipif(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") < 20 * 2**30,
                    reason="needs 20 GiB of memory")
def test_more_than_2_pow_31_elements_float16() -> None:
    elements = int(np.prod(SHAPE))
    assert elements > 2**31
    channels = SHAPE[-1]
    rows = elements // channels
    dy, x = _random(1), _random(2)
    out = tf_fbn_ops.fused_batch_norm_grad_v3(
        dy, x, tf.constant(SCALE), tf.constant(MEAN), tf.constant(VARIANCE), tf.zeros([0]),
        epsilon=1e-3, data_format="NHWC", is_training=True)
    dy2, x2 = tf.reshape(dy, [rows, channels]), tf.reshape(x, [rows, channels])
    dx2 = tf.reshape(out.x_backprop, [rows, channels])

    inv_std = 1.0 / np.sqrt(VARIANCE.astype(np.float64) + float(np.float32(1e-3)))
    sum_dy = np.zeros(channels)
    sum_dy_xc = np.zeros(channels)
    scaled = np.zeros(channels)
    for d, xv in _chunks(dy2, x2):
        sum_dy += d.sum(axis=0)
        sum_dy_xc += (d * (xv - MEAN)).sum(axis=0)
        scaled += (d * ((xv - MEAN) * inv_std)).sum(axis=0)
    np.testing.assert_allclose(out.offset_backprop.numpy(), sum_dy, rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(out.scale_backprop.numpy(), scaled, rtol=1e-6, atol=1e-3)

    coef2 = inv_std * inv_std * (sum_dy_xc / rows)
    worst = 0.0
    for d, xv, got in _chunks(dy2, x2, dx2):  # every element, the last ones included
        want = (SCALE * inv_std) * ((d - sum_dy / rows) - (xv - MEAN) * coef2)
        worst = max(worst, float(np.max(np.abs(got - want) / (np.abs(want) + 1e-3))))
    assert worst <= 2.0**-10, worst  # one float16 rounding
    print(f"max relative x_backprop error {worst:.3g} over {elements} elements")
