"""TensorFlow's CUDA build, packed to travel to a GPU machine that has no TensorFlow and no
network, in parts small enough for the working tree that travels with each command.

What goes in: the `tensorflow` wheel (the CUDA build, not tensorflow-cpu) for the machine's
CPython, without its C++ headers (`tensorflow/include`, 400 MB that only builds read); CUDA 12's
runtime (`libcudart.so.12`, TensorFlow's kernels are registered through it, so a newer major
cannot stand in); the pure-Python and small binary packages TensorFlow and Keras import that a
PyTorch/JAX image lacks or holds in other versions. Our own wheel travels on its own (it changes
with every commit, the bundle with TensorFlow's version): gpu_checks.sh takes it. What stays out: cuBLAS, cuFFT,
cuSOLVER, cuSPARSE and cuDNN (gigabytes): TensorFlow only opens them to decide whether to
register a GPU, and the checks call nothing of them but cuDNN, which the machine's PyTorch
brings in the same major version; `assemble.py` points TensorFlow at the machine's copies.

Everything is one tar stream, xz-compressed, cut into parts of --part-mib, with a manifest
(sha256 of every part and of the whole, the versions inside). Nothing here needs a GPU.

Usage: python tools/tf_cuda_bundle/make_bundle.py OUT_DIR [--python 3.12] [--part-mib 56]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

TENSORFLOW = "tensorflow==2.21.0"
# TensorFlow 2.21's CUDA build is linked against CUDA 12 (12.5 or later).
CUDA_RUNTIME = "nvidia-cuda-runtime-cu12==12.5.82"
# What `import tensorflow` and `import keras` need beyond what the GPU machines' image holds
# (NumPy, h5py, rich, absl-py, packaging, typing_extensions, requests, pytest): the versions
# CI's environment runs.
PYTHON_PACKAGES = ("astunparse==1.6.3", "gast==0.7.0", "google-pasta==0.2.0", "termcolor==3.3.0",
                   "wrapt==2.5.2", "protobuf==7.36.2", "keras==3.15.1", "namex==0.1.0",
                   "optree==0.20.0", "opt_einsum==3.4.0", "flatbuffers==25.12.19",
                   "ml_dtypes==0.6.0", "six==1.17.0")
PLATFORMS = ("manylinux_2_27_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64")
# Never read at run time: headers for building against TensorFlow, and pip's bookkeeping.
SKIPPED_PREFIXES = ("tensorflow/include/",)


def download(requirements: list[str], python: str, into: Path) -> list[Path]:
    """Binary wheels for `python` on x86_64 Linux, without their dependencies."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               "--dest", str(into)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    subprocess.run(command + requirements, check=True)
    return sorted(into.glob("*.whl"))


def add_wheel(tar: tarfile.TarFile, wheel: Path) -> int:
    """Adds a wheel's files under site/ (as pip would install them, minus the skipped ones);
    returns the bytes added."""
    added = 0
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir() or info.filename.startswith(SKIPPED_PREFIXES):
                continue
            member = tarfile.TarInfo("site/" + info.filename)
            member.size = info.file_size
            # Shared objects and scripts keep their execute bit.
            member.mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
            with archive.open(info) as data:
                tar.addfile(member, data)
            added += info.file_size
    return added


def compress(source: Path, target: Path) -> None:
    """xz, multithreaded where the xz program is installed; Python's lzma (the same format,
    which is all assemble.py reads) otherwise."""
    xz = shutil.which("xz")
    if xz:
        with source.open("rb") as src, target.open("wb") as dst:
            subprocess.run([xz, "-6", "-T0", "-c"], stdin=src, stdout=dst, check=True)
        return
    import lzma
    with source.open("rb") as src, lzma.open(target, "wb", preset=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def split(whole: Path, out: Path, part_bytes: int) -> list[dict]:
    parts = []
    with whole.open("rb") as src:
        while chunk := src.read(part_bytes):
            name = f"part-{len(parts):03d}"
            (out / name).write_bytes(chunk)
            parts.append({"name": name, "bytes": len(chunk),
                          "sha256": hashlib.sha256(chunk).hexdigest()})
    return parts


def pack(wheels: list[Path], out: Path, python: str, part_bytes: int) -> dict:
    """The wheels' files as one xz-compressed tar in parts under `out`, with manifest.json;
    returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*"):
        old.unlink()
    with tempfile.TemporaryDirectory() as scratch:
        tar_path = Path(scratch) / "bundle.tar"
        contents = {}
        with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
            for wheel in wheels:
                contents[wheel.name] = add_wheel(tar, wheel)
                print(f"  {wheel.name}: {contents[wheel.name] / 1e6:.1f} MB", flush=True)
        compressed = Path(scratch) / "bundle.tar.xz"
        compress(tar_path, compressed)
        digest = hashlib.sha256()
        with compressed.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        parts = split(compressed, out, part_bytes)
        manifest = {"python": python, "wheels": contents,
                    "unpacked_bytes": tar_path.stat().st_size,
                    "sha256": digest.hexdigest(), "parts": parts}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--python", default="3.12", help="the GPU machine's CPython (X.Y)")
    parser.add_argument("--part-mib", type=int, default=56,
                        help="part size: each command carries the working tree and one part")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        wheels = download([TENSORFLOW, CUDA_RUNTIME, *PYTHON_PACKAGES], args.python,
                          Path(scratch))
        manifest = pack(wheels, args.out, args.python, args.part_mib << 20)
    total = sum(p["bytes"] for p in manifest["parts"])
    print(f"{args.out}: {len(manifest['parts'])} parts, {total / 2**20:.0f} MiB "
          f"({manifest['unpacked_bytes'] / 2**20:.0f} MiB unpacked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
