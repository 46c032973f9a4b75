"""What a user's install depends on: metadata that a new virtual environment's setuptools reads,
a version PyPI accepts with the TensorFlow pins as extras, a library that loads on the glibc of
TensorFlow's own wheel, and the CUDA compiler fetched from PyPI when the machine has none."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tensorflow as tf

import tf_fbn_ops

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from build_support import cuda_toolkit, glibc_floor, versioning  # noqa: E402

# The setuptools that `python3.11 -m venv` installs (ensurepip's), and the first that reads an
# SPDX license expression.
NEW_VENV_SETUPTOOLS = "65.5.0"


@pytest.mark.parametrize("tf_version, expected", [
    ("2.21.0", "0.2.0.221"), ("2.12.1", "0.2.0.212"), ("2.9.3", "0.2.0.209"),
    ("3.0.0rc1", "0.2.0.300"), (None, "0.2.0")])
def test_version_carries_the_tensorflow_minor_as_a_public_number(tf_version, expected) -> None:
    from packaging.version import Version  # noqa: PLC0415

    version = versioning.package_version(tf_version)
    assert version == expected
    assert not Version(version).local  # PyPI refuses local labels


def test_extras_pin_each_tensorflow_distribution_to_the_built_minor() -> None:
    from packaging.requirements import Requirement  # noqa: PLC0415

    extras = versioning.tensorflow_extras("2.21.0")
    assert set(extras) == {"tensorflow", "tensorflow-cpu"}
    for name, (requirement,) in extras.items():
        parsed = Requirement(requirement)
        assert parsed.name == name
        assert parsed.specifier.contains("2.21.0") and parsed.specifier.contains("2.21.9")
        assert not parsed.specifier.contains("2.20.1") and not parsed.specifier.contains("2.22.0")


def test_new_venv_setuptools_reads_the_project_metadata(tmp_path: Path) -> None:
    """pyproject.toml validated by the setuptools a new virtual environment has (the step that
    failed with an SPDX license string)."""
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "-d", str(tmp_path), f"setuptools=={NEW_VENV_SETUPTOOLS}"], capture_output=True,
        text=True)
    if fetched.returncode != 0:
        pytest.skip(f"setuptools {NEW_VENV_SETUPTOOLS} not downloadable: {fetched.stderr[-300:]}")
    old = next(tmp_path.glob("setuptools-*.whl"))
    code = textwrap.dedent(f"""
        import setuptools
        from setuptools.config.pyprojecttoml import read_configuration
        assert setuptools.__file__.startswith({str(old)!r}), setuptools.__file__
        # Validation only: the dynamic fields come from setup.py in a real build.
        config = read_configuration({str(ROOT / 'pyproject.toml')!r}, expand=False)
        print(sorted(config["project"]["dynamic"]))
    """)
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(old)))
    assert result.returncode == 0, result.stderr
    assert "license" in result.stdout and "version" in result.stdout


def test_license_follows_the_setuptools_in_use() -> None:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("tf_fbn_ops_setup", ROOT / "setup.py")
    setup_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_py)
    import setuptools  # noqa: PLC0415

    metadata = setup_py.license_metadata()
    field = "license_expression" if int(setuptools.__version__.split(".")[0]) >= 77 else "license"
    assert metadata == {field: "Apache-2.0", "license_files": ["LICENSE"]}


def test_built_library_needs_no_newer_glibc_than_tensorflow_s_wheel() -> None:
    floor = glibc_floor.tensorflow_wheel_floor()
    assert floor is not None
    library = Path(tf_fbn_ops.library_path())
    assert glibc_floor.too_new_imports(library, floor) == {}
    # manylinux_2_27's libstdc++ limits, which TensorFlow's own libraries keep too.
    assert glibc_floor.version_tuple(glibc_floor.highest_version(library, "GLIBCXX")) <= (3, 4, 24)
    assert glibc_floor.version_tuple(glibc_floor.highest_version(library, "CXXABI")) <= (1, 3, 11)


TOY = """
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
static void* echo(void* p) { return p; }
int toy(void) {
  pthread_t thread; void* out = 0; sem_t sem;
  if (pthread_create(&thread, 0, echo, (void*)7) || pthread_join(thread, &out)) return -1;
  if (sem_init(&sem, 0, 1) || sem_wait(&sem)) return -2;
  void* libm = dlmopen(LM_ID_BASE, "libm.so.6", RTLD_NOW);
  return (int)(long)out + (libm != 0);
}
"""


def test_stub_libraries_bind_moved_glibc_functions_to_their_old_versions(tmp_path) -> None:
    """A library using functions that glibc 2.34 moved into libc, linked against the stubs,
    needs only their old versions (from their old homes) and still runs here."""
    (tmp_path / "toy.c").write_text(TOY)
    library = tmp_path / "libtoy.so"
    link = ["gcc", "-shared", "-fPIC", str(tmp_path / "toy.c"), "-o", str(library)]
    subprocess.run(link, check=True)
    too_new = glibc_floor.too_new_imports(library, "2.27")
    if not too_new:
        pytest.skip("this system's glibc predates 2.34: nothing to rebind")
    assert {"pthread_create", "dlmopen", "sem_init"} <= set(too_new)
    # The link setup.py runs: the plain one, then again with the stubs.
    glibc_floor.link_within_floor(
        lambda extra: subprocess.run(link[:-2] + extra + link[-2:], check=True), library,
        "2.27", True, ["gcc"], tmp_path / "stubs")
    assert glibc_floor.too_new_imports(library, "2.27") == {}
    versions = {name: version for imp, version, name in glibc_floor.dynamic_symbols(library)
                if imp}
    assert versions["pthread_create"] == "GLIBC_2.2.5" and versions["dlmopen"] == "GLIBC_2.3.4"
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True,
                            check=True).stdout
    assert "[libpthread.so.0]" in needed and "[libdl.so.2]" in needed
    import ctypes  # noqa: PLC0415

    assert ctypes.CDLL(str(library)).toy() == 8


def test_a_symbol_with_no_old_version_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no older version"):
        glibc_floor.write_stubs({"pthread_no_such_function": "GLIBC_2.34"},
                                glibc_floor.system_library(["gcc"], "libc.so.6"), "2.27",
                                tmp_path, ["gcc"])


def test_cuda_compiler_comes_from_pypi_without_a_toolkit(tmp_path: Path, monkeypatch) -> None:
    """No CUDA_HOME, no nvcc on PATH: the pinned PyPI compiler is fetched and compiles the CUDA
    core."""
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("TF_FBN_OPS_CUDA", raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep)
        if not (Path(d) / "nvcc").exists()))
    try:
        toolkit = cuda_toolkit.find_toolkit(tmp_path)
    except RuntimeError as e:
        if "could not be fetched" in str(e):
            pytest.skip(f"PyPI unreachable: {e}")
        raise
    assert toolkit.origin == "PyPI" and toolkit.version() == "13.0"
    assert toolkit.static_runtime().is_file()
    obj = tmp_path / "core.o"
    subprocess.run([str(toolkit.nvcc), "-std=c++17", "-O1", "--expt-relaxed-constexpr",
                    f"-I{ROOT}", *toolkit.include_flags(),
                    "-gencode=arch=compute_90,code=sm_90", "-c",
                    str(ROOT / "cc" / "core" / "gpu" / "bn_grad_gpu.cu"), "-o", str(obj)], check=True)
    assert obj.stat().st_size > 0
    # Fetched once: a second build finds it in place.
    assert cuda_toolkit.find_toolkit(tmp_path) == toolkit


def test_cpu_only_on_purpose(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TF_FBN_OPS_CUDA", "0")
    assert cuda_toolkit.find_toolkit(tmp_path) is None


def test_build_info_states_cuda_and_driver_floor() -> None:
    from tf_fbn_ops import _build_info  # noqa: PLC0415

    if not _build_info.CUDA:
        pytest.skip("CPU-only build")
    assert _build_info.CUDA_VERSION == "13.0"
    assert _build_info.MINIMUM_DRIVER == cuda_toolkit.minimum_driver(_build_info.CUDA_VERSION)
    assert tf.__version__ == _build_info.TF_VERSION


def test_an_unknown_toolkit_choice_is_refused(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TF_FBN_OPS_CUDA", raising=False)
    monkeypatch.setenv("TF_FBN_OPS_CUDA_TOOLKIT", "cuda-11")
    with pytest.raises(RuntimeError, match="expected pypi or debian-12.4"):
        cuda_toolkit.find_toolkit(tmp_path)


def test_one_wheel_is_tagged_for_every_cpython_of_its_tensorflow(tmp_path: Path) -> None:
    """The python tag is TensorFlow's CPython set from our floor up, the ABI tag none: the
    library links no libpython and exports no module init."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import build_wheel  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "tools"))
    library = Path(tf_fbn_ops.__file__).with_name("_fbn_ops.so")
    dynamic = subprocess.run(["readelf", "-dW", str(library)], capture_output=True, text=True,
                             check=True).stdout
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                             text=True, check=True).stdout
    assert "libpython" not in dynamic and "PyInit_" not in symbols

    tags = build_wheel.tensorflow_pythons(sys.executable)
    assert f"cp3{sys.version_info.minor}" in tags
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415
    import zipfile  # noqa: PLC0415
    wheel = tmp_path / "tf_fbn_ops-1.0-cp311-cp311-manylinux_2_27_x86_64.whl"
    files = {"tf_fbn_ops-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
             b"Root-Is-Purelib: false\nTag: cp311-cp311-manylinux_2_27_x86_64\n",
             "tf_fbn_ops-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tf-fbn-ops\n"
             b"Version: 1.0\n"}
    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{name},sha256={digest(data)},{len(data)}\n"
                     for name, data in files.items())
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("tf_fbn_ops-1.0.dist-info/RECORD",
                         record + "tf_fbn_ops-1.0.dist-info/RECORD,,\n")
    retagged = build_wheel.retag_for_pythons(sys.executable, wheel)
    expected = [t for t in tags if int(t[3:]) >= 10]
    assert retagged.name == (f"tf_fbn_ops-1.0-{'.'.join(expected)}-none-"
                             "manylinux_2_27_x86_64.whl")
    assert not wheel.exists()


