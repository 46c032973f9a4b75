"""The load-time driver check: GPU kernels are registered unless the installed NVIDIA driver is
too old for the CUDA code, in which case one warning says why and TensorFlow runs the ops on the
CPU. The driver is played by a stand-in libcuda.so.1 that answers cuDriverGetVersion with the
version in FAKE_CUDA_DRIVER_VERSION, found first through LD_LIBRARY_PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fresh_process import run_python
from tf_fbn_ops import _build_info

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # build_support/

pytestmark = pytest.mark.skipif(not _build_info.CUDA, reason="CPU-only build: no GPU kernels")

# The build's CUDA major, and drivers just below and just above what it needs.
BUILT_MAJOR = int((getattr(_build_info, "CUDA_VERSION", None) or "0").split(".")[0])
OLD_DRIVER = (BUILT_MAJOR - 1) * 1000 + 80   # e.g. 12080 (R570) for a CUDA 13 build
NEW_DRIVER = BUILT_MAJOR * 1000 + 10         # e.g. 13010

FAKE_LIBCUDA = r"""
#include <stdlib.h>
int cuDriverGetVersion(int* version) {
  *version = atoi(getenv("FAKE_CUDA_DRIVER_VERSION"));
  return 0;
}
"""

PROBE = """
import numpy as np, tensorflow as tf, tf_fbn_ops
from tensorflow.python.framework import kernels
tf_fbn_ops.load_library()
for op in ("FbnFusedBatchNormGrad", "FbnFusedBatchNormGradV2", "FbnFusedBatchNormGradV3"):
    devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
    print(op, "GPU" in devices, "CPU" in devices)
x = tf.random.normal([2, 3, 3, 4])
out = tf_fbn_ops.fused_batch_norm_grad(x, x, tf.ones([4]), tf.zeros([4]), tf.ones([4]))
print("cpu op:", np.isfinite(out.x_backprop.numpy()).all())
print("status:", tf_fbn_ops.gpu_kernel_status())
"""


@pytest.fixture(scope="module")
def fake_driver_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fake_driver")
    (folder / "fake.c").write_text(FAKE_LIBCUDA)
    subprocess.run(["gcc", "-shared", "-fPIC", str(folder / "fake.c"), "-Wl,-soname,libcuda.so.1",
                    "-o", str(folder / "libcuda.so.1")], check=True)
    return folder


def _probe(fake_driver_dir: Path, version: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(fake_driver_dir), os.environ.get("LD_LIBRARY_PATH"))
                           if p)
    return run_python(PROBE, LD_LIBRARY_PATH=path, FAKE_CUDA_DRIVER_VERSION=version,
                      TF_CPP_MIN_LOG_LEVEL="0")


def test_old_driver_leaves_gpu_kernels_unregistered_with_one_warning(fake_driver_dir) -> None:
    result = _probe(fake_driver_dir, str(OLD_DRIVER))
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines()[:3]:
        assert line.endswith(" False True"), result.stdout  # no GPU kernel, the CPU one stays
    assert "cpu op: True" in result.stdout
    warnings = [l for l in result.stderr.splitlines() if "GPU kernels NOT registered" in l]
    assert len(warnings) == 1, result.stderr
    from build_support import cuda_toolkit  # noqa: PLC0415

    floor = cuda_toolkit.minimum_driver(_build_info.CUDA_VERSION)
    assert f"supports only CUDA {BUILT_MAJOR - 1}.8" in warnings[0]
    assert f"{floor} or newer" in warnings[0]
    assert "status: GPU kernels NOT registered" in result.stdout


def test_new_enough_driver_registers_gpu_kernels(fake_driver_dir) -> None:
    result = _probe(fake_driver_dir, str(NEW_DRIVER))
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines()[:3]:
        assert line.endswith(" True True"), result.stdout
    assert "NOT registered" not in result.stderr
    assert "status: GPU kernels registered" in result.stdout
    assert f"the driver supports CUDA {BUILT_MAJOR}.1" in result.stdout


def test_no_driver_registers_gpu_kernels() -> None:
    """Without a driver TensorFlow has no GPU device, so registering costs nothing; and a
    library built here must show its GPU kernels (the wheel's smoke test asks for them)."""
    result = run_python(PROBE, TF_CPP_MIN_LOG_LEVEL="0")
    assert result.returncode == 0, result.stderr
    assert "NOT registered" not in result.stderr
    for line in result.stdout.splitlines()[:3]:
        assert line.endswith(" True True"), result.stdout
    status = next(l for l in result.stdout.splitlines() if l.startswith("status:"))
    if os.path.exists("/proc/driver/nvidia/version"):
        assert "GPU kernels registered" in status
    else:
        assert "no NVIDIA driver is installed here" in status
