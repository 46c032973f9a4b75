"""One result row per (case, threads): medians, ratios, bandwidth, cross-check and targets."""

from __future__ import annotations

from harness import traffic
from harness.cases import Case
from harness.crosscheck import crosscheck
from harness.implementations import SHIM_IN_PROCESS_OF
from harness.schedule import ImplResult
from harness.targets import evaluate_row

BASELINE = "shim"
LIMIT = "stream"
PAGE_BYTES = 4096


def _medians(results: dict[str, ImplResult]) -> dict[str, float]:
    medians = {}
    for name, result in results.items():
        summary = result.summary() if result.status == "ok" else None
        if summary:
            medians[name] = summary.median_us
    return medians


def _ratios(medians: dict[str, float]) -> dict[str, float]:
    """Other implementation's median / the shim's: how many times faster the shim is. A
    TensorFlow kernel is compared with the shim timed in its own process (SHIM_IN_PROCESS_OF):
    shim_stock for the stock kernel, where that ran; "shim_stock" itself is shim_stock / shim,
    the shim's time in the stock process relative to the default one."""
    ratios = {}
    for name, median in medians.items():
        if name in (BASELINE, LIMIT):
            continue
        shim = medians.get(SHIM_IN_PROCESS_OF.get(name, BASELINE)) or medians.get(BASELINE)
        if shim:
            ratios[name] = median / shim
    return ratios


def _faults(case: Case, results: dict[str, ImplResult]) -> tuple[dict, dict]:
    """Minor page faults per call of each implementation, and as a percentage of x_backprop's
    pages (100 %: every page of the output fresh on every call)."""
    per_call = {n: r.faults_per_call() for n, r in results.items() if r.status == "ok"}
    per_call = {n: f for n, f in per_call.items() if f is not None}
    pages = max(1, case.tensor_bytes // PAGE_BYTES)
    return per_call, {n: 100.0 * f / pages for n, f in per_call.items()}


def _pct_stream(medians: dict[str, float]) -> float | None:
    """The streaming kernel's time as a percentage of the shim's (100% = at the limit)."""
    if not medians.get(BASELINE) or LIMIT not in medians:
        return None
    return medians[LIMIT] / medians[BASELINE] * 100.0


def build_row(case: Case, threads: int, results: dict[str, ImplResult]) -> dict:
    """Everything the reports need about one (case, threads), JSON-ready."""
    medians = _medians(results)
    faults_per_call, faults_pct = _faults(case, results)
    model_bytes = traffic.model_bytes(case)
    row = {
        "case": case.name,
        **case.to_json(),
        "label": case.label,
        "threads": threads,
        "elements": case.elements,
        "tensor_bytes": case.tensor_bytes,
        "model_passes": traffic.model_passes(case),
        "model_bytes": model_bytes,
        "stream_passes": traffic.stream_passes(case),
        "stream_bytes": traffic.stream_bytes(case),
        "medians_us": medians,
        "ratios": _ratios(medians),
        "pct_stream": _pct_stream(medians),
        "faults_per_call": faults_per_call,
        "faults_pct_of_output": faults_pct,
        # Model bytes over each implementation's time; for "stream" see stream_gbps.
        "model_gbps": {n: traffic.gigabytes_per_second(model_bytes, m)
                       for n, m in medians.items() if n != LIMIT},
        # What the streaming kernel actually moved per second (always two sweeps in training).
        "stream_gbps": traffic.gigabytes_per_second(traffic.stream_bytes(case),
                                                    medians.get(LIMIT)),
        "crosscheck": crosscheck(case, {n: r.check for n, r in results.items()
                                        if r.status == "ok" and r.check}),
        "impls": {n: r.to_json() for n, r in results.items()},
    }
    row["targets"] = evaluate_row(case, row)
    return row
