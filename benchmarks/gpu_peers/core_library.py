"""The CUDA core's C entry points (core_capi.cu) through ctypes: libfbn_core.so built with nvcc
for a GPU, or libfbn_core_emu.so built against the host emulator, whose "device" pointers are
host pointers. Shared by the peer benchmark and tools/jax_ffi_check.py; NumPy only."""

from __future__ import annotations

import ctypes
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}


def default_path(emulated: bool) -> Path:
    name = "libfbn_core_emu.so" if emulated else "libfbn_core.so"
    return ROOT / "build" / "gpu_peers" / name


def load_core(emulated: bool, path: Path | None = None) -> ctypes.CDLL:
    """The library with its entry points' signatures declared."""
    core = ctypes.CDLL(str(path or default_path(emulated)))
    core.fbn_gpu_scratch_bytes.restype = ctypes.c_uint64
    core.fbn_gpu_scratch_bytes.argtypes = [ctypes.c_int64] * 3 + [ctypes.c_int]
    core.fbn_gpu_grad.argtypes = ([ctypes.c_int] + [ctypes.c_int64] * 3 + [ctypes.c_int] * 3
                                  + [ctypes.c_float] + [ctypes.c_void_p] * 10)
    core.fbn_gpu_error_string.restype = ctypes.c_char_p
    core.fbn_gpu_variant_names.restype = ctypes.c_char_p
    core.fbn_gpu_set_variants.restype = ctypes.c_uint
    core.fbn_gpu_set_variants.argtypes = [ctypes.c_char_p]
    core.fbn_gpu_alloc.restype = ctypes.c_void_p
    core.fbn_gpu_alloc.argtypes = [ctypes.c_uint64]
    core.fbn_gpu_free.argtypes = [ctypes.c_void_p]
    core.fbn_gpu_copy_to_host.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    return core


def check(core: ctypes.CDLL, error: int, what: str) -> None:
    if error != 0:
        raise RuntimeError(f"{what}: {core.fbn_gpu_error_string(error).decode()}")
