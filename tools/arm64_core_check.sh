#!/usr/bin/env bash
# `make arm64-core-test`: the CPU core (no TensorFlow) built for Linux AArch64 with Debian's cross
# compiler and run under qemu's user-mode emulation: its test (core_test), and its outputs
# against this machine's, bit for bit (core_digest: 924 cases, every dtype, layout and mode,
# exact and fast paths, in place, serial and split). On AArch64 the core's portable copy is the
# only one; GCC compiles its 4-lane vectors to NEON, with the same operations in the same order
# as every x86 copy (-ffp-contract=off: no fused multiply-add), so the bits must match.
# Installs g++-aarch64-linux-gnu and qemu-user-static with apt where they are missing (root).
# Times under emulation say nothing about an Arm server's speed: there, run
# `python -m tf_fbn_ops bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
if [[ ${#missing[@]} -gt 0 ]]; then
  apt-get install -y -q "${missing[@]}" >/dev/null
fi
# The core's folders and flags, from the build description (build_support/generated/build.mk).
described() { sed -n "s/^$1 := //p" build_support/generated/build.mk; }
read -ra core_dirs <<<"$(described CORE_DIRS)"
core=()
for dir in "${core_dirs[@]}"; do core+=("$dir"/*.cc); done
read -ra flags <<<"$(described LANGUAGE_FLAGS) $(described EXACT_FLAGS)"
flags+=(-I. -pthread -O2 -Wall -Wextra)
mkdir -p build/aarch64
for program in core_test core_stages_test core_forward_test core_digest; do
  aarch64-linux-gnu-g++ "${flags[@]}" "${core[@]}" "cc/tests/$program.cc" -o "build/aarch64/$program"
done
g++ "${flags[@]}" "${core[@]}" cc/tests/core_digest.cc -o build/core_digest
run_arm64() { qemu-aarch64-static -L /usr/aarch64-linux-gnu "$@"; }
run_arm64 build/aarch64/core_test | tail -1
run_arm64 build/aarch64/core_stages_test | tail -1
run_arm64 build/aarch64/core_forward_test | tail -1
# Per-case lines only: the last line names the instruction set, which differs by design.
run_arm64 build/aarch64/core_digest | tee build/aarch64/core_digest.txt | tail -1
status=0
for isa in baseline avx2 avx512; do
  TF_FBN_OPS_CPU_ISA=$isa ./build/core_digest >"build/core_digest_$isa.txt"
  if diff -q <(head -n -1 "build/core_digest_$isa.txt") \
             <(head -n -1 build/aarch64/core_digest.txt) >/dev/null; then
    echo "x86-64 $(tail -1 "build/core_digest_$isa.txt" | sed 's/core_digest: //'): same bits"
  else
    echo "x86-64 $isa: DIFFERS from AArch64 (build/core_digest_$isa.txt)"
    status=1
  fi
done
exit $status
