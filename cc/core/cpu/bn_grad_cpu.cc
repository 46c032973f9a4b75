// The production CPU kernels: how the work of one call is cut into units, in which order the
// units run, and how partial sums are combined. The schedules live in bn_grad_cpu_fast.cc and
// bn_grad_cpu_exact.cc, what they share in bn_grad_cpu_call.h, the innermost loops in
// cpu_loops_impl.h; this file chooses the family and handles empty calls.
//
// Both layouts are handled natively, never transposed, by one of three schedules:
//   rows    channels last [R, C]: blocks of whole rows, vectorized across the channels, with
//           per-column means, coefficients and sums. Rows narrower than kMinRowWidth are
//           folded, k rows into one, so that short rows do not cost a loop start each.
//   runs    channels first [N, C, S]: a unit walks each channel plane by plane.
//   planes  channels first with planes too short for runs (S < kShortPlane): the rows loops on
//           the [N, C * S] matrix, a unit being a group of channels whose planes make a row of
//           at most kMaxUnitColumns columns.
// Channels with fewer than kFastPathRest elements take the exact family of loops (see
// cpu_loops.h) in the same shapes of units, each holding whole channels; its planes schedule
// takes planes shorter than a vector (RunExactPlanes).
//
// Memory traffic is what limits these kernels, so the schedules are about bytes:
//   - A unit that holds all of its channels' elements and whose x and dy fit in the L2 cache
//     (kFusedUnitBytes) sums them and writes their x_backprop right away, so main memory sees
//     x and dy once: every channels-first unit where the channels allow it, and the exact
//     family's channels-last training in strips of columns where there are enough of them.
//   - Otherwise training makes two sweeps, sums then x_backprop; the second visits the units
//     in reverse, starting with the data the first sweep touched last and left in the caches.
//   - Inference needs no sums for x_backprop: one sweep computes both.
// The stages of synchronized batch norm (Stage, bn_grad.h) run the same units: kSums only the
// sums (the first sweep), kDxFromSums only x_backprop (the second sweep, or the x_backprop half
// of a fused unit), from coefficients made of the global sums.
//
// Determinism: units depend on the shape only, each unit writes its own partial sums, and
// partials are combined per channel in unit order. The thread count changes which thread runs
// a unit, never the bits of the result. (Channels-first inference sizes its groups by the thread
// count too: each holds whole channels, so no channel's sums depend on the groups.)
#include <algorithm>

#include "cc/core/bn_grad.h"
#include "cc/core/cpu/bn_grad_cpu_call.h"
#include "cc/core/cpu/cpu_loops.h"
#include "cc/core/cpu/streaming_stores.h"
#include "cc/core/ieee_arithmetic.h"

namespace fbn {

ParallelFor SerialFor() {
  return {[](int64_t count, int64_t /*cost_per_unit*/, const RangeFn& fn) {
            if (count > 0) fn(0, count);
          },
          1};
}

template <typename T>
void BatchNormGradCpuWithLoops(const Params& params, const Tensors<T>& t,
                               const ParallelFor& parallel_for, const CpuLoops<T>& loops,
                               const MemoryRules& rules) {
  ScopedIeeeArithmetic ieee;
  const Shape s = params.shape.canonical();
  if (s.elements() == 0) {
    switch (params.stage) {
      case Stage::kWhole:
        std::fill(t.scale_backprop, t.scale_backprop + s.channels, 0.0f);
        std::fill(t.offset_backprop, t.offset_backprop + s.channels, 0.0f);
        return;
      case Stage::kSums:  // a replica with an empty batch adds nothing
        std::fill(t.sum_dy, t.sum_dy + s.channels, 0.0);
        std::fill(t.sum_dy_xc, t.sum_dy_xc + s.channels, 0.0);
        return;
      case Stage::kDxFromSums:  // no x_backprop, but the global gradients all the same
        return grad_cpu::Call<T, double>(params, t, parallel_for, loops, rules)
            .FinishFromGlobalSums();
    }
  }
  if (s.rest() < kFastPathRest) {
    return grad_cpu::RunExactFamily(
        grad_cpu::Call<T, double>(params, t, parallel_for, loops, rules));
  }
  grad_cpu::RunFastFamily(grad_cpu::Call<T, float>(params, t, parallel_for, loops, rules));
}

template <typename T>
void BatchNormGradCpu(const Params& params, const Tensors<T>& t, const ParallelFor& parallel_for) {
  BatchNormGradCpuWithLoops(params, t, parallel_for, LoopsFor<T>(ActiveCpuIsa()),
                            KernelMemoryRules());
}

#define FBN_INSTANTIATE_CPU(T)                                                                 \
  template void BatchNormGradCpu<T>(const Params&, const Tensors<T>&, const ParallelFor&);     \
  template void BatchNormGradCpuWithLoops<T>(const Params&, const Tensors<T>&,                 \
                                             const ParallelFor&, const CpuLoops<T>&,           \
                                             const MemoryRules&);
FBN_INSTANTIATE_CPU(float)
FBN_INSTANTIATE_CPU(Half)
FBN_INSTANTIATE_CPU(BFloat16)
#undef FBN_INSTANTIATE_CPU

}  // namespace fbn
