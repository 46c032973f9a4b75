"""The training-step benchmark (python -m harness --training) runs end to end.

Correctness only: every variant timed, ratios and shares computed from the times they claim to
compare. No timing is asserted, since the machine may be busy.
"""

import json
import math
import os
import subprocess
import sys

import pytest

from harness_run import harness_environment

VARIANTS = ("keras3", "keras3_shim", "keras2", "keras2_shim", "keras3_jit", "keras3_shim_jit")
MODELS = ("resnet2d", "conv3d")
BASELINE = {"keras3_shim": "keras3", "keras2_shim": "keras2", "keras3_shim_jit": "keras3_jit"}
EXPECTED_OPS = {"keras3": [], "keras3_shim": ["FbnFusedBatchNormGradV3"],
                "keras2": ["FusedBatchNormGradV3"], "keras2_shim": ["FbnFusedBatchNormGradV3"],
                "keras3_jit": [], "keras3_shim_jit": ["FbnFusedBatchNormGradV3"]}


def _bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "--training", *args],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          env=harness_environment(TF_CPP_MIN_LOG_LEVEL="2"))


def _positive(value) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_quick_run_times_every_variant(tmp_path) -> None:
    out = tmp_path / "bench"
    result = _bench("--quick", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BN backward (isolated ops) share" in result.stdout
    document = json.loads((out / "training.json").read_text())
    assert document["meta"]["command"].startswith("python -m harness --training")
    assert document["meta"]["options"]["threads"] == [1]
    rows = {(r["model"], r["variant"]): r for r in document["rows"]}
    assert set(rows) == {(m, v) for m in MODELS for v in VARIANTS}
    for (model, variant), row in rows.items():
        assert row["threads"] == 1
        assert len(row["samples_ns"]) == 1  # one round
        assert _positive(row["step_ms"]), (model, variant, row["step_ms"])
        assert row["backward_ops_in_step"] == EXPECTED_OPS[variant]
        backward = row["bn_backward_isolated"]
        assert _positive(backward["ms"]), (model, variant, backward)
        assert backward["share_of_step"] == pytest.approx(backward["ms"] / row["step_ms"])
        assert sum(layer["count"] for layer in backward["layers"]) == row["bn_layers"] > 0
        if variant in BASELINE:
            base = rows[(model, BASELINE[variant])]
            assert row["baseline"] == BASELINE[variant]
            assert row["speedup_vs_baseline"] == pytest.approx(base["step_ms"] / row["step_ms"])
            assert row["round_speedups"] == pytest.approx(
                [b / s for b, s in zip(base["samples_ns"], row["samples_ns"])])
        else:
            assert row["baseline"] is None and row["speedup_vs_baseline"] is None
    markdown = (out / "training.md").read_text()
    assert markdown.startswith("# Training-step benchmark")
    assert all(f"| {m} | {v} |" in markdown for m in MODELS for v in VARIANTS)


def test_bad_options_exit_with_status_2() -> None:
    result = _bench("--models", "resnet3d", timeout=60)
    assert result.returncode == 2
    assert "resnet2d" in result.stderr  # the valid choices are listed


def test_silent_worker_is_killed(tmp_path) -> None:
    """A worker that prints nothing for --timeout seconds is taken for hung: killed, exit 1,
    and the parent says so (here it is still importing TensorFlow after 0.01 s)."""
    result = _bench("--quick", "--timeout", "0.01", "--out", str(tmp_path), timeout=60)
    assert result.returncode == 1
    assert "printed nothing for 0.01 s and was killed" in result.stderr
    assert not (tmp_path / "training.json").exists()
