"""Differential fuzzing of the shim against tf.raw_ops (stock kernel): one random case, both
implementations, one verdict. Used by tests/test_fuzz.py (short, in `make test`) and
tests/fuzz_long.py (`make fuzz`).

Agreement rules:
  * both raise: the same exception class and the same message (op name normalized). One
    exception: when several attrs are invalid at once, TensorFlow's framework reports one of
    them picked by hash-map order, differently from run to run for its own ops too; then both
    messages must be attr-validation errors;
  * both succeed: the same shapes and dtypes, NaN and infinities in the same places, and on the
    finite values the parity criterion's accuracy rule (tests/parity.py): against the float64
    oracle, the shim is at most one ulp less accurate than TF. Inputs here can be arbitrarily
    ill-conditioned (1e15 next to 1 in a channel's sum), where TF's float sums lose whole
    terms and a fixed tolerance between the two would say nothing. Where the NaN/Inf patterns
    differ, the shim must equal the oracle there: TF's float intermediates overflowed where
    the shim's double ones did not (e.g. 1/(var + eps) beyond the float range);
  * documented supersets: TF refuses channels-first inference ("only support NHWC"), the shim
    computes it; for an empty 5-D input TF returns a 4-D x_backprop, the shim x's shape.

check_jit() holds the shim under XLA (tf.function(jit_compile=True)) to its own kernel in the
same tf.function without XLA: where that succeeds, the compiled op gives the same bits (a custom
call runs that kernel); where it raises, so does the compiled function, at tracing (the shape
function, as in any graph: it refuses a 5-D V1 that the eager kernel takes, like TensorFlow's)
or at compilation, from the kernel's own validation with the kernel's text.
"""

from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import tensorflow as tf
from hypothesis import strategies as st

from tf_calls import BUILTIN, SHIM
from parity import assert_parity
from tf_fbn_ops import reference

NUMPY = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
         "float64": np.float64, "int32": np.int32}
FORMATS = ["NHWC", "NCHW", "NDHWC", "NCDHW"]
ATTR_ERROR = re.compile(r"Value for attr '\w+' of .* is not in the list of allowed values")
BAD_FORMATS = ["NHCW", "", "nhwc", "NCHW_VECT_C", "NHWC "]


@dataclasses.dataclass
class Case:
    op: str
    dtype: str
    dy_dtype: str
    stat_dtype: str
    x_shape: tuple
    dy_shape: tuple
    stat_shapes: tuple  # scale, reserve_space_1, reserve_space_2, reserve_space_3
    data_format: str
    is_training: bool
    epsilon: float
    values: dict  # name -> numpy array


def _special_values(dtype: str) -> list:
    info = ml_dtypes.finfo(NUMPY[dtype]) if dtype != "int32" else None
    if info is None:
        return [0, 1, -7]
    tiny = float(info.smallest_subnormal)
    huge = 1e15 if dtype in ("float32", "float64", "bfloat16") else 6e4
    return [np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -3 * tiny, huge, -huge, 1.0]


