"""CUDA 12.4 from Debian 13's packages: the toolkit the binary wheels are built with.

Code built with CUDA 12 runs on any driver for CUDA 12 or newer (R525 and later, the floor of
TensorFlow 2.21's own GPU build), where CUDA 13 needs R580. PyPI has no CUDA 12 compiler (its
nvidia-cuda-nvcc-cu12 carries ptxas alone), but Debian 13 ("trixie") packages NVIDIA's CUDA 12.4
binaries, which need only glibc 2.7 and so run on any machine that builds TensorFlow ops. The
packages are downloaded with apt's own tools under a private configuration (nothing is
installed or added to the system's sources), unpacked into build/, and given the toolkit layout
nvcc expects: bin/nvcc with an nvcc.profile beside it, include/ and lib64/libcudart_static.a.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

RELEASE = "12.4"
SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# Exact versions: the compiler, the headers with the static runtime, and libcu++'s <nv/target>
# that cuda_fp16.h includes.
PACKAGES = {
    "nvidia-cuda-toolkit": "12.4.131~12.4.1-2",
    "nvidia-cuda-dev": "12.4.127~12.4.1-2",
    "libcu++-dev": "2.3.2-2",
}
# Of nvidia-cuda-dev (3 GB unpacked, mostly static math libraries) only these are needed.
DEV_MEMBERS = ("./usr/include/*", "./usr/lib/x86_64-linux-gnu/libcudart_static.a")


def fetch(build_dir: Path) -> Path:
    """The toolkit root (build_dir/cuda-debian-12.4/toolkit), downloaded and laid out once."""
    folder = build_dir / f"cuda-debian-{RELEASE}"
    toolkit = folder / "toolkit"
    if (folder / ".complete").is_file():
        return toolkit
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise RuntimeError(
            f"CUDA {RELEASE} from Debian's packages needs apt-get and dpkg-deb (a Debian or "
            "Ubuntu build machine); build with the machine's own toolkit instead")
    print(f"tf-fbn-ops: fetching CUDA {RELEASE} from Debian {SUITE}'s packages into {folder}",
          file=sys.stderr)
    shutil.rmtree(folder, ignore_errors=True)
    apt = folder / "apt"
    for sub in ("lists/partial", "archives/partial", "cache"):
        (apt / sub).mkdir(parents=True)
    (apt / "sources.list").write_text(
        f"deb [signed-by={KEYRING}] {MIRROR} {SUITE} main contrib non-free\n")
    options = [f"-oDir::Etc::SourceList={apt / 'sources.list'}", "-oDir::Etc::SourceParts=/dev/null",
               f"-oDir::State::Lists={apt / 'lists'}", f"-oDir::Cache={apt / 'cache'}",
               f"-oDir::Cache::Archives={apt / 'archives'}", "-oDebug::NoLocking=true",
               "-oAPT::Architecture=amd64", "-oAPT::Architectures=amd64"]
    _run(["apt-get", *options, "-q", "update"], folder)
    _run(["apt-get", *options, "-q", "download",
          *(f"{name}={version}" for name, version in PACKAGES.items())], folder)
    root = folder / "root"
    root.mkdir()
    for deb in sorted(folder.glob("*.deb")):
        members = DEV_MEMBERS if deb.name.startswith("nvidia-cuda-dev_") else ()
        tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
        _run(["tar", "-x", "-C", str(root), "--wildcards", *members], folder, stdin=tar.stdout)
        if tar.wait() != 0:
            raise RuntimeError(f"dpkg-deb could not read {deb}")
        deb.unlink()  # 1 GB of packages, no longer needed
    _lay_out(root, toolkit)
    (folder / ".complete").write_text("".join(f"{n}={v}\n" for n, v in PACKAGES.items()))
    return toolkit


def _lay_out(root: Path, toolkit: Path) -> None:
    """bin/nvcc (a link: nvcc reads the nvcc.profile beside the name it was started by), its
    crt/ stubs, the profile pointing at the unpacked tools, include/ and lib64/."""
    tools = root / "usr" / "lib" / "nvidia-cuda-toolkit"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "lib64").mkdir()
    (toolkit / "bin" / "nvcc").symlink_to(tools / "bin" / "nvcc")
    (toolkit / "bin" / "crt").symlink_to(tools / "bin" / "crt")
    (toolkit / "include").symlink_to(root / "usr" / "include")
    (toolkit / "lib64" / "libcudart_static.a").symlink_to(
        root / "usr" / "lib" / "x86_64-linux-gnu" / "libcudart_static.a")
    (toolkit / "bin" / "nvcc.profile").write_text(
        f"TOP = {toolkit}\n"
        f"NVVMIR_LIBRARY_DIR = {tools / 'libdevice'}\n"
        f"PATH += {tools / 'bin'}:{root / 'usr' / 'bin'}:\n"
        f'INCLUDES += "-I{root / "usr" / "include"}" $(_SPACE_)\n'
        f"LIBRARIES =+ $(_SPACE_) -L{root / 'usr' / 'lib' / 'x86_64-linux-gnu'}\n")


def _run(command: list[str], cwd: Path, **kwargs) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(command[:3])} ...` failed: {result.stderr.strip()[-600:]}")
