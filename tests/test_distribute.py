"""Training with the shim under tf.distribute matches training without it.

MirroredStrategy runs on two logical CPU devices in one process; MultiWorkerMirroredStrategy
runs as two worker processes on localhost (TF_CONFIG with free ports), bounded in time and
killed if they overrun. Tolerance: losses and weights within rtol 1e-4, atol 1e-5 (the two runs
differ only by the float rounding of the batch-norm gradients).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from worker_processes import run_cluster, run_workers, worker_env

pytest.importorskip("tf_keras", reason="tf_keras (Keras 2) not installed; `make test` installs it")

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distribute_worker.py")
TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def _run_workers(commands: list[list[str]], envs: list[dict]) -> None:
    for returncode, stdout, stderr in run_workers(commands, envs):
        assert returncode == 0 and "WORKER DONE" in stdout, stderr[-3000:]


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
        _run_workers([[sys.executable, WORKER, "mirrored", shim, str(out)]], [worker_env()])
        results[shim] = _load(out)
    _assert_same_training(results["1"], results["0"])


def test_multi_worker_mirrored_strategy_with_two_processes(tmp_path) -> None:
    results = {}
    for shim in ("0", "1"):
        outs = [tmp_path / f"multi_{shim}_{i}.npz" for i in range(2)]
        commands = [[sys.executable, WORKER, "multiworker", shim, str(o)] for o in outs]
        for returncode, stdout, stderr in run_cluster(commands):
            assert returncode == 0 and "WORKER DONE" in stdout, stderr[-3000:]
        chief, other = _load(outs[0]), _load(outs[1])
        for a, b in zip(chief[1], other[1]):  # synchronous training: the replicas agree
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        results[shim] = chief
    _assert_same_training(results["1"], results["0"])