@st.composite
def cases(draw) -> Case:
    op = draw(st.sampled_from(["V1", "V2", "V3"]))
    valid_types = ["float32"] if op == "V1" else ["float32", "float16", "bfloat16"]
    formats = FORMATS if op == "V3" else FORMATS[:2]
    dims = st.sampled_from([1, 2, 3, 5, 0] if draw(st.booleans()) else [1, 2, 3, 4])
    # Most cases are valid, so that special values reach the arithmetic; the others break
    # types, ranks, shapes, formats or per-channel sizes at random.
    if draw(st.integers(0, 9)) < 6:
        dtype = dy_dtype = draw(st.sampled_from(valid_types))
        stat_dtype = dtype if op == "V1" else "float32"
        data_format = draw(st.sampled_from(formats))
        rank = 5 if data_format in ("NDHWC", "NCDHW") else 4
        x_shape = dy_shape = tuple(draw(dims) for _ in range(rank))
        channels = x_shape[rank - 1 if data_format in ("NHWC", "NDHWC") else 1]
        stat_shapes = ((channels,),) * 3 + (draw(st.sampled_from([(0,), (), (2, 7)])),)
    else:
        dtype = draw(st.sampled_from(valid_types * 6 + ["float64", "float16", "int32"]))
        dy_dtype = dtype if draw(st.integers(0, 15)) else draw(st.sampled_from(list(NUMPY)))
        stat_dtype = (dtype if op == "V1" else "float32") if draw(st.integers(0, 15)) else \
            draw(st.sampled_from(list(NUMPY)))
        rank = draw(st.sampled_from([4] * 8 + [5] * 4 + [0, 1, 2, 3, 6]))
        x_shape = tuple(draw(dims) for _ in range(rank))
        dy_shape = x_shape if draw(st.integers(0, 7)) else tuple(draw(dims) for _ in range(
            draw(st.sampled_from([rank, rank, 3, 4, 5]))))
        data_format = draw(st.sampled_from(formats * 6 + FORMATS[2:] + BAD_FORMATS))
        channel_axis = (rank - 1 if data_format in ("NHWC", "NDHWC") else 1) if rank else 0
        channels = x_shape[channel_axis] if rank > channel_axis else 1

        def stat_shape():
            choice = draw(st.integers(0, 19))
            if choice == 0:
                return ()
            if choice == 1:
                return (1, channels)
            if choice == 2:
                return (max(channels + draw(st.sampled_from([-1, 1])), 0),)
            return (channels,)

        stat_shapes = (stat_shape(), stat_shape(), stat_shape(),
                       draw(st.sampled_from([(0,), (), (2, 7), (channels,)])))
    epsilon = draw(st.sampled_from([1e-3] * 6 + [0.0, -1e-3, -5.0, 1e-30, 10.0]))
    specials = draw(st.booleans())

    def array(shape, dt, positive=False):
        size = int(np.prod(shape)) if shape else 1
        seed = draw(st.integers(0, 2**31 - 1))
        rng = np.random.default_rng(seed)
        data = rng.standard_normal(size) * draw(st.sampled_from([1.0, 1e-3, 1e3]))
        if positive:
            data = np.abs(data) + draw(st.sampled_from([0.5, 0.0]))
        if specials and size:
            picks = draw(st.lists(st.integers(0, size - 1), max_size=3))
            for i in picks:
                data[i] = draw(st.sampled_from(_special_values(dt)))
        if dt == "int32":
            data = np.nan_to_num(data, posinf=0, neginf=0)
        return data.reshape(shape).astype(NUMPY[dt])

    values = {"y_backprop": array(dy_shape, dy_dtype), "x": array(x_shape, dtype),
              "scale": array(stat_shapes[0], stat_dtype),
              "reserve_space_1": array(stat_shapes[1], stat_dtype),
              "reserve_space_2": array(stat_shapes[2], stat_dtype, positive=True)}
    if op == "V3":
        values["reserve_space_3"] = array(stat_shapes[3], stat_dtype)
    return Case(op, dtype, dy_dtype, stat_dtype, x_shape, dy_shape, stat_shapes, data_format,
                draw(st.booleans()), epsilon, values)


def _run(fn, case: Case):
    kwargs = {k: tf.constant(v) for k, v in case.values.items()}
    try:
        out = fn(**kwargs, epsilon=case.epsilon, data_format=case.data_format,
                 is_training=case.is_training)
        return "ok", [t.numpy() for t in out]
    except (tf.errors.OpError, TypeError, ValueError) as e:
        message = getattr(e, "message", None) or str(e)
        return type(e).__name__, re.sub(r"Fbn(FusedBatchNormGrad)", r"\1", message)


def _run_function(fn, case: Case, jit_compile: bool, unknown_shapes: bool):
    """The op in a tf.function; with unknown_shapes, traced for inputs of any shape, so that bad
    shapes pass the shape function and reach the kernel's (or XLA compilation's) validation."""
    names = list(case.values)
    tensors = [tf.constant(case.values[k]) for k in names]
    signature = [tf.TensorSpec(None, t.dtype) for t in tensors] if unknown_shapes else None
    function = tf.function(
        lambda *args: fn(**dict(zip(names, args)), epsilon=case.epsilon,
                         data_format=case.data_format, is_training=case.is_training),
        jit_compile=jit_compile, input_signature=signature)
    try:
        return "ok", [t.numpy() for t in function(*tensors)]
    except (tf.errors.OpError, TypeError, ValueError) as e:
        return type(e).__name__, getattr(e, "message", None) or str(e)


def _kernel_text(message: str) -> str:
    """A kernel error's own words: its first line, without TF's "{{function_node ...}}" and
    " [Op:...]"."""
    return re.sub(r"^\{\{[^}]*\}\}\s*", "", message).split(" [Op:")[0].split("\n")[0]


