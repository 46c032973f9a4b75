"""The performance targets, evaluated per (case, threads) row.

Ratios are another implementation's median over the shim's (higher is better for the shim),
each TensorFlow kernel against the shim timed in the same process (the stock kernel against
shim_stock); %stream is the streaming kernel's median over the shim's, in percent. The ratio
targets apply to shapes with at least 1 MB per tensor (smaller ones are dispatch-bound); the
tiny shape has its own target, no slower than TF's stock kernel. Two targets are upper bounds on
what the process must not change: the shim's time in the stock process within 10 % of its time
in the default one, and its minor page faults per call under 5 % of x_backprop's pages in both.
A %stream far beyond what fewer bytes and caches explain (IMPOSSIBLE_PCT_STREAM) means the row
was disturbed while it ran: it is marked SUSPECT rather than judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.cases import Case

MIN_TENSOR_BYTES = 1_000_000
# Above this %stream a measurement is not believed. The shim legitimately beats the streaming
# kernel where its fused schedules move fewer bytes (3 of the 5 passes) or the tensors stay in
# cache: up to 244 % in the full run of 2026-11-22. Five times the streaming kernel's speed is
# beyond both: a disturbed measurement (a contended run once showed 1561 %).
IMPOSSIBLE_PCT_STREAM = 500.0
VERDICTS = ("PASS", "MISS", "SUSPECT", "n/a")


@dataclass(frozen=True)
class Target:
    """One target: where it applies, what it measures, and the bound."""

    label: str
    applies: Callable[[Case], bool]
    # A key of the row's "ratios"; "pct_stream"; "tiny_vs_eigen"; "process_gap" (shim_stock /
    # shim - 1, absolute); "faults:<implementation>" (% of x_backprop's pages per call).
    metric: str
    bound: float  # the metric must be >= bound (<= bound where at_most)
    at_most: bool = False

    def value(self, row: dict) -> float | None:
        if self.metric == "pct_stream":
            return row.get("pct_stream")
        if self.metric == "tiny_vs_eigen":
            # shim time <= tf_eigen time, i.e. eigen/shim >= 1
            return row["ratios"].get("tf_eigen")
        if self.metric == "process_gap":
            ratio = row["ratios"].get("shim_stock")
            return None if ratio is None else abs(ratio - 1.0)
        if self.metric.startswith("faults:"):
            return row.get("faults_pct_of_output", {}).get(self.metric.split(":", 1)[1])
        return row["ratios"].get(self.metric)

    def met(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound


def _big(case: Case) -> bool:
    return case.tensor_bytes >= MIN_TENSOR_BYTES


def _f32_channels_last(case: Case) -> bool:
    """NHWC and NDHWC: native in TF's stock kernel too, hence a 3x target, not 10x."""
    return _big(case) and case.dtype == "float32" and case.channels_last


def _f32_channels_first(case: Case) -> bool:
    return _big(case) and case.dtype == "float32" and not case.channels_last


def _f32(case: Case) -> bool:
    return _big(case) and case.dtype == "float32"


def _low(case: Case) -> bool:
    return _big(case) and case.dtype != "float32"


def _bf16(case: Case) -> bool:
    return _big(case) and case.dtype == "bfloat16"


def _onednn_runs(case: Case) -> bool:
    """TF's default process runs oneDNN's kernel only for 4-D float32 and bfloat16; elsewhere
    "tf_onednn" times TF's Eigen fallback, which the oneDNN targets must not be judged on."""
    return len(case.shape) == 4 and case.dtype in ("float32", "bfloat16")


TARGETS: tuple[Target, ...] = (
    Target("eigen/shim>=3", _f32_channels_last, "tf_eigen", 3.0),
    Target("onednn/shim>=1.2", lambda c: _f32_channels_last(c) and _onednn_runs(c),
           "tf_onednn", 1.2),
    Target("eigen/shim>=10", _f32_channels_first, "tf_eigen", 10.0),
    Target("onednn/shim>=3", lambda c: _f32_channels_first(c) and _onednn_runs(c),
           "tf_onednn", 3.0),
    Target("torch/shim>=1.1", _f32, "torch", 1.1),
    Target("%stream>=90", _f32, "pct_stream", 90.0),
    Target("eigen/shim>=3", _low, "tf_eigen", 3.0),
    Target("onednn/shim>=1.2", _bf16, "tf_onednn", 1.2),
    Target("torch/shim>=1.0", _low, "torch", 1.0),
    Target("shim<=tf_eigen", lambda c: c.is_tiny, "tiny_vs_eigen", 1.0),
    Target("stock/default shim<=10%", _big, "process_gap", 0.10, at_most=True),
    Target("faults<5% (shim)", _big, "faults:shim", 5.0, at_most=True),
    Target("faults<5% (shim_stock)", _big, "faults:shim_stock", 5.0, at_most=True),
)


def evaluate_row(case: Case, row: dict) -> list[dict]:
    """The targets that apply to the row, each PASS, MISS, SUSPECT (an impossible number) or n/a
    (no number to judge)."""
    cells = []
    for target in TARGETS:
        if not target.applies(case):
            continue
        value = target.value(row)
        if value is None:
            verdict = "n/a"
        elif target.metric == "pct_stream" and value > IMPOSSIBLE_PCT_STREAM:
            verdict = "SUSPECT"
        else:
            verdict = "PASS" if target.met(value) else "MISS"
        cells.append({"target": target.label, "value": value, "verdict": verdict})
    return cells


def count(cells: list[dict]) -> dict[str, int]:
    """Totals per verdict (PASS, MISS, SUSPECT, n/a)."""
    totals = dict.fromkeys(VERDICTS, 0)
    for cell in cells:
        totals[cell["verdict"]] += 1
    return totals
