// The AVX-512 (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4 and later) copy of the CPU loops.
// Compiled with GCC's target pragma rather than per-file flags, so every build (setup.py, Bazel,
// the Makefile's test programs) makes it the same way; cpu_loops.cc picks it only on CPUs that
// have the instructions. Other compilers get no copy here (Loops() returns null) and use the
// portable one.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cc/core/cpu/cpu_loops.h"
#include "cc/core/cpu/forward_loops.h"
#include "cc/core/cpu/streaming_stores.h"
#include "cc/core/float16_convert.h"

namespace fbn {
namespace isa_avx512 {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
// GCC 12's own AVX-512 conversion and extraction intrinsics trip -Wmaybe-uninitialized and
// -Wuninitialized (their undefined pass-through operand); nothing of ours is uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl")
#define FBN_SIMD_AVX512 1
#include "cc/core/cpu/cpu_loops_impl.h"
#include "cc/core/cpu/forward_loops_impl.h"
#undef FBN_SIMD_AVX512
#pragma GCC diagnostic pop
#pragma GCC pop_options
#else
template <typename T>
const CpuLoops<T>* Loops() {
  return nullptr;
}
FBN_INSTANTIATE_LOOPS()
template <typename T>
const CpuForwardLoops<T>* ForwardLoops() {
  return nullptr;
}
FBN_INSTANTIATE_FORWARD_LOOPS()
#endif

}  // namespace isa_avx512
}  // namespace fbn
