"""tools/tf_cuda_bundle/: packing wheels into checked parts and reassembling them, on small
wheels made here (the real bundle is TensorFlow's 572 MB CUDA wheel; `make tf-cuda-bundle`).
No TensorFlow and no GPU: what TensorFlow does with the result is checked on a GPU machine."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools" / "tf_cuda_bundle"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def load_make_bundle():
    spec = importlib.util.spec_from_file_location("make_bundle", TOOLS / "make_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return path


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """Two wheels, one of them CUDA's runtime and one with headers the bundle leaves out, in
    parts of 4 KiB (incompressible data, so there are several)."""
    noise = random.Random(1).randbytes(20000)
    wheels = [
        make_wheel(tmp_path / "tensorflow-0-py3-none-any.whl",
                   {"tensorflow/__init__.py": b"VERSION = 'test'\n",
                    "tensorflow/libbig.so": noise,
                    "tensorflow/include/header.h": b"// never read at run time\n"}),
        make_wheel(tmp_path / "cudart-0-py3-none-any.whl",
                   {"nvidia/cuda_runtime/lib/libcudart.so.12": b"\x7fELF runtime"}),
    ]
    manifest = load_make_bundle().pack(wheels, tmp_path / "parts", PYTHON, 4096)
    assert len(manifest["parts"]) > 2
    return tmp_path / "parts"


def assemble(parts: Path, dest: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOLS / "assemble.py"), str(parts), str(dest),
                           *flags], capture_output=True, text=True, timeout=120)


def test_parts_reassemble_into_a_site_folder_and_environment(bundle: Path, tmp_path: Path):
    dest = tmp_path / "dest"
    result = assemble(bundle, dest, "--allow-missing-libraries")
    assert result.returncode == 0, result.stdout + result.stderr
    site = dest / "site"
    assert (site / "tensorflow" / "__init__.py").read_bytes() == b"VERSION = 'test'\n"
    assert len((site / "tensorflow" / "libbig.so").read_bytes()) == 20000
    assert not (site / "tensorflow" / "include").exists()
    runtime = dest / "cuda" / "libcudart.so.12"
    assert runtime.is_symlink() and runtime.read_bytes() == b"\x7fELF runtime"
    env = (dest / "env.sh").read_text()
    assert f'PYTHONPATH="{site.resolve()}:' in env
    assert f'LD_LIBRARY_PATH="{(dest / "cuda").resolve()}' in env
    assert "--xla_gpu_cuda_data_dir=" in env


def test_a_damaged_or_missing_part_is_named(bundle: Path, tmp_path: Path):
    second = bundle / "part-001"
    data = bytearray(second.read_bytes())
    data[100] ^= 1
    second.write_bytes(bytes(data))
    result = assemble(bundle, tmp_path / "dest", "--allow-missing-libraries")
    assert result.returncode != 0 and "part-001 is damaged" in result.stderr
    second.unlink()
    result = assemble(bundle, tmp_path / "dest", "--allow-missing-libraries")
    assert result.returncode != 0 and "part-001 is missing" in result.stderr
    assert not (tmp_path / "dest").exists()


def test_a_bundle_for_another_python_is_refused(bundle: Path, tmp_path: Path):
    manifest = bundle / "manifest.json"
    manifest.write_text(manifest.read_text().replace(f'"python": "{PYTHON}"',
                                                     '"python": "2.7"'))
    result = assemble(bundle, tmp_path / "dest")
    assert result.returncode != 0 and "the bundle is for CPython 2.7" in result.stderr


def test_without_the_flag_a_missing_library_stops_it(bundle: Path, tmp_path: Path,
                                                     monkeypatch):
    # No NVIDIA library folders: sys.path without pip's nvidia packages, no CUDA folders found.
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    result = subprocess.run(
        [sys.executable, "-S", str(TOOLS / "assemble.py"), str(bundle), str(tmp_path / "d")],
        capture_output=True, text=True, timeout=120)
    if result.returncode == 0:
        pytest.skip("this machine has every CUDA library TensorFlow opens")
    assert "assemble: no lib" in result.stderr and "for TensorFlow's" in result.stderr
