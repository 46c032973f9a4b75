"""How the library compiles its core (cc/core/, no TensorFlow) and where each object is kept.

setup.py compiles the library with these commands and names; the Makefile's test programs (the
core tests, core-bench, the FFI library, the sanitized core tests) take the core's objects from
here too (``python -m build_support.library_objects release|sanitize SOURCE COPY``), so a
``make test`` compiles the core once per flag set and its tests run the objects the library
links. An object is named by a hash of all its bits depend on, so builds of other settings keep
their own; it is recompiled when its source, any header or setup.py is newer.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Callable

from build_support import build_description

ROOT = Path(__file__).resolve().parent.parent
# The library's flags, every file; -fPIC for the shared library.
COMMON_FLAGS = [*build_description.LANGUAGE_FLAGS, *build_description.RELEASE_FLAGS,
                *build_description.EXACT_FLAGS, "-fPIC", f"-I{ROOT}"]
# The core is our code alone: warnings on.
CORE_WARNING_FLAGS = ["-Wall", "-Wextra"]
SANITIZE_VARIABLE = "TF_FBN_OPS_SANITIZE"


def sanitizing() -> bool:
    return os.environ.get(SANITIZE_VARIABLE) == "1"


def sanitize_flags(core: bool = False) -> list[str]:
    """ASan for every file of a sanitized build, UBSan too for the core (TensorFlow's headers
    are not UBSan-clean)."""
    if not sanitizing():
        return []
    return build_description.ASAN_FLAGS + (build_description.UBSAN_FLAGS if core else [])


def compiler() -> list[str]:
    return shlex.split(os.environ.get("CXX", "g++"))


def core_command(cxx: list[str]) -> list[str]:
    """The compile command of a core source, without -c and -o."""
    return [*cxx, *COMMON_FLAGS, *CORE_WARNING_FLAGS, *sanitize_flags(core=True)]


def tool_version(command: list[str]) -> str:
    """What `command --version` prints, to tell compilers apart in the build key."""
    try:
        result = subprocess.run([*command, "--version"], capture_output=True, text=True)
    except OSError as e:
        return f"unavailable: {e}"
    return (result.stdout or result.stderr).strip()


def build_key(parts: dict[str, object]) -> str:
    """A short hash of everything that changes what is built from `parts`."""
    text = "\n".join(f"{name}={parts[name]!r}" for name in sorted(parts))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_folder() -> Path:
    """Where objects stay between builds: the editable install's (`make lib`), which a wheel
    built next shares, or the sanitized build's (`make sanitize`)."""
    if sanitizing():
        return ROOT / "build" / "sanitize" / "temp"
    return ROOT / "build" / f"temp.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"


def object_path(folder: Path, source: str, command: list[str], compiler_version: str,
                tensorflow_version: str | None = None) -> Path:
    """The object of `source` compiled by `command`; TensorFlow's version for files that read
    its headers."""
    key = build_key({"command": command, "compiler": compiler_version,
                     "tensorflow": tensorflow_version})
    return folder / f"{source.replace('/', '_')}-{key}.o"


def stale(target: Path, inputs: list[Path]) -> bool:
    """True when target is missing or older than any of its inputs."""
    if not target.exists():
        return True
    built = target.stat().st_mtime
    return any(p.stat().st_mtime > built for p in inputs)


@functools.cache
def _our_headers() -> tuple[Path, ...]:
    """Every header under cc/, listed once per process (a build asks for each object)."""
    return (*(ROOT / "cc").rglob("*.h"), *(ROOT / "cc").rglob("*.cuh"))


def inputs_of(source: str) -> list[Path]:
    """What an object is rebuilt for: its source, any of our headers, the build's own code."""
    return [ROOT / source, *_our_headers(), ROOT / "setup.py", Path(__file__)]


def run_printed(command: list[str]) -> None:
    print(shlex.join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def compile_object(command: list[str], source: str, obj: Path, force: bool = False,
                   run: Callable[[list[str]], None] = run_printed) -> Path:
    """Compiles `source` into `obj` unless it is up to date; no half-written object stays."""
    if force or stale(obj, inputs_of(source)):
        obj.parent.mkdir(parents=True, exist_ok=True)
        partial = obj.with_suffix(f".{os.getpid()}.part")
        run([*command, "-c", str(ROOT / source), "-o", str(partial)])
        partial.replace(obj)
    return obj


def core_object(source: str) -> Path:
    """A core source's object as the library builds it now, compiled if stale."""
    cxx = compiler()
    command = core_command(cxx)
    obj = object_path(default_folder(), source, command, tool_version(cxx))
    return compile_object(command, source, obj)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("release", "sanitize"):
        raise SystemExit("usage: python -m build_support.library_objects release|sanitize "
                         "SOURCE COPY")
    flavor, source, copy = argv
    if source not in build_description.sources("core"):
        raise SystemExit(f"{source} is not a source of the core")
    os.environ.pop(SANITIZE_VARIABLE, None)
    if flavor == "sanitize":
        os.environ[SANITIZE_VARIABLE] = "1"
    # A copy, dated now: Make's target is then newer than what it was made from.
    Path(copy).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(core_object(source), copy)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
