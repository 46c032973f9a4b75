"""tools/keras_step_errors.py on the CPU: the tool runs every layer, compilation and lowering,
and with our layer a model's first gradients and its losses stay within a few float32 units of
the same model computed in float64 (a lowering that mistook its saved statistics would be off by
thousands). On a GPU the tool is run by tools/tf_cuda_bundle/gpu_checks.sh."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("keras", minversion="3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import keras_step_errors  # noqa: E402
from tf_fbn_ops import _loader  # noqa: E402

# Float32 units (of each variable's largest float64 gradient) a run of our layer may be off:
# the convolutions' and the dense layer's own float32 rounding, carried through the model.
GRADIENT_UNITS = 64
LOSS_UNITS = 8


@pytest.mark.parametrize("data_format, rank", [("channels_last", 4), ("channels_first", 5)])
def test_our_layer_tracks_the_float64_model_on_the_cpu(data_format, rank, capsys):
    rows = keras_step_errors.report(data_format, rank, steps=3, devices=["CPU"])
    names = [row["run"] for row in rows]
    expected = ["CPU graph keras", "CPU graph ours", "CPU xla keras"]
    if _loader.xla_missing_reason() is None:
        expected += ["CPU xla ours custom call", "CPU xla ours hlo"]
    assert names == expected
    for row in rows:
        assert len(row["gradients"]) == 8 and len(row["losses"]) == 3
        if "ours" in row["run"]:
            assert max(row["gradients"]) < GRADIENT_UNITS, row
            assert max(row["losses"]) < LOSS_UNITS, row
    assert "float64 losses:" in capsys.readouterr().out
