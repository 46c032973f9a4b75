"""setup.py names each object by everything its bits depend on and keys the library on everything
that changes it: a rebuild for another TensorFlow (or compiler, flags, CUDA set-up, sanitizer
mode) compiles anew what reads TensorFlow, reuses the rest and relinks the library, and an
isolated build says what to do instead of a traceback."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from setuptools import Distribution, Extension

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setup_py():
    spec = importlib.util.spec_from_file_location("tf_fbn_ops_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the build; setup() runs only as a script
    return module


BASE = {"tensorflow": "2.21.0", "tf_cflags": ["-I/tf"], "tf_lflags": ["-ltf"], "cxx": ["g++"],
        "cxx_version": "g++ 12.2.0", "flags": ["-O3"], "sanitize": [], "cuda": None,
        "nvcc_version": None, "cuda_archs": None, "xla": ([], [], "turned off"),
        "glibc_floor": "2.27"}


@pytest.mark.parametrize("part, other", [
    ("tensorflow", "2.20.0"), ("tf_cflags", ["-I/other"]), ("tf_lflags", ["-lother"]),
    ("cxx", ["clang++"]), ("cxx_version", "g++ 13.1.0"), ("flags", ["-O2"]),
    ("sanitize", ["-fsanitize=address"]), ("cuda", "/usr/local/cuda"),
    ("nvcc_version", "Build cuda_13.0"), ("cuda_archs", ["-gencode=arch=compute_90"]),
    ("xla", (["-I/tf/external/highwayhash"], ["-l:libtensorflow_cc.so.2"], None)),
    ("glibc_floor", None),
])
def test_every_part_changes_the_key(setup_py, part: str, other) -> None:
    assert setup_py.build_key(BASE) == setup_py.build_key(dict(BASE))
    assert setup_py.build_key(BASE) != setup_py.build_key(dict(BASE, **{part: other}))


# A source of the core (no TensorFlow) and one that reads TensorFlow's headers and calls it.
SOURCES = ["cc/core/cpu/pool_parallel_for.cc", "cc/runtime/cpu_parallel_for.cc"]


def _build(setup_py, monkeypatch, tmp_path: Path, tf_version: str) -> Path:
    """Runs build_ext on SOURCES with TensorFlow reported as `tf_version`."""
    flags = (tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags(), tf_version,
             Path(tf.sysconfig.get_include()), Path(tf.sysconfig.get_lib()))
    monkeypatch.setattr(setup_py, "tensorflow_build_flags", lambda: flags)
    monkeypatch.setenv("TF_FBN_OPS_CUDA", "0")
    monkeypatch.setenv("TF_FBN_OPS_XLA", "0")  # no XLA source among SOURCES: nothing to add
    monkeypatch.delenv("TF_FBN_OPS_SANITIZE", raising=False)
    ext = Extension("tf_fbn_ops._fbn_ops", sources=SOURCES)
    dist = Distribution({"name": "probe", "ext_modules": [ext],
                         "cmdclass": {"build_ext": setup_py.BuildTensorFlowOps}})
    command = dist.get_command_obj("build_ext")
    command.build_lib = str(tmp_path / "lib")
    command.build_temp = str(tmp_path / "temp")
    command.ensure_finalized()
    command.run()
    return tmp_path / "lib" / "tf_fbn_ops"


def _info(lib: Path) -> dict:
    values: dict = {}
    exec((lib / "_build_info.py").read_text(), values)  # noqa: S102 - our own generated file
    return values


def _objects(tmp_path: Path) -> dict[str, int]:
    """Each object in the build's folder and when it was written."""
    return {p.name: p.stat().st_mtime_ns for p in (tmp_path / "temp").iterdir()}


def test_rebuild_for_another_tensorflow_recompiles_what_reads_it(setup_py, monkeypatch,
                                                                 tmp_path: Path) -> None:
    lib = _build(setup_py, monkeypatch, tmp_path, "2.21.0")
    first = _info(lib)
    objects_21 = _objects(tmp_path)
    assert sorted(name.split("-")[0] for name in objects_21) == [
        "cc_core_cpu_pool_parallel_for.cc", "cc_runtime_cpu_parallel_for.cc"]
    first_link = (lib / "_fbn_ops.so").stat().st_mtime_ns

    lib = _build(setup_py, monkeypatch, tmp_path, "2.20.0")
    second = _info(lib)
    assert second["TF_VERSION"] == "2.20.0" and second["BUILD_KEY"] != first["BUILD_KEY"]
    objects = _objects(tmp_path)
    fresh = sorted(objects.keys() - objects_21.keys())
    assert [name.split("-")[0] for name in fresh] == ["cc_runtime_cpu_parallel_for.cc"], \
        "the source that reads TensorFlow was not compiled anew"
    assert all(objects[name] == written for name, written in objects_21.items()), \
        "an object of the first build was rewritten (the core's is reused as it was)"
    assert (lib / "_fbn_ops.so").stat().st_mtime_ns > first_link, "library not relinked"

    # Back to the first TensorFlow: its objects are still there and newer than nothing, yet the
    # library (last linked from the 2.20 objects) must be relinked from them.
    second_link = (lib / "_fbn_ops.so").stat().st_mtime_ns
    lib = _build(setup_py, monkeypatch, tmp_path, "2.21.0")
    assert _info(lib)["BUILD_KEY"] == first["BUILD_KEY"]
    assert _objects(tmp_path) == objects, "nothing needed compiling"
    assert (lib / "_fbn_ops.so").stat().st_mtime_ns > second_link, "library not relinked"


