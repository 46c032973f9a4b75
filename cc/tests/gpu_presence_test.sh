#!/usr/bin/env bash
# How the GPU test decides to run, skip or fail (cc/tests/gpu_presence.h), on machines that the
# host emulator pretends to be (FBN_EMU_MACHINE, see cc/tests/gpu_emulator/emulator.cc): without
# a GPU or an NVIDIA driver it must skip, and fail under FBN_REQUIRE_GPU=1; a driver older than
# the CUDA runtime must fail either way, naming both versions.
# Usage: cc/tests/gpu_presence_test.sh build/gpu_emu_test
set -u
binary=$1
failures=0

# expect EXIT_STATUS TEXT MACHINE FBN_REQUIRE_GPU
expect() {
  local output status
  output=$(FBN_EMU_MACHINE=$3 FBN_REQUIRE_GPU=$4 "$binary" 2>&1)
  status=$?
  if [[ $status == "$1" && $output == *"$2"* ]]; then
    echo "PASS: machine $3, FBN_REQUIRE_GPU=$4: exit $status, says '$2'"
  else
    echo "FAIL: machine $3, FBN_REQUIRE_GPU=$4: exit $status (want $1), said: $output"
    failures=$((failures + 1))
  fi
}

expect 0 "SKIP: no CUDA GPU (no CUDA-capable device" no-device 0
expect 1 "FAIL: no CUDA GPU (no CUDA-capable device" no-device 1
expect 0 "SKIP: no CUDA GPU (no NVIDIA driver installed)" no-driver 0
expect 1 "FAIL: no CUDA GPU (no NVIDIA driver installed)" no-driver 1
old="FAIL: CUDA driver version is insufficient for CUDA runtime version"
expect 1 "$old (driver for CUDA 12.4, runtime CUDA 13.0)" old-driver 0
expect 1 "$old (driver for CUDA 12.4, runtime CUDA 13.0)" old-driver 1
echo "gpu_presence_test: $((6 - failures)) passed, $failures failed"
exit $((failures > 0))
