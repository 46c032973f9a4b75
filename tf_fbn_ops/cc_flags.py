"""Compiler and linker flags for a C++ program that builds graphs with the shim's ops through
TensorFlow's C++ API (``#include "tf_fbn_ops/ops.h"``). ``python -m tf_fbn_ops cc-flags`` prints
them; the README's C++ section shows a whole build line.

The op library is linked by name with ``--no-as-needed`` around it: nothing in the program calls
into it (its static initializers register the ops), so a linker that defaults to
``--as-needed`` would otherwise drop it and the ops would be unknown at run time. Run paths let
the program find it and TensorFlow's libraries without LD_LIBRARY_PATH.
"""

from __future__ import annotations

import os

from tf_fbn_ops import _loader


def get_include() -> str:
    """The folder to add to the include path for ``#include "tf_fbn_ops/ops.h"``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def compile_flags() -> list[str]:
    """TensorFlow's compile flags and the shim's include folder."""
    import tensorflow as tf  # noqa: PLC0415

    return [*tf.sysconfig.get_compile_flags(), f"-I{get_include()}"]


def link_flags() -> list[str]:
    """TensorFlow's C++ API and framework libraries, and the op library, kept when unused."""
    import tensorflow as tf  # noqa: PLC0415

    tf_lib = tf.sysconfig.get_lib()
    library = _loader.library_path()
    folder, name = os.path.split(library)
    return [f"-L{tf_lib}", "-l:libtensorflow_cc.so.2", "-l:libtensorflow_framework.so.2",
            f"-L{folder}", "-Wl,--push-state,--no-as-needed", f"-l:{name}", "-Wl,--pop-state",
            f"-Wl,-rpath,{tf_lib}", f"-Wl,-rpath,{folder}"]
