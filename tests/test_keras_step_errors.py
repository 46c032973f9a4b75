"""tools/keras_step_errors.py on every device TensorFlow has: the tool runs every layer,
compilation and lowering, and with our layer a model's first gradients and its losses stay
within a few float32 units of the same model computed in float64 (a lowering that mistook its
saved statistics would be off by thousands to millions: on a GPU under XLA, reading a variance as
an inverse standard deviation was 5e6-5e7 units off). On a GPU, where TensorFloat-32 rounds the
convolutions of both layers' models alike, ours may be off by as much as Keras' layer's row in
the same setting, twice over; tools/tf_cuda_bundle/gpu_checks.sh runs this there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("keras", minversion="3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import keras_step_errors  # noqa: E402
from devices import DEVICES  # noqa: E402
from tf_fbn_ops import _loader  # noqa: E402

# Float32 units (of each variable's largest float64 gradient) a run of our layer may be off:
# the convolutions' and the dense layer's own float32 rounding, carried through the model.
GRADIENT_UNITS = 64
LOSS_UNITS = 8


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("data_format, rank", [("channels_last", 4), ("channels_first", 5)])
def test_our_layer_tracks_the_float64_model(device, data_format, rank, capsys):
    rows = keras_step_errors.report(data_format, rank, steps=3, devices=[device])
    names = [row["run"] for row in rows]
    assert names == [run.name for run in keras_step_errors.runs_for([device])]
    if device == "CPU":
        expected = ["CPU graph keras", "CPU graph ours", "CPU xla keras"]
        if _loader.xla_missing_reason() is None:
            expected += ["CPU xla ours custom call", "CPU xla ours hlo"]
        assert names == expected
    keras_rows = {row["run"].split(" keras")[0]: row for row in rows if row["run"].endswith(
        " keras")}
    for row in rows:
        assert len(row["gradients"]) == 8 and len(row["losses"]) == 3
        if " ours" in row["run"]:
            theirs = keras_rows[row["run"].split(" ours")[0]]
            gradient_bound = max(GRADIENT_UNITS, 2 * max(theirs["gradients"]))
            loss_bound = max(LOSS_UNITS, 2 * max(theirs["losses"]))
            assert max(row["gradients"]) < gradient_bound, (row, theirs)
            assert max(row["losses"]) < loss_bound, (row, theirs)
    assert "float64 losses:" in capsys.readouterr().out
