"""Keras 3's own BatchNormalization tests (shipped in its wheel) with tf_fbn_ops' layer swapped
in, as it is and with synchronized=True by default (tests/keras_suite_swap.py), each in a
process of its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

keras = pytest.importorskip("keras")
SUITE = os.path.join(os.path.dirname(keras.__file__), "src", "layers", "normalization",
                     "batch_normalization_test.py")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif(not os.path.isfile(SUITE), reason="this Keras wheel ships no tests")
@pytest.mark.parametrize("synchronized", ["0", "1"])
def test_keras_batch_normalization_suite_with_our_layer(synchronized, tmp_path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]),
               SWAP_SYNCHRONIZED=synchronized, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "keras_suite_swap", "-p", "no:cacheprovider",
         "-p", "no:xdist", SUITE], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=600)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
