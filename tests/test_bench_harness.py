"""The benchmark harness (python -m harness, from benchmarks/) runs end to end and counts bytes right.

Correctness only: no timing is asserted, since the machine may be busy.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from harness_run import harness_environment
from harness import crosscheck, streaming, traffic
from harness.cases import Case, all_cases, select

TINY = "^1x8x8x32-NHWC-train-float32$"
IMPLS = ("shim", "tf_onednn", "stream")


def _case(shape, layout="NHWC", training=True, dtype="float32") -> Case:
    return Case(tuple(shape), layout, training, dtype)


def test_model_bytes_follow_the_pass_model() -> None:
    big = _case((32, 56, 56, 64))  # x+dy = 51 MB > 16 MiB: two sweeps from memory
    assert traffic.model_passes(big) == 5
    assert traffic.model_bytes(big) == 5 * 4 * 32 * 56 * 56 * 64  # 128.5 MB
    mid = _case((32, 14, 14, 256))  # x+dy = 12.8 MB: the second sweep hits the cache
    assert traffic.model_bytes(mid) == 3 * 4 * 32 * 14 * 14 * 256
    assert traffic.model_bytes(_case((32, 56, 56, 64), training=False)) == 3 * 4 * 6422528
    half = _case((32, 28, 28, 128), dtype="bfloat16")  # 2-byte elements: 12.8 MB of x+dy
    assert traffic.model_bytes(half) == 3 * 2 * 32 * 28 * 28 * 128
    # The streaming kernel always makes both training sweeps.
    assert traffic.stream_bytes(mid) == 5 * 4 * 32 * 14 * 14 * 256
    assert traffic.stream_bytes(_case((4, 16, 32, 32, 32), "NCDHW", False)) == 3 * 4 * 2097152
    assert traffic.gigabytes_per_second(10**9, 1e6) == pytest.approx(1.0)


def test_case_list_is_the_full_benchmark() -> None:
    cases = all_cases()
    assert len(cases) == len({c.name for c in cases}) == 6 * 4 + 4 + 5 * 2 + 2 * 2 * 4
    cache_resident = select(cases, "32x7x7x1024")
    assert {(c.layout, c.training) for c in cache_resident} == {("NHWC", True), ("NHWC", False)}
    assert [c.name for c in select(cases, TINY)] == ["1x8x8x32-NHWC-train-float32"]
    assert {c.layout for c in select(cases, "4x16x32x32x32")} == {"NDHWC", "NCDHW"}
    assert _case((4, 16, 32, 32, 32), "NCDHW").physical_shape == (4, 32, 16, 32, 32)


@pytest.mark.parametrize("dtype", [np.float32, np.uint16])
@pytest.mark.parametrize("training", [True, False])
def test_stream_kernel_reads_x_and_dy_and_writes_every_dx(dtype, training) -> None:
    """Every element of dx must come out of a*x + b*dy, so the kernel touched each byte of the
    three tensors that the byte accounting charges it for."""
    library = streaming.load(streaming.build())
    library.fbn_stream_set_threads(2)
    rng = np.random.default_rng(0)
    n = 100_003  # not a multiple of the vector width or of the thread count
    x = rng.integers(0, 1000, n).astype(dtype)
    dy = rng.integers(0, 1000, n).astype(dtype)
    kernel = streaming.StreamKernel(library, x, dy, training)
    dot = kernel()
    if dtype == np.float32:
        a, b = (np.float32(dot / n), np.float32(0.5)) if training else streaming.INFER_F32
        np.testing.assert_allclose(kernel.dx, a * x + b * dy, rtol=1e-5)
        if training:
            assert dot == pytest.approx(float(np.dot(x.astype(np.float64), dy)), rel=1e-3)
    else:
        wide = (x.astype(np.uint64), dy.astype(np.uint64))
        a, b = (1 + (dot & 7), 3) if training else streaming.INFER_U16
        np.testing.assert_array_equal(kernel.dx, ((a * wide[0] + b * wide[1]) & 0xFFFF))
        if training:
            assert dot == int((wide[0] * wide[1]).sum())


def test_crosscheck_flags_a_different_computation() -> None:
    reference = {"sum_dx": 1e-6, "sum_abs_dx": 100.0, "scale_backprop_head": [1.0, -2.0],
                 "offset_backprop_head": [0.0, 3.0], "sum_scale_backprop": 5.0,
                 "sum_offset_backprop": 0.5, "sum_abs_scale_backprop": 20.0,
                 "sum_abs_offset_backprop": 30.0, "channels": 4}
    close = dict(reference, sum_dx=0.5, offset_backprop_head=[0.05, 3.01])
    assert crosscheck.compare(reference, close, 1e-2) == []
    wrong = dict(reference, scale_backprop_head=[1.0, -1.0])
    assert crosscheck.compare(reference, wrong, 1e-2) != []


def test_end_to_end_on_the_tiny_case(tmp_path) -> None:
    out = tmp_path / "bench"
    command = [sys.executable, "-m", "harness", "--filter", TINY, "--rounds", "1",
               "--threads", "1", "--impls", ",".join(IMPLS), "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False,
                            env=harness_environment(TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1x8x8x32" in result.stdout and "targets:" in result.stdout
    document = json.loads((out / "results.json").read_text())
    (row,) = document["rows"]
    assert row["case"] == "1x8x8x32-NHWC-train-float32" and row["threads"] == 1
    for name in IMPLS:
        impl = row["impls"][name]
        assert impl["status"] == "ok", (name, impl["error"])
        assert len(impl["variants"][impl["chosen_variant"]]["samples_ns"]) == 1
        assert row["medians_us"][name] > 0
    # The TF worker really ran with oneDNN on, although the tests' conftest turns it off.
    assert document["meta"]["workers"]["tf_default/t1"]["info"]["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert document["crosscheck_ok"] is True
    assert row["crosscheck"] == {"reference": "shim", "tolerance": 1e-2, "ok": True,
                                 "results": {"tf_onednn": {"ok": True, "mismatches": []}}}
    assert row["model_bytes"] == 3 * 4 * 2048 and row["stream_bytes"] == 5 * 4 * 2048
    assert row["pct_stream"] == pytest.approx(
        100 * row["medians_us"]["stream"] / row["medians_us"]["shim"])
    assert (out / "results.md").read_text().count("1x8x8x32") >= 2

    # The saved results re-render without measuring anything (--report).
    again = tmp_path / "again"
    result = subprocess.run([sys.executable, "-m", "harness", "--report",
                             str(out / "results.json"), "--out", str(again)],
                            capture_output=True, text=True, timeout=120, check=False,
                            env=harness_environment())
    assert result.returncode == 0, result.stdout + result.stderr
    assert (again / "results.md").read_text() == (out / "results.md").read_text()


def test_onednn_targets_apply_only_where_onednn_runs() -> None:
    from harness.targets import evaluate_row

    row = {"ratios": {"tf_eigen": 20.0, "tf_onednn": 5.0, "torch": 2.0}, "pct_stream": 95.0}
    labels_5d = [c["target"] for c in evaluate_row(_case((4, 16, 32, 32, 32), "NCDHW"), row)]
    labels_4d = [c["target"] for c in evaluate_row(_case((32, 56, 56, 64), "NCHW"), row)]
    assert "onednn/shim>=3" not in labels_5d and "eigen/shim>=10" in labels_5d
    assert "onednn/shim>=3" in labels_4d


def test_impossible_stream_ratios_are_suspect_not_passes() -> None:
    """A row whose shim time implies several times the streaming kernel's speed was disturbed
    (a contended run once reported 1561 %): flagged, not counted as a PASS."""
    from harness.targets import IMPOSSIBLE_PCT_STREAM, count, evaluate_row

    case = _case((32, 56, 56, 64))
    verdicts = {}
    for pct in (95.0, 244.0, 1561.0):
        cells = evaluate_row(case, {"ratios": {"tf_eigen": 5.0}, "pct_stream": pct})
        verdicts[pct] = next(c["verdict"] for c in cells if c["target"].startswith("%stream"))
    assert verdicts == {95.0: "PASS", 244.0: "PASS", 1561.0: "SUSPECT"}
    assert 244.0 < IMPOSSIBLE_PCT_STREAM < 1561.0
    assert count([{"verdict": "SUSPECT"}, {"verdict": "PASS"}]) == {
        "PASS": 1, "MISS": 0, "SUSPECT": 1, "n/a": 0}


def test_report_words_are_for_users() -> None:
    from harness.report import header_lines

    meta = {"cpu": "x", "cores": 2, "versions": {}, "options": {"rounds": 1, "seed": 0},
            "date": "today", "git_commit": None}
    text = "\n".join(header_lines(meta))
    assert "commit None" not in text and "unknown (not run from a git checkout)" in text


def test_each_tensorflow_kernel_is_compared_with_the_shim_in_its_own_process() -> None:
    from harness.rows import _ratios

    ratios = _ratios({"shim": 100.0, "shim_stock": 125.0, "tf_eigen": 500.0, "tf_onednn": 200.0,
                      "torch": 150.0, "stream": 90.0})
    assert ratios == {"shim_stock": 1.25, "tf_eigen": 4.0, "tf_onednn": 2.0, "torch": 1.5}
    # Without a stock-process shim run, the default process's shim stands in.
    assert _ratios({"shim": 100.0, "tf_eigen": 500.0}) == {"tf_eigen": 5.0}


def test_process_and_page_fault_targets() -> None:
    from harness.targets import evaluate_row

    def verdicts(case, ratios, faults_pct) -> dict:
        row = {"ratios": ratios, "pct_stream": 95.0, "faults_pct_of_output": faults_pct}
        return {c["target"]: c["verdict"] for c in evaluate_row(case, row)}

    big = _case((32, 56, 56, 64))
    good = verdicts(big, {"tf_eigen": 4.0, "shim_stock": 1.08}, {"shim": 0.0, "shim_stock": 4.9})
    assert good["stock/default shim<=10%"] == "PASS"
    assert good["faults<5% (shim)"] == good["faults<5% (shim_stock)"] == "PASS"
    bad = verdicts(big, {"tf_eigen": 4.0, "shim_stock": 0.85}, {"shim": 75.0})
    assert bad["stock/default shim<=10%"] == "MISS" and bad["faults<5% (shim)"] == "MISS"
    assert bad["faults<5% (shim_stock)"] == "n/a"
    # NDHWC is native in TensorFlow's stock kernel: 3x there, 10x for channels first.
    ndhwc = verdicts(_case((4, 16, 32, 32, 32), "NDHWC"), {"tf_eigen": 4.0}, {})
    assert ndhwc["eigen/shim>=3"] == "PASS" and "eigen/shim>=10" not in ndhwc
    assert "eigen/shim>=10" in verdicts(_case((4, 16, 32, 32, 32), "NCDHW"), {}, {})
    assert "faults<5% (shim)" not in verdicts(_case((1, 8, 8, 32)), {}, {})  # under 1 MB


def test_the_shim_under_xla_is_timed_alone_and_as_one_compiled_chain(monkeypatch) -> None:
    import tensorflow as tf  # noqa: PLC0415

    import tf_fbn_ops  # noqa: PLC0415
    from tf_fbn_ops._loader import XLA_LOWERING_VARIABLE, xla_ffi_missing_reason  # noqa: PLC0415
    from harness import implementations as impls  # noqa: PLC0415
    from harness.inputs import make_inputs  # noqa: PLC0415

    case = _case((2, 4, 4, 8))
    inputs = make_inputs(case, 0)
    runner = impls.prepare_xla("shim_xla", case, inputs)
    if xla_ffi_missing_reason() is not None:  # the HLO lowering: XLA would fuse a chain
        assert set(runner.variants) == {impls.EAGER}
        return
    assert runner.calls == {impls.EAGER: 1, impls.CHAINED: impls.CHAIN_LENGTH}
    # The compiled chain really makes CHAIN_LENGTH calls: the kernel's bits after as many.
    dy, kwargs = impls.tf_kwargs(case, inputs)
    for _ in range(impls.CHAIN_LENGTH):
        dy = tf_fbn_ops.fused_batch_norm_grad_v3(y_backprop=dy, **kwargs)[0]
    chained = runner.variants[impls.CHAINED]()
    np.testing.assert_array_equal(tf.bitcast(chained, tf.int32).numpy(),
                                  tf.bitcast(dy, tf.int32).numpy())
    # TensorFlow's op, and the shim forced onto the HLO lowering, are timed compiled alone.
    assert set(impls.prepare_xla("tf_xla", case, inputs).variants) == {impls.EAGER}
    monkeypatch.setenv(XLA_LOWERING_VARIABLE, "hlo")
    assert set(impls.prepare_xla("shim_xla", case, inputs).variants) == {impls.EAGER}
