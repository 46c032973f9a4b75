"""Worker processes for the tf.distribute tests: free loopback ports and a bounded run that
kills every worker when one overruns."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

TIMEOUT_S = 300


def worker_env(**extra: str) -> dict:
    """This environment with TensorFlow quiet, no inherited TF_CONFIG, and `extra`."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def free_ports(count: int) -> list[int]:
    """`count` ports free on 127.0.0.1 just now (the workers bind them moments later)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def cluster_envs(count: int) -> list[dict]:
    """TF_CONFIG environments of `count` workers on free loopback ports."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(count)]}
    return [worker_env(TF_CONFIG=json.dumps({"cluster": cluster,
                                             "task": {"type": "worker", "index": i}}))
            for i in range(count)]


def run_workers(commands: list[list[str]], envs: list[dict],
                timeout_s: float = TIMEOUT_S) -> list[tuple[int, str, str]]:
    """Runs the processes together; kills all of them and fails the test if any overruns.
    Returns each one's (exit status, stdout, stderr)."""
    processes = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for c, e in zip(commands, envs)]
    try:
        outputs = [p.communicate(timeout=timeout_s) for p in processes]
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        for p in processes:
            p.communicate()
        pytest.fail(f"distributed workers did not finish within {timeout_s:.0f} s")
    return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs)]


def port_in_use(results: list[tuple[int, str, str]]) -> bool:
    """Whether a worker failed because another process took its port first."""
    return any("Address already in use" in err or "Failed to add port" in err
               for _, _, err in results)


def run_cluster(commands: list[list[str]], attempts: int = 3,
                timeout_s: float = TIMEOUT_S) -> list[tuple[int, str, str]]:
    """One worker per command on free loopback ports; new ports and another try when a port
    was taken between picking it and binding it."""
    for _ in range(attempts):
        results = run_workers(commands, cluster_envs(len(commands)), timeout_s)
        if not port_in_use(results):
            return results
    return results
