"""The two ways the shim's ops compile under XLA (cc/xla/xla_grad_lowerings.h): custom calls
of our FFI handlers, with the non-jit kernels' bits, and the HLO lowerings
(TF_FBN_OPS_XLA_LOWERING=hlo). A test module that imports `xla_path` runs each test taking it
once per path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tf_fbn_ops import _loader

NO_CUSTOM_CALLS = _loader.xla_ffi_missing_reason()


@pytest.fixture(params=["custom_call", "hlo"])
def xla_path(request, monkeypatch) -> str:
    """The variable is read at every compilation."""
    monkeypatch.delenv(_loader.XLA_LOWERING_VARIABLE, raising=False)
    if request.param == "custom_call" and NO_CUSTOM_CALLS is not None:
        pytest.skip(f"this build compiles to the HLO lowering only: {NO_CUSTOM_CALLS}")
    if request.param == "hlo":
        monkeypatch.setenv(_loader.XLA_LOWERING_VARIABLE, "hlo")
    return request.param


CUSTOM_CALL_TARGET = 'custom_call_target="tf_fbn_ops_batch_norm_grad"'


def assert_compiled_by(path: str, hlo: str) -> None:
    """The HLO of a compiled shim op is a call of our target, or the lowering's double sums."""
    if path == "custom_call":
        assert CUSTOM_CALL_TARGET in hlo and "f64" not in hlo
    else:
        assert CUSTOM_CALL_TARGET not in hlo and "f64" in hlo


def auto_clustering_environment(dump_dir: Path, path: str) -> dict[str, str]:
    """A process's environment with XLA auto-clustering on for the CPU, the clustering pass's
    graphs dumped into dump_dir, and the ops compiled by `path`."""
    env = {"TF_DUMP_GRAPH_PREFIX": str(dump_dir),
           "TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_clustering_debug"}
    if path == "hlo":
        env[_loader.XLA_LOWERING_VARIABLE] = "hlo"
    return env


def clusters_by_op(dump_dir: Path, op_type: str) -> dict[str, set]:
    """Op type -> the XLA clusters its nodes were put in ("" for none), from the graphs of a step
    function (an op of `op_type` between Sin and Cos) that --tf_xla_clustering_debug dumps after
    the clustering pass (eager ops get graphs of their own there, too small to cluster)."""
    clusters: dict[str, set] = {}
    for dump in dump_dir.glob("mark_for_compilation_annotated*.pbtxt"):
        text = dump.read_text()
        if not all(f'op: "{op}"' in text for op in (op_type, "Sin", "Cos")):
            continue
        for node in text.split("\nnode {")[1:]:
            op = re.search(r'op: "([^"]+)"', node).group(1)
            cluster = re.search(r'key: "_XlaCluster"\s+value \{\s+s: "([^"]+)"', node)
            clusters.setdefault(op, set()).add(cluster.group(1) if cluster else "")
    return clusters
