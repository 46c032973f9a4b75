// What the CPU gradient's schedules (bn_grad_cpu_fast.cc, bn_grad_cpu_exact.cc) share: how a
// call's work is cut into pieces, per-column copies of per-channel values, and the call itself
// (its inputs, the loops for this CPU, running units on the pool, finishing a channel from its
// sums). bn_grad_cpu.cc says how the schedules are chosen and why.
#ifndef TF_FBN_OPS_CC_CORE_CPU_BN_GRAD_CPU_CALL_H_
#define TF_FBN_OPS_CC_CORE_CPU_BN_GRAD_CPU_CALL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cc/core/bn_grad.h"
#include "cc/core/ceil_div.h"
#include "cc/core/cpu/call_scratch.h"
#include "cc/core/cpu/cpu_loops.h"
#include "cc/core/cpu/cpu_sweeps.h"
#include "cc/core/cpu/streaming_stores.h"
#include "cc/core/float16_convert.h"

namespace fbn {
namespace grad_cpu {

// About this many elements per unit of work (fewer units for tiny calls).
constexpr int64_t kUnitElements = int64_t{1} << 15;
// Upper bound on blocks per channel: bounds the scratch to O(C * kMaxBlocks).
constexpr int64_t kMaxBlocks = 64;
// Rough cycles per element, for the pool's cost model.
constexpr int64_t kCyclesPerElement = 4;

// [0, length) cut into pieces of `size` items (`align` divides every piece but the last).
// Tapered, about the last quarter of the items go in pieces a quarter that size: threads that
// take pieces one at a time then finish within a small piece of each other, where equal pieces
// could leave one thread idle for most of a piece at the end (13 pieces on 2 threads: 7 % of
// the call).
struct Pieces {
  int64_t length = 0;
  int64_t size = 1;   // items per piece (the tapered tail's are smaller)
  int64_t count = 0;
  int64_t large = 0;  // pieces of `size` items, before the tail
  int64_t small = 1;  // items per piece of the tail

  Pieces() = default;
  Pieces(int64_t total, int64_t per_piece, int64_t align, bool taper)
      : length(total), size(per_piece), count(CeilDiv(total, per_piece)), large(count),
        small(per_piece) {
    if (!taper || count < 4) return;
    large = count - CeilDiv(count, 4);
    small = std::max(align, RoundUp(size / 4, align));
    count = large + CeilDiv(total - large * size, small);
  }
  int64_t begin(int64_t p) const {
    return p < large ? p * size : large * size + (p - large) * small;
  }
  int64_t end(int64_t p) const {
    return std::min(length, begin(p) + (p < large ? size : small));
  }
};

// Blocks of `total` items for one channel's worth of work: about `per_block` items each (a
// multiple of `align`), at most kMaxBlocks of them before any taper.
inline Pieces Blocks(int64_t total, int64_t per_block, int64_t align, bool taper = false) {
  const int64_t wanted = std::clamp<int64_t>(CeilDiv(total, per_block), 1, kMaxBlocks);
  return Pieces(total, RoundUp(CeilDiv(total, wanted), align), align, taper);
}

// Groups of `per_group` consecutive channels.
inline Pieces Groups(int64_t channels, int64_t per_group) {
  return Pieces(channels, per_group, 1, /*taper=*/false);
}

// Per-column copies of per-channel values (rows and planes schedules).
template <typename F>
struct Columns {
  F* mean;
  F* scale_inv_std;
  F* dy_mean;
  F* xc_coef;
  DxCoefficients<F> coefficients() const { return {mean, scale_inv_std, dy_mean, xc_coef}; }
};

// One call: the inputs, the loops for this CPU, and what every schedule shares: per-channel
// values in F (float for the fast family, double for the exact one), running units on the
// pool, and turning a channel's sums into its outputs and coefficients.
template <typename T, typename F>
class Call {
 public:
  Call(const Params& params, const Tensors<T>& t, const ParallelFor& parallel_for,
       const CpuLoops<T>& loops, const MemoryRules& rules)
      : t(t),
        loops(loops),
        s(params.shape.canonical()),
        training(params.is_training),
        stage(params.stage),
        stream_dx(StreamDx(s, t, rules.streaming_footprint)),
        dx_order(3 * s.elements() * kElementBytes <= rules.grouped_bytes
                     ? RowOrder::kByGroups
                     : RowOrder::kInOrder),
        exact_strips(rules.exact_strips),
        params_(params),
        parallel_for_(parallel_for) {
    const int64_t C = s.channels;
    inv_std_ = CallScratch<double, kInvStdSlot>(C);
    F* values = CallScratch<F, kChannelSlot>(4 * C);
    mean = values;
    scale_inv_std = values + C;
    dy_mean = values + 2 * C;
    xc_coef = values + 3 * C;
    // kSums reads neither scale nor variance (its tensors may not hold them).
    const bool sums_only = params.stage == Stage::kSums;
    for (int64_t c = 0; c < C; ++c) {
      inv_std_[c] = sums_only ? 0.0 : params_.InvStd(t.variance[c]);
      mean[c] = static_cast<F>(t.mean[c]);
      scale_inv_std[c] = sums_only ? F(0) : static_cast<F>(t.scale[c] * inv_std_[c]);
      dy_mean[c] = F(0);
      xc_coef[c] = F(0);
    }
  }

  // Runs unit(u) for u in [0, count), then the parts of `then`, through the pool or inline
  // when the call is tiny.
  void RunUnits(int64_t count, int64_t unit_elements, const UnitFn& unit,
                const BetweenStep& then = {}) const {
    RunSweeps(parallel_for_, PlanOf(count, unit_elements), unit, then);
  }

