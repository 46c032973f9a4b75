"""Compiles a one-file C++ shared library with the system compiler, cached by content hash.

Used for the streaming-limit kernel only (the op library has its own build). The cache key
covers the source, the flags, the compiler's version and the CPU (``-march=native`` output is
only valid on the CPU it was built for), so a stale or foreign build is never loaded. Builds go
to a temporary name and are renamed into place, so concurrent runs cannot load a half-written
file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ("-std=c++17", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
CACHE_ENV = "TF_FBN_OPS_BENCH_CACHE"


class BuildError(RuntimeError):
    """The compiler is missing or rejected the source."""


def find_compiler() -> str:
    """$CXX if set, else c++, else g++."""
    for candidate in (os.environ.get("CXX"), "c++", "g++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate) or candidate
    raise BuildError("no C++ compiler found (set CXX, or install c++/g++)")


def compiler_version(compiler: str) -> str:
    """First line of ``compiler --version``."""
    result = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    return (result.stdout or result.stderr).splitlines()[0] if result.returncode == 0 else "?"


def cache_dir() -> Path:
    """$TF_FBN_OPS_BENCH_CACHE, else a per-user directory under the system temp dir."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"tf_fbn_ops_bench_{os.getuid()}"


def _cpu_signature() -> bytes:
    try:
        with open("/proc/cpuinfo", "rb") as f:
            lines = [ln for ln in f.read().splitlines()
                     if ln.startswith((b"model name", b"flags", b"cpu family", b"model\t"))]
    except OSError:
        return b""
    return b"\n".join(sorted(set(lines)))


def _cache_key(source: Path, compiler: str) -> str:
    digest = hashlib.sha256()
    for part in (source.read_bytes(), " ".join(FLAGS).encode(), compiler.encode(),
                 compiler_version(compiler).encode(), _cpu_signature()):
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def build(source: Path) -> Path:
    """Path of the shared library built from ``source``, compiling it on a cache miss.

    Raises:
      BuildError: no compiler, or the compilation failed (its output is in the message).
    """
    compiler = find_compiler()
    target = cache_dir() / f"{source.stem}-{_cache_key(source, compiler)}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    command = [compiler, *FLAGS, str(source), "-o", str(partial)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(f"{' '.join(command)} failed:\n{result.stderr.strip()}")
    os.replace(partial, target)
    return target
