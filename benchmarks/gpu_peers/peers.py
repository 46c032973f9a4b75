"""The CUDA core against its peers on the same GPU, in one run: cuDNN's batch-norm backward
(what TensorFlow's GPU op calls in training), PyTorch's own CUDA kernel, and a device-to-device
copy of the same bytes (the streaming limit), on the GPU benchmark's shapes.

For each shape, layout (NHWC as PyTorch's channels_last, and NCHW), dtype and mode it reports:
median time; the copy's time over it (1.0 = at the copy's speed); each peer's time over ours
(and each kernel variant's, as "ours+NAME": under 1, the variant is faster);
the error against a float64 reference in units of the output type (normwise: the largest
difference over the largest reference value, per output, the worst of dx, dscale and doffset);
and whether 10 runs gave the same bits. Every implementation gets what it expects: ours the
saved mean and inverse standard deviation of PyTorch's forward (TensorFlow's GPU contract),
cuDNN the saved statistics and reserve space of its own forward, PyTorch its own; the two
forwards' statistics are compared first, so the inputs mean the same thing. cuDNN has no
inference-mode backward: those cells say n/a.

Needs PyTorch with CUDA, and build/gpu_peers/libfbn_core.so (`make gpu-peers` builds it and runs
this). `--emulated` runs the same plumbing without a GPU: the core built against the host
emulator (cc/tests/gpu_emulator), NumPy buffers as device memory, PyTorch's CPU kernel as the
peer where PyTorch is installed, tiny shapes, and no timing.

Usage: python benchmarks/gpu_peers/peers.py [--emulated] [--shapes NAME,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

import backends  # noqa: E402 - beside this file; PyTorch is imported only when used
from core_library import load_core  # noqa: E402 - beside this file
from backends import EPSILON  # noqa: E402
from tf_fbn_ops import reference  # noqa: E402 - NumPy only, no TensorFlow

RUNS = 10
WARMUP, TIMED = 3, 20
UNIT = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# gpu_bench's shapes: (N, spatial dims, C).
SHAPES = {"32x56x56x64": (32, (56, 56), 64), "32x28x28x128": (32, (28, 28), 128),
          "32x14x14x256": (32, (14, 14), 256), "32x7x7x2048": (32, (7, 7), 2048),
          "8x112x112x64": (8, (112, 112), 64), "1x8x8x32": (1, (8, 8), 32),
          "4x16x32x32x32": (4, (16, 32, 32), 32), "32x112x112x64": (32, (112, 112), 64),
          "64x56x56x256": (64, (56, 56), 256), "256x7x7x2048": (256, (7, 7), 2048),
          "8x32x64x64x64": (8, (32, 64, 64), 64)}
EMULATED_SHAPES = {"2x5x5x8": (2, (5, 5), 8), "3x4x6x2x5": (3, (4, 6, 2), 5)}


class Case:
    """One cell's inputs, as float64 NumPy arrays in logical NC... order plus the layout."""

    def __init__(self, name: str, dims: tuple, channels_last: bool, dtype: str, training: bool,
                 seed: int) -> None:
        n, spatial, c = dims
        rng = np.random.default_rng(seed)
        shape = (n, c, *spatial)
        self.name, self.dtype, self.training = name, dtype, training
        self.channels_last = channels_last
        self.n, self.c, self.s = n, c, int(np.prod(spatial))
        self.x = rng.standard_normal(shape) * 2 + 0.5
        self.dy = rng.standard_normal(shape)
        self.weight = rng.uniform(0.5, 1.5, c)
        self.running_mean = rng.uniform(0.3, 0.7, c)
        self.running_var = rng.uniform(3.0, 5.0, c)
        self.moved = (5 if training else 3) * self.x.size * (4 if dtype == "float32" else 2)

    @property
    def layout(self) -> str:
        rank = self.x.ndim
        return ("NHWC" if rank == 4 else "NDHWC") if self.channels_last else (
            "NCHW" if rank == 4 else "NCDHW")

    def reference(self, x: np.ndarray, dy: np.ndarray) -> tuple:
        """float64 gradients of the inputs as rounded to the dtype (x, dy given NC... order)."""
        axes = (0, *range(2, x.ndim))
        mean = x.mean(axis=axes) if self.training else self.running_mean
        var = x.var(axis=axes) if self.training else self.running_var
        return reference.batch_norm_grad(dy, x, self.weight, mean, var, EPSILON, "NCHW"
                                         if x.ndim == 4 else "NCDHW", self.training)


