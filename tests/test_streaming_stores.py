"""TF_FBN_OPS_STREAMING_MIB: where x_backprop (and the forward's y) bypasses the caches is a
speed setting only.

The core's own test compares non-temporal and ordinary stores loop by loop; this one checks the
setting as a user sets it: read once per process, every value giving the same bits, a value that
is not a number ignored with one line on stderr.
"""

from __future__ import annotations

import json

import pytest

from fresh_process import run_python

# x_backprop and the forward's y of each case, as hex digests, for every layout and mode, and
# once in place (x_backprop over a dead y_backprop, which never streams).
DIGESTS = """
    import hashlib, json
    import numpy as np
    import tensorflow as tf
    import tf_fbn_ops
    digests = {}
    rng = np.random.default_rng(7)
    for shape, data_format in [((8, 28, 28, 256), "NHWC"), ((8, 256, 28, 28), "NCHW"),
                               ((4, 8, 8, 2048), "NHWC")]:
        channels = shape[-1] if data_format == "NHWC" else shape[1]
        dy = rng.standard_normal(shape).astype(np.float32)
        x = rng.standard_normal(shape).astype(np.float32)
        for is_training in (True, False):
            out = tf_fbn_ops.fused_batch_norm_grad_v3(
                y_backprop=dy, x=x, scale=np.full(channels, 1.5, np.float32),
                reserve_space_1=np.full(channels, 0.25, np.float32),
                reserve_space_2=np.full(channels, 0.75, np.float32),
                reserve_space_3=np.zeros(0, np.float32), data_format=data_format,
                is_training=is_training)
            key = f"{shape} {data_format} {is_training}"
            digests[key] = hashlib.sha256(out.x_backprop.numpy().tobytes()).hexdigest()
            forward = tf_fbn_ops.fused_batch_norm_forward_v3(
                x, np.full(channels, 1.5, np.float32), np.full(channels, 0.5, np.float32),
                np.full(channels, 0.25, np.float32), np.full(channels, 0.75, np.float32),
                data_format=data_format, is_training=is_training)
            digests["forward " + key] = hashlib.sha256(forward.y.numpy().tobytes()).hexdigest()

    @tf.function
    def in_place(dy, x):
        out = tf_fbn_ops.fused_batch_norm_grad_v3(
            y_backprop=dy * 2.0, x=x, scale=tf.ones([256]), reserve_space_1=tf.zeros([256]),
            reserve_space_2=tf.ones([256]), reserve_space_3=tf.zeros([0]), is_training=True)
        return out.x_backprop

    dy = rng.standard_normal((8, 28, 28, 256)).astype(np.float32)
    digests["in place"] = hashlib.sha256(in_place(dy, dy).numpy().tobytes()).hexdigest()
    print(json.dumps(digests))
    """


def _digests(**env: str) -> tuple[dict, str]:
    result = run_python(DIGESTS, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.fixture(scope="module")
def default_digests() -> dict:
    digests, stderr = _digests()
    assert "TF_FBN_OPS_STREAMING_MIB" not in stderr
    return digests


@pytest.mark.parametrize("setting", ["0", "1048576", "not-a-number", "-3", "99999999999999"])
def test_streaming_setting_changes_no_bits(default_digests, setting):
    """0 streams every x_backprop that may stream, 1 TiB none, bad values keep the CPU's own
    threshold and say so; the bits are the default's in every case."""
    digests, stderr = _digests(TF_FBN_OPS_STREAMING_MIB=setting, TF_CPP_MIN_LOG_LEVEL="1")
    assert digests == default_digests
    warned = "TF_FBN_OPS_STREAMING_MIB" in stderr
    assert warned == (setting not in ("0", "1048576")), stderr
