"""Build of tf-fbn-ops: compiles cc/ into tf_fbn_ops/_fbn_ops.so against the TensorFlow that is
installed in the building interpreter. Install with ``pip install --no-build-isolation .`` (or
``-e .``): with build isolation pip would build against a different TensorFlow, or none.
Static package metadata lives in pyproject.toml; the version is set here, with the TensorFlow
the library is built for as a fourth number (0.2.0.221 for TensorFlow 2.21).

Objects go to a folder per build key: a hash of everything that changes them (the TensorFlow
version and its compile flags, the compiler, our flags, CUDA and its architectures, sanitizer
mode). Switching TensorFlow and rebuilding therefore never reuses objects compiled for another
one, and the library is relinked whenever the key of the objects it holds differs.

Compiler flags come from ``tf.sysconfig`` only; nothing is machine-specific (no -march=native),
so the library runs on any x86-64. The CUDA kernels are compiled in with
the static CUDA runtime, so the same library loads into tensorflow-cpu and into CUDA TensorFlow;
nvcc comes from ``CUDA_HOME``, else ``PATH``, else NVIDIA's pinned PyPI packages, fetched into
build/ (build_support/cuda_toolkit.py). The link keeps the library loadable on the glibc of the
TensorFlow wheel's own platform tag (build_support/glibc_floor.py). Environment knobs:
  CXX                    the C++ compiler (default g++)
  TF_FBN_OPS_JOBS        parallel compile jobs (default: number of CPUs)
  TF_FBN_OPS_CUDA        0: CPU only; 1: a CUDA toolkit on the machine is required; unset: the
                         machine's toolkit, else the compiler from PyPI
  TF_FBN_OPS_CUDA_TOOLKIT  pypi (CUDA 13.0) or debian-12.4 (the wheels' CUDA 12.4, driver R525+)
  TF_FBN_OPS_CUDA_ARCHS  SM versions to build for (default: build_description.CUDA_ARCHS, plus PTX
                         of the last)
  TF_FBN_OPS_GLIBC_FLOOR oldest glibc the library must load on, e.g. 2.27 (an error if it cannot);
                         0: none; unset: the TensorFlow wheel's, where this system allows it
  TF_FBN_OPS_XLA         0: no XLA lowerings; 1: XLA required; unset: XLA when TensorFlow ships
                         what it needs (tf2xla headers and libtensorflow_cc)
  TF_FBN_OPS_XLA_FFI     0: under XLA the ops compile to the HLO lowering even where TensorFlow
                         ships XLA's FFI headers (2.20 on), which otherwise make them custom calls
  TF_FBN_OPS_SANITIZE    1: build with AddressSanitizer and UndefinedBehaviorSanitizer (make sanitize)
  TF_FBN_OPS_TARGET      a cross build: the description of the TensorFlow of another machine
                         (build_support/target_tensorflow.py; CXX then names a cross compiler,
                         OBJDUMP its objdump; CPU kernels only). tools/build_wheel_aarch64.py
                         makes the Linux AArch64 wheel this way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # build_support/, beside this file

from build_support import (build_description, cuda_toolkit, glibc_floor,  # noqa: E402
                           target_tensorflow, versioning)
from build_support.library_objects import (COMMON_FLAGS, build_key,  # noqa: E402
                                           compile_object, compiler, core_command,
                                           default_folder, object_path, sanitize_flags, stale,
                                           tool_version)

PACKAGE = "tf_fbn_ops"
LIBRARY = "_fbn_ops.so"
VERSION = versioning.RELEASE
ISOLATED_BUILD_MESSAGE = (
    "tf-fbn-ops must be compiled against the TensorFlow that will load it, but TensorFlow cannot "
    "be imported here (pip's build isolation hides it). Install TensorFlow first, then build "
    "with: pip install --no-build-isolation .")

# Each part's sources, by folder (build_support/build_description.py).
PART_SOURCES = {part: build_description.sources(part) for part in build_description.PARTS}
CORE_SOURCES, CUDA_SOURCES = PART_SOURCES["core"], PART_SOURCES["core_cuda"]
XLA_SHELL_SOURCES = PART_SOURCES["xla"]
FFI_SOURCES = PART_SOURCES["xla_ffi"] + PART_SOURCES["xla_ffi_gpu"]
CUDA_ONLY_SOURCES = [s for part in build_description.CUDA_PARTS for s in PART_SOURCES[part]]
# The typed FFI API; TensorFlow's wheels ship it from 2.20 on (2.17-2.19 have only its C half).
FFI_HEADER = "xla/ffi/api/ffi.h"
# What the XLA lowerings need from TensorFlow: tf2xla's kernel API and XLA's builder (which has
# lived in three places), and the library that exports both.
XLA_KERNEL_HEADER = "tensorflow/compiler/tf2xla/xla_op_kernel.h"
# The one file that includes it (the XLA kernels), and all the lowerings read besides.
XLA_KERNELS_SOURCE = "cc/xla/xla_op_kernels.cc"
XLA_BUILDER_HEADERS = ("xla/hlo/builder/xla_builder.h", "xla/client/xla_builder.h",
                       "tensorflow/compiler/xla/client/xla_builder.h")
XLA_LIBRARY = "libtensorflow_cc.so.2"
# Folders of the include dir that tf2xla's headers reach through their own include paths.
XLA_INCLUDE_SUBDIRS = ("external/highwayhash", "external/farmhash_archive/src")
QUIET_TF_HEADERS = build_description.QUIET_TF_HEADERS


def xla_support(include: Path, lib: Path, cxx: list[str],
                tf_cflags: list[str]) -> tuple[list[str], list[str], str | None]:
    """Compile flags, link flags and, when XLA cannot be built, the reason (flags are then empty).

    Beyond the files themselves, the lowering's includes are run through the preprocessor: some
    wheels ship tf2xla's headers without all they include (TF 2.19's reach LLVM's). A compile
    error in our own code still fails the build. TF_FBN_OPS_XLA=0 turns the lowerings off; =1
    makes a missing piece an error.
    """
    mode = os.environ.get("TF_FBN_OPS_XLA", "")
    if mode == "0":
        return [], [], "turned off with TF_FBN_OPS_XLA=0"
    missing = []
    if not (include / XLA_KERNEL_HEADER).is_file():
        missing.append(XLA_KERNEL_HEADER)
    if not any((include / h).is_file() for h in XLA_BUILDER_HEADERS):
        missing.append(" or ".join(XLA_BUILDER_HEADERS))
    if not (lib / XLA_LIBRARY).is_file():
        missing.append(XLA_LIBRARY)
    reason = f"this TensorFlow lacks {', '.join(missing)}" if missing else None
    cflags = [f"-I{include / d}" for d in XLA_INCLUDE_SUBDIRS if (include / d).is_dir()]
    if reason is None:
        preprocess = subprocess.run(
            [*cxx, *COMMON_FLAGS, *tf_cflags, *cflags, "-E", "-o", os.devnull,
             str(ROOT / XLA_KERNELS_SOURCE)], capture_output=True, text=True)
        if preprocess.returncode != 0:
            errors = [line for line in preprocess.stderr.splitlines() if "error" in line]
            first = (errors or ["the preprocessor failed"])[0].replace(f"{include}/", "")
            reason = f"this TensorFlow's headers are incomplete ({first.strip()})"
    if reason is None:
        return cflags, [f"-l:{XLA_LIBRARY}"], None
    if mode == "1":
        raise RuntimeError(f"TF_FBN_OPS_XLA=1, but {reason}")
    return [], [], reason


def xla_ffi_missing_reason(include: Path, no_xla_reason: str | None) -> str | None:
    """Why XLA compiles the ops with the HLO lowering instead of custom calls of the FFI
    handlers, or None when the handlers are built. TF_FBN_OPS_XLA_FFI=0 leaves them out."""
    if no_xla_reason:
        return "no XLA support"
    if os.environ.get("TF_FBN_OPS_XLA_FFI") == "0":
        return "turned off with TF_FBN_OPS_XLA_FFI=0"
    if not (include / FFI_HEADER).is_file():
        return f"this TensorFlow lacks {FFI_HEADER}"
    return None


def tensorflow_build_flags() -> tuple[list[str], list[str], str, Path, Path]:
    """Compile flags, link flags, version, include and library folders of the TensorFlow the
    library is for: the installed one, or the cross build's target."""
    target = target_tensorflow.description()
    if target:
        return target_tensorflow.build_flags(target)
    try:
        import tensorflow as tf  # noqa: PLC0415 - only needed when building
    except ImportError:
        raise SystemExit(ISOLATED_BUILD_MESSAGE) from None
    return (tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags(), tf.__version__,
            Path(tf.sysconfig.get_include()), Path(tf.sysconfig.get_lib()))


