"""The TensorFlow a build compiles the library for: the building interpreter's own, or, when
cross-compiling, another machine's, read from a description of it.

A cross build (an AArch64 wheel made on x86-64) cannot import the TensorFlow it builds for. Its
compile and link flags still come from that TensorFlow's own tf.sysconfig: run there (natively,
or under qemu in a root of the target architecture), this file as a script prints a JSON
description (flags, folders, version, the wheel's tags and classifiers, the machine). The
builder adds "sysroot", where that machine's files lie here, and points TF_FBN_OPS_TARGET at
the file; every path of the description is then read below the sysroot.

Usage, on the target: python build_support/target_tensorflow.py > tensorflow.json
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
from pathlib import Path

# The variable that names a description; unset, the build is native.
TARGET_VARIABLE = "TF_FBN_OPS_TARGET"
# Flags that carry a path, and the path's prefix in them.
_PATH_FLAGS = ("-I", "-L", "-Wl,-rpath,")


def describe() -> dict[str, object]:
    """This machine's TensorFlow as a cross build needs it (imports TensorFlow)."""
    import tensorflow as tf  # noqa: PLC0415 - the target's TensorFlow

    dist = next(importlib.metadata.distribution(name) for name in
                importlib.metadata.packages_distributions()["tensorflow"])
    return {
        "compile_flags": tf.sysconfig.get_compile_flags(),
        "link_flags": tf.sysconfig.get_link_flags(),
        "include": tf.sysconfig.get_include(),
        "lib": tf.sysconfig.get_lib(),
        "version": tf.__version__,
        "distribution": dist.metadata["Name"],
        "wheel_tags": re.findall(r"^Tag: (\S+)$", dist.read_text("WHEEL") or "", re.M),
        "classifiers": dist.metadata.get_all("Classifier") or [],
        "machine": platform.machine(),
    }


def description() -> dict[str, object] | None:
    """The target's description when TF_FBN_OPS_TARGET names one, else None (a native build)."""
    path = os.environ.get(TARGET_VARIABLE)
    if not path:
        return None
    try:
        found = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"tf-fbn-ops: {TARGET_VARIABLE}={path} is not a readable description "
                         f"of a TensorFlow ({e})") from None
    missing = [k for k in ("compile_flags", "link_flags", "include", "lib", "version",
                           "wheel_tags", "machine", "sysroot") if k not in found]
    if missing:
        raise SystemExit(f"tf-fbn-ops: {path} lacks {', '.join(missing)} (write it with "
                         "build_support/target_tensorflow.py and add the sysroot)")
    return found


def in_sysroot(target: dict[str, object], path: str) -> str:
    """A path of the target machine as it lies on this one."""
    return str(Path(str(target["sysroot"])) / path.lstrip("/"))


def build_flags(target: dict[str, object]) -> tuple[list[str], list[str], str, Path, Path]:
    """Compile flags, link flags, version, include and library folders, all read below the
    sysroot."""
    def moved(flags: list[str]) -> list[str]:
        out = []
        for flag in flags:
            prefix = next((p for p in _PATH_FLAGS if flag.startswith(p + "/")), None)
            out.append(prefix + in_sysroot(target, flag[len(prefix):]) if prefix else flag)
        return out
    return (moved(target["compile_flags"]), moved(target["link_flags"]), target["version"],
            Path(in_sysroot(target, target["include"])), Path(in_sysroot(target, target["lib"])))


if __name__ == "__main__":
    print(json.dumps(describe(), indent=1))
