"""The implementations under test: how each builds its inputs and runs one call.

Implementations are grouped by the process they need: TensorFlow reads TF_ENABLE_ONEDNN_OPTS
once, at import, so TF with oneDNN (the default) and TF without it (stock Eigen kernels) need
separate processes; torch and the streaming kernel get their own so that no framework's thread
pool sits in another's process. The shim runs in both TensorFlow processes ("shim" and
"shim_stock"): the process changes TensorFlow's memory allocator, hence what the shim's outputs
cost, and each TensorFlow kernel is compared with the shim in its own process. The frameworks
are imported only inside the worker that uses them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.cases import EPSILON, Case
from harness.inputs import Inputs, storage_bits

EAGER = "eager"  # one call per timed invocation
CHAINED = "fn20"  # a tf.function of CHAIN_LENGTH chained calls per timed invocation
CHAIN_LENGTH = 20
# Above this size one call takes milliseconds and Python's per-call overhead is noise, so the
# chained variant would only lengthen the run.
CHAIN_MAX_ELEMENTS = 4 * 2**20


@dataclass(frozen=True)
class Group:
    """A worker process kind: its environment and the implementations it hosts."""

    name: str
    framework: str | None  # "tensorflow", "torch" or None
    env: dict[str, str]
    implementations: tuple[str, ...]


GROUPS: dict[str, Group] = {
    # The default TF process: oneDNN on, forced even if the caller's environment turned it off.
    "tf_default": Group("tf_default", "tensorflow", {"TF_ENABLE_ONEDNN_OPTS": "1"},
                        ("shim", "tf_onednn")),
    "tf_eigen": Group("tf_eigen", "tensorflow", {"TF_ENABLE_ONEDNN_OPTS": "0"},
                      ("shim_stock", "tf_eigen")),
    "torch": Group("torch", "torch", {}, ("torch",)),
    "stream": Group("stream", None, {}, ("stream",)),
    # The op compiled by XLA (jit_compile=True): the shim's lowering and TensorFlow's.
    # Their own process, so that XLA's compiled code and thread use stay out of the others'.
    "tf_xla": Group("tf_xla", "tensorflow", {"TF_ENABLE_ONEDNN_OPTS": "1"},
                    ("shim_xla", "tf_xla")),
}
IMPLEMENTATIONS: tuple[str, ...] = ("shim", "shim_stock", "tf_eigen", "tf_onednn", "torch",
                                    "stream", "shim_xla", "tf_xla")
# What a run times unless --impls says otherwise; the XLA ones answer one question (should the
# shim's ops join XLA clusters?) and are asked for by name.
DEFAULT_IMPLEMENTATIONS: tuple[str, ...] = ("shim", "shim_stock", "tf_eigen", "tf_onednn",
                                            "torch", "stream")
# The shim's run in each TensorFlow process, and the TensorFlow kernel it is compared with there.
SHIM_IN_PROCESS_OF: dict[str, str] = {"tf_onednn": "shim", "tf_eigen": "shim_stock"}
XLA_IMPLEMENTATIONS: tuple[str, ...] = ("shim_xla", "tf_xla")
GROUP_OF: dict[str, str] = {impl: g.name for g in GROUPS.values() for impl in g.implementations}


class Unsupported(Exception):
    """The implementation cannot run this case; the case is reported as n/a for it."""


@dataclass
class Runner:
    """A prepared case: zero-argument callables, one per timing variant.

    Attributes:
      variants: variant name -> a callable doing one timed invocation.
      calls: variant name -> batch-norm gradient calls per invocation.
      aggregates: turns the EAGER variant's return value into cross-check aggregates; None for
        an implementation exempt from the cross-check.
      notes: anything the report should say about how the case was run.
    """

    variants: dict[str, Callable[[], Any]]
    calls: dict[str, int]
    aggregates: Callable[[Any], dict] | None
    notes: list[str] = field(default_factory=list)


def aggregates(dx: np.ndarray, scale_backprop: np.ndarray, offset_backprop: np.ndarray) -> dict:
    """What the cross-check compares: sums of dx, the first four channel gradients and sums of
    the channel gradients (with absolute sums, the scale each comparison is relative to)."""
    dx = np.asarray(dx).astype(np.float64)
    scale_backprop = np.asarray(scale_backprop, dtype=np.float64)
    offset_backprop = np.asarray(offset_backprop, dtype=np.float64)
    return {
        "sum_dx": float(dx.sum()),
        "sum_abs_dx": float(np.abs(dx).sum()),
        "scale_backprop_head": [float(v) for v in scale_backprop[:4]],
        "offset_backprop_head": [float(v) for v in offset_backprop[:4]],
        "sum_scale_backprop": float(scale_backprop.sum()),
        "sum_offset_backprop": float(offset_backprop.sum()),
        "sum_abs_scale_backprop": float(np.abs(scale_backprop).sum()),
        "sum_abs_offset_backprop": float(np.abs(offset_backprop).sum()),
        "channels": int(scale_backprop.size),
    }


def first_line(error: BaseException) -> str:
    """The meaningful first line of an error: TF's "{{function_node ...}}" prefix and trailing
    " name: " dropped."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text)
    return re.sub(r"\s*name:\s*$", "", text)


