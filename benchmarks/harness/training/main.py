"""Command line of the training benchmark: ``python -m harness --training [options]``.

The op harness times FusedBatchNormGradV3 alone; this asks what the shim changes for a whole
training step. Runs one worker per thread count (one after the other), then prints the table
and writes training.json and training.md to ``--out``. Progress goes to stderr, the report to
stdout. The exit status is 1 when a worker failed (its stderr is quoted), 2 for bad options,
else 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness import machine
from harness.cli import int_list, name_list, progress
from harness.training import models, report, results, spawn, variants

DEFAULTS = {"threads": [1, 2], "rounds": 7, "steps": 10, "bn_calls": 20}
QUICK = {"threads": [1], "rounds": 1, "steps": 2, "bn_calls": 3}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness --training",
        description="Times model.train_on_batch on CPU for a small ResNet (NHWC) and a small "
                    "3-D CNN (NDHWC) in six variants: Keras 3 with its BatchNormalization "
                    "(keras3) or tf_fbn_ops.keras's (keras3_shim), Keras 2 with the fused "
                    "layer (keras2) or traced under tf_fbn_ops.shim_gradients() (keras2_shim), "
                    "and the two Keras 3 ones compiled with jit_compile=True (keras3_jit, "
                    "keras3_shim_jit); "
                    "interleaved in shuffled rounds in one process per thread count, with the "
                    "batch-norm backward's share of the step estimated from isolated op times.")
    # The op harness hands the whole command line over; the flag itself means nothing here.
    parser.add_argument("--training", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int_list, default=None,
                        help="comma-separated intra-op thread counts, one worker each "
                             "(default 1,2; 1 with --quick)")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"timing rounds (default {DEFAULTS['rounds']}; "
                             f"{QUICK['rounds']} with --quick)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed training steps per variant and round, whose median is "
                             f"the round's sample (default {DEFAULTS['steps']}; "
                             f"{QUICK['steps']} with --quick)")
    parser.add_argument("--models", type=name_list(models.MODELS, "model"),
                        default=list(models.MODELS),
                        help=f"comma-separated models, from {','.join(models.MODELS)} "
                             "(default both)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny smoke run: batch 4 (resnet2d) and 2 (conv3d), 1 thread, "
                             "1 round, 2 steps")
    parser.add_argument("--out", type=Path, default=Path("build/bench"),
                        help="output directory (default build/bench)")
    parser.add_argument("--seed", type=int, default=2026,
                        help="seed of weights, data and visit order")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds a worker may print nothing before it is taken for hung "
                             "and killed (default 600)")
    args = parser.parse_args(argv)
    for key, default in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key, None) is None:
            setattr(args, key, default)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be >= 1")
    return args


def worker_job(args: argparse.Namespace) -> list[str]:
    """The worker's command line, less --threads."""
    job = ["--models", ",".join(args.models), "--variants", ",".join(variants.NAMES),
           "--rounds", str(args.rounds), "--steps", str(args.steps),
           "--bn-calls", str(args.bn_calls), "--seed", str(args.seed)]
    return [*job, "--quick"] if args.quick else job


def _versions(worker_results: list[dict]) -> dict[str, str]:
    versions: dict[str, str] = {}
    for result in worker_results:
        for key in ("tensorflow", "keras", "tf_keras"):
            if key in result["info"]:
                versions.setdefault(key, result["info"][key])
    return versions


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    meta = machine.describe(argv)
    worker_results = []
    for threads in args.threads:
        progress(f"training benchmark: worker with {threads} thread(s), models "
                 f"{','.join(args.models)}, {args.rounds} round(s) of {args.steps} step(s)")
        try:
            worker_results.append(spawn.run_worker(
                threads, worker_job(args), args.out / "logs" / f"training-t{threads}.log",
                args.timeout))
        except spawn.WorkerFailed as error:
            progress(str(error))
            return 1
    rows = results.build_rows(worker_results)
    meta.update(load_average_end=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                versions=_versions(worker_results),
                workers=[r["info"] for r in worker_results],
                options={"rounds": args.rounds, "steps": args.steps, "threads": args.threads,
                         "models": args.models, "quick": args.quick, "seed": args.seed,
                         "bn_calls": args.bn_calls})
    print(report.render(rows, meta, markdown=False), flush=True)
    for path in report.write(args.out, rows, meta):
        progress(f"wrote {path}")
    return 0
