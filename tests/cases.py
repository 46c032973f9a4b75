"""The parity grid and its inputs, shared by the tests and the TensorFlow reference worker.

Inputs are a pure function of the case (seeded by its id), so a worker process can rebuild
exactly the arrays a test used without shipping them around.
"""

from __future__ import annotations

import dataclasses
import hashlib

import ml_dtypes
import numpy as np

OPS = {"V1": "FusedBatchNormGrad", "V2": "FusedBatchNormGradV2", "V3": "FusedBatchNormGradV3"}
DTYPES = {"V1": ("float32",), "V2": ("float32", "float16", "bfloat16"),
          "V3": ("float32", "float16", "bfloat16")}
NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
EPSILON = 1e-3

# Logical shapes, channels last: (N, spatial..., C). Converted to each layout below.
SHAPES_4D = [
    (2, 4, 5, 3),       # the spec's probe shape
    (1, 1, 1, 1),       # C = 1, R = 1
    (3, 5, 7, 1),       # C = 1
    (2, 3, 3, 7),       # odd C
    (1, 1, 1, 129),     # R = 1, C not a multiple of any vector width
    (4, 6, 6, 64),
    (8, 16, 16, 33),    # large enough for the thread pool
    (0, 4, 5, 3),       # N = 0
    (2, 4, 5, 0),       # C = 0
    (2, 0, 5, 3),       # H = 0
]
SHAPES_5D = [
    (2, 2, 3, 4, 3),
    (1, 1, 1, 1, 1),
    (2, 3, 1, 2, 7),
    (2, 4, 8, 8, 16),
    (2, 0, 4, 4, 3),    # empty: TF returns a 4-D x_backprop here (a bug we do not copy)
    (2, 0, 0, 3, 5),
]
LARGE_SHAPE = (1, 1000, 1000, 3)  # R = 1e6


@dataclasses.dataclass(frozen=True)
class Case:
    op: str            # "V1", "V2" or "V3"
    dtype: str         # "float32", "float16" or "bfloat16"
    data_format: str   # "NHWC", "NCHW", "NDHWC" or "NCDHW"
    is_training: bool
    logical_shape: tuple  # channels last, (N, spatial..., C)

    @property
    def id(self) -> str:
        mode = "train" if self.is_training else "infer"
        dims = "x".join(map(str, self.logical_shape))
        return f"{self.op}-{self.dtype}-{self.data_format}-{mode}-{dims}"

    @property
    def channels_last(self) -> bool:
        return self.data_format in ("NHWC", "NDHWC")

    @property
    def shape(self) -> tuple:
        """The shape of x in this case's layout."""
        s = self.logical_shape
        return s if self.channels_last else (s[0], s[-1], *s[1:-1])

    @property
    def channel_axis(self) -> int:
        return len(self.shape) - 1 if self.channels_last else 1

    @property
    def channels(self) -> int:
        return self.logical_shape[-1]


def parity_cases() -> list[Case]:
    """Every version x dtype x layout x mode on the shape grid, plus R >= 1e6 cases."""
    cases = []
    for op, dtypes in DTYPES.items():
        for dtype in dtypes:
            formats = [("NHWC", SHAPES_4D), ("NCHW", SHAPES_4D)]
            if op == "V3":
                formats += [("NDHWC", SHAPES_5D), ("NCDHW", SHAPES_5D)]
            for data_format, shapes in formats:
                for is_training in (True, False):
                    cases += [Case(op, dtype, data_format, is_training, s) for s in shapes]
    for dtype in ("float32", "float16", "bfloat16"):
        for data_format in ("NHWC", "NCHW"):
            for is_training in (True, False):
                cases.append(Case("V3", dtype, data_format, is_training, LARGE_SHAPE))
    cases.append(Case("V1", "float32", "NHWC", True, LARGE_SHAPE))
    return cases


def make_inputs(case: Case) -> dict:
    """y_backprop and x in the case's dtype; scale and the statistics in float32.

    x has a non-zero mean, so x - mean matters. In training mode the statistics are x's batch
    mean and biased variance, as the forward pass saves them; in inference mode they are
    population statistics near those.
    """
    seed = int.from_bytes(hashlib.sha256(case.id.encode()).digest()[:4], "little")
    rng = np.random.default_rng(seed)
    dtype = NUMPY_DTYPES[case.dtype]
    shape = case.shape
    x = (0.5 + 2.0 * rng.standard_normal(shape)).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    c = case.channels
    axes = tuple(a for a in range(len(shape)) if a != case.channel_axis)
    x64 = x.astype(np.float64)
    if x.size:
        mean = x64.mean(axis=axes)
        var = x64.var(axis=axes)
    else:
        mean, var = np.full(c, 0.5), np.full(c, 4.0)
    if not case.is_training:
        mean = mean + 0.1 * rng.standard_normal(c)
        var = var * rng.uniform(0.8, 1.2, c)
    return {
        "y_backprop": dy,
        "x": x,
        "scale": rng.uniform(0.5, 1.5, c).astype(np.float32),
        "reserve_space_1": mean.astype(np.float32),
        "reserve_space_2": var.astype(np.float32),
        "reserve_space_3": np.zeros([0], np.float32),
    }
