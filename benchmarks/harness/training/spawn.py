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
import time
from pathlib import Path
from typing import IO

from harness.pool import worker_environment

TAIL_LINES = 40


class WorkerFailed(RuntimeError):
    """The worker exited with an error or without a result; the message quotes its stderr."""


def _copy_stderr(stream: IO[str], log: IO[str], tail: collections.deque,
                 last_output: list[float]) -> None:
    for line in stream:
        last_output[0] = time.monotonic()
        sys.stderr.write(line)
        sys.stderr.flush()
        log.write(line)
        tail.append(line.rstrip("\n"))


def run_worker(threads: int, job: list[str], log_path: Path, idle_timeout_s: float) -> dict:
    """Runs the worker for ``threads`` with the job's options and returns its result. The worker
    reports progress on stderr at least once per round; one silent for ``idle_timeout_s`` is
    taken for hung and killed.

    Raises:
      WorkerFailed: non-zero exit, no JSON result on stdout, or silent for too long.
    """
    env = worker_environment("tf_default", threads)
    env.setdefault("KERAS_BACKEND", "tensorflow")
    command = [sys.executable, "-m", "harness.training.worker",
               "--threads", str(threads), *job]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    last_output = [time.monotonic()]
    stdout: list[str] = []
    hung = False
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env)
        copier = threading.Thread(target=_copy_stderr,
                                  args=(process.stderr, log, tail, last_output), daemon=True)
        reader = threading.Thread(target=lambda: stdout.append(process.stdout.read()),
                                  daemon=True)
        copier.start()
        reader.start()
        try:
            while process.poll() is None:
                if time.monotonic() - last_output[0] > idle_timeout_s:
                    hung = True
                    break
                time.sleep(0.5)
        finally:
            if process.poll() is None:  # hung or interrupted: do not leave it running
                process.kill()
            returncode = process.wait()
            reader.join(timeout=10)
            copier.join(timeout=10)
    lines = [line for line in "".join(stdout).splitlines() if line.strip()]
    if returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
    stderr = "\n".join(f"    | {line}" for line in tail)
    why = (f"printed nothing for {idle_timeout_s:g} s and was killed" if hung
           else f"failed (exit status {returncode})")
    raise WorkerFailed(f"training worker for {threads} thread(s) {why}; the end of its stderr "
                       f"(all of it in {log_path}):\n{stderr}")
