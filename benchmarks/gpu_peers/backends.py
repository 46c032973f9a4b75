"""Where peers.py runs its implementations: a CUDA GPU through PyTorch, or the host emulator
with NumPy buffers (the plumbing, untimed). Each backend prepares a Case into callables that
launch one implementation and return its three outputs."""

from __future__ import annotations

import ctypes
import statistics
from collections.abc import Callable

import numpy as np
from core_library import DTYPE_CODE, check

EPSILON = 1e-3


def _torch():
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return None
    return torch


def make(emulated: bool, core: ctypes.CDLL):
    return EmulatedBackend(core) if emulated else CudaBackend(core)


def call_core(core: ctypes.CDLL, case, pointers: list[int], stream: int | None) -> None:
    """One call of the core on `case`. pointers: dy, x, scale, mean, variance (the inverse std
    in training, TensorFlow's GPU contract), dx, dscale, doffset, scratch."""
    check(core, core.fbn_gpu_grad(DTYPE_CODE[case.dtype], case.n, case.c, case.s,
                                  int(case.channels_last), int(case.training),
                                  int(case.training), EPSILON, *pointers, stream),
          "fbn_gpu_grad")


def with_variants(core: ctypes.CDLL, ours: Callable) -> dict[str, Callable]:
    """`ours` and, as "ours+NAME", ours under each kernel variant of the core (GpuVariant),
    the default kernels again after each call."""
    implementations = {"ours": ours}
    for name in core.fbn_gpu_variant_names().decode().split(","):
        def run(name: str = name):
            core.fbn_gpu_set_variants(name.encode())
            try:
                return ours()
            finally:
                core.fbn_gpu_set_variants(b"")
        implementations[f"ours+{name}"] = run
    return implementations


# --- PyTorch on a CUDA GPU -----------------------------------------------------------------

# GPU clock cycles (about 1 ms) the stream sleeps before each timed call: far longer than any
# host's way to a launch.
HOLD_CYCLES = 2_000_000


class CudaBackend:
    def __init__(self, core: ctypes.CDLL) -> None:
        self.torch = _torch()
        if self.torch is None or not self.torch.cuda.is_available():
            raise SystemExit("gpu peers: PyTorch with a CUDA GPU is needed (or --emulated)")
        self.core = core

    def describe(self) -> str:
        t = self.torch
        props = t.cuda.get_device_properties(0)
        return (f"device: {props.name}, {props.total_memory / 2**30:.0f} GiB; PyTorch {t.__version__}"
                f" (CUDA {t.version.cuda}, cuDNN {t.backends.cudnn.version()}); our core built "
                f"with CUDA {self.core.fbn_gpu_cuda_version() / 1000:.1f}")

    def prepare(self, case) -> "CudaCase":
        return CudaCase(self, case)

    def median_seconds(self, fn: Callable, warmup: int, timed: int) -> float:
        t = self.torch
        for _ in range(warmup):
            fn()
        start, stop = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        seconds = []
        for _ in range(timed):
            # The GPU sleeps while the host queues the call, so the events time the GPU's work
            # alone, not Python's way to the launch (longer through ctypes than through ATen).
            t.cuda._sleep(HOLD_CYCLES)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            seconds.append(start.elapsed_time(stop) / 1e3)
        return statistics.median(seconds)

    def snapshot(self, outputs: tuple) -> tuple:
        return tuple(o.clone() for o in outputs)

    def same_bits(self, a: tuple, b: tuple) -> bool:
        t = self.torch
        return all(t.equal(x.contiguous().view(t.uint8), y.contiguous().view(t.uint8))
                   for x, y in zip(a, b))

    def to_numpy(self, outputs: tuple, case) -> tuple:
        return tuple(o.double().cpu().numpy() for o in outputs)


