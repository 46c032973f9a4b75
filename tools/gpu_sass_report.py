"""The CUDA core's machine code (SASS) for one architecture, read without a GPU: per kernel,
its global loads and stores by width, as the GPU will run them. A report, not a test
(tools/gpu_code_check.py holds the rules, on the PTX); it shows what the PTX cannot, such as a
store's memory-model strength (`STG.E.128` against `STG.E.128.STRONG.SM`).

NVIDIA's cuobjdump and nvdisasm come from PyPI where they are not on PATH (this machine's CUDA
install has neither), installed once into build/nvidia-tools/<tool>.

Usage: python tools/gpu_sass_report.py NVCC ARCH SOURCE...   (ARCH: e.g. 90)
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from build_support.build_description import NVCC_FLAGS as LANGUAGE_FLAGS  # noqa: E402
from gpu_code_check import short_name  # noqa: E402

# The library's flags for CUDA sources (the build description's) at the test programs' -O3.
NVCC_FLAGS = [*LANGUAGE_FLAGS, "-O3", "-I."]
TOOLS_DIR = ROOT / "build" / "nvidia-tools"
PACKAGES = {"cuobjdump": "nvidia-cuda-cuobjdump==13.2.51", "nvdisasm": "nvidia-cuda-nvdisasm"}

FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$", re.M)
GLOBAL_ACCESS = re.compile(r"\b((?:LDG|STG)\.E(?:\.[A-Z0-9]+)*)\b")


def nvidia_tool(name: str) -> Path:
    """The tool on PATH, or from its PyPI package in TOOLS_DIR (installed on first use)."""
    if found := shutil.which(name):
        return Path(found)
    target = TOOLS_DIR / name  # one per package: pip skips a target's existing nvidia/ folder
    existing = list(target.rglob(f"bin/{name}"))
    if not existing:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", "--no-deps", "--target", str(target),
                        PACKAGES[name]], check=True, timeout=600)
        existing = list(target.rglob(f"bin/{name}"))
    if not existing:
        sys.exit(f"{PACKAGES[name]} installed no bin/{name}")
    return existing[0]


def accesses_per_kernel(sass: str) -> dict[str, collections.Counter]:
    """Global load and store instructions of each kernel in cuobjdump -sass output."""
    starts = [(m.end(), m.group(1)) for m in FUNCTION.finditer(sass)]
    kernels = {}
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(sass)
        kernels[name] = collections.Counter(GLOBAL_ACCESS.findall(sass[start:end]))
    return kernels


def main() -> int:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    nvcc, arch, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    cuobjdump, nvdisasm = nvidia_tool("cuobjdump"), nvidia_tool("nvdisasm")
    env = dict(os.environ, NVDISASM_PATH=str(nvdisasm.parent),
               PATH=f"{nvdisasm.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with tempfile.TemporaryDirectory() as scratch:
        for source in sources:
            cubin = Path(scratch) / (Path(source).stem + ".cubin")
            subprocess.run([nvcc, *NVCC_FLAGS, "-DNDEBUG", f"-arch=sm_{arch}", "-cubin", source,
                            "-o", str(cubin)], check=True, timeout=900)
            sass = subprocess.run([str(cuobjdump), "-sass", str(cubin)], check=True, env=env,
                                  capture_output=True, text=True, timeout=600).stdout
            kernels = accesses_per_kernel(sass)
            print(f"{source}: {len(kernels)} kernels, sm_{arch}; global loads and stores")
            for name in sorted(kernels, key=short_name):
                counts = ", ".join(f"{n} {op}" for op, n in sorted(kernels[name].items()))
                print(f"  {short_name(name):<44} {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
