"""On the GPU machine: TensorFlow's CUDA build reassembled from make_bundle.py's parts, and the
environment that makes it see the GPU. Python's standard library only.

1. Every part is checked against the manifest (size and sha256), then the parts are read as one
   xz stream and unpacked into DEST/site (a folder for PYTHONPATH).
2. DEST/cuda holds what TensorFlow opens by name before it registers a GPU: CUDA 12's runtime
   from the bundle, and cuBLAS, cuBLASLt, cuFFT, cuSOLVER, cuSPARSE and cuDNN from the
   machine. Where the machine has only another major version (a CUDA 13 image), the name
   TensorFlow asks for is linked to it: TensorFlow opens them all, but what our checks run calls
   only cuDNN, whose major version (9) is the same for CUDA 12 and 13.
3. DEST/env.sh exports PYTHONPATH, LD_LIBRARY_PATH (DEST/cuda, then the machine's NVIDIA
   library folders, where cuDNN finds its own parts) and XLA's CUDA folder (ptxas, libdevice).

Usage: python3 tools/tf_cuda_bundle/assemble.py PARTS_DIR DEST [--allow-missing-libraries]
Exits non-zero, saying what is wrong, if a part is missing or damaged or a library is not found
(--allow-missing-libraries, for checks on a machine without a GPU: says so and goes on;
TensorFlow then registers no GPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import sys
import tarfile
from pathlib import Path

# The names TensorFlow 2.21's CUDA build opens (its stream executor's library loader), and the
# family each belongs to on the machine.
OPENED_BY_TENSORFLOW = {"libcublas.so.12": "libcublas.so.", "libcublasLt.so.12": "libcublasLt.so.",
                        "libcufft.so.11": "libcufft.so.", "libcusolver.so.11": "libcusolver.so.",
                        "libcusparse.so.12": "libcusparse.so.", "libcudnn.so.9": "libcudnn.so."}
CUDA_RUNTIME = "libcudart.so.12"


class PartsReader:
    """The parts, in order, as one binary stream."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths, self.current = list(paths), None

    def read(self, size: int = -1) -> bytes:
        while True:
            if self.current is None:
                if not self.paths:
                    return b""
                self.current = self.paths.pop(0).open("rb")
            data = self.current.read(size)
            if data:
                return data
            self.current.close()
            self.current = None


def check_parts(parts_dir: Path, manifest: dict) -> list[Path]:
    paths, whole = [], hashlib.sha256()
    for part in manifest["parts"]:
        path = parts_dir / part["name"]
        if not path.is_file():
            raise SystemExit(f"assemble: {path} is missing ({len(manifest['parts'])} parts)")
        data = path.read_bytes()
        if len(data) != part["bytes"] or hashlib.sha256(data).hexdigest() != part["sha256"]:
            raise SystemExit(f"assemble: {path} is damaged (size or sha256 differs)")
        whole.update(data)
        paths.append(path)
    if whole.hexdigest() != manifest["sha256"]:
        raise SystemExit("assemble: the parts do not make the bundle (sha256 differs)")
    return paths


def library_folders() -> list[Path]:
    """The machine's NVIDIA library folders: pip's nvidia/* packages on sys.path, then CUDA's."""
    found = []
    for entry in sys.path:
        nvidia = Path(entry) / "nvidia"
        if nvidia.is_dir():
            found += sorted(p for p in nvidia.glob("**/lib") if p.is_dir())
    for root in ("/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu"):
        if Path(root).is_dir():
            found.append(Path(root))
    return list(dict.fromkeys(found))


def best_match(name: str, family: str, folders: list[Path]) -> Path | None:
    """The library itself where the machine has it, else the family's highest major version."""
    for folder in folders:
        if (folder / name).exists():
            return folder / name
    candidates = [p for folder in folders for p in folder.glob(family + "*")
                  if p.name[len(family):].isdigit()]
    return max(candidates, key=lambda p: int(p.name[len(family):]), default=None)


def cuda_toolkit() -> Path:
    """Where XLA finds ptxas and libdevice: CUDA_HOME, nvcc's toolkit, or /usr/local/cuda."""
    nvcc = shutil.which("nvcc")
    candidates = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    if nvcc:
        candidates.insert(1, str(Path(nvcc).resolve().parent.parent))
    for candidate in filter(None, candidates):
        if (Path(candidate) / "nvvm" / "libdevice").is_dir():
            return Path(candidate)
    return Path("/usr/local/cuda")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--allow-missing-libraries", action="store_true")
    args = parser.parse_args()
    manifest = json.loads((args.parts / "manifest.json").read_text())
    if f"{sys.version_info.major}.{sys.version_info.minor}" != manifest["python"]:
        raise SystemExit(f"assemble: the bundle is for CPython {manifest['python']}, this is "
                         f"{sys.version.split()[0]}")
    paths = check_parts(args.parts, manifest)
    site, cuda = args.dest / "site", args.dest / "cuda"
    shutil.rmtree(args.dest, ignore_errors=True)
    cuda.mkdir(parents=True)
    with tarfile.open(fileobj=lzma.LZMAFile(PartsReader(paths)), mode="r|") as tar:
        tar.extractall(args.dest, filter="data")
    runtime = next(site.glob(f"nvidia/cuda_runtime/lib/{CUDA_RUNTIME}"), None)
    if runtime is None:
        raise SystemExit(f"assemble: the bundle holds no {CUDA_RUNTIME}")
    (cuda / CUDA_RUNTIME).symlink_to(runtime.resolve())
    folders = library_folders()
    for name, family in OPENED_BY_TENSORFLOW.items():
        found = best_match(name, family, folders)
        if found is None:
            message = f"no {family}* on this machine for TensorFlow's {name}"
            if not args.allow_missing_libraries:
                raise SystemExit(f"assemble: {message}")
            print(f"  {message}: TensorFlow will register no GPU")
            continue
        (cuda / name).symlink_to(found.resolve())
        print(f"  {name} -> {found}")
    cuda_home = cuda_toolkit()
    env = {"PYTHONPATH": f"{site.resolve()}:${{PYTHONPATH:-}}",
           "LD_LIBRARY_PATH": ":".join([str(cuda.resolve())] + [str(f) for f in folders])
           + ":${LD_LIBRARY_PATH:-}",
           "XLA_FLAGS": f"--xla_gpu_cuda_data_dir={cuda_home} ${{XLA_FLAGS:-}}",
           "PATH": f"{cuda_home}/bin:$PATH"}
    (args.dest / "env.sh").write_text("".join(f'export {k}="{v}"\n' for k, v in env.items()))
    print(f"assemble: {len(paths)} parts, {manifest['unpacked_bytes'] / 2**20:.0f} MiB in "
          f"{args.dest}; `source {args.dest / 'env.sh'}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