class CudaCase:
    def __init__(self, backend: CudaBackend, case) -> None:
        t = backend.torch
        self.backend, self.case, self.core = backend, case, backend.core
        dtype = getattr(t, case.dtype)
        fmt = (t.channels_last if case.x.ndim == 4 else t.channels_last_3d) \
            if case.channels_last else t.contiguous_format
        device = t.device("cuda")
        as_device = lambda a: t.tensor(a, dtype=t.float32, device=device).to(dtype).contiguous(
            memory_format=fmt)  # noqa: E731
        self.x, self.dy = as_device(case.x), as_device(case.dy)
        f32 = lambda a: t.tensor(a, dtype=t.float32, device=device)  # noqa: E731
        self.weight, self.bias = f32(case.weight), t.zeros(case.c, device=device)
        self.running_mean, self.running_var = f32(case.running_mean), f32(case.running_var)
        self.cudnn_saved = None
        if case.training:
            _, self.save_mean, self.save_invstd = t.native_batch_norm(
                self.x, self.weight, self.bias, None, None, True, 0.0, EPSILON)
            try:
                _, mean, invstd, reserve = t.ops.aten.cudnn_batch_norm(
                    self.x, self.weight, self.bias, self.running_mean.clone(),
                    self.running_var.clone(), True, 0.0, EPSILON)
            except RuntimeError:
                pass  # cuDNN refuses this case: its column says n/a
            else:
                # The same batch statistics, or the comparison would be of different inputs.
                if (t.allclose(mean, self.save_mean, rtol=1e-5, atol=1e-6)
                        and t.allclose(invstd, self.save_invstd, rtol=1e-4)):
                    self.cudnn_saved = (mean, invstd, reserve)
                else:
                    worst = ((invstd.double() - self.save_invstd.double()).abs()
                             / self.save_invstd.double().abs()).max().item()
                    print(f"{case.name} {case.layout} {case.dtype}: cuDNN's forward saved other "
                          f"statistics than PyTorch's (inverse std up to {worst:.2e} apart): "
                          "its column is n/a", flush=True)
        self.dx = t.empty_like(self.x)
        self.dscale = t.empty(case.c, device=device)
        self.doffset = t.empty(case.c, device=device)
        self.scratch = t.empty(int(self.core.fbn_gpu_scratch_bytes(
            case.n, case.c, case.s, int(case.channels_last))), dtype=t.uint8, device=device)
        moved = case.moved // 2
        self.copy_src = t.zeros(moved, dtype=t.uint8, device=device)
        self.copy_dst = t.empty_like(self.copy_src)

    def reference(self) -> tuple:
        """The float64 gradients of the inputs as rounded to the dtype, computed on the GPU:
        the host oracle's correctly rounded sums take minutes on the 100-200 MB tensors, and
        plain float64 sums of at most 2^24 terms err far below the float32 unit this measures
        in. Logical NC... order, like Case.reference."""
        t, case = self.backend.torch, self.case
        x, dy = self.x.double(), self.dy.double()
        axes = [0, *range(2, x.dim())]
        per_channel = [1, -1] + [1] * (x.dim() - 2)
        if case.training:
            mean, var = x.mean(axes), x.var(axes, unbiased=False)
        else:
            mean, var = self.running_mean.double(), self.running_var.double()
        inv_std = 1.0 / t.sqrt(var + float(np.float32(EPSILON)))
        xc = x - mean.view(per_channel)
        offset = dy.sum(axes)
        sum_dy_xc = (dy * xc).sum(axes)
        weight = self.weight.double()
        if case.training:
            rest = x.numel() // case.c
            scale = (dy * (xc * inv_std.view(per_channel))).sum(axes)
            coef2 = inv_std * inv_std * (sum_dy_xc / rest)
            dx = (weight * inv_std).view(per_channel) * (
                (dy - (offset / rest).view(per_channel)) - xc * coef2.view(per_channel))
        else:
            scale = sum_dy_xc * inv_std
            dx = dy * (inv_std * weight).view(per_channel)
        return tuple(v.contiguous().cpu().numpy() for v in (dx, scale, offset))

    def copy(self) -> None:
        self.copy_dst.copy_(self.copy_src)

    def implementations(self) -> dict[str, Callable | None]:
        t, case = self.backend.torch, self.case
        native = t.ops.aten.native_batch_norm_backward
        # Inference: PyTorch's CUDA backward asserts that saved statistics are defined, and its
        # own forward saves empty ones then.
        empty = t.empty(0, device=self.x.device)
        saved = (self.save_mean, self.save_invstd) if case.training else (empty, empty)

        def ours():
            mean, var = saved if case.training else (self.running_mean, self.running_var)
            buffers = (self.dy, self.x, self.weight, mean, var, self.dx, self.dscale,
                       self.doffset, self.scratch)
            call_core(self.core, case, [b.data_ptr() for b in buffers],
                      t.cuda.current_stream().cuda_stream)
            return self.dx, self.dscale, self.doffset

        def pytorch():
            return native(self.dy, self.x, self.weight, self.running_mean, self.running_var,
                          saved[0], saved[1], case.training, EPSILON, [True, True, True])

        def cudnn():
            mean, invstd, reserve = self.cudnn_saved
            return t.ops.aten.cudnn_batch_norm_backward(
                self.x, self.dy, self.weight, self.running_mean, self.running_var, mean, invstd,
                EPSILON, reserve)

        return {**with_variants(self.core, ours), "pytorch": pytorch,
                "cudnn": cudnn if self.cudnn_saved is not None else None}


# --- The host emulator ---------------------------------------------------------------------

