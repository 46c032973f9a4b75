"""Repository rule: the CUDA toolkit, switched on by TF_NEED_CUDA=1.

The toolkit is CUDA_HOME if set, else the one the nvcc on PATH belongs to (asked from nvcc
itself, as setup.py does, since the nvcc on PATH may be a wrapper script). Exposes nvcc, the
static CUDA runtime and build_defs.bzl's if_cuda(); with CUDA off, the targets are empty.
"""

def _toolkit_root(rctx):
    if rctx.os.environ.get("CUDA_HOME"):
        return rctx.os.environ["CUDA_HOME"]
    nvcc = rctx.which("nvcc")
    if not nvcc:
        fail("cuda_configure: TF_NEED_CUDA=1 but no CUDA_HOME and no nvcc on PATH")
    result = rctx.execute([nvcc, "--dryrun", "-c", "-x", "cu", "/dev/null", "-o", "/dev/null"])
    for line in (result.stdout + result.stderr).splitlines():
        if line.startswith("#$ TOP="):
            return line[len("#$ TOP="):].strip()
    fail("cuda_configure: could not find the toolkit of %s" % nvcc)

def _cuda_configure_impl(rctx):
    if rctx.os.environ.get("TF_NEED_CUDA", "0") != "1":
        rctx.file("build_defs.bzl", "def if_cuda(if_true, if_false = []):\n    return if_false\n")
        rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cudart_static")
filegroup(name = "nvcc")
""")
        return
    root = _toolkit_root(rctx)
    rctx.symlink(root, "cuda")
    lib = "lib64" if rctx.path(root + "/lib64/libcudart_static.a").exists else \
          "targets/x86_64-linux/lib"
    rctx.file("build_defs.bzl", "def if_cuda(if_true, if_false = []):\n    return if_true\n")
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
filegroup(name = "nvcc", srcs = ["cuda/bin/nvcc"])
cc_library(
    name = "cudart_static",
    srcs = ["cuda/%s/libcudart_static.a"],
    linkopts = ["-ldl", "-lrt", "-lpthread"],
)
""" % lib)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["TF_NEED_CUDA", "CUDA_HOME", "PATH"],
    local = True,
)