# --- TensorFlow ------------------------------------------------------------------------------

def tf_op(name: str) -> Callable[..., Any]:
    """The V3 op of an implementation: the shim's public wrapper, or TensorFlow's raw op."""
    if name in ("shim", "shim_stock", "shim_xla"):
        import tf_fbn_ops  # noqa: PLC0415 - imported with TensorFlow, in the worker only

        return tf_fbn_ops.fused_batch_norm_grad_v3
    import tensorflow as tf  # noqa: PLC0415

    return tf.raw_ops.FusedBatchNormGradV3


def tf_kwargs(case: Case, inputs: Inputs) -> tuple[Any, dict]:
    """dy and the other keyword arguments of FusedBatchNormGradV3, as tensors."""
    import tensorflow as tf  # noqa: PLC0415

    dtype = tf.as_dtype(case.dtype)
    # The arrays already hold values of the dtype, so the cast is exact.
    dy = tf.cast(tf.constant(inputs.dy), dtype)
    kwargs = {
        "x": tf.cast(tf.constant(inputs.x), dtype),
        "scale": tf.constant(inputs.scale),
        "reserve_space_1": tf.constant(inputs.mean),
        "reserve_space_2": tf.constant(inputs.variance),
        "reserve_space_3": tf.zeros([0], tf.float32),
        "epsilon": EPSILON,
        "data_format": case.layout,
        "is_training": case.training,
    }
    return dy, kwargs


def tf_chain(op: Callable[..., Any], kwargs: dict,
             jit_compile: bool = False) -> Callable[[Any], Any]:
    """A tf.function of CHAIN_LENGTH calls, each one's dx the next one's dy, so one Python call
    runs many ops and TF's per-call dispatch (with jit_compile, the launch of the compiled
    program) is amortised."""
    import tensorflow as tf  # noqa: PLC0415

    def chained(dy):
        for _ in range(CHAIN_LENGTH):
            dy = op(y_backprop=dy, **kwargs)[0]
        return dy

    return tf.function(chained, jit_compile=jit_compile)


def _tf_aggregates(outputs: Any) -> dict:
    return aggregates(outputs[0].numpy(), outputs[1].numpy(), outputs[2].numpy())


def prepare_xla(name: str, case: Case, inputs: Inputs) -> Runner:
    """One call of the op compiled by XLA per invocation, plus, for the shim's small cases, one
    compiled program of a chain of calls, as inside a compiled training step; both compiled
    here, before any timing. The shim's op is a custom call XLA cannot look into, so its chain
    is CHAIN_LENGTH real calls; TensorFlow's op lowers to HLO that XLA would fuse across the
    chain into something other than CHAIN_LENGTH calls, so it has no chained variant."""
    import tensorflow as tf  # noqa: PLC0415

    op = tf_op(name)
    dy, kwargs = tf_kwargs(case, inputs)
    compiled = tf.function(lambda dy: op(y_backprop=dy, **kwargs), jit_compile=True)
    compiled(dy)
    variants: dict[str, Callable[[], Any]] = {EAGER: lambda: compiled(dy)}
    calls = {EAGER: 1}
    if name == "shim_xla" and case.elements <= CHAIN_MAX_ELEMENTS and _shim_is_custom_call():
        chained = tf_chain(op, kwargs, jit_compile=True)
        chained(dy)
        variants[CHAINED] = lambda: chained(dy)
        calls[CHAINED] = CHAIN_LENGTH
    return Runner(variants, calls, _tf_aggregates)


def _shim_is_custom_call() -> bool:
    """Whether the shim's ops compile to custom calls of its kernels (else to the HLO lowering)."""
    from tf_fbn_ops._loader import xla_ffi_missing_reason  # noqa: PLC0415

    return xla_ffi_missing_reason() is None


def prepare_tensorflow(name: str, case: Case, inputs: Inputs) -> Runner:
    """The shim or tf.raw_ops: eager calls, plus the chained tf.function for small cases."""
    op = tf_op(name)
    dy, kwargs = tf_kwargs(case, inputs)
    variants: dict[str, Callable[[], Any]] = {EAGER: lambda: op(y_backprop=dy, **kwargs)}
    calls = {EAGER: 1}
    if case.elements <= CHAIN_MAX_ELEMENTS:
        chained = tf_chain(op, kwargs)
        variants[CHAINED] = lambda: chained(dy)
        calls[CHAINED] = CHAIN_LENGTH
    notes = []
    if name == "tf_onednn" and (len(case.shape) == 5 or case.dtype == "float16"):
        # Checked with ONEDNN_VERBOSE=1 on TF 2.21: no oneDNN primitive runs for these.
        notes.append("TF's default process falls back to its Eigen kernel here (oneDNN has "
                     "no batch-norm gradient for 5-D or float16)")
    return Runner(variants, calls, _tf_aggregates, notes)


