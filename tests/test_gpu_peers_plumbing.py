"""The GPU peer benchmark's plumbing, without a GPU: the core's C entry point built against the
host emulator, driven by benchmarks/gpu_peers/peers.py --emulated (the same Case, reference,
error and determinism code the GPU run uses); and its error measure notices inputs that do not
mean what the core expects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmarks" / "gpu_peers"


def test_emulated_run_reports_every_cell(emulated_gpu_core: Path, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(PEERS / "peers.py"), "--emulated", "--core",
                             str(emulated_gpu_core), "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    # 24 cells, each with the default kernels and the two variants.
    assert result.stdout.strip().splitlines()[-1] == "gpu peers: 72 passed, 0 failed"
    rows = json.loads((tmp_path / "peers_emulated.json").read_text())["rows"]
    ours = [r for r in rows if r["impl"] == "ours"]
    for variant in ("ours+separate_launches", "ours+wide_rows"):
        rows_of = [r for r in rows if r["impl"] == variant]
        assert len(rows_of) == 24 and all(
            r["deterministic"] and r["error_units"] <= 1.0 for r in rows_of), rows_of
    # A 4-D and a 5-D shape, each channels-last and channels-first, 3 dtypes, 2 modes: every
    # cell checked against the float64 reference.
    assert sorted((r["layout"], r["dtype"], r["mode"]) for r in ours) == sorted(
        (layout, dtype, mode) for layout in ("NHWC", "NCHW", "NDHWC", "NCDHW")
        for dtype in ("float32", "float16", "bfloat16") for mode in ("train", "infer"))
    for row in ours:
        assert row["deterministic"] and row["error_units"] <= 1.0, row
    cudnn = [r for r in rows if r["impl"] == "cudnn"]
    assert len(cudnn) == 24 and all(r["note"] == "n/a" for r in cudnn)


def test_error_measure_sees_a_variance_where_the_inverse_std_belongs(emulated_gpu_core) -> None:
    """Training inputs in the CPU contract (the variance) instead of the GPU's (inverse std):
    the same harness must report a large error, not a pass."""
    sys.path[:0] = [str(ROOT), str(PEERS)]
    try:
        import backends  # noqa: PLC0415
        import peers  # noqa: PLC0415
    finally:
        del sys.path[:2]
    backend = backends.make(True, peers.load_core(True, emulated_gpu_core))
    case = peers.Case("2x5x5x8", peers.EMULATED_SHAPES["2x5x5x8"], True, "float32", True, 1)
    prepared = backend.prepare(case)
    expected = prepared.reference()
    ours = prepared.implementations()["ours"]
    assert peers.error_units(backend.to_numpy(ours(), case), expected, "float32") <= 1.0
    x = prepared.logical_x
    prepared.var[:] = x.var(axis=(0, 2, 3))  # the variance, read as an inverse std
    assert peers.error_units(backend.to_numpy(ours(), case), expected, "float32") > 1e3