def test_an_sdist_for_another_tensorflow_names_the_one_to_use(tmp_path: Path, monkeypatch) -> None:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("tf_fbn_ops_setup", ROOT / "setup.py")
    setup_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_module)
    monkeypatch.setattr(setup_module, "ROOT", tmp_path)
    needed = setup_module.package_version()
    (tmp_path / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nVersion: {needed}\n")
    setup_module.require_matching_tensorflow_for(["bdist_wheel"])  # the same minor: builds
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\nVersion: 0.2.0.212\n")
    setup_module.require_matching_tensorflow_for(["sdist"])  # not a build of the library
    with pytest.raises(SystemExit, match=r"0\.2\.0\.212 is the source for TensorFlow 2\.12, but "
                                         rf"this environment has {tf.__version__}.*"
                                         rf"tf-fbn-ops=={needed}"):
        setup_module.require_matching_tensorflow_for(["bdist_wheel"])


def _description(tmp_path: Path, **extra) -> Path:
    """A cross build's target description, as build_support/target_tensorflow.py writes it."""
    import json  # noqa: PLC0415
    description = {
        "compile_flags": ["-I/opt/t/site-packages/tensorflow/include",
                          "-D_GLIBCXX_USE_CXX11_ABI=1", "--std=c++17"],
        "link_flags": ["-L/opt/t/site-packages/tensorflow", "-l:libtensorflow_framework.so.2"],
        "include": "/opt/t/site-packages/tensorflow/include",
        "lib": "/opt/t/site-packages/tensorflow", "version": "2.21.0",
        "distribution": "tensorflow",
        "wheel_tags": ["cp311-cp311-manylinux_2_27_aarch64"],
        "classifiers": ["Programming Language :: Python :: 3.10",
                        "Programming Language :: Python :: 3.13"],
        "machine": "aarch64", "sysroot": str(tmp_path / "root"), **extra}
    path = tmp_path / "tensorflow.json"
    path.write_text(json.dumps(description))
    return path


def test_a_cross_build_reads_its_target_below_the_sysroot(tmp_path: Path, monkeypatch) -> None:
    from build_support import glibc_floor, target_tensorflow  # noqa: PLC0415
    monkeypatch.setenv("TF_FBN_OPS_TARGET", str(_description(tmp_path)))
    target = target_tensorflow.description()
    cflags, lflags, version, include, lib = target_tensorflow.build_flags(target)
    root = tmp_path / "root"
    assert cflags[0] == f"-I{root}/opt/t/site-packages/tensorflow/include"
    assert cflags[1:] == ["-D_GLIBCXX_USE_CXX11_ABI=1", "--std=c++17"]
    assert lflags == [f"-L{root}/opt/t/site-packages/tensorflow",
                      "-l:libtensorflow_framework.so.2"]
    assert (version, include, lib) == ("2.21.0", root / "opt/t/site-packages/tensorflow/include",
                                       root / "opt/t/site-packages/tensorflow")
    assert glibc_floor.tensorflow_wheel_floor() == "2.27"


def test_a_cross_build_description_must_be_complete(tmp_path: Path, monkeypatch) -> None:
    from build_support import target_tensorflow  # noqa: PLC0415
    monkeypatch.setenv("TF_FBN_OPS_TARGET", str(_description(tmp_path, sysroot=None)).replace(
        "tensorflow.json", "missing.json"))
    with pytest.raises(SystemExit, match="not a readable description"):
        target_tensorflow.description()
    path = _description(tmp_path)
    path.write_text(path.read_text().replace('"sysroot"', '"elsewhere"'))
    monkeypatch.setenv("TF_FBN_OPS_TARGET", str(path))
    with pytest.raises(SystemExit, match="lacks sysroot"):
        target_tensorflow.description()


def test_a_cross_wheel_takes_its_pythons_and_auditwheel_policy_from_the_target(
        tmp_path: Path) -> None:
    import json  # noqa: PLC0415
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import build_wheel  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "tools"))
    description = json.loads(_description(tmp_path).read_text())
    assert build_wheel.tensorflow_pythons(sys.executable, description) == ["cp310", "cp313"]
    command = build_wheel.auditwheel(sys.executable, description)
    shown = subprocess.run([*command, "repair", "--help"], capture_output=True, text=True,
                           env=build_wheel.tool_env(sys.executable))
    assert shown.returncode == 0, shown.stderr  # make's environment has auditwheel
    assert "manylinux_2_27_aarch64" in shown.stdout
