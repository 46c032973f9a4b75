"""The training benchmark's printed table, training.md and training.json.

Tables, header lines and ratio formatting come from the op harness's report module, so the two
benchmarks read alike.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from harness import report as op_report
from harness.implementations import CHAIN_LENGTH
from harness.training import models
from harness.training.results import ISOLATED_OP

HEADERS = ("model", "variant", "batch", "thr", "step ms (±IQR)", "speedup vs baseline",
           "BN backward (isolated ops) ms", "BN backward (isolated ops) share")
LEFT_ALIGNED = 2

LEGEND = (
    "step ms = median over rounds of each round's median train_on_batch time (jit_compile=False, "
    "or True for the _jit variants; SGD, after warm-up); ±IQR = inter-quartile range / median; ~ = most of the variant's rounds "
    "ran while other processes competed for the cores (likely inflated). Each round visits every "
    "variant in a freshly shuffled order, all six in the same worker process. speedup vs "
    "baseline = baseline median / variant median (keras3_shim against keras3, keras2_shim "
    "against keras2, keras3_shim_jit against keras3_jit; above 1: the shim trains faster). BN backward (isolated ops) is an "
    "ESTIMATE, not a measurement inside the step: each batch-norm layer's backward timed alone "
    "on its exact input shape (float32, training mode, median of many calls; fused ops as "
    f"{CHAIN_LENGTH} chained calls per tf.function, Keras 3's unfused layer as "
    "(forward+gradient) - forward), "
    "summed over the model's layers; share = that sum / step time. It leaves out what the "
    "surrounding step changes (caches, overlap with other ops).")


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def row_cells(row: dict) -> list[str]:
    summary = row["step_summary_us"]
    step = _ms(row["step_ms"]) + ("~" if row["contended"] else "")
    if summary:
        step += f" ±{summary['iqr_pct']:.0f}%"
    backward = row["bn_backward_isolated"]
    share = backward["share_of_step"]
    return [row["model"], row["variant"], str(row["batch"]), str(row["threads"]), step,
            op_report.fmt_ratio(row["speedup_vs_baseline"]) if row["baseline"] else "(baseline)",
            _ms(backward["ms"]), "-" if share is None else f"{share * 100:.1f}%"]


def note_lines(rows: list[dict]) -> list[str]:
    """Models, what each variant's step contains, and what its isolated estimate timed."""
    lines = []
    for name in dict.fromkeys(r["model"] for r in rows):
        spec = models.spec(name)
        first = next(r for r in rows if r["model"] == name)
        lines.append(f"{name}: {spec.description}, {first['data_format']}, batch "
                     f"{first['batch']}, {first['bn_layers']} batch-norm layers")
    seen = set()
    for row in rows:
        ops = ", ".join(row["backward_ops_in_step"]) or "no fused gradient op (unfused graph)"
        kind = row["bn_backward_isolated"]["kind"]
        if (row["variant"], ops, kind) not in seen:
            seen.add((row["variant"], ops, kind))
            lines.append(f"{row['variant']}: batch-norm backward in the traced step: {ops}; "
                         f"isolated estimate: {ISOLATED_OP[kind]}")
    return lines


def render(rows: list[dict], meta: dict, markdown: bool) -> str:
    """The whole report, as plain text or as markdown."""
    title = "Training-step benchmark (Keras 2 and 3, CPU)"
    out = [f"# {title}" if markdown else title, ""]
    options = meta["options"]
    command = f"`{meta['command']}`" if markdown else meta["command"]
    header = [*op_report.header_lines(meta),
              f"timed steps per variant and round: {options['steps']}; isolated backward: "
              f"{options['bn_calls']} calls per layer shape and round",
              f"command: {command}"]
    out += [f"{line}  " if markdown else line for line in header] + [""]
    cells = [row_cells(r) for r in rows]
    out += [op_report.markdown_table(HEADERS, cells) if markdown
            else op_report.text_table(HEADERS, cells, LEFT_ALIGNED), ""]
    out += [LEGEND if markdown else textwrap.fill(LEGEND, width=100), ""]
    out += ["## Notes" if markdown else "notes:", ""]
    out += [f"- {n}" if markdown else f"  {n}" for n in note_lines(rows)] + [""]
    return "\n".join(out)


def write(out: Path, rows: list[dict], meta: dict) -> list[Path]:
    """training.json (every sample and the run's metadata) and training.md."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "training.json", out / "training.md"
    json_path.write_text(json.dumps({"schema": 1, "meta": meta, "rows": rows}, indent=1) + "\n")
    md_path.write_text(render(rows, meta, markdown=True))
    return [json_path, md_path]
