"""A worker process: one implementation group at one thread count, driven over stdin/stdout.

Usage (the parent starts it): ``python -m harness.worker --group G --threads N
[--stream-library PATH]``. Requests and replies are JSON lines (see ``protocol``):

* ``hello`` -> versions and thread settings, and the implementations that cannot run here;
* ``prepare`` {case, seed, impls} -> per implementation: inputs built (the previous case's are
  freed first), two untimed warm-up calls, the cross-check aggregates of the first, a short
  calibration (the parent sizes batches from it), and the same for the chained variant;
* ``time`` {impl, variant, reps} -> two untimed calls, then ``reps`` invocations timed one by
  one; the reply is the batch's median per call;
* ``release`` frees the case; ``quit`` ends the process.

Thread counts are fixed before any framework work starts (TF reads its intra-op setting when the
runtime first starts), which is why each thread count has a process of its own.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from typing import IO, Any

import numpy as np

from tf_fbn_ops._onednn import onednn_enabled
from harness import protocol
from harness import implementations as impls
from harness.batch_timer import time_batch
from harness.cases import Case
from harness.inputs import make_inputs
from harness.stats import median_ns

WARMUP_CALLS = 2  # untimed calls before each timed batch, as in the research harness
# After the warm-up calls, invocations are timed for about this long (at most
# CALIBRATION_MAX_INVOCATIONS) and the fastest sizes the batches: the second call alone still
# pays one-off costs (page faults of fresh outputs, thread pools starting, caches) and
# overestimates a call by up to several times, and on a busy machine even a median can be
# a scheduler stall.
CALIBRATION_NS = 20e6
CALIBRATION_MAX_INVOCATIONS = 200


def _protocol_streams() -> tuple[IO[bytes], IO[bytes]]:
    """stdin for requests and a private duplicate of stdout for replies; file descriptor 1
    then points at stderr, so whatever a library prints cannot corrupt a reply."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, replies



def setup_tensorflow(threads: int, unavailable: dict[str, str]) -> dict:
    """Thread pools sized before any op runs, then the shim's library loaded."""
    import tensorflow as tf  # noqa: PLC0415

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    info: dict[str, Any] = {"tensorflow": tf.__version__, "onednn_enabled": onednn_enabled()}
    try:
        import tf_fbn_ops  # noqa: PLC0415

        tf_fbn_ops.load_library()
        info["shim_library"] = tf_fbn_ops.library_path()
    except ImportError as error:
        unavailable["shim"] = f"op library not loadable: {impls.first_line(error)}"
    info["intra_op_threads"] = tf.config.threading.get_intra_op_parallelism_threads()
    info["inter_op_threads"] = tf.config.threading.get_inter_op_parallelism_threads()
    return info


