"""Repository rule: TensorFlow's headers and libtensorflow_framework from a Python environment.

Everything comes from tf.sysconfig of the interpreter in PYTHON_BIN_PATH (python3 on PATH
otherwise): include and library folders, and the -D flags of get_compile_flags(), as setup.py
uses them. Also writes version.bzl with TF_VERSION, for the build-info file.
"""

_PROBE = """
import tensorflow as tf
print(tf.sysconfig.get_include())
print(tf.sysconfig.get_lib())
print(tf.__version__)
print(" ".join(f for f in tf.sysconfig.get_compile_flags() if f.startswith("-D")))
"""

def _tf_configure_impl(rctx):
    python = rctx.os.environ.get("PYTHON_BIN_PATH") or rctx.which("python3")
    if not python:
        fail("tf_configure: set --repo_env=PYTHON_BIN_PATH to a Python with TensorFlow")
    result = rctx.execute([python, "-c", _PROBE], environment = {"TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.return_code != 0:
        fail("tf_configure: %s could not import TensorFlow:\n%s" % (python, result.stderr))
    include, lib, version, defines = result.stdout.strip().splitlines()[-4:]
    rctx.symlink(include, "include")
    rctx.symlink(lib + "/libtensorflow_framework.so.2", "libtensorflow_framework.so.2")
    rctx.file("version.bzl", "TF_VERSION = %r\n" % version)
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
""" % [d[2:] for d in defines.split(" ") if d])

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = ["PYTHON_BIN_PATH"],
    local = True,
)
