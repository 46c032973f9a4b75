"""Finds the op library next to this file and loads it into TensorFlow, once, on first use."""

from __future__ import annotations

import os
import threading
from types import ModuleType

_LIBRARY_NAME = "_fbn_ops.so"
_lock = threading.Lock()
_module: ModuleType | None = None


class LibraryVersionError(ImportError):
    """The op library was built against a different TensorFlow than the one installed."""


def library_path() -> str:
    """Absolute path of the op library, for ``tf.load_op_library``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME)


def built_tensorflow_version() -> str | None:
    """The TensorFlow version the library was compiled against, or None if it is not built."""
    try:
        from tf_fbn_ops import _build_info  # noqa: PLC0415 - written by setup.py at build time
    except ImportError:
        return None
    return _build_info.TF_VERSION


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
                _module = _load()
    return _module


def _load() -> ModuleType:
    import tensorflow as tf  # noqa: PLC0415 - keep `import tf_fbn_ops` cheap

    path = library_path()
    built = built_tensorflow_version()
    if not os.path.exists(path) or built is None:
        raise ImportError(
            f"tf_fbn_ops: the op library {path} is not built. Build it against your TensorFlow "
            "with `pip install --no-build-isolation .` (or `-e .`) in the project folder.")
    rebuild = ("Rebuild it against the installed TensorFlow with "
               "`pip install --no-build-isolation --force-reinstall .` in the project folder.")
    if built != tf.__version__:
        raise LibraryVersionError(
            f"tf_fbn_ops was built against TensorFlow {built}, but TensorFlow {tf.__version__} "
            f"is installed; the C++ ABI differs between versions. {rebuild}")
    try:
        return tf.load_op_library(path)
    except tf.errors.NotFoundError as e:  # typically an undefined symbol from another TF build
        raise LibraryVersionError(
            f"tf_fbn_ops could not load {path} (built against TensorFlow {built}) into "
            f"TensorFlow {tf.__version__}: {e.message}. {rebuild}") from e
