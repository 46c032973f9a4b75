"""The distribution's version and its TensorFlow pins.

A library is compiled for one TensorFlow minor (the C++ ABI changes between them), so each
minor gets its own build. The version carries it as a fourth number, which PyPI accepts (a
local label such as +tf2.21 it refuses): 0.2.0.221 is release 0.2.0 built for TensorFlow 2.21.

TensorFlow is not a plain dependency: `tensorflow` and `tensorflow-cpu` are two distributions
of the same package, and requiring either would make pip install it over the other. The pin is
an extra named after each (`pip install "tf-fbn-ops[tensorflow-cpu]"`), so pip resolves the
build for the TensorFlow a user asks for; without an extra the import-time check names a
mismatch.
"""

from __future__ import annotations

import importlib.metadata

RELEASE = "0.2.0"
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu")


def installed_tensorflow() -> importlib.metadata.Distribution | None:
    """The distribution (tensorflow, tensorflow-cpu, ...) that provides the `tensorflow`
    package here, read from metadata without importing it; None without one."""
    for name in importlib.metadata.packages_distributions().get("tensorflow", []):
        try:
            return importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def tensorflow_minor(tf_version: str) -> tuple[int, int]:
    major, minor = tf_version.split(".")[:2]
    return int(major), int(minor)


def package_version(tf_version: str | None) -> str:
    """RELEASE plus the TensorFlow minor as one number (2.21 -> 221, 2.9 -> 209)."""
    if tf_version is None:
        return RELEASE
    major, minor = tensorflow_minor(tf_version)
    return f"{RELEASE}.{major}{minor:02d}"


def tensorflow_extras(tf_version: str) -> dict[str, list[str]]:
    """One extra per TensorFlow distribution, each pinning the minor the library is built for."""
    major, minor = tensorflow_minor(tf_version)
    pin = f">={major}.{minor},<{major}.{minor + 1}"
    return {name: [f"{name}{pin}"] for name in TENSORFLOW_DISTRIBUTIONS}
