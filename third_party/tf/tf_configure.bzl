"""Repository rule: TensorFlow's headers and libtensorflow_framework from a Python environment.

Everything comes from tf.sysconfig of the interpreter in PYTHON_BIN_PATH (python3 on PATH
otherwise): include and library folders, and the -D flags of get_compile_flags(), as setup.py
uses them. Whether the XLA lowerings can be built is setup.py's own answer (its xla_support(),
which also honours TF_FBN_OPS_XLA); where they can, `xla` carries libtensorflow_cc and the include
folders tf2xla's headers reach. Also writes version.bzl with TF_VERSION, XLA (True when `xla`
is real) and XLA_FFI (True when the ops compile to custom calls of the FFI handlers: setup.py's
xla_ffi_missing_reason(), which honours TF_FBN_OPS_XLA_FFI).
"""

_XLA_LIBRARY = "libtensorflow_cc.so.2"

_PROBE = """
import os, shlex, sys
from pathlib import Path
import tensorflow as tf
sys.path.insert(0, sys.argv[1])
import setup
xla_cflags, _, no_xla_reason = setup.xla_support(
    Path(tf.sysconfig.get_include()), Path(tf.sysconfig.get_lib()),
    shlex.split(os.environ.get("CXX", "g++")), tf.sysconfig.get_compile_flags())
no_ffi_reason = setup.xla_ffi_missing_reason(Path(tf.sysconfig.get_include()), no_xla_reason)
print("TF_CONFIGURE_PROBE")  # the seven lines after it are the answer
print(tf.sysconfig.get_include())
print(tf.sysconfig.get_lib())
print(tf.__version__)
print(" ".join(f for f in tf.sysconfig.get_compile_flags() if f.startswith("-D")))
print(no_xla_reason or "")
print(" ".join(f[len("-I" + tf.sysconfig.get_include() + "/"):] for f in xla_cflags))
print(no_ffi_reason or "")
"""

def _tf_configure_impl(rctx):
    python = rctx.os.environ.get("PYTHON_BIN_PATH") or rctx.which("python3")
    if not python:
        fail("tf_configure: set --repo_env=PYTHON_BIN_PATH to a Python with TensorFlow")
    root = str(rctx.path(Label("//:setup.py")).dirname)
    result = rctx.execute([python, "-c", _PROBE, root],
                          environment = {"TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.return_code != 0:
        fail("tf_configure: %s could not import TensorFlow:\n%s" % (python, result.stderr))
    lines = result.stdout.split("\n")
    start = lines.index("TF_CONFIGURE_PROBE") + 1
    include, lib, version, defines, no_xla_reason, xla_subdirs, no_ffi_reason = (
        lines[start:start + 7])
    rctx.symlink(include, "include")
    rctx.symlink(lib + "/libtensorflow_framework.so.2", "libtensorflow_framework.so.2")
    has_xla = not no_xla_reason
    if has_xla:
        rctx.symlink(lib + "/" + _XLA_LIBRARY, _XLA_LIBRARY)
        xla_library = """
cc_library(
    name = "xla",
    srcs = ["%s"],
    includes = %r,
    deps = [":tf_header_lib"],
)
""" % (_XLA_LIBRARY, ["include/" + d for d in xla_subdirs.split(" ") if d])
    else:
        xla_library = """
# No XLA lowerings: %s
cc_library(name = "xla")
""" % no_xla_reason
    rctx.file("version.bzl", "TF_VERSION = %r\nXLA = %r\nXLA_FFI = %r\n" %
              (version, has_xla, not no_ffi_reason))
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "tf_header_lib",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.inc",
                 "include/Eigen/**", "include/unsupported/**"]),
    includes = ["include"],
    defines = %r,
)

cc_library(
    name = "libtensorflow_framework",
    srcs = ["libtensorflow_framework.so.2"],
)
""" % [d[2:] for d in defines.split(" ") if d] + xla_library)

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = ["PYTHON_BIN_PATH", "CXX", "TF_FBN_OPS_XLA", "TF_FBN_OPS_XLA_FFI"],
    local = True,
)
