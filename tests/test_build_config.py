"""The Bazel build (BUILD) and setup.py compile with the same flags and GPU architectures."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def _flags(text: str, list_name: str) -> set:
    body = re.search(list_name + r"\s*=\s*\[(.*?)\]", text, re.S).group(1)
    return set(re.findall(r'"(-[^"{}]+)"', body))


def test_bazel_copts_equal_setup_py_flags() -> None:
    setup, build = _read("setup.py"), _read("BUILD")
    expected = (_flags(setup, "COMMON_FLAGS") | _flags(setup, "QUIET_TF_HEADERS")) - {"-fPIC"}
    assert _flags(build, "COPTS") == expected  # Bazel adds -fPIC to shared objects itself


def test_bazel_nvcc_flags_equal_setup_py_defaults() -> None:
    setup, build = _read("setup.py"), _read("BUILD")
    toolkit = _read(os.path.join("build_support", "cuda_toolkit.py"))
    archs = re.search(r'DEFAULT_ARCHS = "([\d;]+)"', toolkit).group(1).split(";")
    gencode = {f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs}
    gencode.add(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}")
    nvcc = re.search(r"NVCC_FLAGS = \" \"\.join\(\[(.*?)\]\)", build, re.S).group(1)
    assert set(re.findall(r"-gencode=[^\s\"]+", nvcc)) == gencode
    for flag in ("-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
                 "-fPIC,-fvisibility=hidden"):
        assert flag in nvcc and flag in setup