def setup_torch(threads: int, unavailable: dict[str, str]) -> dict:
    """torch's intra-op threads set; torch reported unavailable if it does not import."""
    try:
        import torch  # noqa: PLC0415
    except Exception as error:  # noqa: BLE001 - any import failure means "no torch here"
        unavailable["torch"] = f"import torch failed: {impls.first_line(error)}"
        return {}
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # only settable before torch's first parallel work; the default is harmless here
    return {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def setup_stream(threads: int, library_path: str | None,
                 unavailable: dict[str, str]) -> tuple[dict, Any]:
    """The streaming kernel loaded and its OpenMP thread count set."""
    if not library_path:
        unavailable["stream"] = "streaming kernel not built"
        return {}, None
    from harness import streaming  # noqa: PLC0415

    library = streaming.load(library_path)
    library.fbn_stream_set_threads(threads)
    return {"omp_max_threads": library.fbn_stream_max_threads()}, library


def _timed_ns(function) -> int:
    start = time.perf_counter_ns()
    function()
    return time.perf_counter_ns() - start


def calibrate_ns(function) -> float:
    """Fastest invocation among those run for about CALIBRATION_NS."""
    samples = [_timed_ns(function)]
    while sum(samples) < CALIBRATION_NS and len(samples) < CALIBRATION_MAX_INVOCATIONS:
        samples.append(_timed_ns(function))
    return float(min(samples))


class Worker:
    """State of one worker: its group, the prepared runners and the request handlers."""

    def __init__(self, group: str, threads: int, stream_library: str | None):
        self.group = impls.GROUPS[group]
        self.threads = threads
        self.unavailable: dict[str, str] = {}
        self.stream_library = None
        self.runners: dict[str, impls.Runner] = {}
        self.info = self._setup(stream_library)

    def _setup(self, stream_library: str | None) -> dict:
        info: dict[str, Any] = {"group": self.group.name, "threads": self.threads,
                                "pid": os.getpid(), "numpy": np.__version__,
                                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                                "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS")}
        if self.group.framework == "tensorflow":
            info.update(setup_tensorflow(self.threads, self.unavailable))
        elif self.group.framework == "torch":
            info.update(setup_torch(self.threads, self.unavailable))
        else:
            extra, self.stream_library = setup_stream(self.threads, stream_library,
                                                      self.unavailable)
            info.update(extra)
        return info

    def handle(self, message: dict) -> dict:
        """The reply to one request."""
        command = message.get("cmd")
        if command == "hello":
            return {"ok": True, "info": self.info, "unavailable": self.unavailable}
        if command == "prepare":
            case = Case.from_json(message["case"])
            return {"ok": True, "impls": self.prepare(case, message["seed"], message["impls"])}
        if command == "time":
            return {"ok": True, **self.time(message["impl"], message["variant"],
                                            message["reps"])}
        if command == "release":
            self.release()
            return {"ok": True}
        if command == "quit":
            return {"ok": True}
        return {"ok": False, "error": f"unknown command {command!r}"}

    def release(self) -> None:
        """Drops the current case's tensors, before the next case allocates its own."""
        self.runners.clear()
        gc.collect()

    def prepare(self, case: Case, seed: int, names: list[str]) -> dict:
        self.release()
        inputs = make_inputs(case, seed)
        return {name: self._prepare_one(name, case, inputs) for name in names}

    def _prepare_one(self, name: str, case: Case, inputs) -> dict:
        """Builds, warms up and cross-checks one implementation; n/a if it refuses the case."""
        if name in self.unavailable:
            return {"status": "n/a", "error": self.unavailable[name]}
        try:
            runner = impls.prepare(name, case, inputs, self.stream_library)
            eager = runner.variants[impls.EAGER]
            outputs = eager()  # warm-up call 1, which the cross-check looks at
            check = runner.aggregates(outputs) if runner.aggregates else None
            del outputs
            eager()  # warm-up call 2
            warm_ns = {impls.EAGER: calibrate_ns(eager)}
        except Exception as error:  # noqa: BLE001 - the framework's refusal is the result
            return {"status": "n/a", "error": f"{type(error).__name__}: {impls.first_line(error)}"}
        for variant, function in list(runner.variants.items()):
            if variant == impls.EAGER:
                continue
            try:
                function()  # traces the tf.function
                warm_ns[variant] = calibrate_ns(function)
            except Exception as error:  # noqa: BLE001 - keep the eager numbers
                runner.notes.append(f"{variant} dropped: {impls.first_line(error)}")
                del runner.variants[variant]
        self.runners[name] = runner
        return {"status": "ok", "check": check, "warm_ns": warm_ns,
                "calls": {v: runner.calls[v] for v in runner.variants}, "notes": runner.notes}

    def time(self, name: str, variant: str, reps: int) -> dict:
        """One timed batch: the per-call median of ``reps`` back-to-back invocations."""
        runner = self.runners[name]
        function = runner.variants[variant]
        calls = runner.calls[variant]
        for _ in range(impls.invocations_for(WARMUP_CALLS, calls)):
            function()
        batch = time_batch(function, reps)
        # The cores other processes kept busy meanwhile are the evidence of contention (see
        # contention.py); minor faults, of fresh memory touched per call.
        return {"per_call_ns": median_ns(batch.samples_ns) / calls, "batch_ns": batch.batch_ns,
                "others_cores": batch.others_cores,
                "involuntary_switches": batch.involuntary_switches, "cpu_ns": batch.cpu_ns,
                "faults_per_call": batch.minor_faults / (reps * calls)}


def serve(worker: Worker, requests: IO[bytes], replies: IO[bytes]) -> None:
    """Answers requests until "quit" or end of input."""
    for line in requests:
        if not line.strip():
            continue
        try:
            message = protocol.decode(line)
            reply = worker.handle(message)
        except Exception:  # noqa: BLE001 - report to the parent instead of dying silently
            message, reply = {}, {"ok": False, "error": traceback.format_exc(limit=4)}
        protocol.send(replies, reply)
        if message.get("cmd") == "quit":
            return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", required=True, choices=sorted(impls.GROUPS))
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--stream-library")
    args = parser.parse_args(argv)
    requests, replies = _protocol_streams()
    serve(Worker(args.group, args.threads, args.stream_library), requests, replies)


if __name__ == "__main__":
    main()
