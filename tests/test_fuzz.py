"""A short differential fuzz run against tf.raw_ops; `make fuzz` runs a long one."""

import numpy as np
from hypothesis import HealthCheck, example, given, settings

from differential import Case, cases, check, check_jit

_F = np.float32


def _one_element_case(is_training: bool, dy: float, scale: float, mean: float) -> Case:
    values = {"y_backprop": np.full((1, 1, 1, 1), dy, _F),
              "x": np.full((1, 1, 1, 1), 0.12573022, _F), "scale": np.array([scale], _F),
              "reserve_space_1": np.array([mean], _F),
              "reserve_space_2": np.array([0.6257302], _F)}
    return Case("V1", "float32", "float32", "float32", (1, 1, 1, 1), (1, 1, 1, 1),
                ((1,), (1,), (1,), (0,)), "NHWC", is_training, 1e-3, values)


def _cancelling_case() -> Case:
    """+-1e15 in one plane, small values in the next: a channel sum whose plain double
    accumulation (per spatial position first) loses 5e-3 where TF's sequential sum is exact."""
    values = {"y_backprop": np.array([[[[-1e15, 1e15]]], [[[0.64042264, 0.10490011]]]], _F),
              "x": np.array([[[[0.12573022, -0.13210486]]], [[[0.64042264, 0.10490011]]]], _F),
              "scale": np.array([0.12573022], _F), "reserve_space_1": np.array([0.12573022], _F),
              "reserve_space_2": np.array([0.6257302], _F)}
    return Case("V1", "float32", "float32", "float32", (2, 1, 1, 2), (2, 1, 1, 2),
                ((1,), (1,), (1,), (0,)), "NCHW", True, 1e-3, values)


# Cases the long run found, kept as regressions: a denormal scale and dy under TensorFlow's
# flush-to-zero thread mode, an infinite scale (grouping of the dx expression), and a sum of
# cancelling 1e15s (the exact path's compensated sums).
REGRESSIONS = [_one_element_case(True, 1e15, 1e-45, 1e15),
               _one_element_case(False, -4e-45, 0.12573022, 0.12573022),
               _one_element_case(True, 0.12573022, np.inf, 0.00012573),
               _cancelling_case()]


def with_regressions(test):
    """The test, run on every regression case before the random ones."""
    for case in reversed(REGRESSIONS):
        test = example(case)(test)
    return test


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
@with_regressions
def test_shim_agrees_with_tf_raw_ops(case) -> None:
    check(case)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
@with_regressions
def test_shim_under_xla_gives_its_kernels_bits(case) -> None:
    """Random shapes, attrs, special values, bad inputs and empty tensors, compiled one by one
    (`make fuzz-xla` runs the long version)."""
    check_jit(case)