def installed_tensorflow_version() -> str | None:
    """The installed TensorFlow's version from its package metadata (no import), or None; a
    cross build's target's version."""
    target = target_tensorflow.description()
    if target:
        return str(target["version"])
    dist = versioning.installed_tensorflow()
    return dist.version if dist else None


def package_version() -> str:
    """The release plus the TensorFlow minor the library is built for (0.2.0.221 for 2.21)."""
    return versioning.package_version(installed_tensorflow_version())


def tensorflow_extras() -> dict[str, list[str]]:
    """`pip install "tf-fbn-ops[tensorflow-cpu]"` (or `[tensorflow]`) pins that TensorFlow."""
    tf_version = installed_tensorflow_version()
    return versioning.tensorflow_extras(tf_version) if tf_version else {}


def glibc_floor_setting() -> tuple[str | None, bool]:
    """The oldest glibc the library must load on, and whether that is required.

    TF_FBN_OPS_GLIBC_FLOOR=2.27 requires it (wheel builds); =0 turns it off; unset, it is the
    floor of the installed TensorFlow wheel's own platform tag (manylinux_2_27 -> 2.27), kept
    when this system allows it.
    """
    setting = os.environ.get("TF_FBN_OPS_GLIBC_FLOOR", "")
    if setting == "0":
        return None, False
    if setting:
        return setting, True
    return glibc_floor.tensorflow_wheel_floor(), False


