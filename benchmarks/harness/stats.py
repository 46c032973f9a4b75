"""Summary statistics of the per-round samples."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class Summary:
    """Median over rounds and its spread, in microseconds per call."""

    median_us: float
    min_us: float
    max_us: float
    iqr_pct: float  # inter-quartile range as a percentage of the median

    def to_json(self) -> dict:
        return asdict(self)


def summarize(samples_ns: list[float]) -> Summary | None:
    """Summary of per-call samples given in nanoseconds; None when there are none."""
    if not samples_ns:
        return None
    us = np.asarray(samples_ns, dtype=np.float64) / 1e3
    median = float(np.median(us))
    q1, q3 = np.percentile(us, [25, 75])
    return Summary(median_us=median, min_us=float(us.min()), max_us=float(us.max()),
                   iqr_pct=float((q3 - q1) / median * 100.0) if median > 0 else 0.0)


def median_ns(values: list[int]) -> float:
    """Median of one batch's per-call times."""
    return float(np.median(np.asarray(values, dtype=np.float64)))
