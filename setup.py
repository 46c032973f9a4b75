"""Build of tf-fbn-ops: compiles cc/ into tf_fbn_ops/_fbn_ops.so against the TensorFlow that is
installed in the building interpreter. Install with ``pip install --no-build-isolation .`` (or
``-e .``): with build isolation pip would build against a different TensorFlow, or none.

Compiler flags come from ``tf.sysconfig`` only; nothing is machine-specific (no -march=native),
so the library runs on any x86-64. Environment knobs:
  CXX              the C++ compiler (default g++)
  TF_FBN_OPS_JOBS  parallel compile jobs (default: number of CPUs)
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PACKAGE = "tf_fbn_ops"
LIBRARY = "_fbn_ops.so"

# The core has no TensorFlow dependency and compiles without TensorFlow's flags.
CORE_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cc" / "core").glob("*.cc"))
SHELL_SOURCES = sorted(
    str(p.relative_to(ROOT))
    for folder in ("ops", "kernels")
    for p in (ROOT / "cc" / folder).glob("*.cc")
    if not p.name.endswith("_gpu.cc")
)
COMMON_FLAGS = ["-std=c++17", "-O3", "-fPIC", "-DNDEBUG", "-fvisibility=hidden", f"-I{ROOT}"]
# TensorFlow's headers warn about their own deprecations; g++ 12 warns about Eigen's use of
# hardware_destructive_interference_size. Neither is ours to fix.
QUIET_TF_HEADERS = ["-Wno-deprecated-declarations", "-Wno-interference-size"]


def tensorflow_build_flags() -> tuple[list[str], list[str], str]:
    """Compile flags, link flags and version of the TensorFlow in this interpreter."""
    import tensorflow as tf  # noqa: PLC0415 - only needed when building

    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags(), tf.__version__


class BuildTensorFlowOps(build_ext):
    """Compiles the op library with the TensorFlow flags, two or more files at a time."""

    def get_ext_filename(self, fullname: str) -> str:
        # A plain name: the library is loaded with tf.load_op_library, not imported.
        return os.path.join(*fullname.split(".")[:-1], LIBRARY)

    def build_extension(self, ext: Extension) -> None:
        tf_cflags, tf_lflags, tf_version = tensorflow_build_flags()
        cxx = shlex.split(os.environ.get("CXX", "g++"))
        out_path = Path(self.get_ext_fullpath(ext.name))
        out_path.parent.mkdir(parents=True, exist_ok=True)
        obj_dir = Path(self.build_temp) / "objects"
        obj_dir.mkdir(parents=True, exist_ok=True)
        headers = list((ROOT / "cc").rglob("*.h"))

        def compile_one(source: str) -> Path:
            obj = obj_dir / (source.replace("/", "_") + ".o")
            flags = COMMON_FLAGS + ([] if source in CORE_SOURCES else tf_cflags + QUIET_TF_HEADERS)
            if self.force or _stale(obj, [ROOT / source, *headers, Path(__file__)]):
                self._run([*cxx, *flags, "-c", str(ROOT / source), "-o", str(obj)])
            return obj

        jobs = int(os.environ.get("TF_FBN_OPS_JOBS", os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            objects = list(pool.map(compile_one, ext.sources))
        if self.force or _stale(out_path, objects):
            self._run([*cxx, "-shared", *map(str, objects), "-o", str(out_path), *tf_lflags,
                       "-Wl,--no-undefined", "-Wl,-O1"])
        Path(_build_info_path(str(out_path))).write_text(
            '"""Written by setup.py at build time."""\n\n'
            f"TF_VERSION = {tf_version!r}\n"
            f"CUDA = False\n"
        )

    # The build-info file travels with the library wherever setuptools puts it: in place for
    # `pip install -e`, in build/ for a regular install.
    def copy_extensions_to_source(self) -> None:
        super().copy_extensions_to_source()
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            inplace, regular = self._get_inplace_equivalent(build_py, ext)
            shutil.copyfile(_build_info_path(regular), _build_info_path(inplace))

    def get_outputs(self) -> list[str]:
        outputs = super().get_outputs()
        return outputs + [_build_info_path(p) for p in outputs if p.endswith(LIBRARY)]

    def get_output_mapping(self) -> dict[str, str]:
        mapping = super().get_output_mapping()
        for regular, inplace in list(mapping.items()):
            if regular.endswith(LIBRARY):
                mapping[_build_info_path(regular)] = _build_info_path(inplace)
        return mapping

    def _run(self, command: list[str]) -> None:
        self.announce(" ".join(command), level=2)
        subprocess.run(command, check=True, cwd=ROOT)


def _build_info_path(library: str) -> str:
    """The generated module that records what the library beside it was built against."""
    return os.path.join(os.path.dirname(library), "_build_info.py")


def _stale(target: Path, inputs: list[Path]) -> bool:
    """True when target is missing or older than any of its inputs."""
    if not target.exists():
        return True
    built = target.stat().st_mtime
    return any(p.stat().st_mtime > built for p in inputs)


setup(
    name="tf-fbn-ops",
    version="0.1.0",
    description="Fast, exact, deterministic batch-norm gradient ops for TensorFlow",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=[PACKAGE],
    # TensorFlow is deliberately not a requirement: pip must never swap the user's TensorFlow
    # (tensorflow vs tensorflow-cpu, or another version) for the one the library was built for.
    install_requires=["numpy"],
    ext_modules=[Extension(f"{PACKAGE}._fbn_ops", sources=CORE_SOURCES + SHELL_SOURCES)],
    cmdclass={"build_ext": BuildTensorFlowOps},
    zip_safe=False,
)
