"""Finds the op library next to this file and loads it into TensorFlow, once.

`import tf_fbn_ops` alone imports nothing heavy. The library is loaded as soon as both
tf_fbn_ops and TensorFlow are imported, whichever comes second, so that graphs and SavedModels
holding the shim's ops can be loaded right after the two imports; or, at the latest, on first
use. Loading also registers the ops' gradients and vectorization rules. A library built for
another TensorFlow is reported then, as a LibraryVersionWarning naming both versions, and raises
LibraryVersionError on use.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading
import warnings
from types import ModuleType

_LIBRARY_NAME = "_fbn_ops.so"
_lock = threading.RLock()
_module: ModuleType | None = None


REBUILD_COMMAND = "pip install --no-build-isolation --force-reinstall ."


class LibraryVersionError(ImportError):
    """The op library was built against a different TensorFlow than the one installed."""


class LibraryVersionWarning(UserWarning):
    """Issued at import when the op library was built against another TensorFlow."""


def library_path() -> str:
    """Absolute path of the op library, for ``tf.load_op_library``: the one built next to this
    file, or the file named by the TF_FBN_OPS_LIBRARY environment variable (a library built
    elsewhere, for example by Bazel).

    Raises:
      LibraryVersionError: TensorFlow is imported and is not the version the library next to
        this file was built for (loading it would fail with an undefined symbol, or worse).
    """
    override = os.environ.get("TF_FBN_OPS_LIBRARY")
    if override:
        return os.path.abspath(override)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME)
    tf = sys.modules.get("tensorflow")
    installed = getattr(tf, "__version__", None)
    built = built_tensorflow_version()
    if installed is not None and built is not None and built != installed:
        raise LibraryVersionError(_mismatch_message(path, built, installed))
    return path


def _mismatch_message(path: str, built: str, installed: str) -> str:
    return (f"tf_fbn_ops: the op library {path} was built against TensorFlow {built}, but "
            f"TensorFlow {installed} is installed; the C++ ABI differs between versions. "
            f"Rebuild it in the project folder with `{REBUILD_COMMAND}` (or `make lib`).")


def built_tensorflow_version() -> str | None:
    """The TensorFlow version the library was compiled against, or None if it is not built."""
    try:
        from tf_fbn_ops import _build_info  # noqa: PLC0415 - written by setup.py at build time
    except ImportError:
        return None
    return _build_info.TF_VERSION


def xla_missing_reason() -> str | None:
    """Why the library has no XLA lowerings (jit_compile=True then fails on the shim's ops), or
    None when it has them."""
    try:
        from tf_fbn_ops import _build_info  # noqa: PLC0415
    except ImportError:
        return "the library is not built"
    if getattr(_build_info, "XLA", False):
        return None
    # Libraries built before the lowerings existed record nothing about XLA.
    return getattr(_build_info, "XLA_MISSING_REASON", None) or "built without XLA lowerings"


# Set to "hlo" at run time, makes XLA compile the ops to the HLO lowering even in builds with the
# FFI handlers (for debugging and comparison); read whenever XLA compiles one of the ops.
XLA_LOWERING_VARIABLE = "TF_FBN_OPS_XLA_LOWERING"


def xla_ffi_missing_reason() -> str | None:
    """Why XLA compiles the ops to the HLO lowering instead of custom calls of the library's own
    CPU and CUDA kernels (XLA's FFI), or None when the custom calls are built and not turned
    off with TF_FBN_OPS_XLA_LOWERING=hlo."""
    no_xla = xla_missing_reason()
    if no_xla is not None:
        return f"no XLA lowerings: {no_xla}"
    if os.environ.get(XLA_LOWERING_VARIABLE) == "hlo":
        return f"{XLA_LOWERING_VARIABLE}=hlo"
    from tf_fbn_ops import _build_info  # noqa: PLC0415 - exists once built

    if getattr(_build_info, "XLA_FFI", False):
        return None
    return getattr(_build_info, "XLA_FFI_MISSING_REASON", None) or "built without FFI handlers"


def xla_path() -> str:
    """What the ops compile to under XLA, in words, for `info`, `--version` and reports."""
    no_xla = xla_missing_reason()
    if no_xla is not None:
        return f"no XLA lowerings ({no_xla})"
    no_ffi = xla_ffi_missing_reason()
    if no_ffi is None:
        return "under XLA: custom calls of the kernels (XLA FFI)"
    return f"under XLA: the HLO lowering ({no_ffi})"


def build_summary() -> str:
    """What the library next to the package was built for, without importing TensorFlow."""
    built = built_tensorflow_version()
    if built is None:
        return "library not built"
    from tf_fbn_ops import _build_info  # noqa: PLC0415 - exists once built

    device = "CPU only"
    if getattr(_build_info, "CUDA", False):
        cuda = getattr(_build_info, "CUDA_VERSION", None) or "?"
        device = (f"CPU and CUDA {cuda} (NVIDIA driver "
                  f"{getattr(_build_info, 'MINIMUM_DRIVER', None) or '?'} or newer)")
    return f"library built for TensorFlow {built}, {device}, {xla_path()}"


def gpu_kernel_status() -> str:
    """What the library decided about its CUDA kernels when it loaded, in one line: registered
    or not, the CUDA version they were built with, the driver that needs and the one installed.
    Loads the library first.

    Raises:
      ImportError: the library is not built, or cannot load into this TensorFlow.
    """
    load_library()
    import ctypes  # noqa: PLC0415

    library = ctypes.CDLL(library_path())  # already loaded: the same handle, no second copy
    try:
        status = library.TfFbnOpsGpuKernelStatus
    except AttributeError:
        return "no GPU kernels: the library was built for the CPU only"
    status.restype = ctypes.c_char_p
    return status().decode()


def load_library() -> ModuleType:
    """Loads the op library (first call only) and returns its generated op module.

    Raises:
      ImportError: the library has not been built.
      LibraryVersionError: it was built against another TensorFlow version.
    """
    global _module
    if _module is None:
        with _lock:
            if _module is None:
                module = _load()
                from tf_fbn_ops import _registrations  # noqa: PLC0415 - needs TensorFlow

                _registrations.register_all(module)
                _module = module
    return _module


def _load() -> ModuleType:
    import tensorflow as tf  # noqa: PLC0415 - keep `import tf_fbn_ops` cheap

    built = built_tensorflow_version()
    if os.environ.get("TF_FBN_OPS_LIBRARY"):
        built = tf.__version__  # chosen explicitly; a mismatch still fails at load, below
    path = library_path()  # raises LibraryVersionError on a version mismatch
    if not os.path.exists(path) or built is None:
        raise ImportError(
            f"tf_fbn_ops: the op library {path} is not built. Build it against your TensorFlow "
            "with `pip install --no-build-isolation .` (or `-e .`) in the project folder.")
    try:
        return tf.load_op_library(path)
    except tf.errors.NotFoundError as e:  # typically an undefined symbol from another TF build
        raise LibraryVersionError(
            f"tf_fbn_ops could not load {path} (built against TensorFlow {built}) into "
            f"TensorFlow {tf.__version__}: {e.message}. Rebuild it in the project folder with "
            f"`{REBUILD_COMMAND}`.") from e


def _load_at_import() -> None:
    """Loads now if possible. A library that is not built stays quiet until first use; one built
    for another TensorFlow (or that TensorFlow refuses) is reported now, as a warning, and again
    as LibraryVersionError on use."""
    try:
        load_library()
    except LibraryVersionError as e:
        warnings.warn(str(e), LibraryVersionWarning, stacklevel=3)
    except ImportError:
        pass


class _LoadAfterTensorFlowImport(importlib.abc.MetaPathFinder):
    """Loads the library right after `import tensorflow` finishes (then removes itself)."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            _load_at_import()

        spec.loader.exec_module = exec_module
        return spec


def load_when_tensorflow_is_imported() -> None:
    """Called once by `import tf_fbn_ops`."""
    if "tensorflow" in sys.modules:
        _load_at_import()
    elif not any(isinstance(f, _LoadAfterTensorFlowImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _LoadAfterTensorFlowImport())
