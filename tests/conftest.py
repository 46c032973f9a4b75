"""Test-session set-up: TensorFlow's stock CPU kernels unless the caller chose otherwise.

The error-text and parity tests compare against TensorFlow's stock ("Eigen") kernels, which run
only with oneDNN off; TF_ENABLE_ONEDNN_OPTS is read once, at import, so it is set here before
anything imports TensorFlow. The oneDNN comparison runs in a worker process (see
tests/tf_reference_worker.py).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# On a GPU the Keras tests compare two models' float32 training, and compare one model's
# predictions across processes, bit for bit; the convolutions around batch norm must then
# compute the same way each time. TensorFloat-32 (cuDNN's and cuBLAS's default on Ampere and
# newer) rounds their inputs to 10 bits of mantissa, so two programs that pick different
# algorithms part by 1e-3; cuDNN's autotuning picks algorithms by timing, per process. Both off
# here and, through the environment, in every process the tests start (TensorFlow's own switch
# for TF32 is set in `float32_convolutions` below). Nothing here touches our kernels.
os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
os.environ.setdefault("TF_CUDNN_USE_AUTOTUNE", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The research benchmark harness (benchmarks/harness/), which lives beside the package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
# build_support/ (the build description), last: a tf_fbn_ops found earlier (the sanitized build's,
# an installed wheel's) stays the one imported.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from build_support import build_description  # noqa: E402


@pytest.fixture(scope="session")
def emulated_gpu_core(tmp_path_factory) -> Path:
    """The CUDA core's C entry (benchmarks/gpu_peers/core_capi.cu) built against the host
    emulator: the "device" buffers it takes are host memory."""
    root = Path(__file__).resolve().parents[1]
    library = tmp_path_factory.mktemp("gpu_core") / "libfbn_core_emu.so"
    subprocess.run(["g++", *build_description.LANGUAGE_FLAGS, *build_description.EXACT_FLAGS,
                    f"-I{root}", "-O1", "-shared", "-fPIC", "-Wno-unknown-pragmas",
                    f"-I{root / 'cc/tests/gpu_emulator'}",
                    "-x", "c++", *(str(root / s) for s in build_description.sources("core_cuda")),
                    str(root / "benchmarks/gpu_peers/core_capi.cu"),
                    "-x", "none", str(root / "cc/tests/gpu_emulator/emulator.cc"),
                    "-o", str(library)], check=True)
    return library


@pytest.fixture(scope="session", autouse=True)
def float32_convolutions():
    """TensorFlow's own TF32 switch off too: XLA reads it when it compiles a convolution (its
    precision), which NVIDIA_TF32_OVERRIDE does not reach."""
    import tensorflow as tf  # noqa: PLC0415 (after the environment above)

    tf.config.experimental.enable_tensor_float_32_execution(False)
