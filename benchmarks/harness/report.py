"""The printed table, results.md and results.json.

The text and markdown reports share their cells; only the table syntax differs.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable
from pathlib import Path

from harness.cases import SHORT_DTYPE
from harness.implementations import CHAINED, XLA_IMPLEMENTATIONS
from harness.targets import count

OTHERS = ("tf_eigen", "tf_onednn", "torch")
HEADERS = ("shape", "layout", "mode", "dtype", "thr", "elems", "shim µs (±IQR)", "shim_stock",
           "tf_eigen", "tf_onednn", "torch", "stream", "stock/default", "eigen/shim",
           "onednn/shim", "torch/shim", "%stream", "GB/s", "faults/call", "check")
LEFT_ALIGNED = 4  # the first columns are text
# The XLA table (only when an XLA implementation ran): each compiled op against the shim's kernel.
XLA_HEADERS = ("shape", "layout", "mode", "dtype", "thr", "elems", "shim µs", "shim_xla",
               "tf_xla", "shim_xla/shim", "tf_xla/shim")


def fmt_us(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def fmt_elements(n: int) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    return f"{n / 1e3:.1f}K" if n >= 1e3 else str(n)


def _mismatched(row: dict) -> set[str]:
    return {n for n, r in row["crosscheck"]["results"].items() if not r["ok"]}


def impl_cell(row: dict, name: str, spread: bool = False) -> str:
    """Median µs; "*" when the chained tf.function was the faster variant, "~" when most of its
    visits were contended, "!" when the cross-check failed; n/a, FAIL or "-" (not run)."""
    impl = row["impls"].get(name)
    if impl is None:
        return "-"
    if impl["status"] != "ok" or not impl["summary"]:
        return "n/a" if impl["status"] == "n/a" else "FAIL"
    summary = impl["summary"]
    text = fmt_us(summary["median_us"])
    if impl["chosen_variant"] == CHAINED:
        text += "*"
    if impl["contended"]:
        text += "~"
    if name in _mismatched(row):
        text += "!"
    if spread:
        text += f" ±{summary['iqr_pct']:.0f}%"
    return text


def check_cell(row: dict) -> str:
    ok = row["crosscheck"]["ok"]
    return "-" if ok is None else ("ok" if ok else "MISMATCH")


def faults_cell(row: dict) -> str:
    """The shim's minor page faults per call in the default and the stock process."""
    faults = row.get("faults_per_call", {})
    values = [faults.get(n) for n in ("shim", "shim_stock")]
    if all(v is None for v in values):
        return "-"
    return "/".join("-" if v is None else f"{v:.0f}" for v in values)


def row_cells(row: dict) -> list[str]:
    shape = "x".join(str(d) for d in row["shape"])
    gbps = row["model_gbps"].get("shim")
    pct = row["pct_stream"]
    return [shape, row["layout"], "train" if row["training"] else "infer",
            SHORT_DTYPE[row["dtype"]], str(row["threads"]), fmt_elements(row["elements"]),
            impl_cell(row, "shim", spread=True), impl_cell(row, "shim_stock"),
            *(impl_cell(row, n) for n in (*OTHERS, "stream")),
            fmt_ratio(row["ratios"].get("shim_stock")),
            *(fmt_ratio(row["ratios"].get(n)) for n in OTHERS),
            "-" if pct is None else f"{pct:.0f}%",
            "-" if gbps is None else f"{gbps:.1f}",
            faults_cell(row), check_cell(row)]


def xla_row_cells(row: dict) -> list[str]:
    return [*row_cells(row)[:6], impl_cell(row, "shim"),
            *(impl_cell(row, n) for n in XLA_IMPLEMENTATIONS),
            *(fmt_ratio(row["ratios"].get(n)) for n in XLA_IMPLEMENTATIONS)]


def text_table(headers: Iterable[str], rows: list[list[str]], left: int = LEFT_ALIGNED) -> str:
    """Space-padded columns: text left-aligned, numbers right-aligned."""
    headers = list(headers)
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]),
                      *(line(r) for r in rows)])


