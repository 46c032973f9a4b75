"""Command line of the benchmark: ``python -m harness [options]``.

Starts every worker once, runs each (case, threads) block in turn, then prints the table and
writes results.json, results.md and results.png to ``--out``. Progress goes to stderr, the
report to stdout. The exit status is 1 when a cross-check failed (the timings would compare
different computations), 2 for bad options, else 0. With ``--training`` the whole command line
goes to the end-to-end training-step benchmark instead (``harness.training``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness import cases as case_list
from harness import machine, native_build, report, streaming
from harness.cases import Case
from harness.cli import int_list, name_list, progress
from harness.implementations import (
    DEFAULT_IMPLEMENTATIONS,
    GROUP_OF,
    GROUPS,
    IMPLEMENTATIONS,
)
from harness.plot import plot
from harness.pool import Pool
from harness.rows import build_row
from harness.schedule import run_block
from harness.targets import evaluate_row

DEFAULT_ROUNDS = 7
QUICK_ROUNDS = 2


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description="Times the shim's FusedBatchNormGradV3 against TF (oneDNN on/off), PyTorch "
                    "and a streaming-limit kernel, interleaved in shuffled rounds.")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"timing rounds per case (default {DEFAULT_ROUNDS}; "
                             f"{QUICK_ROUNDS} with --quick)")
    parser.add_argument("--threads", type=int_list, default=[1, 2],
                        help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--filter", help="regular expression (or substring) on case names such "
                                         "as 32x56x56x64-NCHW-train-float32")
    parser.add_argument("--impls", type=name_list(IMPLEMENTATIONS, "implementation"),
                        default=list(DEFAULT_IMPLEMENTATIONS),
                        help="comma-separated implementations, from "
                             f"{','.join(IMPLEMENTATIONS)} (default "
                             f"{','.join(DEFAULT_IMPLEMENTATIONS)}); shim_xla and tf_xla are "
                             "the op compiled by XLA (alone; the shim's small cases also "
                             "as a compiled chain of calls)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny subset: 1x8x8x32 and 32x14x14x256, NHWC/NCHW float32 "
                             f"training, {QUICK_ROUNDS} rounds")
    parser.add_argument("--out", type=Path, default=Path("build/bench"),
                        help="output directory (default build/bench)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of inputs and visit order")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds a worker may take to answer one request (default 600)")
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument("--training", action="store_true",
                        help="run the end-to-end training-step benchmark instead (Keras 2 and "
                             "3 models, train_on_batch with and without the shim); "
                             "'bench --training --help' lists its own options")
    parser.add_argument("--report", type=Path, metavar="RESULTS_JSON",
                        help="measure nothing: re-evaluate the targets of a saved results.json "
                             "and write the table, results.md and results.png to --out")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def selected_cases(args: argparse.Namespace) -> list[Case]:
    base = case_list.quick_cases() if args.quick else case_list.all_cases()
    return case_list.select(base, args.filter)


def build_stream_kernel(names: list[str]) -> tuple[str | None, dict]:
    """Compiles the streaming kernel when it is wanted; a failure only makes it n/a."""
    if "stream" not in names:
        return None, {}
    try:
        compiler = native_build.find_compiler()
        path = streaming.build()
    except native_build.BuildError as error:
        progress(f"streaming kernel not built, reported as n/a: {error}")
        return None, {"error": str(error)}
    return str(path), {"path": str(path), "compiler": native_build.compiler_version(compiler),
                       "flags": list(native_build.FLAGS)}


def _versions(hellos: dict) -> dict:
    versions: dict[str, str] = {}
    for hello in hellos.values():
        if isinstance(hello, dict):
            for key in ("tensorflow", "torch", "numpy"):
                if key in hello["info"]:
                    versions.setdefault(key, hello["info"][key])
    return versions


def _check_onednn(hellos: dict) -> None:
    """Warns if TF's oneDNN setting is not what the worker's label says."""
    expected = {"tf_default": True, "tf_eigen": False, "tf_xla": True}
    for name, hello in hellos.items():
        group = name.split("/")[0]
        if isinstance(hello, dict) and group in expected:
            actual = hello["info"].get("onednn_enabled")
            if actual is not None and actual != expected[group]:
                progress(f"WARNING: worker {name} has oneDNN {'on' if actual else 'off'}")


def _block_summary(row: dict) -> str:
    parts = []
    for name, impl in row["impls"].items():
        median = row["medians_us"].get(name)
        text = f"{name} {report.fmt_us(median)} µs" if median else f"{name} {impl['status']}"
        if name in row["ratios"]:
            text += f" ({report.fmt_ratio(row['ratios'][name])})"
        parts.append(text)
    if row["pct_stream"] is not None:
        parts.append(f"{row['pct_stream']:.0f}% of stream")
    if row["crosscheck"]["ok"] is False:
        parts.append("CROSS-CHECK MISMATCH")
    return "    " + " | ".join(parts)


def run_all(pool: Pool, blocks: list[tuple[Case, int]], args: argparse.Namespace) -> list[dict]:
    """Every block in turn; Ctrl-C stops early and keeps what was measured."""
    rows = []
    try:
        for index, (case, threads) in enumerate(blocks, 1):
            progress(f"[{index}/{len(blocks)}] {case.label}, {threads} thread(s)")
            results = run_block(pool, case, threads, args.impls, args.rounds, args.seed,
                                progress)
            rows.append(build_row(case, threads, results))
            progress(_block_summary(rows[-1]))
    except KeyboardInterrupt:
        progress(f"interrupted: reporting the {len(rows)} finished block(s)")
    return rows


def write_outputs(rows: list[dict], meta: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report.write_json(out / "results.json", meta, rows)
    (out / "results.md").write_text(report.render(rows, meta, markdown=True))
    skipped = plot(rows, out / "results.png")
    progress(skipped or f"wrote {out / 'results.png'}")
    progress(f"wrote {out / 'results.json'} and {out / 'results.md'}")


def rerender(saved: Path, out: Path) -> int:
    """The reports of an earlier run, with the current targets and plot."""
    import json  # noqa: PLC0415

    document = json.loads(saved.read_text())
    rows = document["rows"]
    for row in rows:
        row["targets"] = evaluate_row(Case.from_json(row), row)
    print(report.render(rows, document["meta"], markdown=False), flush=True)
    write_outputs(rows, document["meta"], out)
    return 1 if any(r["crosscheck"]["ok"] is False for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--training" in argv:  # a benchmark of its own, with its own options
        from harness.training.main import main as training_main  # noqa: PLC0415

        return training_main(argv)
    args = parse_args(argv)
    if args.report is not None:
        return rerender(args.report, args.out)
    cases = selected_cases(args)
    if args.list:
        print("\n".join(c.name for c in cases))
        return 0
    if not cases:
        progress(f"no case matches --filter {args.filter!r}; --list shows the names")
        return 2
    meta = machine.describe(argv)
    stream_library, meta["stream_kernel"] = build_stream_kernel(args.impls)
    groups = [g for g in GROUPS if any(GROUP_OF[n] == g for n in args.impls)]
    pool = Pool(groups, args.threads, stream_library, args.out / "logs", args.timeout)
    try:
        hellos = pool.start_all(progress)
        _check_onednn(hellos)
        blocks = [(case, threads) for case in cases for threads in args.threads]
        rows = run_all(pool, blocks, args)
    finally:
        pool.stop_all()
    meta.update(load_average_end=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                versions=_versions(hellos), workers=hellos,
                options={"rounds": args.rounds, "threads": args.threads, "filter": args.filter,
                         "impls": args.impls, "quick": args.quick, "seed": args.seed})
    print(report.render(rows, meta, markdown=False), flush=True)
    write_outputs(rows, meta, args.out)
    return 1 if any(r["crosscheck"]["ok"] is False for r in rows) else 0
