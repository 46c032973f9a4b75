"""Parity of every op, dtype, layout and mode with tf.raw_ops and a float64 oracle.

Each case is checked against TensorFlow's stock kernel (this process, oneDNN off) and against
TensorFlow with oneDNN on (a worker process), with the criterion of tests/parity.py.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cases import Case, parity_cases, make_inputs
from parity import assert_parity, sum_rtol
from tf_calls import run_oracle, run_shim, run_tf

CASES = parity_cases()
OUTPUTS = ("x_backprop", "scale_backprop", "offset_backprop")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_reference_worker.py")


@pytest.fixture(scope="session")
def onednn_outputs(tmp_path_factory) -> dict:
    """TensorFlow's outputs for every case with oneDNN on, computed once in a worker."""
    out = tmp_path_factory.mktemp("onednn") / "outputs.npz"
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1")
    subprocess.run([sys.executable, WORKER, str(out)], input=json.dumps([c.id for c in CASES]),
                   text=True, env=env, check=True, timeout=900)
    with np.load(out) as data:
        return dict(data)


def _output_dtype(case: Case, index: int) -> str:
    return case.dtype if index == 0 else "float32"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_parity(case: Case, onednn_outputs: dict) -> None:
    inputs = make_inputs(case)
    shim = run_shim(case, inputs)
    stock, _ = run_tf(case, inputs)
    oracle = run_oracle(case, inputs)

    assert shim[0].shape == case.shape and shim[0].dtype == inputs["x"].dtype
    for i in (1, 2):
        assert shim[i].shape == (case.channels,) and shim[i].dtype == np.float32
    for i in (3, 4):  # the stock kernel's empty placeholders
        assert shim[i].shape == (0,) and stock[i].shape == (0,)
    if 0 in case.shape:
        assert not np.any(shim[1]) and not np.any(shim[2])

    rest = int(np.prod(case.logical_shape[:-1]))
    for i, name in enumerate(OUTPUTS):
        dtype = _output_dtype(case, i)
        rtol = None if i == 0 else sum_rtol(rest)
        assert_parity(name, shim[i], stock[i], oracle[i], dtype, "tf stock", rtol)
        onednn = onednn_outputs[f"{case.id}/{i}"]
        assert_parity(name, shim[i], onednn, oracle[i], dtype, "tf oneDNN", rtol)


def test_onednn_worker_really_ran_onednn(onednn_outputs: dict) -> None:
    """oneDNN's kernel returns scalar placeholders where the stock kernel returns [0]: seeing
    them proves the second comparison was made against oneDNN, not the stock kernel again."""
    rewritten = [c for c in CASES if c.op == "V3" and c.dtype == "float32"
                 and c.data_format == "NHWC" and 0 not in c.shape]
    assert rewritten
    for case in rewritten:
        assert onednn_outputs[f"{case.id}/3"].shape == (), case.id


def test_5d_empty_input_keeps_5d_shape() -> None:
    """TF returns a 4-D x_backprop for an empty 5-D input (a bug); the shim keeps x's shape."""
    case = Case("V3", "float32", "NCDHW", True, (2, 0, 0, 3, 5))
    inputs = make_inputs(case)
    shim = run_shim(case, inputs)
    stock, _ = run_tf(case, inputs)
    assert case.shape == (2, 5, 0, 0, 3)
    assert shim[0].shape == (2, 5, 0, 0, 3)
    assert stock[0].shape == (2, 5, 0, 0)  # documents the TF bug this project does not copy
