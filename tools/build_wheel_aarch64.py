"""`make wheel-aarch64`: the Linux AArch64 wheel, cross-compiled on this x86-64 machine.

TensorFlow publishes its AArch64 wheel as `tensorflow` (CPU kernels only). It is installed into
an arm64 Debian root (tools/debian_root.py; qemu runs it), where its own tf.sysconfig describes
it (build_support/target_tensorflow.py); Debian's g++-aarch64-linux-gnu then compiles against
its headers and links against its libraries in that root, and auditwheel tags the wheel for
TensorFlow's own glibc floor (manylinux_2_27_aarch64). CPU kernels and XLA (lowerings and
custom calls); no CUDA. The CPU core has one copy there, the portable one, which GCC compiles
to NEON with the same operations in the same order as every x86-64 copy.

Usage: python tools/build_wheel_aarch64.py [--tensorflow VERSION] [--out DIR]
(root; network access to Debian's archive and PyPI; installs the cross tools with apt).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_wheel  # noqa: E402
from debian_root import WORK, DebianRoot, RootError, run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Debian 12's CPython 3.11: TensorFlow 2.21 has an AArch64 wheel for it.
ARM64_ROOT = DebianRoot("arm64", "bookworm", "arm64")
CROSS = {"CXX": "aarch64-linux-gnu-g++", "OBJDUMP": "aarch64-linux-gnu-objdump"}
# The target's TensorFlow, apart from any environment a test makes there.
TARGET_VENV = "/opt/tensorflow-target"


def host_tensorflow_version() -> str:
    for name in ("tensorflow-cpu", "tensorflow"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise SystemExit("no TensorFlow here to match: run from the project's environment")


def describe_target(version: str, log) -> Path:
    """TensorFlow `version` in the arm64 root and its description, with the root as sysroot."""
    made = ARM64_ROOT.ensure(log)
    if made:
        print(f"arm64 root made in {made:.0f} s", flush=True)
    script = ARM64_ROOT.host_path("/tmp/target_tensorflow.py")
    shutil.copy(ROOT / "build_support" / "target_tensorflow.py", script)
    with ARM64_ROOT.mounted(log):
        ARM64_ROOT.inside(
            f"set -e; [ -x {TARGET_VENV}/bin/python ] || python3 -m venv {TARGET_VENV}; "
            f"{TARGET_VENV}/bin/pip install -q 'tensorflow=={version}'; "
            f"{TARGET_VENV}/bin/python /tmp/target_tensorflow.py > /tmp/tensorflow.json", log)
    description = json.loads(ARM64_ROOT.host_path("/tmp/tensorflow.json").read_text())
    description["sysroot"] = str(ARM64_ROOT.path)
    path = WORK / "arm64-tensorflow.json"
    path.write_text(json.dumps(description, indent=1))
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensorflow", default=None,
                        help="TensorFlow release to build for (default: this environment's)")
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    args = parser.parse_args(argv)
    missing = [p for p, tool in (("g++-aarch64-linux-gnu", CROSS["CXX"]),
                                 ("binutils-aarch64-linux-gnu", CROSS["OBJDUMP"]))
               if shutil.which(tool) is None]
    if missing:
        subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True)
    WORK.mkdir(parents=True, exist_ok=True)
    log_path = WORK / "arm64-wheel.log"
    with log_path.open("w") as log:
        try:
            target = describe_target(args.tensorflow or host_tensorflow_version(), log)
        except RootError as error:
            print(f"build_wheel_aarch64: {error} (log: {log_path})", file=sys.stderr)
            return 1
    os.environ.update(CROSS)
    build_wheel.build(sys.executable, args.out.resolve(), "machine", target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
