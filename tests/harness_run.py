"""The environment of a `python -m harness` subprocess (the research benchmark harness lives in
benchmarks/harness/, beside the package, and runs from a checkout)."""

from __future__ import annotations

import os
from pathlib import Path

HARNESS_FOLDER = str(Path(__file__).resolve().parents[1] / "benchmarks")


def harness_environment(**extra: str) -> dict:
    """This process's environment with the harness importable, plus `extra`."""
    path = os.pathsep.join(p for p in (HARNESS_FOLDER, os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)
