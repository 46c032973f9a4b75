"""`make platform-test`: the wheel installed the way a user installs it, in the environments it
is tagged for that this machine can stand up, and checked there from outside the checkout.

Environments (all by default, or the ones named):
  pythons     every CPython the wheel is tagged for that this machine has (pyenv's or
              python3.X on PATH), each in a new virtual environment with `WHEEL[tensorflow-cpu]`
  cuda-build  `WHEEL[tensorflow]`: TensorFlow's CUDA build, on this machine's Python; its GPU
              kernels must register (no GPU is needed for that)
  debian13    a Debian 13 (trixie) root made by debootstrap (cached in build/platform/), its
              own python3.13, a virtual environment with `WHEEL[tensorflow-cpu]`
  arm64       a Debian 12 arm64 root run by qemu (the one make wheel-aarch64 builds in), its
              python3.11, the AArch64 wheel beside WHEEL with `[tensorflow]` (TensorFlow's
              AArch64 wheel); then tools/op_digest.py there and with WHEEL here: every case's
              bits must match
  sdist       the source distribution beside the wheel (make sdist), built by pip in a new
              environment with tensorflow-cpu of the wheel's minor
In each: `python -m tf_fbn_ops info` and `python -m tf_fbn_ops check` (every op, dtype, layout
and mode against TensorFlow's op and a float64 oracle, run to run, in place, under
jit_compile=True, and a Keras 3 training step against Keras' layer) must pass. Each
environment's output goes to build/platform/ENV.log; the summary gives setup and check times.

Usage: python tools/platform_test.py WHEEL [ENV ...]
Needs network access to PyPI (and to Debian's archive for debian13 and arm64, and root for
their chroots).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from debian_root import WORK, DebianRoot, run  # noqa: E402
from debian_root import RootError as Failed  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ["-m", "tf_fbn_ops", "check"]


ARM64 = DebianRoot("arm64", "bookworm", "arm64")  # the one build_wheel_aarch64.py builds in


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


def check(python: str, log, root: DebianRoot | None = None) -> float:
    """info and check, from a folder outside the checkout; returns the seconds they took."""
    start = time.time()
    with tempfile.TemporaryDirectory() as cwd:
        for arguments in (["-m", "tf_fbn_ops", "info"], CHECKS):
            if root:  # inside a chroot: its own /tmp
                root.inside(f"cd /tmp && {python} {' '.join(arguments)}", log)
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


DEBIAN13 = DebianRoot("debian13", "trixie")


def checked_in_root(root: DebianRoot, wheel: Path, extra: str, log, then=None) -> tuple:
    """The root (made once), a new /opt/venv there with WHEEL[extra], its system's versions in
    the log, info and check inside; then(root) while it is still mounted. Returns the seconds
    of making the root (0 when cached), of the setup and of the check, and then's result."""
    made = root.ensure(log)
    shutil.copy(wheel, root.host_path(f"/tmp/{wheel.name}"))
    with root.mounted(log):
        start = time.time()
        root.inside("rm -rf /opt/venv && python3 -m venv /opt/venv && "
                    f"/opt/venv/bin/pip install -q '/tmp/{wheel.name}[{extra}]'", log)
        setup = time.time() - start
        root.inside("uname -m; cat /etc/debian_version; python3 --version", log)
        checked = check("/opt/venv/bin/python", log, root=root)
        return made, setup, checked, then(root) if then else None


def env_debian13(wheel: Path, log) -> list[str]:
    made, setup, checked, _ = checked_in_root(DEBIAN13, wheel, "tensorflow-cpu", log)
    return [f"Debian 13 ({DEBIAN13.suite}), its CPython 3.13: root {made:.0f} s (0 when "
            f"cached), setup {setup:.0f} s, check {checked:.0f} s"]


def aarch64_wheel(wheel: Path) -> Path:
    """The Linux AArch64 wheel of the same version beside `wheel` (make wheel-aarch64)."""
    version = wheel.name.split("-")[1]
    found = sorted(wheel.parent.glob(f"tf_fbn_ops-{version}-*_aarch64.whl"),
                   key=lambda p: p.stat().st_mtime)
    if not found:
        raise Failed(f"no AArch64 wheel of {version} beside {wheel.name} (make wheel-aarch64)")
    return found[-1]


def op_digest(python: str, log, root: DebianRoot | None = None) -> list[str]:
    """tools/op_digest.py's lines, run by `python` (inside `root` when given)."""
    if root:
        shutil.copy(ROOT / "tools" / "op_digest.py", root.host_path("/tmp/op_digest.py"))
        out = root.host_path("/tmp/op_digest.txt")
        root.inside(f"cd /tmp && {python} /tmp/op_digest.py > /tmp/op_digest.txt", log)
    else:
        out = WORK / "op_digest_x86_64.txt"
        with out.open("w") as f, tempfile.TemporaryDirectory() as cwd:
            log.write(f"$ {python} tools/op_digest.py > {out}\n")
            if subprocess.run([python, str(ROOT / "tools" / "op_digest.py")], stdout=f,
                              stderr=log, cwd=cwd).returncode != 0:
                raise Failed(f"{python} tools/op_digest.py failed")
    lines = out.read_text().splitlines()
    log.write("\n".join(lines) + "\n")
    return lines


def env_arm64(wheel: Path, log) -> list[str]:
    """TensorFlow's AArch64 wheel and ours in an arm64 root under qemu; then the ops' bits
    there against this machine's x86-64 wheel, case by case."""
    arm_wheel = aarch64_wheel(wheel)

    def timed_digest(root: DebianRoot) -> tuple[list[str], float]:
        start = time.time()
        return op_digest("/opt/venv/bin/python", log, root=root), time.time() - start

    made, setup, checked, (theirs, digest_s) = checked_in_root(ARM64, arm_wheel, "tensorflow",
                                                               log, timed_digest)
    x86_python, _ = in_venv(sys.executable, WORK / "venv-digest", f"{wheel}[tensorflow-cpu]",
                            log, [])
    ours = op_digest(x86_python, log)
    differ = [a for a, b in zip(theirs, ours) if a != b]
    if len(theirs) != len(ours) or differ:
        raise Failed(f"AArch64 bits differ from x86-64's in {len(differ)} of {len(ours) - 1} "
                     f"cases (first: {(differ or theirs)[0]})")
    return [f"AArch64 under qemu, Debian 12 ({ARM64.suite}), its CPython 3.11, {arm_wheel.name}: "
            f"root {made:.0f} s (0 when cached), setup {setup:.0f} s, check {checked:.0f} s",
            f"AArch64 op bits = x86-64 op bits: {ours[-1]} ({digest_s:.0f} s under qemu)"]


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
                "arm64": env_arm64, "sdist": env_sdist}


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
