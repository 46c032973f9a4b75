"""The forward's FFI handler without TensorFlow: the standalone library (make xla-ffi-lib)
registered into JAX's XLA, its target tf_fbn_ops_batch_norm_forward called through
jax.ffi.ffi_call.

For every element type, layout (4-D and 5-D, channels last and first), mode (training, training
with a running-average factor, training saving the inverse std, inference) and empty shapes: the
five outputs against the float64 oracle (tf_fbn_ops/reference.py; y within one unit of its type, each statistic within
two float roundings), run to run bit-identical, and, given --expected (an .npz of the
TensorFlow kernel's inputs and outputs per case), bit-identical to that kernel. Bad calls must
come back as errors that name the problem. Needs only NumPy, ml_dtypes and JAX (jax[cuda] for
--platform cuda).

    python tools/jax_forward_ffi_check.py build/libtf_fbn_ops_xla_ffi.so --platform cpu
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
TARGET = "tf_fbn_ops_batch_norm_forward"
HANDLERS = {"cpu": "FbnBatchNormForwardHost", "cuda": "FbnBatchNormForwardCuda"}
# (name, is_training, exponential_avg_factor, save_inv_std)
MODES = (("train", True, 1.0, False), ("train_factor", True, 0.25, False),
         ("infer", False, 1.0, False), ("train_inv_std", True, 1.0, True))


def load_grad_check():
    """tools/jax_ffi_check.py: the gradient's check, whose dtypes, layouts, empty shapes and
    helpers this one shares."""
    spec = importlib.util.spec_from_file_location("jax_ffi_check", ROOT / "tools" /
                                                  "jax_ffi_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


grad = load_grad_check()


def register(library: str, platform: str) -> None:
    import jax  # noqa: PLC0415

    handler = getattr(ctypes.cdll.LoadLibrary(library), HANDLERS[platform])
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handler),
                                platform=grad.JAX_PLATFORM[platform])


def forward_call(x_shape: tuple, dtype: Any, channels: int, **attrs: Any):
    """The jitted custom call: y, batch_mean, batch_variance, reserve_space_1, _2."""
    import jax  # noqa: PLC0415

    vector = jax.ShapeDtypeStruct((channels,), np.float32)
    call = jax.ffi.ffi_call(TARGET, (jax.ShapeDtypeStruct(x_shape, dtype), *(vector,) * 4))
    return jax.jit(lambda *operands: call(*operands, **attrs))


def attrs_for(layout: str, is_training: bool, factor: float, save_inv_std: bool) -> dict:
    return {"epsilon": np.float32(grad.EPSILON), "exponential_avg_factor": np.float32(factor),
            "is_training": is_training, "channels_last": layout.endswith("C"),
            "save_inv_std": save_inv_std}


def make_inputs(rng: np.random.Generator, shape: tuple, layout: str, dtype: Any,
                reads_statistics: bool) -> list[np.ndarray]:
    """x (offset from zero, so the variance must survive it), scale, offset, and the mean and
    variance: one per channel where the call reads them, [0] otherwise, as callers pass them."""
    channels = shape[-1] if layout.endswith("C") else shape[1]
    given = channels if reads_statistics else 0
    return [(rng.standard_normal(shape) * 1.5 + 30.0).astype(dtype),
            rng.uniform(0.5, 1.5, channels).astype(np.float32),
            rng.standard_normal(channels).astype(np.float32),
            (rng.standard_normal(given) + 30.0).astype(np.float32),
            rng.uniform(1.0, 4.0, given).astype(np.float32)]


def accuracy_problems(outputs: list, want: list, dtype: Any) -> list[str]:
    problems = []
    got = np.asarray(outputs[0], np.float64)
    if got.size:
        bound = grad.ulp(dtype, float(np.max(np.abs(want[0]))))
        error = float(np.max(np.abs(got - want[0])))
        if not error <= bound:
            problems.append(f"y error {error:.3g} > {bound:.3g}")
    for i, name in enumerate(("batch_mean", "batch_variance", "reserve_space_1",
                              "reserve_space_2"), start=1):
        got, expected = np.asarray(outputs[i], np.float64), want[i]
        if not np.array_equal(np.isnan(got), np.isnan(expected)):
            problems.append(f"{name}: NaN where the oracle has none, or the other way")
        elif np.any(np.abs(got - expected) > 2.0**-22 * np.abs(expected)):
            problems.append(f"{name} error {float(np.nanmax(np.abs(got - expected))):.3g}")
    return problems


def case_key(dtype_name: str, layout: str, mode: str, shape: tuple) -> str:
    return f"{dtype_name}-{layout}-{mode}-{'x'.join(map(str, shape))}"


def check_cases(args: argparse.Namespace, reference) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    expected = dict(np.load(args.expected)) if args.expected else {}
    records = []
    for dtype_name, dtype in grad.DTYPES.items():
        for layout in grad.LAYOUTS:
            for mode, is_training, factor, save_inv_std in MODES:
                for shape in (grad.LAYOUTS[layout], grad.EMPTY[layout]):
                    key = case_key(dtype_name, layout, mode, shape)
                    inputs = make_inputs(rng, shape, layout, dtype,
                                         not is_training or factor != 1.0)
                    if f"{key}/in0" in expected:  # the inputs the kernel's outputs are for
                        inputs = [grad.typed(expected[f"{key}/in{i}"], dtype if i == 0 else None)
                                  for i in range(5)]
                    call = forward_call(shape, dtype, inputs[1].shape[0],
                                        **attrs_for(layout, is_training, factor, save_inv_std))
                    first = [np.asarray(v) for v in call(*inputs)]
                    second = [np.asarray(v) for v in call(*inputs)]
                    problems = accuracy_problems(first, reference.batch_norm_forward(
                        *inputs, grad.EPSILON, layout, is_training, factor, save_inv_std), dtype)
                    if not all(grad.same_bits(a, b) for a, b in zip(first, second)):
                        problems.append("two runs differ")
                    if f"{key}/out0" in expected and not all(
                            grad.same_bits(a, grad.typed(expected[f"{key}/out{i}"],
                                                         dtype if i == 0 else None))
                            for i, a in enumerate(first)):
                        problems.append("differs from the TensorFlow kernel's bits")
                    records.append({"case": key, "problems": problems,
                                    "against_kernel": f"{key}/out0" in expected})
    return records


# (what is wrong, shapes of x and the four vectors, x's dtype, attributes changed, fragment)
BAD_CALLS = (
    ("3-D x", [(2, 3, 4)] + [(4,)] * 4, np.float32, {}, "4- or 5-dimensional"),
    ("short offset", [(2, 3, 4, 5), (5,), (4,), (0,), (0,)], np.float32, {},
     "offset must be [5]"),
    ("no mean in inference", [(2, 3, 4, 5), (5,), (5,), (0,), (5,)], np.float32,
     {"is_training": False}, "mean must be [5]"),
    ("int32 x", [(2, 3, 4, 5)] + [(5,)] * 4, np.int32, {}, "f32, f16 or bf16"),
)


def check_bad_calls() -> list[dict]:
    records = []
    for what, shapes, dtype, changed, fragment in BAD_CALLS:
        operands = [np.ones(s, dtype if i == 0 else np.float32) for i, s in enumerate(shapes)]
        attrs = {**attrs_for("NHWC", True, 1.0, False), **changed}
        call = forward_call(shapes[0], dtype, shapes[1][0], **attrs)
        problem = grad.refusal_problem(lambda: call(*operands)[0].block_until_ready(), fragment)
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

    register(args.library, args.platform)
    records = check_cases(args, grad.load_reference()) + check_bad_calls()
    failed = grad.print_failures(records)
    against_kernel = sum(bool(r.get("against_kernel")) for r in records)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}: {len(records)} checks "
          f"({against_kernel} against the kernel's bits), {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
