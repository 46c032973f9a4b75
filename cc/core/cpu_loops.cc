// Picks the copy of the CPU loops for the CPU at hand (see cpu_loops.h).
#include "cc/core/cpu_loops.h"

#include <cstdlib>
#include <cstring>

namespace fbn {

void LaneSums::Clear() {
  for (int j = 0; j < kLanes; ++j) dy[j] = dy_xc[j] = 0.0;
}

void LaneSums::Reduce(double* sum_dy, double* sum_dy_xc) const {
  for (int j = 0; j < kLanes; ++j) {
    *sum_dy += dy[j];
    *sum_dy_xc += dy_xc[j];
  }
}

CpuIsa DetectedCpuIsa() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) {
    return CpuIsa::kBaseline;
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return CpuIsa::kAvx512;
  }
  return CpuIsa::kAvx2;
#endif
  return CpuIsa::kBaseline;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    default:
      return "baseline";
  }
}

CpuIsa ActiveCpuIsa() {
  static const CpuIsa active = [] {
    const CpuIsa detected = DetectedCpuIsa();
    const char* wanted = std::getenv("TF_FBN_OPS_CPU_ISA");
    if (wanted == nullptr) return detected;
    // Only a narrower copy than the CPU supports can be asked for.
    for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (std::strcmp(wanted, CpuIsaName(isa)) == 0 && isa <= detected) return isa;
    }
    return detected;
  }();
  return active;
}

template <typename T, typename F>
const CpuLoops<T, F>& LoopsFor(CpuIsa isa) {
  const CpuLoops<T, F>* loops = nullptr;
  if (isa == CpuIsa::kAvx512) loops = isa_avx512::Loops<T, F>();
  if (isa == CpuIsa::kAvx2) loops = isa_avx2::Loops<T, F>();
  return loops != nullptr ? *loops : *isa_baseline::Loops<T, F>();
}

#define FBN_INSTANTIATE_LOOPS_FOR(T)                              \
  template const CpuLoops<T, double>& LoopsFor<T, double>(CpuIsa); \
  template const CpuLoops<T, float>& LoopsFor<T, float>(CpuIsa);
FBN_INSTANTIATE_LOOPS_FOR(float)
FBN_INSTANTIATE_LOOPS_FOR(Half)
FBN_INSTANTIATE_LOOPS_FOR(BFloat16)
#undef FBN_INSTANTIATE_LOOPS_FOR

}  // namespace fbn
