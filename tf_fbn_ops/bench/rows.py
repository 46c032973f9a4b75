"""One result row per (case, threads): medians, ratios, bandwidth, cross-check and targets."""

from __future__ import annotations

from tf_fbn_ops.bench import traffic
from tf_fbn_ops.bench.cases import Case
from tf_fbn_ops.bench.crosscheck import crosscheck
from tf_fbn_ops.bench.schedule import ImplResult
from tf_fbn_ops.bench.targets import evaluate_row

BASELINE = "shim"
LIMIT = "stream"


def _medians(results: dict[str, ImplResult]) -> dict[str, float]:
    medians = {}
    for name, result in results.items():
        summary = result.summary() if result.status == "ok" else None
        if summary:
            medians[name] = summary.median_us
    return medians


def _ratios(medians: dict[str, float]) -> dict[str, float]:
    """Other implementation's median / the shim's: how many times faster the shim is."""
    shim = medians.get(BASELINE)
    if not shim:
        return {}
    return {n: m / shim for n, m in medians.items() if n not in (BASELINE, LIMIT)}


def _pct_stream(medians: dict[str, float]) -> float | None:
    """The streaming kernel's time as a percentage of the shim's (100% = at the limit)."""
    if not medians.get(BASELINE) or LIMIT not in medians:
        return None
    return medians[LIMIT] / medians[BASELINE] * 100.0


def build_row(case: Case, threads: int, results: dict[str, ImplResult]) -> dict:
    """Everything the reports need about one (case, threads), JSON-ready."""
    medians = _medians(results)
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
