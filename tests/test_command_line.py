"""python -m tf_fbn_ops: help, version, info and demo, and what a user sees of them; a failing
call logs nothing that TensorFlow's own kernel would not."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf

import tf_fbn_ops


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tf_fbn_ops", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def test_help_lists_the_commands_and_exits_0() -> None:
    for flag in ("-h", "--help"):
        result = _cli(flag)
        assert result.returncode == 0, result.stderr
        for command in ("demo", "bench", "info", "--version"):
            assert command in result.stdout


def test_no_command_prints_help_and_exits_2() -> None:
    result = _cli()
    assert result.returncode == 2
    assert "demo" in result.stdout and "bench" in result.stdout


def test_unknown_command_is_an_argparse_error() -> None:
    result = _cli("frobnicate")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_version_names_the_package_and_the_tensorflow_it_was_built_for() -> None:
    result = _cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"tf-fbn-ops {tf_fbn_ops.__version__} ")
    assert f"library built for TensorFlow {tf.__version__}" in result.stdout
    # Whether jit_compile=True can compile the shim's ops, and to what, or if not, why.
    from tf_fbn_ops import _build_info, _loader  # noqa: PLC0415

    reason = _loader.xla_missing_reason()
    text = " ".join(result.stdout.split())
    if reason is not None:
        assert f"no XLA lowerings ({reason})" in text
    elif _build_info.XLA_FFI:
        assert "under XLA: custom calls of the kernels (XLA FFI)" in text
    else:
        assert f"under XLA: the HLO lowering ({_build_info.XLA_FFI_MISSING_REASON})" in text


def test_version_names_the_forced_hlo_lowering() -> None:
    result = _cli("--version", env=dict(os.environ, TF_FBN_OPS_XLA_LOWERING="hlo"))
    assert result.returncode == 0, result.stderr
    from tf_fbn_ops import _loader  # noqa: PLC0415

    if _loader.xla_missing_reason() is None:
        assert "under XLA: the HLO lowering (TF_FBN_OPS_XLA_LOWERING=hlo)" in " ".join(
            result.stdout.split())


def test_cc_flags_give_the_header_and_keep_the_op_library() -> None:
    header = os.path.join(tf_fbn_ops.get_include(), "tf_fbn_ops", "ops.h")
    assert os.path.isfile(header)
    cflags, libs, both = (_cli("cc-flags", *a) for a in (["--cflags"], ["--libs"], []))
    for result in (cflags, libs, both):
        assert result.returncode == 0, result.stderr
    assert f"-I{tf_fbn_ops.get_include()}" in cflags.stdout.split()
    assert "-Wl,--no-as-needed" not in cflags.stdout
    library = os.path.basename(tf_fbn_ops.library_path())
    assert re.search(rf"--no-as-needed \S*{re.escape(library)}", libs.stdout), libs.stdout
    assert both.stdout.split() == cflags.stdout.split() + libs.stdout.split()


def test_bench_help_is_the_benchmark_s_own() -> None:
    result = _cli("bench", "--help")
    assert result.returncode == 0, result.stderr
    assert "python -m tf_fbn_ops bench" in result.stdout and "--quick" in result.stdout


def test_quick_bench_times_ours_against_tensorflow() -> None:
    result = _cli("bench", "--quick", "--rounds", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("8x14x14x128")]
    assert [r[1:3] for r in rows] == [["NHWC", "train"], ["NHWC", "infer"], ["NCHW", "train"],
                                      ["NCHW", "infer"]]
    for row in rows:
        assert float(row[3]) > 0 and (row[4] == "n/a" or float(row[5].rstrip("x")) > 0)


def test_info_reports_a_library_that_loads() -> None:
    result = _cli("info")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"TensorFlow installed: {tf.__version__}" in result.stdout
    assert f"library built for TensorFlow {tf.__version__}" in result.stdout
    assert "loads: yes" in result.stdout


@pytest.mark.slow
def test_demo_is_quiet_and_complete() -> None:
    """No tf.function retracing warnings, no kernel warnings; every row printed."""
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    result = _cli("demo", env=env)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "retracing" not in output
    assert "OP_REQUIRES failed" not in output
    assert "oneDNN kernels " in result.stdout
    every = re.search(r"at least as accurate as tf.raw_ops in (\d+) of (\d+) cases", result.stdout)
    assert every and every.group(1) == every.group(2) == "40", result.stdout


def test_invalid_input_logs_no_kernel_warning() -> None:
    """TensorFlow's kernel rejects bad inputs through OP_REQUIRES, which logs nothing; so do
    we (OP_REQUIRES_OK would add a 'W ... OP_REQUIRES failed at ...' line)."""
    code = """
import numpy as np, tensorflow as tf, tf_fbn_ops
x = np.zeros([1, 2, 2, 3], np.float32)
for name, fn in (("shim", tf_fbn_ops.fused_batch_norm_grad),
                 ("tf", tf.raw_ops.FusedBatchNormGrad)):
    try:
        fn(y_backprop=x, x=x, scale=np.ones([4], np.float32),
           reserve_space_1=np.ones([3], np.float32), reserve_space_2=np.ones([3], np.float32))
    except tf.errors.InvalidArgumentError as e:
        print(name, "refused:", e.message.splitlines()[0])
"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, env=env)
    assert "shim refused:" in result.stdout and "tf refused:" in result.stdout, result.stderr
    assert "OP_REQUIRES failed" not in result.stderr, result.stderr
