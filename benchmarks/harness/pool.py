"""The parent's side of the workers: start them, send requests, restart one that died.

Each worker is a Python subprocess of the parent's interpreter. Its stderr (TF's and oneDNN's
log chatter, tracebacks) goes to a log file under the output directory, whose tail is quoted when
the worker fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness import protocol
from harness.implementations import GROUPS

HELLO_TIMEOUT_S = 300.0  # importing TensorFlow on a busy 2-core machine can take a while
HARNESS_ROOT = Path(__file__).resolve().parents[1]  # benchmarks/, the folder holding harness/


class WorkerError(RuntimeError):
    """A worker exited, hung or answered a request with an error."""


def worker_environment(group: str, threads: int) -> dict[str, str]:
    """The parent's environment plus the group's settings and the thread count."""
    env = dict(os.environ)
    env.update(GROUPS[group].env)
    env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The workers must import this harness and the same tf_fbn_ops as the parent, whatever
    # their cwd.
    import tf_fbn_ops  # noqa: PLC0415 - the parent's own, already imported
    package_root = str(Path(tf_fbn_ops.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HARNESS_ROOT), package_root, env.get("PYTHONPATH", "")) if p)
    return env


class WorkerHandle:
    """One worker process (a group at a thread count), started on demand."""

    def __init__(self, group: str, threads: int, stream_library: str | None, log_dir: Path,
                 timeout_s: float):
        self.group = group
        self.threads = threads
        self.stream_library = stream_library
        self.log_path = log_dir / f"worker-{group}-t{threads}.log"
        self.timeout_s = timeout_s
        self.hello: dict = {}
        self.broken: str | None = None  # why the worker could not start; it is not retried
        self._spawned = False
        self._process: subprocess.Popen | None = None
        self._reader: protocol.LineReader | None = None

    @property
    def name(self) -> str:
        return f"{self.group}/t{self.threads}"

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> dict:
        """Starts the process if it is not running and returns its hello reply.

        Raises:
          WorkerError: the worker did not start, now or on an earlier attempt (a worker that
            cannot start would fail the same way for every case, at the cost of a TF import).
        """
        if self.alive:
            return self.hello
        if self.broken:
            raise WorkerError(self.broken)
        try:
            self.hello = self._spawn()
        except WorkerError as error:
            self.broken = f"{self.name} did not start: {error}"
            raise WorkerError(self.broken) from error
        return self.hello

    def _spawn(self) -> dict:
        command = [sys.executable, "-m", "harness.worker", "--group", self.group,
                   "--threads", str(self.threads)]
        if self.stream_library:
            command += ["--stream-library", self.stream_library]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # A fresh log per run; a restarted worker appends, keeping the first one's last words.
        mode = "ab" if self._spawned else "wb"
        self._spawned = True
        with open(self.log_path, mode) as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                env=worker_environment(self.group, self.threads))
        self._reader = protocol.LineReader(self._process.stdout.fileno())
        return self.request({"cmd": "hello"}, HELLO_TIMEOUT_S)

    def request(self, message: dict, timeout_s: float | None = None) -> dict:
        """Sends one request and returns the reply.

        Raises:
          WorkerError: the worker is gone, timed out or replied with an error; a worker that
            died or hung is stopped, and ``start`` runs a fresh one.
        """
        if not self.alive:
            raise WorkerError(f"{self.name} is not running")
        try:
            protocol.send(self._process.stdin, message)
            reply = self._reader.read(timeout_s or self.timeout_s)
        except (OSError, protocol.ProtocolError) as error:
            self.stop()
            raise WorkerError(f"{self.name}: {error}\n{self.log_tail()}") from error
        if not reply.get("ok"):
            raise WorkerError(f"{self.name}: {reply.get('error', 'request failed')}")
        return reply

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the worker's log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(f"    | {line}" for line in text[-lines:])

    def stop(self) -> None:
        """Asks the worker to quit, then makes sure it is gone."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            try:
                protocol.send(process.stdin, {"cmd": "quit"})
                process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
        for stream in (process.stdin, process.stdout):
            if stream:
                stream.close()


class Pool:
    """All workers of a run, keyed by (group, threads)."""

    def __init__(self, groups: list[str], threads: list[int], stream_library: str | None,
                 log_dir: Path, timeout_s: float):
        self.workers = {(g, t): WorkerHandle(g, t, stream_library, log_dir, timeout_s)
                        for t in threads for g in groups}

    def start_all(self, progress) -> dict[str, dict | str]:
        """Starts every worker one after the other (each import is CPU-heavy; starting them
        together would only slow each other down). Returns hello replies, or the error text of
        workers that failed to start."""
        hellos: dict[str, dict | str] = {}
        for handle in self.workers.values():
            progress(f"starting worker {handle.name}")
            try:
                hellos[handle.name] = handle.start()
            except WorkerError as error:
                progress(str(error))
                hellos[handle.name] = str(error)
        return hellos

    def get(self, group: str, threads: int) -> WorkerHandle:
        return self.workers[(group, threads)]

    def stop_all(self) -> None:
        for handle in self.workers.values():
            handle.stop()
