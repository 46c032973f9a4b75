"""ctypes bindings of the streaming-limit kernel (streaming_limit.cc)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from harness import native_build

SOURCE = Path(__file__).with_name("streaming_limit.cc")

# Raw addresses rather than numpy ndpointer types: ndpointer validates every argument on every
# call, which costs microseconds, as much as the kernel itself on the tiny shape.
_PTR = ctypes.c_void_p
_I64 = ctypes.c_int64

# name -> (restype, argtypes)
_SIGNATURES = {
    "fbn_stream_set_threads": (None, [ctypes.c_int]),
    "fbn_stream_max_threads": (ctypes.c_int, []),
    "fbn_stream_train_f32": (ctypes.c_double, [_PTR, _PTR, _PTR, _I64]),
    "fbn_stream_infer_f32": (None, [_PTR, _PTR, _PTR, _I64, ctypes.c_float, ctypes.c_float]),
    "fbn_stream_train_u16": (ctypes.c_uint64, [_PTR, _PTR, _PTR, _I64]),
    "fbn_stream_infer_u16": (None, [_PTR, _PTR, _PTR, _I64, ctypes.c_uint16,
                                    ctypes.c_uint16]),
}

# Coefficients of the inference sweep dx = a*x + b*dy (any values do; these keep float32
# results finite and well away from denormals).
INFER_F32 = (0.25, 0.5)
INFER_U16 = (5, 3)


def build() -> Path:
    """The kernel library's path, compiled on first use."""
    return native_build.build(SOURCE)


def load(path: Path | str) -> ctypes.CDLL:
    """The library at ``path`` with its argument and result types declared."""
    library = ctypes.CDLL(str(path))
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(library, name)
        function.restype = restype
        function.argtypes = argtypes
    return library


class StreamKernel:
    """One call of the kernel on fixed arrays: float32, or uint16 for the 2-byte dtypes."""

    def __init__(self, library: ctypes.CDLL, x: np.ndarray, dy: np.ndarray, training: bool):
        if x.dtype != dy.dtype or x.shape != dy.shape:
            raise ValueError("x and dy must have the same dtype and shape")
        self.x = np.ascontiguousarray(x).reshape(-1)
        self.dy = np.ascontiguousarray(dy).reshape(-1)
        # dx is allocated (and faulted in) once: the limit counts memory traffic, not the
        # allocator's page faults.
        self.dx = np.zeros_like(self.x)
        self._call = self._bind(library, training)

    def _bind(self, library: ctypes.CDLL, training: bool):
        # The arrays stay referenced by self, so the addresses stay valid.
        x, dy, dx = (a.ctypes.data for a in (self.x, self.dy, self.dx))
        n = self.x.size
        if self.x.dtype == np.float32:
            if training:
                return lambda: library.fbn_stream_train_f32(x, dy, dx, n)
            return lambda: library.fbn_stream_infer_f32(x, dy, dx, n, *INFER_F32)
        if self.x.dtype == np.uint16:
            if training:
                return lambda: library.fbn_stream_train_u16(x, dy, dx, n)
            return lambda: library.fbn_stream_infer_u16(x, dy, dx, n, *INFER_U16)
        raise ValueError(f"unsupported dtype {self.x.dtype}")

    def __call__(self) -> float | int | None:
        """Runs once; returns sweep 1's dot product in training, None in inference."""
        return self._call()
