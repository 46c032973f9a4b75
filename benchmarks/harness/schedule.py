"""Timing of one (case, threads) block: prepare every worker, then shuffled rounds of visits.

A visit is one (implementation, variant) batch on one worker; only one worker runs at a time,
and a 30 ms pause before each visit lets the previous worker's spinning threads go idle. Every
round visits every unit once in a freshly shuffled order, so slow drifts of the machine (other
jobs, thermal state) spread over all implementations instead of biasing whichever ran last.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness import contention
from harness.cases import Case
from harness.implementations import GROUP_OF
from harness.pool import Pool, WorkerError
from harness.stats import Summary, summarize

TARGET_BATCH_NS = 75e6  # aim for batches of 50-100 ms
MIN_REPS = 3
MAX_REPS = 200
PAUSE_S = 0.030


@dataclass
class VariantTiming:
    """Samples of one timing variant of one implementation."""

    calls: int  # batch-norm gradient calls per invocation
    warm_ns: float  # one invocation, as calibrated after the warm-up; it sized the batches
    reps: int  # invocations per batch
    samples_ns: list[float] = field(default_factory=list)  # per call, one per round
    # Per round: batch_ns, the worker's cpu_ns, involuntary_switches and minor page faults per
    # call during the batch, the others_cores other processes kept busy, and whether that made
    # the visit contended.
    visits: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"calls_per_invocation": self.calls, "warm_ns": self.warm_ns, "reps": self.reps,
                "samples_ns": self.samples_ns, "visits": self.visits,
                "contended_visits": self.contended_visits(),
                "summary": _summary_json(self.summary())}

    def summary(self) -> Summary | None:
        return summarize(self.samples_ns)

    def contended_visits(self) -> int:
        """Visits during which another process competed for the cores."""
        return sum(1 for v in self.visits if v["contended"])


def _summary_json(summary: Summary | None) -> dict | None:
    return summary.to_json() if summary else None


@dataclass
class ImplResult:
    """One implementation on one block: status, cross-check aggregates and timings."""

    status: str  # "ok", "n/a" (the implementation refuses the case) or "failed"
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    check: dict | None = None
    variants: dict[str, VariantTiming] = field(default_factory=dict)

    def chosen(self) -> str | None:
        """The variant with the lowest median (the faster of eager and chained)."""
        timed = {v: t.summary() for v, t in self.variants.items() if t.samples_ns}
        if not timed:
            return None
        return min(timed, key=lambda v: timed[v].median_us)

    def summary(self) -> Summary | None:
        chosen = self.chosen()
        return self.variants[chosen].summary() if chosen else None

    def contended(self) -> bool:
        """Whether most visits of the chosen variant were contended, so that even the median
        is likely inflated by another process."""
        chosen = self.chosen()
        if not chosen:
            return False
        timing = self.variants[chosen]
        return 2 * timing.contended_visits() > len(timing.visits)

    def faults_per_call(self) -> float | None:
        """Median over the chosen variant's visits of its minor page faults per call."""
        chosen = self.chosen()
        faults = sorted(v["faults_per_call"] for v in self.variants[chosen].visits) if chosen \
            else []
        return faults[len(faults) // 2] if faults else None

    def fail(self, error: str) -> None:
        self.status, self.error = "failed", error

    def to_json(self) -> dict:
        return {"status": self.status, "error": self.error, "notes": self.notes,
                "check": self.check, "chosen_variant": self.chosen(),
                "contended": self.contended(), "faults_per_call": self.faults_per_call(),
                "summary": _summary_json(self.summary()),
                "variants": {v: t.to_json() for v, t in self.variants.items()}}


def choose_reps(warm_ns: float) -> int:
    """Invocations per batch so that a batch takes about TARGET_BATCH_NS."""
    return max(MIN_REPS, min(MAX_REPS, round(TARGET_BATCH_NS / max(warm_ns, 1.0))))


def _by_group(names: list[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(GROUP_OF[name], []).append(name)
    return groups


def _from_prepare(reply: dict) -> ImplResult:
    if reply["status"] != "ok":
        return ImplResult(reply["status"], error=reply.get("error"))
    variants = {v: VariantTiming(calls=reply["calls"][v], warm_ns=warm,
                                 reps=choose_reps(warm))
                for v, warm in reply["warm_ns"].items()}
    return ImplResult("ok", notes=reply.get("notes", []), check=reply["check"],
                      variants=variants)


def prepare_block(pool: Pool, case: Case, threads: int, names: list[str],
                  seed: int) -> dict[str, ImplResult]:
    """Inputs, warm-up and cross-check aggregates on every worker of the block."""
    results: dict[str, ImplResult] = {}
    for group, members in _by_group(names).items():
        handle = pool.get(group, threads)
        try:
            handle.start()
            reply = handle.request({"cmd": "prepare", "case": case.to_json(), "seed": seed,
                                    "impls": members})
            results.update({n: _from_prepare(reply["impls"][n]) for n in members})
        except WorkerError as error:
            results.update({n: ImplResult("failed", error=str(error)) for n in members})
    return results


def _visit(pool: Pool, threads: int, name: str, variant: str,
           results: dict[str, ImplResult]) -> None:
    """One timed batch; a worker failure fails every implementation that worker hosts."""
    timing = results[name].variants[variant]
    group = GROUP_OF[name]
    try:
        reply = pool.get(group, threads).request(
            {"cmd": "time", "impl": name, "variant": variant, "reps": timing.reps})
    except WorkerError as error:
        for other, result in results.items():
            if GROUP_OF[other] == group and result.status == "ok":
                result.fail(str(error))
        return
    timing.samples_ns.append(reply["per_call_ns"])
    visit = {k: reply[k] for k in ("batch_ns", "cpu_ns", "involuntary_switches",
                                   "others_cores", "faults_per_call")}
    visit["contended"] = contention.is_contended(reply["others_cores"], threads,
                                                 contention.usable_cores())
    timing.visits.append(visit)


def run_rounds(pool: Pool, case: Case, threads: int, results: dict[str, ImplResult],
               rounds: int, seed: int) -> None:
    """``rounds`` rounds over every (implementation, variant), each in a new shuffled order."""
    # Seeded by the case, so a --filter'ed rerun visits in the same order.
    rng = random.Random(f"{seed}/{case.name}/{threads}")
    units = [(n, v) for n, r in results.items() if r.status == "ok" for v in r.variants]
    for _ in range(rounds):
        rng.shuffle(units)
        for name, variant in units:
            if results[name].status != "ok":
                continue
            time.sleep(PAUSE_S)
            _visit(pool, threads, name, variant, results)


def release_block(pool: Pool, threads: int, names: list[str]) -> None:
    """Frees the block's tensors in every worker that is still running."""
    for group in _by_group(names):
        handle = pool.get(group, threads)
        if handle.alive:
            try:
                handle.request({"cmd": "release"})
            except WorkerError:
                pass  # a worker that cannot release is stopped; the next block restarts it


def run_block(pool: Pool, case: Case, threads: int, names: list[str], rounds: int,
              seed: int, progress: Callable[[str], None]) -> dict[str, ImplResult]:
    """Everything for one (case, threads): prepare, rounds, release."""
    results = prepare_block(pool, case, threads, names, seed)
    for name, result in results.items():
        if result.status == "failed":
            progress(f"  {name} failed: {result.error}")
    run_rounds(pool, case, threads, results, rounds, seed)
    release_block(pool, threads, names)
    return results
