"""Running a snippet of Python in a fresh interpreter: for what must start from a clean process
(imports, SavedModels loaded elsewhere, flags TensorFlow reads once at start)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Runs the (dedented) code with TensorFlow's logging quiet (unless `env` says otherwise) and
    `env` added; never raises for the snippet's own failure (check returncode and stderr)."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    environment.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=environment, timeout=300)
