"""The FFI handlers without TensorFlow: the standalone library (make xla-ffi-lib) registered into
JAX's XLA and called through jax.ffi.ffi_call.

For every element type, layout (4-D and 5-D, channels last and first), mode (training with a
saved variance or a saved inverse std, inference) and empty shapes: the results against the
float64 oracle (tf_fbn_ops.reference), run to run bit-identical, and, given --expected (an .npz
that the TensorFlow kernel's inputs and outputs were written to, per case), bit-identical to
that kernel. Bad calls
must come back as errors that name the problem. With --time, the median time of the jitted call
per large case. With --core (the CUDA core's C entry, benchmarks/gpu_peers/core_capi.cu), the
core is also called directly on the same device buffers: on the GPU the custom call must give
its bits, and --time times both; on the CPU the entry built against the host emulator checks
this plumbing against the oracle, untimed. Needs only NumPy, ml_dtypes and JAX (jax[cuda] for
--platform cuda).

    python tools/jax_ffi_check.py build/libtf_fbn_ops_xla_ffi.so --platform cpu
    python tools/jax_ffi_check.py build/libtf_fbn_ops_xla_ffi.so --platform cuda --time \
        --core build/gpu_peers/libfbn_core.so
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import math
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TARGET = "tf_fbn_ops_batch_norm_grad"
HANDLERS = {"cpu": "FbnBatchNormGradHost", "cuda": "FbnBatchNormGradCuda"}
JAX_PLATFORM = {"cpu": "cpu", "cuda": "CUDA"}
EPSILON = 1e-3
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
LAYOUTS = {"NHWC": (8, 5, 6, 24), "NCHW": (8, 24, 5, 6), "NDHWC": (2, 3, 4, 5, 12),
           "NCDHW": (2, 12, 3, 4, 5)}
EMPTY = {"NHWC": (0, 3, 4, 5), "NCHW": (2, 5, 0, 4), "NDHWC": (0, 2, 3, 4, 6),
         "NCDHW": (2, 6, 0, 3, 4)}
# (name, is_training, saved_inv_std): TensorFlow's CPU contract in both modes, and the GPU one
# (training with reserve_space_2 = 1/sqrt(var + eps), as cuDNN's forward saves it).
MODES = (("train", True, False), ("infer", False, False), ("train_inv_std", True, True))
LARGE = {"NHWC": (32, 28, 28, 128), "NCHW": (32, 128, 28, 28), "NDHWC": (4, 16, 28, 28, 64)}


def load_by_path(name: str, relative: str):
    """A module of this checkout by its path: tf_fbn_ops/reference.py (importing the package
    would not need TensorFlow either, but this tool must also run from a bare checkout on a
    machine without it) and the core's ctypes loader beside the peer benchmark."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_reference():
    return load_by_path("fbn_reference", "tf_fbn_ops/reference.py")


def register(library: str, platform: str) -> None:
    import jax  # noqa: PLC0415

    handler = getattr(ctypes.cdll.LoadLibrary(library), HANDLERS[platform])
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handler),
                                platform=JAX_PLATFORM[platform])


def grad_call(x_shape: tuple, dtype: Any, channels: int, **attrs: Any):
    """The jitted custom call for one shape and set of attributes."""
    import jax  # noqa: PLC0415

    call = jax.ffi.ffi_call(TARGET, (jax.ShapeDtypeStruct(x_shape, dtype),
                                     jax.ShapeDtypeStruct((channels,), np.float32),
                                     jax.ShapeDtypeStruct((channels,), np.float32)))
    return jax.jit(lambda *operands: call(*operands, **attrs))


def attrs_for(layout: str, is_training: bool, saved_inv_std: bool) -> dict:
    return {"epsilon": np.float32(EPSILON), "is_training": is_training,
            "channels_last": layout.endswith("C"), "saved_inv_std": saved_inv_std}


def make_inputs(rng: np.random.Generator, shape: tuple, layout: str, dtype: Any,
                saved_inv_std: bool) -> list[np.ndarray]:
    channels = shape[-1] if layout.endswith("C") else shape[1]
    variance = rng.uniform(0.5, 2.0, channels).astype(np.float32)
    saved = (1.0 / np.sqrt(variance.astype(np.float64) + np.float32(EPSILON))).astype(np.float32)
    return [rng.standard_normal(shape).astype(dtype),
            (rng.standard_normal(shape) * 1.5 + 0.3).astype(dtype),
            rng.uniform(0.5, 1.5, channels).astype(np.float32),
            (rng.standard_normal(channels) * 0.2 + 0.3).astype(np.float32),
            saved if saved_inv_std else variance]


