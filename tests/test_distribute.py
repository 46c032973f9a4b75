"""Training with the shim under tf.distribute matches training without it.

MirroredStrategy runs on two logical CPU devices in one process; MultiWorkerMirroredStrategy
runs as two worker processes on localhost (TF_CONFIG with free ports), bounded in time and
killed if they overrun. Tolerance: losses and weights within rtol 1e-4, atol 1e-5 (the two runs
differ only by the float rounding of the batch-norm gradients).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tf_keras", reason="tf_keras (Keras 2) not installed; `make test` installs it")

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distribute_worker.py")
TIMEOUT_S = 300
TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def _env(**extra) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **extra)
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _run_workers(commands: list[list[str]], envs: list[dict]) -> None:
    """Runs the processes together; kills all of them if any overruns the time limit."""
    processes = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for c, e in zip(commands, envs)]
    try:
        outputs = [p.communicate(timeout=TIMEOUT_S) for p in processes]
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        pytest.fail(f"distributed workers did not finish within {TIMEOUT_S} s")
    for p, (stdout, stderr) in zip(processes, outputs):
        assert p.returncode == 0 and "WORKER DONE" in stdout, stderr[-3000:]


def _load(path) -> tuple[np.ndarray, list, int]:
    with np.load(path) as data:
        weights = [data[f"arr_{i}"] for i in range(len(data.files) - 2)]
        return data["losses"], weights, int(data["calls"])


def _assert_same_training(with_shim, without_shim) -> None:
    losses_shim, weights_shim, calls_shim = with_shim
    losses_tf, weights_tf, calls_tf = without_shim
    assert calls_shim > 0 and calls_tf == 0  # the shim really computed the gradients
    np.testing.assert_allclose(losses_shim, losses_tf, **TOLERANCE)
    for a, b in zip(weights_shim, weights_tf):
        np.testing.assert_allclose(a, b, **TOLERANCE)


def test_mirrored_strategy_on_two_logical_cpus(tmp_path) -> None:
    results = {}
    for shim in ("0", "1"):
        out = tmp_path / f"mirrored_{shim}.npz"
        _run_workers([[sys.executable, WORKER, "mirrored", shim, str(out)]], [_env()])
        results[shim] = _load(out)
    _assert_same_training(results["1"], results["0"])


def test_multi_worker_mirrored_strategy_with_two_processes(tmp_path) -> None:
    results = {}
    for shim in ("0", "1"):
        ports = _free_ports(2)
        cluster = {"worker": [f"localhost:{p}" for p in ports]}
        outs = [tmp_path / f"multi_{shim}_{i}.npz" for i in range(2)]
        commands = [[sys.executable, WORKER, "multiworker", shim, str(o)] for o in outs]
        envs = [_env(TF_CONFIG=json.dumps({"cluster": cluster,
                                           "task": {"type": "worker", "index": i}}))
                for i in range(2)]
        _run_workers(commands, envs)
        chief, other = _load(outs[0]), _load(outs[1])
        for a, b in zip(chief[1], other[1]):  # synchronous training: the replicas agree
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        results[shim] = chief
    _assert_same_training(results["1"], results["0"])
