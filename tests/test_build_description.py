"""The build is described once (build_support/build_description.py): setup.py, the Makefile and
Bazel read it, its generated files are current, and every source file belongs to one part."""

from pathlib import Path

import pytest

from build_support import build_description

ROOT = Path(__file__).resolve().parent.parent
BUILD_FILES = ("setup.py", "Makefile", "BUILD", "build_support/cuda_toolkit.py")


def test_generated_files_are_current(capsys) -> None:
    assert build_description.main(["--check"]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("name, reads", [
    ("setup.py", "build_description.sources(part)"),
    ("Makefile", "include build_support/generated/build.mk"),
    ("BUILD", '"//build_support/generated:build.bzl"'),
])
def test_each_build_reads_the_description(name: str, reads: str) -> None:
    assert reads in (ROOT / name).read_text()


@pytest.mark.parametrize("flag", ["-ffp-contract", "-fsanitize", "--expt-relaxed-constexpr",
                                  "-gencode", "-Wno-interference-size", "-fvisibility"])
def test_no_build_file_spells_a_described_flag(flag: str) -> None:
    for name in BUILD_FILES:
        assert flag not in (ROOT / name).read_text(), f"{name} spells {flag}"


def test_every_library_source_is_in_exactly_one_part() -> None:
    library = {str(p.relative_to(ROOT)) for pattern in ("*.cc", "*.cu")
               for p in (ROOT / "cc").rglob(pattern) if "tests" not in p.parts}
    parts = [s for part in build_description.PARTS for s in build_description.sources(part)]
    assert sorted(parts) == sorted(library)
    assert len(parts) == len(set(parts))


def test_parts_are_folders_not_file_name_endings() -> None:
    for folders in build_description.PARTS.values():
        for folder in folders:
            assert (ROOT / folder).is_dir(), folder


def test_every_nvcc_compile_of_the_standalone_handlers_takes_one_source(tmp_path) -> None:
    """`make xla-ffi-lib XLA_FFI_CUDA=1` (tools/gpu_report.sh's build on a GPU machine) compiles
    every CUDA source of the core, each in its own nvcc call: nvcc refuses several sources with
    one -o. Read from make's dry run, with a stand-in nvcc so no CUDA is needed."""
    import subprocess  # noqa: PLC0415

    run = subprocess.run(
        ["make", "-n", "-B", "xla-ffi-lib", "XLA_FFI_CUDA=1", "NVCC=/stand-in/nvcc",
         f"XLA_FFI_INCLUDE={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    compiles = [line for line in run.stdout.splitlines()
                if line.startswith("/stand-in/nvcc") and " -c " in line]
    sources = build_description.sources("core_cuda")
    assert len(compiles) == len(sources), run.stdout + run.stderr
    for line in compiles:
        assert sum(word.endswith(".cu") for word in line.split()) == 1, line
    assert sorted(next(w for w in line.split() if w.endswith(".cu"))
                  for line in compiles) == sorted(sources)