def ulp(dtype: Any, magnitude: float) -> float:
    info = ml_dtypes.finfo(dtype)
    if not magnitude or not math.isfinite(magnitude):
        return float(info.smallest_subnormal)
    return 2.0 ** (max(math.floor(math.log2(magnitude)), int(info.minexp)) - int(info.nmant))


def accuracy_problems(outputs: list, inputs: list, layout: str, is_training: bool,
                      saved_inv_std: bool, dtype: Any, reference) -> list[str]:
    """Against the oracle: x_backprop within 8 ulps of the larger of it and dy's scaled
    magnitude (the terms it is made of); each sum within 1e-5 * sqrt(R / 1000) (at least 1e-5)
    of the sum of its terms' magnitudes."""
    dy, x, scale, mean, saved = (np.asarray(v, np.float64) for v in inputs)
    # A saved inverse std s stands for the variance 1/s^2 with epsilon 0: the same 1/sqrt.
    variance, epsilon = (1.0 / saved**2, 0.0) if saved_inv_std else (saved, EPSILON)
    oracle = reference.batch_norm_grad(dy, x, scale, mean, variance, epsilon,
                                       "NHWC" if layout.endswith("C") else "NCHW", is_training)
    problems = []
    axis = reference.channel_axis(dy.ndim, "NHWC" if layout.endswith("C") else "NCHW")
    rest = max(1, dy.size // max(1, dy.shape[axis]))
    terms = np.abs(np.moveaxis(dy, axis, -1).reshape(-1, dy.shape[axis]))
    scaled = float(np.max(terms, initial=0.0)) * float(np.max(scale, initial=0.0)) * 2.0
    got = np.asarray(outputs[0], np.float64)
    if got.size:
        bound = 8 * ulp(dtype, max(float(np.max(np.abs(oracle[0]))), scaled))
        error = float(np.max(np.abs(got - oracle[0])))
        if not error <= bound:
            problems.append(f"x_backprop error {error:.3g} > {bound:.3g}")
    rtol = 1e-5 * max(1.0, math.sqrt(rest / 1000.0))
    xc = np.abs(np.moveaxis(x, axis, -1).reshape(-1, dy.shape[axis]) - mean)
    magnitudes = (np.sum(terms * xc, axis=0) * 2.0 + 1e-30, np.sum(terms, axis=0) + 1e-30)
    for i, name in ((1, "scale_backprop"), (2, "offset_backprop")):
        error = np.abs(np.asarray(outputs[i], np.float64) - oracle[i])
        if np.any(error > rtol * magnitudes[i - 1] * (4.0 if i == 1 else 1.0)):
            problems.append(f"{name} error {float(np.max(error)):.3g}")
    return problems


def same_bits(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def typed(array: np.ndarray, dtype: Any) -> np.ndarray:
    """An array from an .npz, which keeps bfloat16 as raw 2-byte records, in its element type."""
    return array.view(dtype) if dtype is not None else array


def check_cases(args: argparse.Namespace, reference) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    expected = dict(np.load(args.expected)) if args.expected else {}
    records = []
    for dtype_name, dtype in DTYPES.items():
        for layout in LAYOUTS:
            for mode, is_training, saved_inv_std in MODES:
                for shape in (LAYOUTS[layout], EMPTY[layout]):
                    key = f"{dtype_name}-{layout}-{mode}-{'x'.join(map(str, shape))}"
                    inputs = make_inputs(rng, shape, layout, dtype, saved_inv_std)
                    if f"{key}/in0" in expected:  # the inputs the kernel's outputs are for
                        inputs = [typed(expected[f"{key}/in{i}"], dtype if i < 2 else None)
                                  for i in range(5)]
                    channels = inputs[2].shape[0]
                    call = grad_call(shape, dtype, channels,
                                     **attrs_for(layout, is_training, saved_inv_std))
                    first = [np.asarray(v) for v in call(*inputs)]
                    second = [np.asarray(v) for v in call(*inputs)]
                    problems = accuracy_problems(first, inputs, layout, is_training,
                                                 saved_inv_std, dtype, reference)
                    if not all(same_bits(a, b) for a, b in zip(first, second)):
                        problems.append("two runs differ")
                    if f"{key}/out0" in expected and not all(
                            same_bits(a, typed(expected[f"{key}/out{i}"], dtype if i == 0 else None))
                            for i, a in enumerate(first)):
                        problems.append("differs from the TensorFlow kernel's bits")
                    if not shape.count(0) and not np.all(np.isfinite(first[0].astype(np.float32))):
                        problems.append("non-finite x_backprop")
                    records.append({"case": key, "problems": problems,
                                    "against_kernel": f"{key}/out0" in expected})
    return records


# (what is wrong, shapes of the five operands, x's dtype, result shape, fragment of the error)
BAD_CALLS = (
    ("3-D x", [(2, 3, 4)] * 2 + [(4,)] * 3, np.float32, (2, 3, 4), "4- or 5-dimensional"),
    ("short scale", [(2, 3, 4, 5)] * 2 + [(4,), (5,), (5,)], np.float32, (2, 3, 4, 5),
     "scale must be [5]"),
    ("dy of another shape", [(2, 3, 4, 5), (2, 3, 4, 6), (6,), (6,), (6,)], np.float32,
     (2, 3, 4, 6), "must have x's shape"),
    ("int32 x", [(2, 3, 4, 5)] * 2 + [(5,)] * 3, np.int32, (2, 3, 4, 5), "f32, f16 or bf16"),
)


def refusal_problem(run, fragment: str) -> str | None:
    """None when run() raises an error containing `fragment`, else what happened instead."""
    try:
        run()
        return "accepted"
    except Exception as error:  # noqa: BLE001 - JAX's runtime error type varies by version
        return None if fragment in str(error) else f"unexpected error: {error}"


def print_failures(records: list[dict]) -> list[dict]:
    """One FAIL line per record with problems; those records."""
    failed = [r for r in records if r["problems"]]
    for record in failed:
        print(f"FAIL {record['case']}: {'; '.join(record['problems'])}")
    return failed


def check_bad_calls() -> list[dict]:
    records = []
    for what, shapes, dtype, result, fragment in BAD_CALLS:
        operands = [np.ones(s, dtype if i < 2 else np.float32) for i, s in enumerate(shapes)]
        call = grad_call(result, dtype, shapes[2][0], **attrs_for("NHWC", True, False))
        problem = refusal_problem(lambda: call(*operands)[0].block_until_ready(), fragment)
        records.append({"case": f"bad call: {what}", "problems": [problem] if problem else []})
    return records


class DirectCore:
    """The CUDA core called through its C entry on JAX's device arrays (read only), writing into
    device memory of its own, on the default stream, waiting for the device after each call."""

    def __init__(self, path: str, platform: str) -> None:
        self.library = load_by_path("fbn_core_library", "benchmarks/gpu_peers/core_library.py")
        self.core = self.library.load_core(emulated=platform == "cpu", path=Path(path))

    def prepare(self, inputs: list, layout: str, dtype_name: str, is_training: bool,
                saved_inv_std: bool):
        """A callable running the core once on the device arrays `inputs` (dy, x, scale, mean,
        variance); with fetch (the default) it returns the three outputs as NumPy arrays. The
        device memory lives as long as the callable."""
        import jax  # noqa: PLC0415

        shape = inputs[0].shape
        channels_last = layout.endswith("C")
        n, c = shape[0], shape[-1] if channels_last else shape[1]
        s = math.prod(shape) // (n * c)
        results = [np.empty(shape, DTYPES[dtype_name]), np.empty(c, np.float32),
                   np.empty(c, np.float32)]
        sizes = [r.nbytes for r in results]
        sizes.append(self.core.fbn_gpu_scratch_bytes(n, c, s, int(channels_last)))
        device = [self.core.fbn_gpu_alloc(max(1, size)) for size in sizes]
        if not all(device):
            self.free(device)
            raise MemoryError(f"fbn_gpu_alloc failed for {sizes} bytes")
        jax.block_until_ready(inputs)
        pointers = [a.unsafe_buffer_pointer() for a in inputs] + device
        code = self.library.DTYPE_CODE[dtype_name]
        check = self.library.check

        def run(fetch: bool = True) -> list[np.ndarray] | None:
            check(self.core, self.core.fbn_gpu_grad(
                code, n, c, s, int(channels_last), int(is_training), int(saved_inv_std),
                EPSILON, *pointers, None), "fbn_gpu_grad")
            check(self.core, self.core.fbn_gpu_synchronize(), "synchronize")
            if not fetch:
                return None
            for result, pointer, size in zip(results, device, sizes):
                check(self.core, self.core.fbn_gpu_copy_to_host(result.ctypes.data, pointer,
                                                                 size), "copy")
            return [r.copy() for r in results]

        # Freed with the callable; at exit the process's end frees it, after JAX's teardown.
        weakref.finalize(run, self.free, device).atexit = False
        return run

    def free(self, device: list) -> None:
        for pointer in device:
            if pointer:
                self.core.fbn_gpu_free(pointer)


def check_direct(direct: DirectCore, platform: str, reference) -> list[dict]:
    """The custom call against the core called directly, on every dtype, layout and mode: the
    same bits on the GPU (the same CUDA core); on the CPU, where the handler runs the CPU core
    and the entry the emulated CUDA core, the direct call against the oracle."""
    import jax  # noqa: PLC0415

    rng = np.random.default_rng(2)
    records = []
    for dtype_name, dtype in DTYPES.items():
        for layout, shape in LAYOUTS.items():
            for mode, is_training, saved_inv_std in MODES:
                host = make_inputs(rng, shape, layout, dtype, saved_inv_std)
                inputs = [jax.device_put(v) for v in host]
                attrs = attrs_for(layout, is_training, saved_inv_std)
                via_xla = [np.asarray(v) for v in
                           grad_call(shape, dtype, host[2].shape[0], **attrs)(*inputs)]
                direct_outputs = direct.prepare(inputs, layout, dtype_name, is_training,
                                                saved_inv_std)()
                if platform == "cuda":
                    problems = ([] if all(same_bits(a, b) for a, b in zip(via_xla, direct_outputs))
                                else ["differs from the core called directly"])
                else:
                    problems = accuracy_problems(direct_outputs, host, layout, is_training,
                                                 saved_inv_std, dtype, reference)
                records.append({"case": f"direct-{dtype_name}-{layout}-{mode}",
                                "problems": problems, "against_direct": True})
    return records


def median_seconds(fn, repeats: int = 20) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def time_cases(platform: str, direct: DirectCore | None) -> list[dict]:
    """Median of 20 calls of the jitted custom call on large inputs already on the device, and
    on the GPU, given the core's entry, of 20 direct calls on the same buffers (whose results
    must be the custom call's bits)."""
    import jax  # noqa: PLC0415

    rng = np.random.default_rng(1)
    rows = []
    for layout, shape in LARGE.items():
        for dtype_name in ("float32", "float16"):
            inputs = [jax.device_put(v) for v in
                      make_inputs(rng, shape, layout, DTYPES[dtype_name], platform == "cuda")]
            call = grad_call(shape, DTYPES[dtype_name], inputs[2].shape[0],
                             **attrs_for(layout, True, platform == "cuda"))
            row = {"case": f"{dtype_name}-{layout}-train-{'x'.join(map(str, shape))}",
                   "median_us": round(median_seconds(
                       lambda: jax.block_until_ready(call(*inputs))) * 1e6, 1),
                   "problems": []}
            if direct is not None and platform == "cuda":
                run = direct.prepare(inputs, layout, dtype_name, True, True)
                if not all(same_bits(np.asarray(a), b) for a, b in zip(call(*inputs), run())):
                    row["problems"].append("differs from the core called directly")
                row["direct_us"] = round(median_seconds(lambda: run(fetch=False)) * 1e6, 1)
            rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("library")
    parser.add_argument("--platform", choices=sorted(HANDLERS), default="cpu")
    parser.add_argument("--expected", help=".npz of inputs and TensorFlow kernel outputs")
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--core", help="the CUDA core's C entry (benchmarks/gpu_peers), called "
                        "directly beside the custom call: libfbn_core.so on the GPU, "
                        "libfbn_core_emu.so (host emulator) on the CPU")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the records as JSON here")
    args = parser.parse_args()
    import jax  # noqa: PLC0415

    register(args.library, args.platform)
    reference = load_reference()
    direct = DirectCore(args.core, args.platform) if args.core else None
    records = check_cases(args, reference) + check_bad_calls()
    if direct is not None:
        records += check_direct(direct, args.platform, reference)
    timings = time_cases(args.platform, direct) if args.time else []
    failed = print_failures(records + timings)
    for row in timings:
        beside = (f", the core called directly {row['direct_us']} us "
                  f"({row['median_us'] / row['direct_us']:.2f}x)" if "direct_us" in row else "")
        print(f"time {row['case']}: {row['median_us']} us{beside}")
    against_kernel = sum(bool(r.get("against_kernel")) for r in records)
    against_direct = sum(bool(r.get("against_direct")) for r in records)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}: {len(records)} checks "
          f"({against_kernel} against the kernel's bits, {against_direct} against the core "
          f"called directly), {len(failed)} failed")
    if args.out:
        Path(args.out).write_text(json.dumps({"jax": jax.__version__,
                                              "device": jax.devices()[0].device_kind,
                                              "records": records, "timings": timings}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