def error_units(outputs: tuple, expected: tuple, dtype: str) -> float:
    worst = 0.0
    for i, (got, want) in enumerate(zip(outputs, expected)):
        scale = max(float(np.max(np.abs(want))), 1e-30) * UNIT[dtype if i == 0 else "float32"]
        worst = max(worst, float(np.max(np.abs(got - want))) / scale)
    return worst


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emulated", action="store_true",
                        help="no GPU: the core on the host emulator, PyTorch's CPU kernel")
    parser.add_argument("--shapes", help="comma-separated shape names (default: all)")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu_peers")
    parser.add_argument("--core", type=Path, help="the core's C library (default: build/gpu_peers/)")
    args = parser.parse_args(argv)

    backend = backends.make(args.emulated, load_core(args.emulated, args.core))
    table = EMULATED_SHAPES if args.emulated else SHAPES
    names = args.shapes.split(",") if args.shapes else list(table)
    rows = []
    print(backend.describe(), flush=True)
    print("| shape | layout | dtype | mode | impl | us | copy/impl | peer/ours | error (units) "
          "| 10 runs same bits |\n|---|---|---|---|---|---|---|---|---|---|", flush=True)
    seed = 0
    for name in names:
        for channels_last in (True, False):
            for dtype in args.dtypes.split(","):
                for training in (True, False):
                    seed += 1
                    case = Case(name, table[name], channels_last, dtype, training, seed)
                    rows += run_cell(backend, case)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / ("peers_emulated.json" if args.emulated else "peers.json")
    out.write_text(json.dumps({"device": backend.describe(), "rows": rows}, indent=1))
    checked = [r for r in rows if is_ours(r["impl"])]
    failures = [r for r in checked
                if not r["deterministic"] or r["error_units"] > r["error_bound"]]
    print(f"wrote {out}")
    print(f"gpu peers: {len(checked) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def is_ours(impl: str) -> bool:
    """The core's default kernels ("ours") or one of its variants ("ours+NAME")."""
    return impl == "ours" or impl.startswith("ours+")


def run_cell(backend, case: Case) -> list[dict]:
    """Times and checks every implementation on one case; prints and returns its rows."""
    prepared = backend.prepare(case)
    expected = prepared.reference()
    rows, times = [], {}
    for impl, run in prepared.implementations().items():
        if run is None:
            rows.append({"impl": impl, "note": "n/a"})
            continue
        first = backend.snapshot(run())
        same = all(backend.same_bits(run(), first) for _ in range(RUNS - 1))
        times[impl] = backend.median_seconds(run, WARMUP, TIMED)
        rows.append({"impl": impl, "error_units": error_units(backend.to_numpy(first, case),
                                                              expected, case.dtype),
                     "deterministic": same})
    copy = backend.median_seconds(prepared.copy, WARMUP, TIMED)
    for row in rows:
        row.update({"shape": case.name, "layout": case.layout, "dtype": case.dtype,
                    "mode": "train" if case.training else "infer",
                    # Ours must stay within one unit of the best peer, or 4 units alone.
                    "error_bound": max([4.0] + [r["error_units"] + 1 for r in rows
                                                if not is_ours(r["impl"]) and "error_units" in r])})
        if row["impl"] in times and times[row["impl"]]:
            row["us"] = times[row["impl"]] * 1e6
            row["copy_ratio"] = copy / times[row["impl"]] if copy else None
            if row["impl"] != "ours" and times.get("ours"):
                row["peer_over_ours"] = times[row["impl"]] / times["ours"]
        print(format_row(row), flush=True)
    return rows


def format_row(row: dict) -> str:
    def number(key: str, digits: str) -> str:
        return format(row[key], digits) if row.get(key) is not None else "-"
    cells = [row["shape"], row["layout"], row["dtype"], row["mode"], row["impl"],
             number("us", ".1f"), number("copy_ratio", ".2f"), number("peer_over_ours", ".2f"),
             number("error_units", ".2f"),
             row.get("note") or ("yes" if row.get("deterministic") else "NO")]
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    sys.exit(main(sys.argv[1:]))
