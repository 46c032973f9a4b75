"""Synchronized batch norm's FFI handlers without TensorFlow: the standalone library (make
xla-ffi-lib) registered into JAX's XLA, its two targets called through jax.ffi.ffi_call as one
replica each, the sums added in replica order between them, as tf_fbn_ops.sync_batch_norm's
exchange adds them.

For every element type and layout (4-D and 5-D, channels last and first), the batch as one
replica and cut into three (an empty one among them): with one replica, the bits of the whole
gradient's target (tf_fbn_ops_batch_norm_grad, training); with three, x_backprop and the global
gradients against the float64 oracle on the whole batch (tf_fbn_ops.reference), and each
replica's scale and offset gradients its share, from its own sums; run to run
bit-identical; and, given --expected (an .npz of TensorFlow's FbnSyncBatchNormGrad* kernels'
inputs and outputs per case), bit-identical to those kernels. Bad calls, a count below a
replica's own elements among them, must come back as errors that name the problem on the CPU;
on the GPU that count must make every output NaN (the count stays on the device). Needs only
NumPy, ml_dtypes and JAX (jax[cuda] for --platform cuda).

    python tools/jax_sync_ffi_check.py build/libtf_fbn_ops_xla_ffi.so --platform cpu
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SUMS = "tf_fbn_ops_sync_batch_norm_grad_sums"
FROM_SUMS = "tf_fbn_ops_sync_batch_norm_grad_from_sums"
HANDLERS = {"cpu": {SUMS: "FbnSyncGradSumsHost", FROM_SUMS: "FbnSyncGradFromSumsHost"},
            "cuda": {SUMS: "FbnSyncGradSumsCuda", FROM_SUMS: "FbnSyncGradFromSumsCuda"}}


def load_grad_check():
    """tools/jax_ffi_check.py, the whole gradient's check: its cases, inputs, oracle bounds and
    its target's registration."""
    spec = importlib.util.spec_from_file_location("jax_ffi_check", ROOT / "tools" /
                                                  "jax_ffi_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


grad = load_grad_check()


def cuts(batch: int) -> list[tuple[int, ...]]:
    """Replica batches: the whole, and three replicas with an empty one between."""
    return [(batch,), (1, 0, batch - 1)]


def register(library: str, platform: str) -> None:
    import jax  # noqa: PLC0415

    grad.register(library, platform)
    handlers = ctypes.cdll.LoadLibrary(library)
    for target, symbol in HANDLERS[platform].items():
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(handlers, symbol)),
                                    platform=grad.JAX_PLATFORM[platform])


def sums_call(x_shape: tuple, channels: int, channels_last: bool):
    import jax  # noqa: PLC0415

    sums = jax.ShapeDtypeStruct((channels,), np.float64)
    call = jax.ffi.ffi_call(SUMS, (sums, sums))
    return jax.jit(lambda dy, x, mean: call(dy, x, mean, channels_last=channels_last))


def from_sums_call(x_shape: tuple, dtype: Any, channels: int, channels_last: bool):
    import jax  # noqa: PLC0415

    vector = jax.ShapeDtypeStruct((channels,), np.float32)
    call = jax.ffi.ffi_call(FROM_SUMS, (jax.ShapeDtypeStruct(x_shape, dtype), vector, vector))
    return jax.jit(lambda *operands: call(*operands, epsilon=np.float32(grad.EPSILON),
                                          channels_last=channels_last))


def split(array: np.ndarray, batches: tuple[int, ...]) -> list[np.ndarray]:
    return np.split(array, np.cumsum(batches)[:-1], axis=0)


