"""Static shapes and shape-inference errors equal TensorFlow's, inside tf.function."""

import re

import pytest
import tensorflow as tf

from tf_calls import BUILTIN, SHIM



def _trace(op: str, fn, shapes: list, data_format: str, dtype=tf.float32):
    """Traces fn over placeholders of the given (possibly partial) shapes; returns output specs."""
    names = ["y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2", "reserve_space_3"]
    specs = [tf.TensorSpec(s, dtype if i < 2 or op == "V1" else tf.float32)
             for i, s in enumerate(shapes)]
    if op != "V3":
        specs = specs[:5]

    @tf.function(input_signature=specs)
    def f(*args):
        return fn(**dict(zip(names, args)), data_format=data_format)

    return [t.shape for t in f.get_concrete_function().structured_outputs]


def _error_line(message: str, shim: bool = False) -> str:
    """The error itself: tf.function prefixes it with the user-code traceback, whose frames
    differ (the shim's call goes through one more Python function)."""
    line = message.strip().splitlines()[-1].strip()
    return re.sub(r"Fbn(FusedBatchNormGrad)", r"\1", line) if shim else line


GOOD = [
    ("V1", "NHWC", [[2, 4, 5, 3]] * 2 + [[3]] * 3),
    ("V1", "NCHW", [[2, 3, 4, 5]] * 2 + [[3]] * 3),
    ("V2", "NHWC", [[None, 4, 5, None], [2, None, None, 3], [None], [3], [None]]),
    ("V3", "NHWC", [[None] * 4, [None] * 4, [None], [None], [7], [2, 7]]),
    ("V3", "NCHW", [[2, None, 4, 5], [None, 3, 4, 5], [3], [None], [3], []]),
    ("V3", "NDHWC", [[2, 2, 4, 5, 3]] * 2 + [[3]] * 3 + [[0]]),
    ("V3", "NCDHW", [[2, None, 2, 4, 5], None, [3], [3], [3], None]),
    ("V3", "NHWC", [None, None, None, None, None, None]),
]

BAD = [
    ("V1", "NHWC", [[4, 5, 3]] * 2 + [[3]] * 3),                          # rank 3
    ("V2", "NHWC", [[4, 5, 3], [2, 4, 5, 3]] + [[3]] * 3),                # dy rank 3
    ("V3", "NHWC", [[1, 2, 2, 4, 5, 3]] * 2 + [[3]] * 3 + [[0]]),        # rank 6
    ("V3", "NHWC", [[2, 2, 4, 5, 3]] * 2 + [[3]] * 3 + [[0]]),           # 5-D with NHWC
    ("V3", "NDHWC", [[2, 4, 5, 3]] * 2 + [[3]] * 3 + [[0]]),             # 4-D with NDHWC
    ("V3", "NCDHW", [[2, 4, 5, 3]] * 2 + [[3]] * 3 + [[0]]),
    ("V1", "NHWC", [[2, 4, 5, 4], [2, 4, 5, 3]] + [[3]] * 3),            # channels differ
    ("V2", "NCHW", [[2, 4, 5, 3], [2, 3, 5, 3]] + [[3]] * 3),
    ("V1", "NHWC", [[2, 4, 5, 3]] * 2 + [[1, 3], [3], [3]]),             # scale rank 2
    ("V2", "NHWC", [[2, 4, 5, 3]] * 2 + [[3], [1, 3], [3]]),             # mean rank 2
    ("V3", "NHWC", [[2, 4, 5, 3]] * 2 + [[3], [3], []] + [[0]]),         # variance rank 0
    ("V1", "NHWC", [[2, 4, 5, 3]] * 2 + [[4], [3], [3]]),                # scale size
    ("V2", "NHWC", [[2, 4, 5, 3]] * 2 + [[0], [3], [3]]),
    ("V3", "NHWC", [[2, 4, 5, 3]] * 2 + [[3], [4], [3]] + [[0]]),        # mean size
    ("V3", "NCDHW", [[2, 3, 2, 4, 5]] * 2 + [[3], [3], [4]] + [[0]]),    # variance size
]


@pytest.mark.parametrize("op,data_format,shapes", GOOD)
def test_static_shapes_equal_tensorflow(op: str, data_format: str, shapes: list) -> None:
    shim = _trace(op, SHIM[op], shapes, data_format)
    builtin = _trace(op, BUILTIN[op], shapes, data_format)
    assert [s.as_list() if s.rank is not None else None for s in shim] == \
           [s.as_list() if s.rank is not None else None for s in builtin]


@pytest.mark.parametrize("op,data_format,shapes", BAD)
def test_shape_errors_equal_tensorflow(op: str, data_format: str, shapes: list) -> None:
    with pytest.raises(ValueError) as builtin:
        _trace(op, BUILTIN[op], shapes, data_format)
    with pytest.raises(ValueError) as shim:
        _trace(op, SHIM[op], shapes, data_format)
    assert "ValueError" in _error_line(str(builtin.value))
    assert _error_line(str(shim.value), shim=True) == _error_line(str(builtin.value))


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_static_dtypes_equal_tensorflow(dtype) -> None:
    shapes = [[2, 4, 5, 3]] * 2 + [[3]] * 3 + [[0]]
    names = ["y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2", "reserve_space_3"]
    specs = [tf.TensorSpec(s, dtype if i < 2 else tf.float32) for i, s in enumerate(shapes)]

    def dtypes(fn):
        f = tf.function(lambda *a: fn(**dict(zip(names, a))), input_signature=specs)
        return [t.dtype for t in f.get_concrete_function().structured_outputs]

    assert dtypes(SHIM["V3"]) == dtypes(BUILTIN["V3"]) == [dtype] + [tf.float32] * 4
