"""The FFI handlers as a library of their own (make xla-ffi-lib: the core and cc/xla_ffi/, no
TensorFlow), registered into JAX's XLA by tools/jax_ffi_check.py in a process without
TensorFlow: every dtype, layout and mode against the float64 oracle, run to run, bad calls, and
bit-identical to this TensorFlow kernel on the cases it has (CPU contract); synchronized batch
norm's two targets likewise (tools/jax_sync_ffi_check.py), and the forward's
(tools/jax_forward_ffi_check.py). The same run calls
the CUDA core's C entry, built against the host emulator, directly on JAX's buffers: the
plumbing a GPU run uses to hold the CUDA handler to the core's bits."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "build" / "libtf_fbn_ops_xla_ffi.so"
CHECK = ROOT / "tools" / "jax_ffi_check.py"
SYNC_CHECK = ROOT / "tools" / "jax_sync_ffi_check.py"
FORWARD_CHECK = ROOT / "tools" / "jax_forward_ffi_check.py"


def _tool(path: Path):
    """A check tool of tools/ as a module (it is a script, not part of a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _missing() -> str | None:
    from tf_fbn_ops import _build_info  # noqa: PLC0415 - written by the build

    if not getattr(_build_info, "XLA_FFI", False):
        return f"no XLA FFI headers in this TensorFlow: {_build_info.XLA_FFI_MISSING_REASON}"
    if importlib.util.find_spec("jax") is None:
        return "JAX is not installed (`make test` installs it)"
    if not LIBRARY.is_file():
        return f"{LIBRARY.relative_to(ROOT)} is not built (make xla-ffi-lib; `make test` does)"
    return None


def _require_library() -> None:
    """Skips without the library, JAX or FFI headers; in CI, where `make test` provides them
    all, fails instead."""
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)