def test_isolated_build_gets_one_clear_message(setup_py, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow now fails
    with pytest.raises(SystemExit) as exit_info:
        setup_py.tensorflow_build_flags()
    message = str(exit_info.value)
    assert "pip install --no-build-isolation ." in message
    assert "\n" not in message


def test_isolated_build_stops_before_building(setup_py, monkeypatch) -> None:
    """Without TensorFlow, a wheel or editable build stops at its metadata step with the one
    message; the metadata and source-distribution commands still work."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorflow" else real_find_spec(name, *a))
    for command in ("dist_info", "bdist_wheel", "editable_wheel", "build_ext"):
        with pytest.raises(SystemExit, match="--no-build-isolation"):
            setup_py.require_tensorflow_for([command])
    for command in ("egg_info", "sdist"):
        setup_py.require_tensorflow_for([command])
    monkeypatch.undo()
    setup_py.require_tensorflow_for(["bdist_wheel"])  # TensorFlow importable: no exit


def test_wheel_version_carries_the_tensorflow_minor(setup_py) -> None:
    major, minor = tf.__version__.split(".")[:2]
    assert setup_py.package_version() == f"{setup_py.VERSION}.{major}{int(minor):02d}"
    assert setup_py.tensorflow_extras()["tensorflow-cpu"] == [
        f"tensorflow-cpu>={major}.{minor},<{major}.{int(minor) + 1}"]
    import tf_fbn_ops  # noqa: PLC0415

    assert tf_fbn_ops.__version__ == setup_py.VERSION


def _fake_tensorflow(tmp_path: Path, headers: dict[str, str]) -> tuple[Path, Path]:
    """An include folder holding `headers` (path -> text) and a library folder with
    libtensorflow_cc.so.2."""
    include, lib = tmp_path / "include", tmp_path / "lib"
    for path, text in headers.items():
        (include / path).parent.mkdir(parents=True, exist_ok=True)
        (include / path).write_text(text)
    lib.mkdir()
    (lib / "libtensorflow_cc.so.2").write_text("")
    return include, lib


def test_xla_support_says_why_it_is_off(setup_py, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TF_FBN_OPS_XLA", raising=False)
    real = (Path(tf.sysconfig.get_include()), Path(tf.sysconfig.get_lib()), ["g++"],
            tf.sysconfig.get_compile_flags())
    cflags, lflags, reason = setup_py.xla_support(*real)
    assert reason is None and lflags == ["-l:libtensorflow_cc.so.2"]

    empty = tmp_path / "empty"
    empty.mkdir()
    _, _, reason = setup_py.xla_support(empty, empty, ["g++"], [])
    assert reason.startswith("this TensorFlow lacks tensorflow/compiler/tf2xla/xla_op_kernel.h")
    assert "libtensorflow_cc.so.2" in reason

    # All the files there, but what they include is not (TF 2.19's wheel): the preprocessor says.
    include, lib = _fake_tensorflow(tmp_path, {
        "tensorflow/compiler/tf2xla/xla_op_kernel.h": '#include "llvm/ADT/ArrayRef.h"\n',
        "xla/hlo/builder/xla_builder.h": ""})
    cflags, lflags, reason = setup_py.xla_support(include, lib, ["g++"], [f"-I{include}"])
    assert (cflags, lflags) == ([], [])
    assert reason.startswith("this TensorFlow's headers are incomplete (") and "fatal error" in reason

    monkeypatch.setenv("TF_FBN_OPS_XLA", "1")
    with pytest.raises(RuntimeError, match="TF_FBN_OPS_XLA=1, but this TensorFlow's headers"):
        setup_py.xla_support(include, lib, ["g++"], [f"-I{include}"])
    monkeypatch.setenv("TF_FBN_OPS_XLA", "0")
    assert setup_py.xla_support(*real) == ([], [], "turned off with TF_FBN_OPS_XLA=0")
