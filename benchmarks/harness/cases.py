"""The benchmark cases: shapes, layouts, modes and dtypes, and how ``--filter`` picks them.

Shapes are written in channels-last order (N,H,W,C or N,D,H,W,C) whatever the layout, so one
name such as ``32x56x56x64`` refers to the same tensor in NHWC and in NCHW.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# The ResNet-50-like layers of the performance notes, plus a tiny, dispatch-bound shape.
SHAPES_4D: tuple[tuple[int, ...], ...] = (
    (32, 56, 56, 64),
    (32, 28, 28, 128),
    (32, 14, 14, 256),
    (32, 7, 7, 2048),
    (8, 112, 112, 64),
    (1, 8, 8, 32),
)
SHAPES_5D: tuple[tuple[int, ...], ...] = ((4, 16, 32, 32, 32),)
# The late stages of ResNet-style networks in channels-last layout: 256-2048 channels, 4-16 MB
# tensors that the convolution before them has just written and that a server's L2 + L3 holds.
# Channels-last only: that is where TensorFlow's default (oneDNN) kernel competes.
CACHE_RESIDENT_SHAPES: tuple[tuple[int, ...], ...] = (
    (16, 14, 14, 512),
    (32, 14, 14, 512),
    (32, 7, 7, 1024),
    (64, 7, 7, 1024),
    (16, 7, 7, 2048),
)
# The 2-byte dtypes are timed on the two DRAM-bound shapes only, to keep the run short.
LOW_PRECISION_SHAPES: tuple[tuple[int, ...], ...] = ((32, 56, 56, 64), (32, 28, 28, 128))
LOW_PRECISION_DTYPES: tuple[str, ...] = ("bfloat16", "float16")
TINY_SHAPE: tuple[int, ...] = (1, 8, 8, 32)

LAYOUTS = {4: ("NHWC", "NCHW"), 5: ("NDHWC", "NCDHW")}
ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
SHORT_DTYPE = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
EPSILON = 1e-3


@dataclass(frozen=True)
class Case:
    """One benchmark case.

    Attributes:
      shape: the logical shape in channels-last order (N,H,W,C or N,D,H,W,C).
      layout: the data_format the ops receive: NHWC, NCHW, NDHWC or NCDHW.
      training: True for the training gradient, False for the inference one.
      dtype: dtype of x, y_backprop and x_backprop: float32, bfloat16 or float16.
    """

    shape: tuple[int, ...]
    layout: str
    training: bool
    dtype: str

    @property
    def shape_name(self) -> str:
        return "x".join(str(d) for d in self.shape)

    @property
    def mode(self) -> str:
        return "train" if self.training else "infer"

    @property
    def name(self) -> str:
        """Unique, shell-friendly name that ``--filter`` matches against."""
        return f"{self.shape_name}-{self.layout}-{self.mode}-{self.dtype}"

    @property
    def label(self) -> str:
        """Short human-readable form for tables and plots."""
        return f"{self.shape_name} {self.layout} {self.mode} {SHORT_DTYPE[self.dtype]}"

    @property
    def channels(self) -> int:
        return self.shape[-1]

    @property
    def channels_last(self) -> bool:
        return self.layout in ("NHWC", "NDHWC")

    @property
    def physical_shape(self) -> tuple[int, ...]:
        """The array shape in memory order for this layout."""
        if self.channels_last:
            return self.shape
        return (self.shape[0], self.shape[-1], *self.shape[1:-1])

    @property
    def channel_axis(self) -> int:
        return len(self.shape) - 1 if self.channels_last else 1

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def tensor_bytes(self) -> int:
        """Bytes of one of x, y_backprop or x_backprop."""
        return self.elements * self.element_bytes

    @property
    def is_tiny(self) -> bool:
        return self.shape == TINY_SHAPE

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "layout": self.layout, "training": self.training,
                "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: dict) -> Case:
        return cls(tuple(data["shape"]), data["layout"], bool(data["training"]), data["dtype"])


def _variants(shape: tuple[int, ...], dtypes: tuple[str, ...]) -> list[Case]:
    """Every layout of the shape's rank, both modes, each dtype."""
    return [Case(shape, layout, training, dtype)
            for dtype in dtypes
            for layout in LAYOUTS[len(shape)]
            for training in (True, False)]


def all_cases() -> list[Case]:
    """The full case list, float32 first, then the 2-byte dtypes."""
    cases: list[Case] = []
    for shape in SHAPES_4D + SHAPES_5D:
        cases += _variants(shape, ("float32",))
    for shape in CACHE_RESIDENT_SHAPES:
        cases += [Case(shape, LAYOUTS[len(shape)][0], training, "float32")
                  for training in (True, False)]
    for shape in LOW_PRECISION_SHAPES:
        cases += _variants(shape, LOW_PRECISION_DTYPES)
    return cases


def quick_cases() -> list[Case]:
    """``--quick``: one tiny and one L3-sized shape, both 4-D layouts, float32 training."""
    return [Case(shape, layout, True, "float32")
            for shape in (TINY_SHAPE, (32, 14, 14, 256))
            for layout in LAYOUTS[4]]


def select(cases: list[Case], pattern: str | None) -> list[Case]:
    """The cases whose name matches ``pattern`` (a regular expression; a plain substring such
    as ``32x14x14x256`` works as one). None keeps every case."""
    if not pattern:
        return list(cases)
    regex = re.compile(pattern)
    return [c for c in cases if regex.search(c.name)]