def run_replicas(inputs: list[np.ndarray], layout: str, batches: tuple[int, ...],
                 count: int | None = None) -> tuple[list, list, list]:
    """Both stages for every replica: (each replica's sums, each replica's three outputs, the
    whole batch's scale and offset gradients)."""
    dy, x, scale, mean, variance = inputs
    channels_last = layout.endswith("C")
    channels = scale.shape[0]
    count = np.int64(x.size // max(channels, 1) if count is None else count)
    parts = list(zip(split(dy, batches), split(x, batches)))
    sums = [[np.asarray(v) for v in sums_call(p[1].shape, channels, channels_last)(*p, mean)]
            for p in parts]
    total_dy = np.zeros(channels, np.float64)
    total_dy_xc = np.zeros(channels, np.float64)
    for replica_dy, replica_dy_xc in sums:  # replica order
        total_dy = total_dy + replica_dy
        total_dy_xc = total_dy_xc + replica_dy_xc
    outputs = [[np.asarray(v) for v in
                from_sums_call(p[1].shape, x.dtype, channels, channels_last)(
                    *p, scale, mean, variance, total_dy, total_dy_xc, count, *own)]
               for p, own in zip(parts, sums)]
    # The whole batch's scale and offset gradients: a replica given the global sums as its own.
    whole = [np.asarray(v) for v in from_sums_call(parts[0][1].shape, x.dtype, channels,
                                                   channels_last)(
        *parts[0], scale, mean, variance, total_dy, total_dy_xc, count, total_dy, total_dy_xc)]
    return sums, outputs, whole[1:]


def case_key(dtype_name: str, layout: str, batches: tuple[int, ...]) -> str:
    return f"{dtype_name}-{layout}-{'.'.join(map(str, batches))}"


def expected_outputs(sums: list, outputs: list, whole: list) -> list[np.ndarray]:
    """What a case is compared by: replica 0's sums, the whole x_backprop, the whole batch's
    scale and offset gradients (each replica's share is checked separately)."""
    return [sums[0][0], sums[0][1], np.concatenate([o[0] for o in outputs], axis=0), *whole]


def share_problems(sums: list, outputs: list, variance: np.ndarray) -> list[str]:
    """Each replica's scale and offset gradients: its own sums, times 1/sqrt(var + eps) for
    scale's, each rounded once to float32."""
    inv_std = 1.0 / np.sqrt(variance.astype(np.float64) + np.float64(np.float32(grad.EPSILON)))
    for (own_dy, own_dy_xc), out in zip(sums, outputs):
        if not (grad.same_bits(out[1], (own_dy_xc * inv_std).astype(np.float32))
                and grad.same_bits(out[2], own_dy.astype(np.float32))):
            return ["a replica's scale/offset gradients are not its own sums' share"]
    return []


def check_cases(args: argparse.Namespace, reference) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    expected = dict(np.load(args.expected)) if args.expected else {}
    records = []
    for dtype_name, dtype in grad.DTYPES.items():
        for layout, shape in grad.LAYOUTS.items():
            for batches in cuts(shape[0]):
                key = case_key(dtype_name, layout, batches)
                inputs = grad.make_inputs(rng, shape, layout, dtype, False)
                if f"{key}/in0" in expected:
                    inputs = [grad.typed(expected[f"{key}/in{i}"], dtype if i < 2 else None)
                              for i in range(5)]
                sums, outputs, whole = run_replicas(inputs, layout, batches)
                got = expected_outputs(sums, outputs, whole)
                again = expected_outputs(*run_replicas(inputs, layout, batches))
                problems = grad.accuracy_problems(got[2:], inputs, layout, True, False, dtype,
                                                  reference)
                if not all(grad.same_bits(a, b) for a, b in zip(got, again)):
                    problems.append("two runs differ")
                problems += share_problems(sums, outputs, inputs[4])
                if len(batches) == 1:
                    whole = grad.grad_call(shape, dtype, inputs[2].shape[0],
                                           **grad.attrs_for(layout, True, False))(*inputs)
                    if not all(grad.same_bits(a, b) for a, b in zip(got[2:], whole)):
                        problems.append("one replica differs from the whole gradient's bits")
                if f"{key}/out0" in expected and not all(
                        grad.same_bits(a, grad.typed(expected[f"{key}/out{i}"],
                                                     dtype if i == 2 else None))
                        for i, a in enumerate(got)):
                    problems.append("differs from the TensorFlow kernels' bits")
                records.append({"case": key, "problems": problems,
                                "against_kernel": f"{key}/out0" in expected})
    return records


def check_low_count(platform: str) -> dict:
    """A count below the replica's own 30 elements per channel."""
    rng = np.random.default_rng(3)
    inputs = grad.make_inputs(rng, (2, 3, 5, 7), "NHWC", np.float32, False)
    try:
        _, outputs, _ = run_replicas(inputs, "NHWC", (2,), count=29)
        if platform == "cuda":
            nan = all(np.all(np.isnan(np.asarray(v, np.float32))) for v in outputs[0])
            problem = None if nan else "outputs not all NaN"
        else:
            problem = "accepted"
    except Exception as error:  # noqa: BLE001 - JAX's runtime error type varies by version
        wanted = "count (29) must be at least this replica's 30 elements per channel"
        problem = (None if platform == "cpu" and wanted in str(error)
                   else f"unexpected error: {error}")
    return {"case": "a count below the replica's elements", "problems": [problem] if problem
            else []}


def check_bad_calls() -> list[dict]:
    """Calls that break the contract, each refused with its fault named."""
    import jax  # noqa: PLC0415

    records = []
    x = np.ones((2, 3, 4, 5), np.float32)
    bad = {
        "sums of f32": (jax.ffi.ffi_call(SUMS, (jax.ShapeDtypeStruct((5,), np.float32),) * 2),
                        (x, x, np.ones(5, np.float32)), {"channels_last": True},
                        "Wrong buffer dtype"),
        "a short mean": (jax.ffi.ffi_call(SUMS, (jax.ShapeDtypeStruct((5,), np.float64),) * 2),
                         (x, x, np.ones(4, np.float32)), {"channels_last": True},
                         "mean must be [5] (x's channels), got [4]"),
        "y_backprop of another dtype": (
            jax.ffi.ffi_call(SUMS, (jax.ShapeDtypeStruct((5,), np.float64),) * 2),
            (x.astype(np.float16), x, np.ones(5, np.float32)), {"channels_last": True},
            "y_backprop and x must have one element type"),
    }
    for what, (call, operands, attrs, fragment) in bad.items():
        problem = grad.refusal_problem(lambda call=call, attrs=attrs, operands=operands: (
            jax.block_until_ready(jax.jit(lambda *o: call(*o, **attrs))(*operands))), fragment)
        records.append({"case": f"bad call: {what}", "problems": [problem] if problem else []})
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("library")
    parser.add_argument("--platform", choices=sorted(HANDLERS), default="cpu")
    parser.add_argument("--expected", help=".npz of inputs and TensorFlow kernel outputs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import jax  # noqa: PLC0415

    jax.config.update("jax_enable_x64", True)  # the sums are float64, the count int64
    register(args.library, args.platform)
    reference = grad.load_reference()
    records = check_cases(args, reference) + [check_low_count(args.platform)]
    records += check_bad_calls()
    failed = grad.print_failures(records)
    against_kernel = sum(bool(r.get("against_kernel")) for r in records)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}: {len(records)} checks "
          f"({against_kernel} against the kernels' bits), {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
