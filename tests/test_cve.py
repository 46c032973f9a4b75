"""The public proofs of concept of the two CVEs in TensorFlow's batch-norm kernels, and their
layout variants, raise TensorFlow's InvalidArgument text on the shim (and never touch memory
out of bounds: `make sanitize` runs this file under AddressSanitizer)."""

from __future__ import annotations

import re

import pytest
import tensorflow as tf

from tf_calls import BUILTIN, SHIM



def _error(fn, **kwargs) -> str:
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        fn(**kwargs)
    return re.sub(r"Fbn(FusedBatchNormGrad)", r"\1", e.value.message)


def _both(op: str, expected: str, **kwargs) -> None:
    if op == "V3":
        kwargs["reserve_space_3"] = tf.zeros([0])
    ours = _error(SHIM[op], **kwargs)
    assert expected in ours
    assert ours == _error(BUILTIN[op], **kwargs)


@pytest.mark.parametrize("op", ["V1", "V2", "V3"])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_cve_2021_41223_shape_mismatch(op: str, data_format: str) -> None:
    """GHSA-f54p-f6jp-4rhr: y_backprop larger than x, and a reserve_space_2 longer than C."""
    _both(op, "x and y_backprop must have same shape, but x has shape [1,1,1,2] and "
              "y_backprop has shape [1,1,3,3]",
          y_backprop=tf.constant([float(i) for i in range(9)], shape=(1, 1, 3, 3)),
          x=tf.constant([float(i) for i in range(2)], shape=(1, 1, 1, 2)),
          scale=[1.0, 1.0], reserve_space_1=[1.0, 1.0], reserve_space_2=[1.0, 1.0, 1.0],
          epsilon=1.0, data_format=data_format, is_training=True)


@pytest.mark.parametrize("op", ["V1", "V2", "V3"])
@pytest.mark.parametrize("data_format,shape,channels", [("NCHW", (1, 2, 3, 3), 2),
                                                        ("NHWC", (1, 3, 3, 2), 2)])
@pytest.mark.parametrize("is_training", [True, False])
def test_cve_2021_41223_reserve_space_2_too_long(op, data_format, shape, channels,
                                                 is_training) -> None:
    _both(op, f"reserve_space_2 must have the same number of elements as the channels of x, "
              f"got 3 and {channels}",
          y_backprop=tf.ones(shape), x=tf.ones(shape), scale=[1.0] * channels,
          reserve_space_1=[1.0] * channels, reserve_space_2=[1.0, 1.0, 1.0], epsilon=1.0,
          data_format=data_format, is_training=is_training)


@pytest.mark.parametrize("op", ["V1", "V2", "V3"])
@pytest.mark.parametrize("data_format,shape", [("NHWC", (10, 10, 10, 6)),
                                               ("NCHW", (10, 6, 10, 10))])
@pytest.mark.parametrize("per_channel", [[0.0], []])
@pytest.mark.parametrize("which", ["scale", "reserve_space_1", "reserve_space_2"])
def test_cve_2021_29583_short_or_empty_per_channel_tensors(op, data_format, shape, per_channel,
                                                           which) -> None:
    """GHSA-9xh4-23q4-v6wr, aimed at the gradient ops: per-channel tensors of one element, or
    empty, for an x with 6 channels (heap over-read, or a null dereference when empty)."""
    kwargs = dict(y_backprop=tf.zeros(shape), x=tf.zeros(shape), scale=tf.ones([6]),
                  reserve_space_1=tf.zeros([6]), reserve_space_2=tf.ones([6]), epsilon=0.0,
                  data_format=data_format, is_training=False)
    kwargs[which] = tf.constant(per_channel, shape=[len(per_channel)], dtype=tf.float32)
    _both(op, f"{which} must have the same number of elements as the channels of x, got "
              f"{len(per_channel)} and 6", **kwargs)