def _markdown_escape(cell: str) -> str:
    """The cell with the table separator and the markers (*, ~) taken literally."""
    for char in "|*~":
        cell = cell.replace(char, "\\" + char)
    return cell


def markdown_table(headers: Iterable[str], rows: list[list[str]]) -> str:
    headers = list(headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_markdown_escape(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _by_threads(rows: list[dict]) -> dict[int, list[dict]]:
    groups: dict[int, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["threads"], []).append(row)
    return dict(sorted(groups.items()))


LEGEND = (
    "µs = median over rounds of each round's per-call median; ±IQR = inter-quartile range / "
    "median (min and max are in results.json). * = the tf.function chain of 20 calls was "
    "faster than eager calls (for shim_xla: the chain compiled into one XLA program was faster "
    "than the op compiled alone). ~ = most timed batches ran while other processes kept so many cores "
    "busy that the worker's threads had to share: the number is likely inflated. "
    "! = cross-check mismatch. shim = the shim in TF's default process (oneDNN on), "
    "shim_stock = the shim in a stock-TF process (oneDNN off); stock/default = shim_stock / "
    "shim. Ratios = other / shim (higher: the shim is faster), eigen/shim against shim_stock "
    "(both in the stock process; against shim in a run without shim_stock), the others "
    "against shim. faults/call = the shim's minor page "
    "faults per call, default/stock process. %stream = streaming-limit time / shim time x 100. "
    "GB/s = model bytes "
    "(training: 5 passes if x+dy > 16 MiB, else 3; inference: 3) / shim time; the streaming "
    "kernel always moves the full 2-sweep (5-pass) training traffic. n/a = the implementation "
    "refuses the case (see below).")


def unavailable_lines(rows: list[dict]) -> list[str]:
    """One line per (implementation, reason), listing the cases it applies to."""
    reasons: dict[tuple[str, str, str], list[str]] = {}
    for row in rows:
        for name, impl in row["impls"].items():
            if impl["status"] != "ok":
                key = (name, impl["status"], impl["error"] or "?")
                reasons.setdefault(key, []).append(f"{row['label']} t={row['threads']}")
            for note in impl["notes"]:
                reasons.setdefault((name, "note", note), []).append(
                    f"{row['label']} t={row['threads']}")
    return [f"{name} {status}: {reason}  [{', '.join(cases)}]"
            for (name, status, reason), cases in reasons.items()]


def crosscheck_lines(rows: list[dict]) -> list[str]:
    """Every mismatch, loudly; or how many comparisons agreed."""
    lines, agreed = [], 0
    for row in rows:
        for name, result in row["crosscheck"]["results"].items():
            if result["ok"]:
                agreed += 1
                continue
            lines.append(f"!!! CROSS-CHECK MISMATCH: {name} vs {row['crosscheck']['reference']}"
                         f" on {row['label']} t={row['threads']}: "
                         + "; ".join(result["mismatches"]))
    return lines or [(f"all {agreed} comparisons agree with the reference "
                      "(relative 1e-2 float32, 5e-2 bfloat16/float16).")]


def contention_lines(rows: list[dict]) -> list[str]:
    """How many timed batches another process disturbed."""
    total = contended = 0
    for row in rows:
        for impl in row["impls"].values():
            for timing in impl["variants"].values():
                total += len(timing["visits"])
                contended += timing["contended_visits"]
    if not contended:
        return [(f"no contention seen in {total} timed batches (batches under 50 ms cannot "
                 "be judged and count as uncontended).")]
    return [(f"{contended} of {total} timed batches ran while other processes competed for the "
             "cores; 2-thread code with spin barriers (OpenMP: torch, stream) can stall for "
             "whole scheduler slices then. Cells marked ~ are likely inflated; the per-batch "
             "evidence (others_cores) is in results.json.")]


def target_lines(rows: list[dict]) -> tuple[list[str], dict[str, int]]:
    """One line per row that has targets, and the totals per verdict."""
    lines, cells = [], []
    for row in rows:
        if not row["targets"]:
            continue
        cells += row["targets"]
        parts = [f"{c['target']} {c['verdict']}"
                 + (f" ({_target_value(c)})" if c["value"] is not None else "")
                 for c in row["targets"]]
        contended = [n for n, impl in row["impls"].items() if impl["contended"]]
        note = f"  [contended: {', '.join(contended)}]" if contended else ""
        lines.append(f"{row['label']} t={row['threads']}: " + " | ".join(parts) + note)
    return lines, count(cells)


def _target_value(cell: dict) -> str:
    if cell["target"].startswith("%") or cell["target"].startswith("faults"):
        return f"{cell['value']:.0f}%"
    if cell["target"].startswith("stock/default"):
        return f"{100 * cell['value']:.0f}%"
    return fmt_ratio(cell["value"])


def header_lines(meta: dict) -> list[str]:
    versions = meta.get("versions", {})
    def load(key: str) -> str:
        return ", ".join(f"{v:.2f}" for v in meta.get(key) or []) or "?"

    return [(f"CPU: {meta['cpu']}, {meta['cores']} cores; load average at start "
             f"{load('load_average')}, at end {load('load_average_end')}"),
            "versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
            (f"rounds: {meta['options']['rounds']}, seed {meta['options']['seed']}, "
             f"date {meta['date']}, "
             f"commit {meta['git_commit'] or 'unknown (not run from a git checkout)'}")]


def render(rows: list[dict], meta: dict, markdown: bool) -> str:
    """The whole report, as plain text or as markdown."""
    table = markdown_table if markdown else text_table
    out = []
    title = "Batch-norm gradient benchmark (FusedBatchNormGradV3)"
    out += [f"# {title}" if markdown else title, ""]
    out += [f"{line}  " if markdown else line for line in header_lines(meta)] + [""]
    for threads, group in _by_threads(rows).items():
        out += [f"## {threads} thread(s)" if markdown else f"threads = {threads}", ""]
        out += [table(HEADERS, [row_cells(r) for r in group]), ""]
    xla_rows = [r for r in rows if any(n in r["impls"] for n in XLA_IMPLEMENTATIONS)]
    if xla_rows:
        title = ("Under XLA (jit_compile=True): the op compiled alone, or * in a compiled chain, "
                 "vs the shim's kernel")
        out += [f"## {title}" if markdown else title, ""]
        out += [table(XLA_HEADERS, [xla_row_cells(r) for r in xla_rows]), ""]
    out += [LEGEND if markdown else textwrap.fill(LEGEND, width=100), ""]
    notes = unavailable_lines(rows)
    if notes:
        out += ["## Not run / notes" if markdown else "not run / notes:", ""]
        out += [f"- {n}" if markdown else f"  {n}" for n in notes] + [""]
    out += ["## Cross-check" if markdown else "cross-check:", ""]
    out += [f"- {n}" if markdown else f"  {n}" for n in crosscheck_lines(rows)] + [""]
    out += ["## Contention" if markdown else "contention:", ""]
    out += [f"- {n}" if markdown else f"  {n}" for n in contention_lines(rows)] + [""]
    lines, totals = target_lines(rows)
    out += ["## Targets (tensors >= 1 MB, plus the tiny shape)" if markdown
            else "targets (tensors >= 1 MB, plus the tiny shape):", ""]
    out += [f"- {n}" if markdown else f"  {n}" for n in lines]
    out += ["", (f"targets: {totals['PASS']} PASS, {totals['MISS']} MISS, "
                 f"{totals['SUSPECT']} SUSPECT (faster than the streaming limit: disturbed, not "
                 f"judged), {totals['n/a']} n/a (of {sum(totals.values())})"), ""]
    return "\n".join(out)


def write_json(path: Path, meta: dict, rows: list[dict]) -> None:
    """All raw samples, summaries, cross-checks, targets and the run's metadata."""
    _, totals = target_lines(rows)
    mismatches = [line for line in crosscheck_lines(rows) if line.startswith("!!!")]
    document = {"schema": 1, "meta": meta, "crosscheck_ok": not mismatches,
                "crosscheck_mismatches": mismatches, "targets_total": totals, "rows": rows}
    path.write_text(json.dumps(document, indent=1) + "\n")