def check_jit(case: Case) -> str:
    """Runs one case through the shim's kernel and through the shim under XLA, each in a
    tf.function; returns the verdict or raises AssertionError."""
    # Half the cases (by x's size) with shapes unknown when traced.
    unknown = case.values["x"].size % 2 == 1
    graph = _run_function(SHIM[case.op], case, jit_compile=False, unknown_shapes=unknown)
    jit = _run_function(SHIM[case.op], case, jit_compile=True, unknown_shapes=unknown)
    if graph[0] != "ok":
        assert jit[0] != "ok", f"the kernel raised {graph}, XLA computed a result"
        if graph[0] == "ValueError":  # the shape function, at tracing: the same for both
            assert jit == graph, f"errors differ:\n {graph}\n {jit}"
        elif jit[0] == "InvalidArgumentError" and graph[0] == "InvalidArgumentError":
            assert _kernel_text(graph[1]) in jit[1], f"errors differ:\n {graph}\n {jit}"
        return f"both raise ({graph[0]} / {jit[0]})"
    assert jit[0] == "ok", f"the kernel succeeded, XLA raised {jit}"
    for name, a, b in zip(("x_backprop", "scale_backprop", "offset_backprop", "reserve_space_4",
                           "reserve_space_5"), jit[1], graph[1]):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert a.tobytes() == b.tobytes(), f"{name}: bits differ under XLA"
    return "both succeed, same bits"


def _close(name: str, got: np.ndarray, want: np.ndarray, oracle: np.ndarray, dtype: str) -> None:
    got64 = np.asarray(got, np.float64)
    want64 = np.asarray(want, np.float64).reshape(got64.shape)
    with np.errstate(all="ignore"):  # the oracle rounded to the output type
        oracle_t = np.asarray(np.asarray(oracle).astype(NUMPY[dtype]), np.float64)
    same_pattern = (np.isnan(got64) == np.isnan(want64)) & \
        (np.where(np.isinf(want64), got64 == want64, ~np.isinf(got64)))
    for i in zip(*np.nonzero(~same_pattern)):
        g, o = got64[i], oracle_t[i]
        assert (np.isnan(g) and np.isnan(o)) or g == o or (
            np.isfinite(g) and np.isfinite(o) and abs(g - o) <= 1e-3 * abs(o)), \
            f"{name}[{i}]: shim {g}, tf {want64[i]}, oracle {oracle[i]}"
    finite = same_pattern & np.isfinite(got64) & np.isfinite(want64) & np.isfinite(oracle)
    if finite.any():
        assert_parity(name, got64[finite], want64[finite], np.asarray(oracle)[finite], dtype,
                      "tf", agreement=False)


def check(case: Case) -> str:
    """Runs one case through both; returns the verdict or raises AssertionError."""
    shim = _run(SHIM[case.op], case)
    builtin = _run(BUILTIN[case.op], case)
    if builtin[0] != "ok":
        if shim[0] == "ok" and "only support NHWC" in builtin[1] and not case.is_training:
            return "superset: channels-first inference"
        if shim != builtin and shim[0] == builtin[0] and all(
                ATTR_ERROR.match(m) for m in (shim[1], builtin[1])):
            return f"both raise {builtin[0]} (attr validation)"
        assert shim == builtin, f"errors differ:\n shim: {shim}\n tf:   {builtin}"
        return f"both raise {builtin[0]}"
    assert shim[0] == "ok", f"TF succeeded, shim raised {shim}"
    ours, theirs = shim[1], builtin[1]
    x = case.values["x"]
    verdict = "both succeed"
    if ours[0].shape != theirs[0].shape and x.size == 0 and x.ndim == 5:
        verdict = "both succeed (superset: 5-D empty x_backprop keeps its rank)"
    else:
        assert ours[0].shape == theirs[0].shape
    if x.size and ours[1].size:
        oracle = reference.batch_norm_grad(
            *(case.values[k] for k in ("y_backprop", "x", "scale", "reserve_space_1",
                                       "reserve_space_2")),
            case.epsilon, case.data_format, case.is_training)
        for name, a, b, o in zip(("x_backprop", "scale_backprop", "offset_backprop"), ours,
                                 theirs, oracle):
            assert a.dtype == b.dtype, name
            _close(name, a, b, np.asarray(o).reshape(a.shape),
                   a.dtype.name if name == "x_backprop" else "float32")
    for a, b in zip(ours[1:], theirs[1:]):
        assert a.shape == b.shape
    return verdict
