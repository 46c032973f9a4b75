#!/usr/bin/env bash
# Everything the CUDA core can show on a machine with an NVIDIA GPU and nvcc (TensorFlow is not
# needed), in one command, with every output kept: the driver, the GPU test with the tensors of
# more than 2^31 elements, compute-sanitizer's memcheck, racecheck and synccheck on the test,
# the benchmark, the benchmark against cuDNN and PyTorch on the same GPU (PyTorch with CUDA
# needed for that step), and the XLA FFI handlers registered into JAX's XLA:GPU (jax[cuda] needed;
# XLA's FFI headers come with the tree in build/xla_ffi_include, copied by `make lib` elsewhere).
# Builds for the GPU present only (its compute capability), which is quicker.
#
# Usage: tools/gpu_report.sh DIR [STEP ...]
#   STEP: driver build test sanitize bench peers jax (default: all, in that order; build is added first
#   when a step that runs the programs is named without it). Writes DIR/STEP.txt for each
#   step, and DIR/summary.txt with each step's exit status; exits 1 if any step failed. Every
#   step needs the GPU: FBN_REQUIRE_GPU=1 is set, so a machine without one fails, not skips.
#   FBN_SANITIZER_TIMEOUT (seconds, default 240) bounds each compute-sanitizer run.
set -u
[[ $# -ge 1 ]] || { sed -n 2,15p "$0"; exit 2; }
dir=$(realpath -m "$1")
shift
cd "$(dirname "$0")/.."
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(driver build test sanitize bench peers jax)
for step in "${steps[@]}"; do
  [[ $step =~ ^(driver|build|test|sanitize|bench|peers|jax)$ ]] ||
    { echo "unknown step '$step' (driver build test sanitize bench peers jax)"; exit 2; }
done
mkdir -p "$dir"
export FBN_REQUIRE_GPU=1
# nvcc: CUDA_HOME's, else PATH's (the Makefile's rule), else where CUDA installs itself.
command -v nvcc >/dev/null || export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
toolkit=${CUDA_HOME:-/usr/local/cuda}

build() {
  local cap
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
  make ${cap:+GPU_ARCHS=$cap} build/gpu_core_test build/gpu_bench build/gpu_peers/libfbn_core.so
  make ${cap:+GPU_ARCHS=$cap} XLA_FFI_CUDA=1 xla-ffi-lib
}

sanitize() {
  local tool sanitizer status=0
  sanitizer=$(command -v compute-sanitizer) || sanitizer=$toolkit/bin/compute-sanitizer
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer --tool $tool"
    FBN_KERNELS_SERIALIZED=1 timeout "${FBN_SANITIZER_TIMEOUT:-240}" "$sanitizer" \
      --tool "$tool" --error-exitcode 1 ./build/gpu_core_test
    case $? in
      0) echo "== $tool: clean" ;;
      124) status=1; echo "== $tool: timed out" ;;
      *) status=1; echo "== $tool: FAILED" ;;
    esac
  done
  return $status
}

run_step() {
  case $1 in
    driver) nvidia-smi ;;
    build) build ;;
    test) FBN_GPU_TEST_LARGE=1 ./build/gpu_core_test ;;
    sanitize) sanitize ;;
    bench) ./build/gpu_bench ;;
    peers) python3 benchmarks/gpu_peers/peers.py ;;
    jax) python3 tools/jax_ffi_check.py build/libtf_fbn_ops_xla_ffi.so --platform cuda --time \
           --core build/gpu_peers/libfbn_core.so \
           --out "$dir/jax_ffi.json" &&
         python3 tools/jax_sync_ffi_check.py build/libtf_fbn_ops_xla_ffi.so --platform cuda &&
         python3 tools/jax_forward_ffi_check.py build/libtf_fbn_ops_xla_ffi.so --platform cuda ;;
  esac
}

# The programs are (re)built before any step that runs them, unless the list says when.
if [[ " ${steps[*]} " =~ \ (test|sanitize|bench|peers|jax)\  && ! " ${steps[*]} " =~ \ build\  ]]; then
  steps=(build "${steps[@]}")
fi
failed=0
: >"$dir/summary.txt"
for step in "${steps[@]}"; do
  start=$SECONDS
  run_step "$step" >"$dir/$step.txt" 2>&1
  status=$?
  failed=$((failed || status != 0))
  echo "$step: exit $status, $((SECONDS - start)) s; last line: $(tail -1 "$dir/$step.txt")" |
    tee -a "$dir/summary.txt"
done
exit $failed