# --- PyTorch ---------------------------------------------------------------------------------

def _torch_tensor(array: np.ndarray, case: Case, dtype: Any) -> Any:
    """An NC... logical tensor over the array, channels_last(_3d) for channels-last layouts."""
    import torch  # noqa: PLC0415

    tensor = torch.from_numpy(array)
    rank = len(case.shape)
    if case.channels_last:
        # The array is N,...,C in memory; a permuted view is N,C,... with channels-last strides.
        tensor = tensor.permute(0, rank - 1, *range(1, rank - 1))
        memory_format = torch.channels_last if rank == 4 else torch.channels_last_3d
    else:
        memory_format = torch.contiguous_format
    return tensor.to(dtype).contiguous(memory_format=memory_format)


def _torch_arguments(case: Case, inputs: Inputs, weight: Any) -> tuple:
    """Positional arguments of aten.native_batch_norm_backward for the case's mode."""
    import torch  # noqa: PLC0415

    dtype = getattr(torch, case.dtype)
    dy = _torch_tensor(inputs.dy, case, dtype)
    x = _torch_tensor(inputs.x, case, dtype)
    mean = torch.from_numpy(inputs.mean)
    variance = torch.from_numpy(inputs.variance)
    mask = [True, True, True]
    if case.training:
        # Computed once here, as a forward pass would have saved it; not part of the timing.
        invstd = (variance.double() + EPSILON).rsqrt().float()
        return (dy, x, weight, None, None, mean, invstd, True, EPSILON, mask)
    return (dy, x, weight, mean, variance, None, None, False, EPSILON, mask)


def _torch_aggregates(outputs: Any) -> dict:
    import torch  # noqa: PLC0415

    return aggregates(outputs[0].to(torch.float64).numpy(), outputs[1].double().numpy(),
                      outputs[2].double().numpy())


def prepare_torch(case: Case, inputs: Inputs) -> Runner:
    """aten.native_batch_norm_backward, float32 weight (mixed types) where torch accepts it."""
    import torch  # noqa: PLC0415

    op = torch.ops.aten.native_batch_norm_backward
    notes: list[str] = []
    weight = torch.from_numpy(inputs.scale)
    arguments = _torch_arguments(case, inputs, weight)
    try:
        op(*arguments)
    except RuntimeError as error:
        if case.dtype == "float32":
            raise
        # Older torch builds have no mixed-type kernel here: give it the weight in x's dtype.
        notes.append(f"weight cast to {case.dtype} (mixed types refused: {first_line(error)})")
        arguments = _torch_arguments(case, inputs, weight.to(getattr(torch, case.dtype)))
    return Runner({EAGER: lambda: op(*arguments)}, {EAGER: 1}, _torch_aggregates, notes)


# --- Streaming limit -------------------------------------------------------------------------

def prepare_stream(case: Case, inputs: Inputs, library: Any) -> Runner:
    """The streaming-limit kernel on x and dy in the case's storage width; exempt from the
    cross-check (it computes no gradient)."""
    from harness.streaming import StreamKernel  # noqa: PLC0415

    kernel = StreamKernel(library, storage_bits(inputs.x, case.dtype),
                          storage_bits(inputs.dy, case.dtype), case.training)
    return Runner({EAGER: kernel}, {EAGER: 1}, None)


def prepare(name: str, case: Case, inputs: Inputs, stream_library: Any = None) -> Runner:
    """The runner of implementation ``name`` for the case.

    Raises:
      Unsupported: the implementation cannot run in this worker (e.g. torch not importable).
    """
    if name in ("shim", "shim_stock", "tf_onednn", "tf_eigen"):
        return prepare_tensorflow(name, case, inputs)
    if name in XLA_IMPLEMENTATIONS:
        return prepare_xla(name, case, inputs)
    if name == "torch":
        return prepare_torch(case, inputs)
    if name == "stream":
        if stream_library is None:
            raise Unsupported("streaming kernel not built")
        return prepare_stream(case, inputs, stream_library)
    raise ValueError(f"unknown implementation {name!r}")


def invocations_for(calls_wanted: int, calls_per_invocation: int) -> int:
    """Invocations that make at least ``calls_wanted`` calls (at least one)."""
    return max(1, math.ceil(calls_wanted / calls_per_invocation))
