"""What the results were measured on and how: CPU, cores, versions, date, command, commit."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np


def cpu_model() -> str:
    """The "model name" of /proc/cpuinfo, with family and model numbers (KVM guests often
    report only a generic name)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or "unknown"
    name = fields.get("model name", "unknown")
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']} model {fields.get('model', '?')})"
    return name


def git_commit(root: Path) -> str | None:
    """HEAD of the checkout holding the package, with "-dirty" for local changes; None when
    the package is not in a git checkout."""
    def git(*args: str) -> str | None:
        try:
            result = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                    text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    return commit


def describe(argv: list[str]) -> dict:
    """Machine and run facts for results.json (framework versions come from the workers)."""
    root = Path(__file__).resolve().parents[2]
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        # timezone.utc rather than datetime.UTC: the package supports Python 3.9.
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(  # noqa: UP017
            timespec="seconds"),
        # No interpreter path: results are committed and must not name this machine's folders.
        "command": shlex.join(["python", "-m", "harness", *argv]),
        "git_commit": git_commit(root),
    }