def _to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """Rounds to bfloat16, to nearest even, as 16-bit patterns."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def _as_array(output) -> np.ndarray:
    """A NumPy view of an output: ours are NumPy already, PyTorch's CPU tensors are widened to
    float32 first (exact for float16 and bfloat16, which NumPy cannot hold)."""
    if isinstance(output, np.ndarray):
        return output
    return output.detach().float().numpy()


def _from_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


class EmulatedBackend:
    """The core built against the host emulator: "device" memory is host memory."""

    def __init__(self, core: ctypes.CDLL) -> None:
        self.core, self.torch = core, _torch()

    def describe(self) -> str:
        peer = f"PyTorch {self.torch.__version__} CPU kernel" if self.torch else \
            "no PyTorch installed (its column is n/a)"
        return (f"device: host emulator (plumbing only, no timing); peer: {peer}; our core "
                f"built for CUDA {self.core.fbn_gpu_cuda_version() / 1000:.1f}")

    def prepare(self, case) -> "EmulatedCase":
        return EmulatedCase(self, case)

    def median_seconds(self, fn: Callable, warmup: int, timed: int) -> None:
        fn()
        return None

    def snapshot(self, outputs: tuple) -> tuple:
        return tuple(np.array(_as_array(o), copy=True) for o in outputs)

    def same_bits(self, a: tuple, b: tuple) -> bool:
        bits = lambda o: np.ascontiguousarray(_as_array(o)).view(np.uint8)  # noqa: E731
        return all(np.array_equal(bits(x), bits(y)) for x, y in zip(a, b))

    def to_numpy(self, outputs: tuple, case) -> tuple:
        """float64, logical NC... order: ours hold bfloat16 as 16-bit patterns."""
        arrays = [_as_array(o) for o in outputs]
        return tuple(_from_storage(a, "bfloat16") if a.dtype == np.uint16
                     else a.astype(np.float64) for a in arrays)


class EmulatedCase:
    def __init__(self, backend: EmulatedBackend, case) -> None:
        self.backend, self.case, self.core = backend, case, backend.core
        storage = {"float32": np.float32, "float16": np.float16}.get(case.dtype)
        physical = (lambda a: np.ascontiguousarray(np.moveaxis(a, 1, -1))) \
            if case.channels_last else np.ascontiguousarray
        encode = _to_bf16_bits if storage is None else (lambda a: a.astype(storage))
        self.x, self.dy = physical(encode(case.x)), physical(encode(case.dy))
        self.logical_x = _from_storage(encode(case.x), case.dtype)
        self.logical_dy = _from_storage(encode(case.dy), case.dtype)
        self.weight = case.weight.astype(np.float32)
        axes = (0, *range(2, case.x.ndim))
        if case.training:  # what a forward saves: batch mean and inverse std, in float32
            self.mean = self.logical_x.mean(axis=axes).astype(np.float32)
            self.var = (1 / np.sqrt(self.logical_x.var(axis=axes) + EPSILON)).astype(np.float32)
        else:
            self.mean = case.running_mean.astype(np.float32)
            self.var = case.running_var.astype(np.float32)
        self.dx = np.empty_like(self.x)
        self.dscale = np.empty(case.c, np.float32)
        self.doffset = np.empty(case.c, np.float32)
        self.scratch = np.empty(int(self.core.fbn_gpu_scratch_bytes(
            case.n, case.c, case.s, int(case.channels_last))), np.uint8)
        self.copy_src = np.zeros(case.moved // 2, np.uint8)
        self.copy_dst = np.empty_like(self.copy_src)

    def reference(self) -> tuple:
        """The host oracle (correctly rounded sums) on the inputs as rounded to the dtype."""
        return self.case.reference(self.logical_x, self.logical_dy)

    def copy(self) -> None:
        np.copyto(self.copy_dst, self.copy_src)

    def implementations(self) -> dict[str, Callable | None]:
        case = self.case

        def ours():
            buffers = (self.dy, self.x, self.weight, self.mean, self.var, self.dx, self.dscale,
                       self.doffset, self.scratch)
            call_core(self.core, case, [b.ctypes.data for b in buffers], None)
            # dx in logical NC... order, as PyTorch's outputs are (a view, no copy).
            dx = np.moveaxis(self.dx, -1, 1) if case.channels_last else self.dx
            return dx, self.dscale, self.doffset

        t = self.backend.torch

        def pytorch():
            dtype = getattr(t, case.dtype)
            x = t.tensor(self.logical_x, dtype=t.float32).to(dtype)
            dy = t.tensor(self.logical_dy, dtype=t.float32).to(dtype)
            weight = t.tensor(self.weight)
            running = (t.tensor(case.running_mean, dtype=t.float32),
                       t.tensor(case.running_var, dtype=t.float32))
            saved = (t.tensor(self.mean), t.tensor(self.var)) if case.training else (None, None)
            return t.ops.aten.native_batch_norm_backward(
                dy, x, weight, *running, *saved, case.training, EPSILON, [True, True, True])

        return {**with_variants(self.core, ours), "pytorch": pytorch if t is not None else None,
                "cudnn": None}