  // Training's two sweeps over the same units in one pool call (cpu_sweeps.h): first(u) for
  // every unit, then the step's parts, then second(u) for every unit, a thread's own units of
  // the first sweep first, the latest first, whose data the caches are most likely to hold.
  void RunTwoSweeps(int64_t count, int64_t unit_elements, const UnitFn& first,
                    const BetweenStep& between, const UnitFn& second) const {
    RunSweeps(parallel_for_, PlanOf(count, unit_elements), first, between, second);
  }

  // Whether x_backprop waits for the sums (training's coefficients) and is written by this call.
  bool TrainingDx() const { return training && stage != Stage::kSums; }
  // Whether the sums are formed here (all but kDxFromSums, which is given them).
  bool Sums() const { return stage != Stage::kDxFromSums; }
  // The threads the pool may run units on.
  int64_t threads() const { return parallel_for_.threads; }

  // Channel c's outputs, and in training its coefficients, from its sums (kSums: the sums
  // are the output).
  void Finish(int64_t c, double sum_dy, double sum_dy_xc) const {
    // A NaN sum becomes the default quiet NaN: which of several NaN inputs' payloads would
    // survive depends on operand order inside vector instructions, which must not decide bits.
    if (std::isnan(sum_dy)) sum_dy = std::numeric_limits<double>::quiet_NaN();
    if (std::isnan(sum_dy_xc)) sum_dy_xc = std::numeric_limits<double>::quiet_NaN();
    if (stage == Stage::kSums) {
      t.sum_dy[c] = sum_dy;
      t.sum_dy_xc[c] = sum_dy_xc;
      return;
    }
    const double count = static_cast<double>(
        stage == Stage::kDxFromSums ? params_.global_count : s.rest());
    ChannelGradients g = GradientsFromSums(sum_dy, sum_dy_xc, inv_std_[c], count);
    if (stage == Stage::kDxFromSums) {
      ScaleOffsetFromSums(t.replica_sum_dy[c], t.replica_sum_dy_xc[c], inv_std_[c], &g);
    }
    t.offset_backprop[c] = g.offset_backprop;
    t.scale_backprop[c] = g.scale_backprop;
    if (!training) return;
    // var + eps == 0: that channel summed again in TF's grouping (one call only: the global
    // sums leave no terms to regroup).
    if (std::isinf(inv_std_[c]) && stage == Stage::kWhole) {
      t.scale_backprop[c] = static_cast<float>(ScaledSumInTfOrder(
          s, t, c, inv_std_[c], [](T v) { return static_cast<double>(ToFloat(v)); }));
    }
    dy_mean[c] = static_cast<F>(g.dy_mean);
    xc_coef[c] = static_cast<F>(g.xc_coef);
  }

  // kDxFromSums: every channel finished from the global sums, before any x_backprop.
  void FinishFromGlobalSums() const {
    for (int64_t c = 0; c < s.channels; ++c) {
      Finish(c, t.global_sum_dy[c], t.global_sum_dy_xc[c]);
    }
  }

  // Fills columns [0, count) of `columns` with the values of channel channel_of(j); the
  // training coefficients too if asked (they exist once the channels are finished).
  template <typename ChannelOf>
  void Expand(const Columns<F>& columns, int64_t count, ChannelOf&& channel_of,
              bool coefficients) const {
    for (int64_t j = 0; j < count; ++j) {
      const int64_t c = channel_of(j);
      columns.mean[j] = mean[c];
      columns.scale_inv_std[j] = scale_inv_std[c];
      if (coefficients) {
        columns.dy_mean[j] = dy_mean[c];
        columns.xc_coef[j] = xc_coef[c];
      }
    }
  }

  const Tensors<T>& t;
  const CpuLoops<T>& loops;
  const Shape s;  // canonical
  const bool training;
  const Stage stage;
  // x_backprop is written with non-temporal stores (StreamDx).
  const bool stream_dx;
  // How training's x_backprop goes through the rows (MemoryRules: by groups where x,
  // y_backprop and x_backprop all fit).
  const RowOrder dx_order;
  // The exact family's training may go by strips of columns (MemoryRules).
  const bool exact_strips;
  // Per channel: mean, scale · inv_std, and (training, once finished) the dx coefficients.
  F* mean = nullptr;
  F* scale_inv_std = nullptr;
  F* dy_mean = nullptr;
  F* xc_coef = nullptr;

 private:
  // Whether x_backprop is streamed (streaming_stores.h): where it can be, beyond the footprint
  // of the call's three tensors.
  static bool StreamDx(const Shape& s, const Tensors<T>& t, int64_t streaming_footprint) {
    const int64_t row = s.channels_last ? s.channels : s.spatial;
    return CanStream(t.x_backprop, t.y_backprop, row * kElementBytes) &&
           3 * s.elements() * kElementBytes > streaming_footprint;
  }
  static constexpr int64_t kElementBytes = sizeof(T);

  SweepPlan PlanOf(int64_t count, int64_t unit_elements) const {
    return {count, unit_elements * kCyclesPerElement, s.elements() <= kInlineElements};
  }

  const Params& params_;
  const ParallelFor& parallel_for_;
  double* inv_std_ = nullptr;
};

// Each family's schedules for one call, the schedule chosen from the shape: channels of at
// least kFastPathRest elements (cpu_loops.h) in float, bn_grad_cpu_fast.cc; fewer, exact, in
// double, bn_grad_cpu_exact.cc.
template <typename T>
void RunFastFamily(const Call<T, float>& call);
template <typename T>
void RunExactFamily(const Call<T, double>& call);

}  // namespace grad_cpu
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_BN_GRAD_CPU_CALL_H_
