"""`python -m tf_fbn_ops check`: the CPU part runs here and passes, says plainly that no GPU was
checked, and its checks fail when the shim is wrong or not deterministic."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
import tensorflow as tf

import tf_fbn_ops
from tf_fbn_ops import _loader
from tf_fbn_ops.cli import self_check


def test_check_passes_on_this_machine_and_says_what_it_did_not_check() -> None:
    result = subprocess.run([sys.executable, "-m", "tf_fbn_ops", "check"], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "FAIL" not in out
    assert f"TensorFlow {tf.__version__}" in out and "library's GPU kernels:" in out
    assert "devices TensorFlow sees: /device:CPU:0" in out
    if not tf.config.list_physical_devices("GPU"):
        assert "GPU: none visible to TensorFlow, so only the CPU is checked" in out
        assert "the GPU part of this check passed on an NVIDIA H100" in out
    for name in ("parity", "deterministic", "in place"):
        assert f"PASS /device:CPU:0: {name} 28/28 cases" in out
    if _loader.xla_missing_reason() is None:
        assert "PASS /device:CPU:0: XLA parity 28/28 cases" in out
    for name in ("forward parity", "forward deterministic"):
        assert f"PASS CPU: {name} 28/28 cases" in out
    if _loader.xla_missing_reason() is None:
        assert "PASS CPU: forward under XLA 28/28 cases" in out
    assert "Keras 3 layer training step as a graph matches" in out
    if _loader.xla_missing_reason() is None:
        assert "Keras 3 layer training step compiled by XLA matches" in out
    assert out.strip().splitlines()[-1].endswith(" passed, 0 failed")


def _case(shim) -> dict:
    tf_fbn_ops.load_library()
    return self_check._one_case(tf, shim, tf.raw_ops.FusedBatchNormGradV2, "V2", "float32",
                                "NCHW", True, seed=1, xla=False)


def test_a_wrong_result_fails_parity() -> None:
    def off_by_a_little(**kwargs):
        out = tf_fbn_ops.fused_batch_norm_grad_v2(**kwargs)
        return (out.x_backprop * (1 + 1e-4), *out[1:])

    assert _case(tf_fbn_ops.fused_batch_norm_grad_v2)["parity"] is None
    assert "output 0: error" in _case(off_by_a_little)["parity"]


def test_changing_bits_fail_determinism() -> None:
    calls = itertools.count()

    def drifting(**kwargs):
        out = tf_fbn_ops.fused_batch_norm_grad_v2(**kwargs)
        return (out.x_backprop, out.scale_backprop * (1 + 2**-20 * next(calls)), *out[2:])

    outcome = _case(drifting)
    assert outcome["deterministic"] == "run 2 output 1 differs"


@pytest.mark.skipif(_loader.xla_missing_reason() is not None, reason="no XLA lowerings")
def test_xla_parity_compiles_the_forward_with_the_gradient() -> None:
    """A gradient that reads the compiled forward's statistic as the other kind (an inverse
    standard deviation where it is a variance) fails XLA parity; the shim passes."""
    def misreading(**kwargs):
        inverse_std = kwargs["reserve_space_2"]
        variance = 1.0 / tf.square(inverse_std) - kwargs["epsilon"]
        return tf_fbn_ops.fused_batch_norm_grad_v3(**dict(kwargs, reserve_space_2=variance))

    def case(shim):
        tf_fbn_ops.load_library()
        return self_check._one_case(tf, shim, tf.raw_ops.FusedBatchNormGradV3, "V3", "float32",
                                    "NHWC", True, seed=2, xla=True)

    assert case(tf_fbn_ops.fused_batch_norm_grad_v3)["XLA parity"] is None
    assert "output 0: error" in case(misreading)["XLA parity"]
