"""The workers' raw samples turned into result rows: one per (model, threads, variant).

A row holds the median step time over rounds (and its spread), the speedup against the
variant's baseline (baseline median / variant median, both from the same worker), and the
isolated-op estimate of the batch-norm backward with its share of the step.
"""

from __future__ import annotations

from harness.stats import summarize
from harness.training.models import MODELS
from harness.training.variants import KERAS3_UNFUSED, SHIM, TF_FUSED, VARIANTS

# What the isolated timing ran for each backward kind, for the reports.
ISOLATED_OP = {
    TF_FUSED: "tf.raw_ops.FusedBatchNormGradV3",
    SHIM: "tf_fbn_ops.fused_batch_norm_grad_v3",
    KERAS3_UNFUSED: "Keras 3 BatchNormalization gradient graph ((forward+gradient) - forward)",
}


def _summary(samples_ns: list[float]) -> dict | None:
    summary = summarize(samples_ns)
    return summary.to_json() if summary else None


def _ms(summary: dict | None) -> float | None:
    return summary["median_us"] / 1e3 if summary else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def build_rows(worker_results: list[dict]) -> list[dict]:
    """Rows in the order model, threads, variant."""
    rows = []
    for result in worker_results:
        for model in result["models"]:
            summaries = {name: _summary(v["samples_ns"]) for name, v in model["variants"].items()}
            step_ms = {name: _ms(summary) for name, summary in summaries.items()}
            for name, timed in model["variants"].items():
                rows.append(_row(result["threads"], model, name, timed, summaries[name], step_ms))
    # Stable: the variants stay in their order within a (model, threads).
    rows.sort(key=lambda r: (MODELS.index(r["model"]), r["threads"]))
    return rows


def _row(threads: int, model: dict, name: str, timed: dict, summary: dict | None,
         step_ms: dict[str, float | None]) -> dict:
    variant = VARIANTS[name]
    baseline = variant.baseline if variant.baseline in model["variants"] else None
    backward = model["bn_backward"][timed["backward_kind"]]
    bn_summary = _summary(backward["samples_ns"])
    bn_ms = _ms(bn_summary)
    contended = sum(1 for v in timed["visits"] if v["contended"])
    round_ratios = None
    if baseline:
        base_samples = model["variants"][baseline]["samples_ns"]
        round_ratios = [b / s for b, s in zip(base_samples, timed["samples_ns"]) if s]
    return {
        "model": model["model"],
        "batch": model["batch"],
        "input_shape": model["input_shape"],
        "data_format": model["data_format"],
        "threads": threads,
        "variant": name,
        "keras": variant.keras_module,
        "baseline": baseline,
        "step_ms": step_ms[name],
        "step_summary_us": summary,
        "samples_ns": timed["samples_ns"],
        "visits": timed["visits"],
        "contended": 2 * contended > len(timed["visits"]),
        # Baseline median / this variant's median: above 1, the variant trains faster.
        "speedup_vs_baseline": _ratio(step_ms.get(baseline), step_ms[name]) if baseline else None,
        "round_speedups": round_ratios,
        "trace_s": timed["trace_s"],
        "train_function_traces": timed["traces"],
        "backward_ops_in_step": timed["backward_ops"],
        "bn_layers": timed["bn_layers"],
        "bn_backward_isolated": {
            "kind": backward["kind"],
            "op": ISOLATED_OP[backward["kind"]],
            "ms": bn_ms,
            "summary_us": bn_summary,
            "samples_ns": backward["samples_ns"],
            "layers": backward["layers"],
            "share_of_step": _ratio(bn_ms, step_ms[name]),
        },
    }
