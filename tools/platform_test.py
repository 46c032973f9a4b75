"""`make platform-test`: the wheel installed the way a user installs it, in the environments it
is tagged for that this machine can stand up, and checked there from outside the checkout.

Environments (all by default, or the ones named):
  pythons     every CPython the wheel is tagged for that this machine has (pyenv's or
              python3.X on PATH), each in a new virtual environment with `WHEEL[tensorflow-cpu]`
  cuda-build  `WHEEL[tensorflow]`: TensorFlow's CUDA build, on this machine's Python; its GPU
              kernels must register (no GPU is needed for that)
  debian13    a Debian 13 (trixie) root made by debootstrap (cached in build/platform/), its
              own python3.13, a virtual environment with `WHEEL[tensorflow-cpu]`
  sdist       the source distribution beside the wheel (make sdist), built by pip in a new
              environment with tensorflow-cpu of the wheel's minor
In each: `python -m tf_fbn_ops info` and `python -m tf_fbn_ops check` (every op, dtype, layout
and mode against TensorFlow's op and a float64 oracle, run to run, in place, under
jit_compile=True, and a Keras 3 training step against Keras' layer) must pass. Each
environment's output goes to build/platform/ENV.log; the summary gives setup and check times.

Usage: python tools/platform_test.py WHEEL [ENV ...]
Needs network access to PyPI (and to Debian's archive for debian13, and root for its chroot).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "platform"
DEBIAN_SUITE = "trixie"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
CHECKS = ["-m", "tf_fbn_ops", "check"]


class Failed(Exception):
    pass


def run(command: list[str], log, **kwargs) -> None:
    log.write("$ " + " ".join(command) + "\n")
    log.flush()
    result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, **kwargs)
    if result.returncode != 0:
        raise Failed(f"exit {result.returncode}: {' '.join(command)}")


def wheel_pythons(wheel: Path) -> list[str]:
    """The X.Y of every cpXY tag in the wheel's file name."""
    python_tag = wheel.name.split("-")[-3]
    return [f"3.{tag[3:]}" for tag in python_tag.split(".") if tag.startswith("cp3")]


def find_python(version: str) -> str | None:
    """A CPython X.Y on this machine: pyenv's, else python3.X on PATH."""
    pyenv = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python3")))
    if pyenv:
        return pyenv[-1]
    return shutil.which(f"python{version}")


def in_venv(python: str, venv: Path, requirement: str, log, extra: list[str]) -> tuple:
    """A new virtual environment with `requirement` installed; returns (its python, seconds)."""
    start = time.time()
    shutil.rmtree(venv, ignore_errors=True)
    run([python, "-m", "venv", str(venv)], log)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", requirement], log)
    for code in extra:
        run([str(venv / "bin" / "python"), "-c", code], log)
    return str(venv / "bin" / "python"), time.time() - start


def check(python: str, log, prefix: list[str] | None = None) -> float:
    """info and check, from a folder outside the checkout; returns the seconds they took."""
    start = time.time()
    with tempfile.TemporaryDirectory() as cwd:
        for arguments in (["-m", "tf_fbn_ops", "info"], CHECKS):
            if prefix:  # inside a chroot: its own /tmp
                run([*prefix, "/bin/sh", "-c", f"cd /tmp && {python} {' '.join(arguments)}"],
                    log)
            else:
                run([python, *arguments], log, cwd=cwd)
    return time.time() - start


CUDA_BUILD = ("import tensorflow as tf, tf_fbn_ops; from tensorflow.python.framework import "
              "kernels; tf_fbn_ops.load_library(); "
              "assert tf.sysconfig.get_build_info()['is_cuda_build'], 'not the CUDA build'; "
              "devices = {k.device_type for k in kernels.get_registered_kernels_for_op("
              "'FbnFusedBatchNormGradV3').kernel}; print('kernels for', sorted(devices)); "
              "assert 'GPU' in devices, 'no GPU kernels registered'")


def env_pythons(wheel: Path, log) -> list[str]:
    """Each CPython on its own: one that fails does not keep the others from running."""
    lines, failures = [], []
    for version in wheel_pythons(wheel):
        python = find_python(version)
        if python is None:
            lines.append(f"CPython {version}: not on this machine, not run")
            continue
        try:
            venv_python, setup = in_venv(python, WORK / f"venv-{version}",
                                         f"{wheel}[tensorflow-cpu]", log, [])
            checked = check(venv_python, log)
        except Failed as error:
            failures.append(f"CPython {version}: {error}")
            continue
        lines.append(f"CPython {version} ({python}): setup {setup:.0f} s, check {checked:.0f} s")
    if failures:
        raise Failed("; ".join(failures) + (f" (passed: {'; '.join(lines)})" if lines else ""))
    return lines


def env_cuda_build(wheel: Path, log) -> list[str]:
    venv_python, setup = in_venv(sys.executable, WORK / "venv-cuda-build",
                                 f"{wheel}[tensorflow]", log, [CUDA_BUILD])
    checked = check(venv_python, log)
    return [f"tensorflow (CUDA build), CPython {sys.version.split()[0]}: setup {setup:.0f} s, "
            f"check {checked:.0f} s"]


