"""results.png: each implementation's time per call relative to the shim, per thread count."""

from __future__ import annotations

from pathlib import Path

import numpy as np

COMPARED = ("tf_eigen", "tf_onednn", "torch", "stream")


def _relative_times(rows: list[dict], name: str) -> np.ndarray:
    """Implementation time / shim time per row; NaN where either is missing."""
    values = []
    for row in rows:
        medians = row["medians_us"]
        shim, other = medians.get("shim"), medians.get(name)
        values.append(other / shim if shim and other else np.nan)
    return np.asarray(values, dtype=np.float64)


def _panel(axis, rows: list[dict], threads: int, names: list[str]) -> None:
    """Grouped horizontal bars drawn from 1 (the shim): right of it the shim is faster."""
    positions = np.arange(len(rows))
    height = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        relative = _relative_times(rows, name)
        offsets = positions - 0.4 + (k + 0.5) * height
        axis.barh(offsets, relative - 1.0, height, left=1.0, label=name)
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set_xscale("log")
    # Plain "0.5x", "2x" labels instead of powers of ten.
    axis.xaxis.set_major_formatter(lambda value, _: f"{value:g}x")
    axis.xaxis.set_minor_formatter(lambda value, _: "")
    axis.set_yticks(positions, [f"{r['label']}" for r in rows], fontsize=7)
    axis.invert_yaxis()
    axis.set_title(f"{threads} thread(s)")
    axis.set_xlabel("time per call / shim's (log; > 1: the shim is faster)")
    axis.grid(axis="x", which="both", alpha=0.3)


def plot(rows: list[dict], path: Path) -> str | None:
    """Writes the PNG; returns why it was skipped (matplotlib missing, nothing to plot)."""
    try:
        import matplotlib  # noqa: PLC0415 - optional, benchmark-only dependency

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return "matplotlib is not installed: results.png skipped"
    groups: dict[int, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["threads"], []).append(row)
    names = [n for n in COMPARED if any(n in r["medians_us"] for r in rows)]
    if not groups or not names or not any("shim" in r["medians_us"] for r in rows):
        return "nothing to plot (no shim timings): results.png skipped"
    tallest = max(len(g) for g in groups.values())
    figure, axes = plt.subplots(1, len(groups), squeeze=False, sharey=False,
                                figsize=(7.5 * len(groups), 1.5 + 0.3 * tallest * len(names) / 2))
    for axis, (threads, group) in zip(axes[0], sorted(groups.items())):
        _panel(axis, group, threads, names)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper center", ncol=len(names), fontsize=8)
    figure.tight_layout(rect=(0, 0, 1, 0.94))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None