def test_jax_runs_the_handlers_with_the_kernels_bits(tmp_path, emulated_gpu_core) -> None:
    _require_library()
    check = _tool(CHECK)
    expected = {}
    rng = np.random.default_rng(0)  # the tool's own draws, so its cases get these inputs
    for dtype_name, dtype in check.DTYPES.items():
        for layout in check.LAYOUTS:
            for mode, is_training, saved_inv_std in check.MODES:
                for shape in (check.LAYOUTS[layout], check.EMPTY[layout]):
                    inputs = check.make_inputs(rng, shape, layout, dtype, saved_inv_std)
                    if saved_inv_std:  # the GPU contract: no CPU kernel to compare with
                        continue
                    key = f"{dtype_name}-{layout}-{mode}-{'x'.join(map(str, shape))}"
                    outputs = tf_fbn_ops.fused_batch_norm_grad_v3(
                        *(tf.constant(v) for v in inputs), tf.zeros([0]),
                        epsilon=check.EPSILON, data_format=layout, is_training=is_training)
                    for i, value in enumerate(inputs):
                        expected[f"{key}/in{i}"] = value
                    for i in range(3):
                        expected[f"{key}/out{i}"] = outputs[i].numpy()
    assert len(expected) == 3 * 4 * 2 * 2 * 8
    np.savez(tmp_path / "expected.npz", **expected)
    # JAX's own XLA, in a process of its own: TensorFlow's is loaded here.
    run = subprocess.run(
        [sys.executable, str(CHECK), str(LIBRARY), "--platform", "cpu",
         "--expected", str(tmp_path / "expected.npz"), "--core", str(emulated_gpu_core)],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # 3 dtypes x 4 layouts x 3 modes through the core's entry.
    assert ("(48 against the kernel's bits, 36 against the core called directly), 0 failed"
            in run.stdout), run.stdout
    assert "FAIL" not in run.stdout, run.stdout


def _kernels_replicas(inputs, layout: str, batches, epsilon: float) -> tuple[list, list, list]:
    """The check's replicas through this TensorFlow's FbnSyncBatchNormGrad* kernels: each
    replica's sums and outputs, and the whole batch's scale and offset gradients."""
    from tf_fbn_ops import ops as shim_ops  # noqa: PLC0415

    scale, mean, variance = (tf.constant(v) for v in inputs[2:])
    cut = np.cumsum(batches)[:-1]
    parts = list(zip(np.split(inputs[0], cut), np.split(inputs[1], cut)))
    sums = [[t.numpy() for t in shim_ops.sync_batch_norm_grad_sums(
        tf.constant(part_dy), tf.constant(part_x), mean, data_format=layout)]
        for part_dy, part_x in parts]
    total_dy = np.zeros(scale.shape[0], np.float64)
    total_dy_xc = np.zeros(scale.shape[0], np.float64)
    for replica_dy, replica_dy_xc in sums:
        total_dy = total_dy + replica_dy
        total_dy_xc = total_dy_xc + replica_dy_xc
    count = tf.constant(inputs[1].size // max(scale.shape[0], 1), tf.int64)
    def from_sums(part, own_dy, own_dy_xc):
        return [t.numpy() for t in shim_ops.sync_batch_norm_grad_from_sums(
            tf.constant(part[0]), tf.constant(part[1]), scale, mean, variance, total_dy,
            total_dy_xc, count, epsilon=epsilon, data_format=layout, replica_sum_dy=own_dy,
            replica_sum_dy_xc=own_dy_xc)]

    outputs = [from_sums(part, *own) for part, own in zip(parts, sums)]
    return sums, outputs, from_sums(parts[0], total_dy, total_dy_xc)[1:]


def test_jax_runs_the_synchronized_handlers_with_the_kernels_bits(tmp_path) -> None:
    """Synchronized batch norm's two targets in JAX's XLA, as replicas of a batch cut three
    ways: against the oracle, the whole gradient's target, and these kernels' bits."""
    _require_library()
    check = _tool(SYNC_CHECK)
    expected = {}
    rng = np.random.default_rng(0)  # the tool's own draws, so its cases get these inputs
    for dtype_name, dtype in check.grad.DTYPES.items():
        for layout, shape in check.grad.LAYOUTS.items():
            for batches in check.cuts(shape[0]):
                key = check.case_key(dtype_name, layout, batches)
                inputs = check.grad.make_inputs(rng, shape, layout, dtype, False)
                for i, value in enumerate(inputs):
                    expected[f"{key}/in{i}"] = value
                for i, value in enumerate(check.expected_outputs(
                        *_kernels_replicas(inputs, layout, batches, check.grad.EPSILON))):
                    expected[f"{key}/out{i}"] = value
    np.savez(tmp_path / "expected.npz", **expected)
    run = subprocess.run(
        [sys.executable, str(SYNC_CHECK), str(LIBRARY), "--platform", "cpu",
         "--expected", str(tmp_path / "expected.npz")],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # 3 dtypes x 4 layouts x 2 cuts against the kernels; a low count; 3 bad calls.
    assert "28 checks (24 against the kernels' bits), 0 failed" in run.stdout, run.stdout


def test_jax_runs_the_forward_handler_with_the_kernels_bits(tmp_path) -> None:
    """The forward's target in JAX's XLA: against the oracle, run to run, bad calls, and the
    bits of this TensorFlow's FbnFusedBatchNormV3 kernel on every case with the CPU contract."""
    _require_library()
    check = _tool(FORWARD_CHECK)
    expected = {}
    rng = np.random.default_rng(0)  # the tool's own draws, so its cases get these inputs
    for dtype_name, dtype in check.grad.DTYPES.items():
        for layout in check.grad.LAYOUTS:
            for mode, is_training, factor, save_inv_std in check.MODES:
                for shape in (check.grad.LAYOUTS[layout], check.grad.EMPTY[layout]):
                    inputs = check.make_inputs(rng, shape, layout, dtype,
                                               not is_training or factor != 1.0)
                    if save_inv_std:  # the GPU contract: no CPU kernel to compare with
                        continue
                    key = check.case_key(dtype_name, layout, mode, shape)
                    outputs = tf_fbn_ops.fused_batch_norm_forward_v3(
                        *(tf.constant(v) for v in inputs), epsilon=check.grad.EPSILON,
                        exponential_avg_factor=factor, data_format=layout,
                        is_training=is_training)
                    for i, value in enumerate(inputs):
                        expected[f"{key}/in{i}"] = value
                    for i in range(5):
                        expected[f"{key}/out{i}"] = outputs[i].numpy()
    np.savez(tmp_path / "expected.npz", **expected)
    run = subprocess.run(
        [sys.executable, str(FORWARD_CHECK), str(LIBRARY), "--platform", "cpu",
         "--expected", str(tmp_path / "expected.npz")],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # 3 dtypes x 4 layouts x 4 modes x 2 shapes, 72 of them with the CPU contract; 4 bad calls.
    assert "100 checks (72 against the kernel's bits), 0 failed" in run.stdout, run.stdout