def env_debian13(wheel: Path, log) -> list[str]:
    if os.geteuid() != 0:
        raise Failed("debian13 needs root (debootstrap and chroot)")
    root = WORK / "debian13"
    start = time.time()
    if not (root / "usr" / "bin" / "python3").exists():
        if shutil.which("debootstrap") is None:
            run(["apt-get", "install", "-y", "-q", "debootstrap"], log)
        partial = WORK / "debian13.partial"
        shutil.rmtree(partial, ignore_errors=True)
        run(["debootstrap", "--variant=minbase",
             "--include=python3,python3-venv,python3-pip,ca-certificates", DEBIAN_SUITE,
             str(partial), DEBIAN_MIRROR], log)
        partial.rename(root)
    made = time.time() - start
    # The host's resolver and certificate bundle (with a proxy's CA, where there is one) as the
    # root's own: pip reads the system's store there.
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    bundle = root / "etc" / "ssl" / "certs" / "ca-certificates.crt"
    bundle.unlink(missing_ok=True)
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", bundle)
    shutil.copy(wheel, root / "tmp" / wheel.name)
    mounts = [root / "proc", root / "dev"]
    run(["mount", "-t", "proc", "proc", str(mounts[0])], log)
    try:
        run(["mount", "--bind", "/dev", str(mounts[1])], log)
        try:
            inside = ["chroot", str(root), "/usr/bin/env", "-i", "HOME=/root",
                      "PATH=/usr/local/bin:/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK=1",
                      "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
                      "PIP_CERT=/etc/ssl/certs/ca-certificates.crt"]
            start = time.time()
            run([*inside, "/bin/sh", "-c", "rm -rf /opt/venv && python3 -m venv /opt/venv && "
                 f"/opt/venv/bin/pip install -q '/tmp/{wheel.name}[tensorflow-cpu]'"], log)
            setup = time.time() - start
            run([*inside, "/bin/sh", "-c", "cat /etc/debian_version; python3 --version"], log)
            checked = check("/opt/venv/bin/python", log, prefix=inside)
        finally:
            run(["umount", str(mounts[1])], log)
    finally:
        run(["umount", str(mounts[0])], log)
    return [f"Debian 13 ({DEBIAN_SUITE}), its CPython 3.13: root {made:.0f} s (0 when cached), "
            f"setup {setup:.0f} s, check {checked:.0f} s"]


def env_sdist(wheel: Path, log) -> list[str]:
    """The source distribution beside the wheel, built by pip in a new environment that has
    TensorFlow (CPU kernels only, TF_FBN_OPS_CUDA=0: a platform without our wheel has no CUDA
    build of TensorFlow either, or an nvcc of its own)."""
    version = wheel.name.split("-")[1]
    sdist = wheel.with_name(f"tf_fbn_ops-{version}.tar.gz")
    if not sdist.is_file():
        raise Failed(f"no {sdist.name} beside the wheel (make sdist)")
    tensorflow = f"tensorflow-cpu=={tensorflow_version(wheel)}"
    venv = WORK / "venv-sdist"
    venv_python, setup = in_venv(sys.executable, venv, tensorflow, log, [])
    start = time.time()
    run([venv_python, "-m", "pip", "install", "-q", "--no-build-isolation", str(sdist)], log,
        env=dict(os.environ, TF_FBN_OPS_CUDA="0"))
    built = time.time() - start
    checked = check(venv_python, log)
    return [f"{sdist.name} on CPython {sys.version.split()[0]} with {tensorflow}: setup "
            f"{setup:.0f} s, build {built:.0f} s, check {checked:.0f} s"]


def tensorflow_version(wheel: Path) -> str:
    """The TensorFlow release the wheel's extras pin (its minor, as 2.21.*)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        for line in archive.read(name).decode().splitlines():
            if line.startswith("Requires-Dist: tensorflow-cpu"):
                low = line.split(">=")[1].split(";")[0].split(",")[0].strip()
                return low.rsplit(".", 1)[0] + ".*" if low.count(".") == 2 else low + ".*"
    raise Failed("the wheel pins no TensorFlow")


ENVIRONMENTS = {"pythons": env_pythons, "cuda-build": env_cuda_build, "debian13": env_debian13,
                "sdist": env_sdist}


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    wheel = Path(argv[0]).resolve()
    if not zipfile.is_zipfile(wheel):
        print(f"platform_test: {wheel} is not a wheel")
        return 2
    names = argv[1:] or list(ENVIRONMENTS)
    unknown = [n for n in names if n not in ENVIRONMENTS]
    if unknown:
        print(f"platform_test: unknown environment {unknown} ({', '.join(ENVIRONMENTS)})")
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in names:
        path = WORK / f"{name}.log"
        with path.open("w") as log:
            try:
                for line in ENVIRONMENTS[name](wheel, log):
                    print(f"PASS {name}: {line}", flush=True)
            except Failed as error:
                failed += 1
                print(f"FAIL {name}: {error} (log: {path})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