class BuildTensorFlowOps(build_ext):
    """Compiles the op library with the TensorFlow flags, two or more files at a time."""

    def get_ext_filename(self, fullname: str) -> str:
        # A plain name: the library is loaded with tf.load_op_library, not imported.
        return os.path.join(*fullname.split(".")[:-1], LIBRARY)

    def build_extension(self, ext: Extension) -> None:
        tf_cflags, tf_lflags, tf_version, tf_include, tf_lib = tensorflow_build_flags()
        cxx = compiler()
        xla_cflags, xla_lflags, no_xla_reason = xla_support(tf_include, tf_lib, cxx, tf_cflags)
        # Said on every build, not only in logs: a library without lowerings fails under jit.
        xla_state = f"not built: {no_xla_reason}" if no_xla_reason else "built"
        print(f"tf-fbn-ops: XLA lowerings {xla_state}", file=sys.stderr)
        no_ffi_reason = xla_ffi_missing_reason(tf_include, no_xla_reason)
        if not no_xla_reason:
            path = (f"the HLO lowering ({no_ffi_reason})" if no_ffi_reason
                    else "custom calls of the FFI handlers")
            print(f"tf-fbn-ops: under XLA the ops compile to {path}", file=sys.stderr)
        ffi_define = [] if no_ffi_reason else ["-DFBN_XLA_FFI=1"]
        target = target_tensorflow.description()
        if target and os.environ.get("TF_FBN_OPS_CUDA") == "1":
            raise SystemExit("tf-fbn-ops: a cross build has CPU kernels only (TF_FBN_OPS_CUDA=1 "
                             f"with {target_tensorflow.TARGET_VARIABLE})")
        cuda = None if target else cuda_toolkit.find_toolkit(ROOT / "build")
        cuda_version = cuda.version() if cuda else None
        if cuda:
            print(f"tf-fbn-ops: CUDA kernels built with CUDA {cuda_version} from {cuda.origin} "
                  f"({cuda.root}); they need an NVIDIA driver "
                  f"{cuda_toolkit.minimum_driver(cuda_version)} or newer", file=sys.stderr)
        floor, floor_required = glibc_floor_setting()
        if floor and not floor_required and shutil.which(glibc_floor.objdump()) is None:
            print("tf-fbn-ops: no objdump (binutils) here to check the library's glibc floor; "
                  "it is linked for this system only", file=sys.stderr)
            floor = None
        out_path = Path(self.get_ext_fullpath(ext.name))
        out_path.parent.mkdir(parents=True, exist_ok=True)
        cxx_version = tool_version(cxx)
        nvcc_version = tool_version([str(cuda.nvcc)]) if cuda else None
        key = build_key({
            "tensorflow": tf_version, "tf_cflags": tf_cflags, "tf_lflags": tf_lflags,
            "cxx": cxx, "cxx_version": cxx_version, "flags": COMMON_FLAGS + QUIET_TF_HEADERS,
            "sanitize": sanitize_flags(core=True),
            "cuda": str(cuda.root) if cuda else None,
            "nvcc_version": nvcc_version,
            "nvcc_flags": list(cuda.extra_flags) if cuda else None,
            "cuda_archs": cuda_toolkit.arch_flags() if cuda else None,
            "xla": (xla_cflags, xla_lflags, no_xla_reason),
            "xla_ffi": no_ffi_reason,
            "glibc_floor": floor,
            "target": target["machine"] if target else None,
        })
        obj_dir = self.object_folder()
        obj_dir.mkdir(parents=True, exist_ok=True)
        sources = [s for s in ext.sources if cuda or s not in CUDA_ONLY_SOURCES]
        sources = [s for s in sources if not no_xla_reason or s not in XLA_SHELL_SOURCES]
        sources = [s for s in sources if not no_ffi_reason or s not in FFI_SOURCES]
        # The XLA files take longest, the kernels most of all: started first.
        sources.sort(key=lambda s: (s != XLA_KERNELS_SOURCE, s not in XLA_SHELL_SOURCES))

        def compile_one(source: str) -> Path:
            if source in CUDA_SOURCES:  # nvcc; the CUDA core needs no TensorFlow headers
                command = [str(cuda.nvcc), *cuda.extra_flags, *build_description.NVCC_FLAGS,
                           *build_description.OPTIMIZE_FLAGS, *build_description.NVCC_SHARED_FLAGS, f"-I{ROOT}",
                           *cuda.include_flags(), *cuda_toolkit.arch_flags()]
            elif source in CORE_SOURCES:
                command = core_command(cxx)
            elif source in FFI_SOURCES:  # XLA's FFI headers, nothing else of TensorFlow
                command = [*cxx, *COMMON_FLAGS, f"-I{tf_include}", *sanitize_flags(core=True)]
            else:
                command = [*cxx, *COMMON_FLAGS, *tf_cflags, *QUIET_TF_HEADERS, *ffi_define,
                           *sanitize_flags()]
                if source in XLA_SHELL_SOURCES:
                    command += xla_cflags
            # Named by all its bits depend on, so builds of other settings (a wheel's CUDA,
            # another TensorFlow, the sanitizers) keep their own and reuse the rest.
            reads_tensorflow = source not in CORE_SOURCES and source not in CUDA_SOURCES
            obj = object_path(obj_dir, source, command,
                              nvcc_version if source in CUDA_SOURCES else cxx_version,
                              tf_version if reads_tensorflow else None)
            return compile_object(command, source, obj, force=self.force, run=self._run)

        jobs = int(os.environ.get("TF_FBN_OPS_JOBS", os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            objects = list(pool.map(compile_one, sources))
        # The static CUDA runtime goes before TensorFlow's libraries: CUDA TensorFlow's
        # framework library exports cudart entry points that would otherwise satisfy ours and
        # leave the library unloadable in tensorflow-cpu.
        cudart = [str(cuda.static_runtime()), "-ldl", "-lrt", "-lpthread"] if cuda else []
        wrap = [f"-Wl,--wrap={symbol}" for symbol in glibc_floor.WRAPPED_LIBSTDCXX]

        def link(stub: list[str]) -> None:
            self._run([*cxx, "-shared", *sanitize_flags(core=True), *map(str, objects), *stub,
                       "-o", str(out_path), *cudart, *tf_lflags, *xla_lflags, *wrap,
                       "-Wl,--no-undefined", "-Wl,-O1"])

        info_path = Path(_build_info_path(str(out_path)))
        if self.force or stale(out_path, objects) or _recorded_key(info_path) != key:
            if floor:
                glibc_floor.link_within_floor(link, out_path, floor, floor_required, cxx,
                                              obj_dir / "glibc-stubs")
            else:
                link([])
        info_path.write_text(
            '"""Written by setup.py at build time."""\n\n'
            f"TF_VERSION = {tf_version!r}\n"
            f"CUDA = {cuda is not None}\n"
            f"CUDA_VERSION = {cuda_version!r}\n"
            f"CUDA_ORIGIN = {cuda.origin if cuda else None!r}\n"
            "MINIMUM_DRIVER = "
            f"{cuda_toolkit.minimum_driver(cuda_version) if cuda else None!r}\n"
            f"XLA = {no_xla_reason is None}\n"
            f"XLA_MISSING_REASON = {no_xla_reason!r}\n"
            f"XLA_FFI = {no_ffi_reason is None}\n"
            f"XLA_FFI_MISSING_REASON = {no_ffi_reason!r}\n"
            f"GLIBC = {glibc_floor.highest_version(out_path, 'GLIBC')!r}\n"
            f"BUILD_KEY = {key!r}\n"
        )

    def object_folder(self) -> Path:
        """Where objects stay between builds. An editable build's build_temp is deleted after
        it: it takes the folder the Makefile's test programs share (library_objects.py), so
        `make lib` recompiles only what changed and a wheel built next reuses its objects."""
        if self.editable_mode:
            return default_folder()
        return Path(self.build_temp)

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


def _recorded_key(info_path: Path) -> str | None:
    """The build key recorded next to a linked library, or None."""
    if not info_path.exists():
        return None
    for line in info_path.read_text().splitlines():
        if line.startswith("BUILD_KEY = "):
            return line.split("=", 1)[1].strip().strip("'\"")
    return None


# Commands that lead to compiling; the metadata step of a wheel build (dist_info) comes first,
# so an isolated build stops there with one message instead of a build log.
BUILDING_COMMANDS = ("dist_info", "bdist_wheel", "editable_wheel", "build_ext", "develop", "install")


def require_tensorflow_for(argv: list[str]) -> None:
    """Exits with ISOLATED_BUILD_MESSAGE when argv builds the library and TensorFlow is absent."""
    import importlib.util  # noqa: PLC0415

    if any(c in argv for c in BUILDING_COMMANDS) and importlib.util.find_spec("tensorflow") is None:
        raise SystemExit(ISOLATED_BUILD_MESSAGE)


def require_matching_tensorflow_for(argv: list[str]) -> None:
    """In an unpacked source distribution (PKG-INFO beside this file) the version is fixed, and
    with it the TensorFlow minor it was made for: building against another one would give a
    wheel whose version differs from the sdist's, which pip refuses with a less useful message."""
    info = ROOT / "PKG-INFO"
    if not info.is_file() or not any(c in argv for c in BUILDING_COMMANDS):
        return
    declared = next((line.split(":", 1)[1].strip() for line in info.read_text().splitlines()
                     if line.startswith("Version:")), None)
    needed = package_version()
    if declared is not None and declared != needed:
        installed = installed_tensorflow_version() or "no TensorFlow"
        minor = declared.split(".")[3:]
        made_for = f"TensorFlow {minor[0][0]}.{int(minor[0][1:])}" if minor else "no TensorFlow"
        raise SystemExit(
            f"tf-fbn-ops {declared} is the source for {made_for}, but this environment has "
            f"{installed}: install the source made for it instead "
            f"(pip install 'tf-fbn-ops=={needed}').")


# Commands that write a wheel: setuptools before 70.1 needs the `wheel` package for them.
WHEEL_COMMANDS = ("dist_info", "bdist_wheel", "editable_wheel")


def require_wheel_builder_for(argv: list[str]) -> None:
    """Exits with one line when argv builds a wheel that this setuptools cannot write."""
    import importlib.util  # noqa: PLC0415

    import setuptools  # noqa: PLC0415

    too_old = tuple(int(p) for p in setuptools.__version__.split(".")[:2]) < (70, 1)
    if (any(c in argv for c in WHEEL_COMMANDS) and too_old
            and importlib.util.find_spec("wheel") is None):
        raise SystemExit(
            f"tf-fbn-ops: setuptools {setuptools.__version__} writes wheels only with the "
            "`wheel` package, which is not installed here: run `pip install wheel` (or upgrade "
            "setuptools to 70.1 or newer), then the same command again.")


def license_metadata() -> dict[str, object]:
    """Apache-2.0 in the form this setuptools understands: an SPDX expression from 77 on (the
    older `license` field is deprecated there), the plain field before (a new virtual
    environment's setuptools 65.5 cannot read the expression)."""
    import setuptools  # noqa: PLC0415

    major = int(setuptools.__version__.split(".")[0])
    field = "license_expression" if major >= 77 else "license"
    return {field: "Apache-2.0", "license_files": ["LICENSE"]}


if __name__ == "__main__":  # setuptools runs this file as a script; tests import it
    require_wheel_builder_for(sys.argv[1:])
    require_tensorflow_for(sys.argv[1:])
    require_matching_tensorflow_for(sys.argv[1:])
    setup(
        version=package_version(),
        **license_metadata(),
        extras_require=tensorflow_extras(),
        # The Keras 3 layer; the research benchmark harness stays in the repository
        # (benchmarks/harness/), the package keeps the quick comparison (cli/quick_bench.py).
        packages=[PACKAGE, f"{PACKAGE}.cli", f"{PACKAGE}.keras"],
        # The C++ graph API header (tf_fbn_ops.get_include()).
        package_data={PACKAGE: ["include/tf_fbn_ops/*.h"]},
        ext_modules=[Extension(f"{PACKAGE}._fbn_ops",
                               sources=[s for part in PART_SOURCES.values() for s in part])],
        cmdclass={"build_ext": BuildTensorFlowOps},
        zip_safe=False,
    )
