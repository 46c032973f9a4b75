"""Parity smoke test against the installed TensorFlow's tf.raw_ops (run by tools/tf_matrix.py
in each version's environment, by tools/wheel_smoke.py on an installed wheel, and by Bazel's
parity_smoke_test; needs only NumPy and TensorFlow): the self-check's CPU cases
(tf_fbn_ops/cli/self_check.py), that is all three ops, float32 and float16/bfloat16, NHWC and NCHW,
training and inference. A case passes when the shim's error against a float64 oracle is at
most TensorFlow's plus one unit of the output type, five runs give the same bits, and a graph
whose y_backprop dies at the op (x_backprop may take over its buffer) gives the same bits.
Where the loaded library has XLA lowerings, every case runs once more under
tf.function(jit_compile=True) with the same bound, and "XLA_PATH" says what the op compiled to
(custom calls of the kernels, or the HLO lowering). Prints "SMOKE passed/total" and
"XLA passed/total" (or "XLA none") and exits non-zero on any failure.

Usage: python tf_matrix_smoke.py [LIBRARY.so]  (a library built elsewhere, e.g. by Bazel)
"""

import os
import sys

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if len(sys.argv) > 1:
    os.environ["TF_FBN_OPS_LIBRARY"] = os.path.abspath(sys.argv[1])

import tensorflow as tf  # noqa: E402

import tf_fbn_ops  # noqa: E402
from tf_fbn_ops.cli import self_check  # noqa: E402


def has_xla_lowerings() -> bool:
    """Whether the loaded library registered kernels for XLA's CPU device (asked of TensorFlow's
    kernel registry, so it holds for a library built by Bazel too)."""
    from tensorflow.python.framework import kernels

    tf_fbn_ops.load_library()
    registered = kernels.get_registered_kernels_for_op("FbnFusedBatchNormGradV3").kernel
    return any(k.device_type == "XLA_CPU_JIT" for k in registered)


def compiled_path() -> str:
    """What XLA compiles the op to here, read from the HLO of a small compiled call."""
    ones = tf.ones([1, 2, 2, 3])
    compiled = tf.function(lambda: tf_fbn_ops.fused_batch_norm_grad_v3(
        ones, ones, tf.ones([3]), tf.zeros([3]), tf.ones([3]), tf.zeros([0]))[0],
        jit_compile=True)
    hlo = compiled.experimental_get_compiler_ir()(stage="hlo")
    target = 'custom_call_target="tf_fbn_ops_batch_norm_grad"'
    return "custom calls of the kernels" if target in hlo else "the HLO lowering"


def main() -> int:
    xla = has_xla_lowerings()
    tf.get_logger().setLevel("ERROR")  # each case traces its own functions, on purpose
    results = self_check.run_op_cases(tf, tf_fbn_ops, "/device:CPU:0", xla)
    total = results["parity"][0]
    failed = {False: set(), True: set()}
    for name, (_, failures) in results.items():
        for failure in failures:
            print("FAIL", failure)
            failed[name == "XLA parity"].add(failure.split(": ")[0])  # the case it names
    print(f"library {tf_fbn_ops.library_path()}")
    print(f"SMOKE {total - len(failed[False])}/{total} TensorFlow {tf.__version__}")
    print(f"XLA {total - len(failed[True])}/{total}" if xla else "XLA none")
    if xla:
        print(f"XLA_PATH {compiled_path()}")
    return 1 if failed[False] or failed[True] else 0


if __name__ == "__main__":
    sys.exit(main())
