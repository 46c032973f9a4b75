// Picks the copy of the CPU loops for the CPU at hand (see cpu_loops.h).
#include "cc/core/cpu/cpu_loops.h"
#include "cc/core/cpu/forward_loops.h"

#include <cstdlib>
#include <cstring>

namespace fbn {

void CompensatedSum::Add(double v) {
  const double t = sum + v;
  const double z = t - sum;
  if (t - t == 0.0) error += (sum - (t - z)) + (v - z);  // finite: keep the rounding error
  sum = t;
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

template <typename T>
const CpuLoops<T>& LoopsFor(CpuIsa isa) {
  const CpuLoops<T>* loops = nullptr;
  if (isa == CpuIsa::kAvx512) loops = isa_avx512::Loops<T>();
  if (isa == CpuIsa::kAvx2) loops = isa_avx2::Loops<T>();
  return loops != nullptr ? *loops : *isa_baseline::Loops<T>();
}

template const CpuLoops<float>& LoopsFor<float>(CpuIsa);
template const CpuLoops<Half>& LoopsFor<Half>(CpuIsa);
template const CpuLoops<BFloat16>& LoopsFor<BFloat16>(CpuIsa);

template <typename T>
const CpuForwardLoops<T>& ForwardLoopsFor(CpuIsa isa) {
  const CpuForwardLoops<T>* loops = nullptr;
  if (isa == CpuIsa::kAvx512) loops = isa_avx512::ForwardLoops<T>();
  if (isa == CpuIsa::kAvx2) loops = isa_avx2::ForwardLoops<T>();
  return loops != nullptr ? *loops : *isa_baseline::ForwardLoops<T>();
}

template const CpuForwardLoops<float>& ForwardLoopsFor<float>(CpuIsa);
template const CpuForwardLoops<Half>& ForwardLoopsFor<Half>(CpuIsa);
template const CpuForwardLoops<BFloat16>& ForwardLoopsFor<BFloat16>(CpuIsa);

}  // namespace fbn
