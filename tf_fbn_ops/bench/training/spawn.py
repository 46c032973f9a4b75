"""The parent's side of the training workers: run one, forward its progress, read its result.

One worker per thread count, run one after the other (two at once would compete for the cores
they are timing). The environment is the op harness's TensorFlow worker's (oneDNN on as TF's
default, OMP_NUM_THREADS = threads, quiet C++ logs, this package on the path), with Keras 3 on
its TensorFlow backend. The worker's stderr is copied live to ours and to a log file.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from tf_fbn_ops.bench.pool import worker_environment

TAIL_LINES = 40


class WorkerFailed(RuntimeError):
    """The worker exited with an error or without a result; the message quotes its stderr."""


def _copy_stderr(stream: IO[str], log: IO[str], tail: collections.deque) -> None:
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()
        log.write(line)
        tail.append(line.rstrip("\n"))


def run_worker(threads: int, job: list[str], log_path: Path) -> dict:
    """Runs the worker for ``threads`` with the job's options and returns its result.

    Raises:
      WorkerFailed: non-zero exit, or no JSON result on stdout.
    """
    env = worker_environment("tf_default", threads)
    env.setdefault("KERAS_BACKEND", "tensorflow")
    command = [sys.executable, "-m", "tf_fbn_ops.bench.training.worker",
               "--threads", str(threads), *job]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env)
        copier = threading.Thread(target=_copy_stderr, args=(process.stderr, log, tail),
                                  daemon=True)
        copier.start()
        try:
            stdout = process.stdout.read()
            returncode = process.wait()
        finally:
            if process.poll() is None:  # interrupted: do not leave it running
                process.kill()
                process.wait()
            copier.join(timeout=10)
    lines = [line for line in stdout.splitlines() if line.strip()]
    if returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
    stderr = "\n".join(f"    | {line}" for line in tail)
    raise WorkerFailed(f"training worker for {threads} thread(s) failed (exit status "
                       f"{returncode}); the end of its stderr (all of it in {log_path}):\n"
                       f"{stderr}")
