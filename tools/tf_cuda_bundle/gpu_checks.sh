#!/usr/bin/env bash
# On a GPU machine, once assemble.py has unpacked the bundle into DEST: TensorFlow's CUDA build
# and our wheel (its files as pip lays them out; the library touches no Python C API, so a wheel
# tagged for another CPython serves), run from outside the checkout so that only the installed
# package can be imported. Writes OUT/tf_gpu.txt (versions, the GPU TensorFlow registered, our
# kernels per device, `python -m tf_fbn_ops info` and `check`), OUT/pytest.txt (tests/test_gpu.py:
# registration, parity with tf.raw_ops' cuDNN kernels, XLA:GPU on both lowerings, the Keras 3
# layer; tests/test_compiled_pairs.py, each gradient with TensorFlow's forward, eagerly and
# compiled together, on the CPU and the GPU; tests/test_keras_step_errors.py and
# tests/test_onednn_graph.py, the same on each device; tests/test_keras3.py, Keras training with
# our layer against Keras' own, here on the GPU) and OUT/keras_step_errors.txt (tools/keras_step_errors.py: a model's gradients and losses
# on the CPU and the GPU, TF32 on and off, graph and XLA, each layer and lowering, in float32
# units against float64). Exits non-zero when TensorFlow sees no GPU or any check fails.
#
# Usage: tools/tf_cuda_bundle/gpu_checks.sh DEST WHEEL OUT [PYTEST_ARGS ...]
set -u
[[ $# -ge 3 ]] || { sed -n 2,10p "$0"; exit 2; }
dest=$(realpath "$1")
wheel=$(realpath "$2")
out=$(realpath -m "$3")
shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
# shellcheck source=/dev/null
source "$dest/env.sh"
ours=$dest/ours
rm -rf "$ours" && mkdir -p "$ours"
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$wheel" "$ours" || exit 1
chmod +x "$ours"/tf_fbn_ops/*.so
export PYTHONPATH=$ours:$PYTHONPATH
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}
cd "$(mktemp -d)"

python3 - >"$out/tf_gpu.txt" 2>&1 <<'EOF'
import sys
import tensorflow as tf
from tensorflow.python.framework import kernels
import tf_fbn_ops
info = tf.sysconfig.get_build_info()
print("tensorflow", tf.__version__, "cuda", info.get("cuda_version"), "cudnn",
      info.get("cudnn_version"), "from", tf.__file__)
print("tf_fbn_ops from", tf_fbn_ops.__file__)
gpus = tf.config.list_physical_devices("GPU")
print("GPUs:", gpus)
for gpu in gpus:
    print(tf.config.experimental.get_device_details(gpu))
tf_fbn_ops.load_library()
for op in ("FbnFusedBatchNormGrad", "FbnFusedBatchNormGradV2", "FbnFusedBatchNormGradV3"):
    devices = sorted({k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel})
    print(op, devices)
sys.exit(0 if gpus else 1)
EOF
status=$?
echo "tensorflow sees a GPU: exit $status" | tee -a "$out/tf_gpu.txt"
{ python3 -m tf_fbn_ops info; python3 -m tf_fbn_ops check; } >>"$out/tf_gpu.txt" 2>&1 ||
  status=1
python3 -m pytest -q -p no:cacheprovider -rs "$root/tests/test_gpu.py" \
  "$root/tests/test_compiled_pairs.py" "$root/tests/test_keras_step_errors.py" \
  "$root/tests/test_onednn_graph.py" "$root/tests/test_keras3.py" "$@" \
  >"$out/pytest.txt" 2>&1 || status=1
python3 "$root/tools/keras_step_errors.py" >"$out/keras_step_errors.txt" 2>&1 || status=1
tail -3 "$out/pytest.txt"
exit $status
