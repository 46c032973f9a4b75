"""The CUDA toolkit a build compiles its GPU kernels with.

A toolkit on the machine comes first (CUDA_HOME, then the nvcc on PATH). Without one, the build
fetches NVIDIA's own PyPI packages of the CUDA compiler, pinned below, into a folder of its own
under build/: most TensorFlow GPU users have CUDA from pip, not a toolkit, and a build that
quietly left the GPU out would make TensorFlow copy every tensor to the CPU and back.
TF_FBN_OPS_CUDA=0 builds for the CPU only on purpose; =1 makes a missing toolkit an error
instead of a download. TF_FBN_OPS_CUDA_TOOLKIT chooses one explicitly: "pypi" (CUDA 13.0), or
"debian-12.4" (CUDA 12.4 from Debian's packages, build_support/cuda_debian.py: the binary
wheels' toolkit, for a driver floor of R525 instead of R580).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from build_support import build_description, cuda_debian

# The CUDA 13.0 compiler as NVIDIA publishes it on PyPI: the same release as the toolkit these
# packages assemble in /usr/local/cuda on the project's machines, so both builds compile alike.
PYPI_PACKAGES = {
    "nvidia-cuda-nvcc": "13.0.88",     # nvcc, cudafe++, ptxas, fatbinary, nvlink
    "nvidia-cuda-crt": "13.0.88",      # nvcc's crt/ headers
    "nvidia-nvvm": "13.0.88",          # cicc and libdevice
    "nvidia-cuda-runtime": "13.0.96",  # runtime headers and libcudart_static.a
    "nvidia-cuda-cccl": "13.0.85",     # the C++ core library headers nvcc includes
}
# Where the packages put the toolkit inside the install folder.
PYPI_TOOLKIT_SUBDIR = Path("nvidia") / "cu13"
# NVIDIA's oldest Linux driver per CUDA major version (minor-version compatibility): the driver
# floor of a build. cc/runtime/gpu/driver_check.cc holds the same table for the load-time check.
MINIMUM_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@dataclass(frozen=True)
class CudaToolkit:
    """A CUDA toolkit folder and where it was found."""

    root: Path
    origin: str  # "CUDA_HOME", "PATH", "PyPI" or "Debian"
    # Added to every nvcc command (the Debian toolkit's host compiler, say).
    extra_flags: tuple[str, ...] = field(default=())

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    def include_flags(self) -> list[str]:
        """Header folders passed explicitly: NVIDIA's PyPI layout is not the one nvcc.profile
        expects (targets/x86_64-linux/include), and for a regular toolkit they are the same
        folders nvcc already searches."""
        flags = [f"-I{self.root / 'include'}"]
        if (self.root / "include" / "cccl").is_dir():
            flags += ["-isystem", str(self.root / "include" / "cccl")]
        return flags

    def static_runtime(self) -> Path:
        for folder in ("lib64", "lib", "targets/x86_64-linux/lib"):
            if (self.root / folder / "libcudart_static.a").is_file():
                return self.root / folder / "libcudart_static.a"
        raise RuntimeError(f"libcudart_static.a not found under {self.root}")

    def version(self) -> str:
        """The release nvcc reports, e.g. "13.0"."""
        result = subprocess.run([str(self.nvcc), "--version"], capture_output=True, text=True)
        found = re.search(r"release (\d+\.\d+)", result.stdout)
        if not found:
            raise RuntimeError(f"cannot read the CUDA release from `{self.nvcc} --version`")
        return found.group(1)


def find_toolkit(build_dir: Path) -> CudaToolkit | None:
    """The toolkit to build with, or None for a CPU-only build (TF_FBN_OPS_CUDA=0)."""
    mode = os.environ.get("TF_FBN_OPS_CUDA", "")
    if mode == "0":
        return None
    chosen = os.environ.get("TF_FBN_OPS_CUDA_TOOLKIT", "")
    if chosen == "pypi":
        return pypi_toolkit(build_dir)
    if chosen == f"debian-{cuda_debian.RELEASE}":
        # nvcc would otherwise take the host compiler its package suggests (g++-13).
        host = shutil.which(os.environ.get("CXX", "g++").split()[-1]) or "g++"
        return CudaToolkit(cuda_debian.fetch(build_dir), "Debian", ("-ccbin", host))
    if chosen:
        raise RuntimeError(f"TF_FBN_OPS_CUDA_TOOLKIT={chosen}: expected pypi or "
                           f"debian-{cuda_debian.RELEASE}")
    local = _local_toolkit()
    if local is not None:
        return local
    if mode == "1":
        raise RuntimeError("TF_FBN_OPS_CUDA=1, but no nvcc in $CUDA_HOME/bin or on PATH")
    return pypi_toolkit(build_dir)


def _local_toolkit() -> CudaToolkit | None:
    home = os.environ.get("CUDA_HOME")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return CudaToolkit(Path(home), "CUDA_HOME")
    nvcc = shutil.which("nvcc")
    if nvcc:
        # The nvcc on PATH may be a link or a wrapper script: ask it where its toolkit is.
        dryrun = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o",
                                 os.devnull], capture_output=True, text=True)
        for line in (dryrun.stdout + dryrun.stderr).splitlines():
            if line.startswith("#$ TOP="):
                return CudaToolkit(Path(line.split("=", 1)[1].strip()).resolve(), "PATH")
    return None


def pypi_toolkit(build_dir: Path) -> CudaToolkit:
    """The pinned PyPI toolkit, installed once into build_dir/cuda-pypi-<nvcc version>."""
    folder = build_dir / f"cuda-pypi-{PYPI_PACKAGES['nvidia-cuda-nvcc']}"
    toolkit = CudaToolkit(folder / PYPI_TOOLKIT_SUBDIR, "PyPI")
    if not (folder / ".complete").is_file():
        print(f"tf-fbn-ops: no CUDA toolkit on this machine (CUDA_HOME, PATH); fetching the "
              f"CUDA {PYPI_PACKAGES['nvidia-cuda-nvcc']} compiler from PyPI into {folder} "
              "(TF_FBN_OPS_CUDA=0 builds for the CPU only)", file=sys.stderr)
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        pins = [f"{name}=={version}" for name, version in PYPI_PACKAGES.items()]
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-input", "--no-deps", "--only-binary=:all:", "--target", str(partial), *pins],
            capture_output=True, text=True)
        if result.returncode != 0 or not (partial / PYPI_TOOLKIT_SUBDIR / "bin" / "nvcc").is_file():
            raise RuntimeError(
                "tf-fbn-ops: no CUDA toolkit here and the CUDA compiler could not be fetched "
                f"from PyPI ({' '.join(pins)}): {result.stderr.strip()[-400:]}. Install a CUDA "
                "toolkit (CUDA_HOME or nvcc on PATH), allow pip to reach PyPI, or build for the "
                "CPU only with TF_FBN_OPS_CUDA=0")
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
        (folder / ".complete").write_text("\n".join(pins) + "\n")
    return toolkit


def arch_flags() -> list[str]:
    """nvcc's code generation flags: SASS for each requested SM, PTX of the newest for future GPUs."""
    requested = os.environ.get("TF_FBN_OPS_CUDA_ARCHS", "")
    archs = [a.strip() for a in requested.replace(",", ";").split(";") if a.strip()]
    return build_description.gencode_flags(archs or build_description.CUDA_ARCHS)


def minimum_driver(cuda_version: str) -> str:
    """The driver floor of code built with `cuda_version` ("13.0")."""
    return MINIMUM_DRIVER.get(int(cuda_version.split(".")[0]), "unknown")
