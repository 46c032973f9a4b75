// The production CPU kernels: how the work of one call is cut into units, in which order the
// units run, and how partial sums are combined. The innermost loops live in cpu_loops_impl.h.
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
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/ceil_div.h"
#include "cc/core/cpu/call_scratch.h"
#include "cc/core/cpu/cpu_loops.h"
#include "cc/core/cpu/cpu_sweeps.h"
#include "cc/core/float16_convert.h"
#include "cc/core/ieee_arithmetic.h"
#include "cc/core/cpu/streaming_stores.h"

namespace fbn {
namespace {

// About this many elements per unit of work (fewer units for tiny calls).
constexpr int64_t kUnitElements = int64_t{1} << 15;
// Rows wider than kMaxDownRowsWidth are summed in stripes (cpu_loops.h), which read memory as
// kFastGroup streams; blocks of them this large keep the streams long.
constexpr int64_t kStripedUnitElements = int64_t{1} << 17;
// A rows block has at least this many rows, so that its partial sums (two doubles per column)
// stay small next to the block's own data.
constexpr int64_t kMinBlockRows = 128;
// Upper bound on blocks per channel: bounds the scratch to O(C * kMaxBlocks).
constexpr int64_t kMaxBlocks = 64;
// Channels-first planes shorter than this go through the planes schedule: a run would fill
// too few of a vector's lanes.
constexpr int64_t kShortPlane = 16;
// Columns of a planes unit, and of an exact rows unit (their per-column arrays are on the stack).
constexpr int64_t kMaxUnitColumns = 1024;
// Channels-last rows are folded to at least this many columns.
constexpr int64_t kMinRowWidth = 64;
// Exact rows blocks have at least this many rows, so that their partial sums (four doubles
// per column) stay small next to the block's own data.
constexpr int64_t kExactMinBlockRows = 128;
// The exact rows' finish goes in parts (cpu_sweeps.h): 2048 channels in 8 parts, 0.1 MB of
// block sums each on 16x7x7x2048.
static_assert(kStepPartChannels % kColumnVector == 0, "step parts of whole column vectors");
// Channels per runs unit: at most this many, and few enough to make at least kMinGroupUnits
// units where the channels allow it.
constexpr int64_t kMaxGroupChannels = 64;
// Inference's runs units read each element once, so they need not fit the L2: each image's
// piece of a unit (one run of each of its channels, contiguous) is made at least this long.
// Read in short pieces the loop waits on memory at every jump from one image to the next (the
// hardware prefetchers start over, as far as a profile can tell). On an Intel Xeon
// (2026-12-02, one process, alternated) against the fused units' groups: 64x7x7x1024 0.86x
// the time at two threads, 64x5x5x1024 0.81x, 128x4x4x1024 0.80x, 8x14x14x256 0.77x,
// 4x32x32x64 0.59-0.69x, others 0.91-1.01x; at one thread 0.80-1.01x.
constexpr int64_t kInferencePieceBytes = int64_t{64} << 10;
constexpr int64_t kMaxInferenceGroupChannels = 512;
static_assert(kMaxGroupChannels <= kMaxInferenceGroupChannels, "one sums array holds either");
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
Pieces Blocks(int64_t total, int64_t per_block, int64_t align, bool taper = false) {
  const int64_t wanted = std::clamp<int64_t>(CeilDiv(total, per_block), 1, kMaxBlocks);
  return Pieces(total, RoundUp(CeilDiv(total, wanted), align), align, taper);
}

// Groups of `per_group` consecutive channels.
Pieces Groups(int64_t channels, int64_t per_group) {
  return Pieces(channels, per_group, 1, /*taper=*/false);
}

// Calls fn(offset, length) for each contiguous run of channel c's elements [begin, end),
// counted in (n, spatial) order, in a channels-first tensor.
template <typename Fn>
void ForEachRun(const Shape& s, int64_t c, int64_t begin, int64_t end, Fn&& fn) {
  int64_t n = begin / s.spatial;
  int64_t i = begin % s.spatial;
  for (int64_t e = begin; e < end; ++n, i = 0) {
    const int64_t length = std::min(s.spatial - i, end - e);
    fn((n * s.channels + c) * s.spatial + i, length);
    e += length;
  }
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

// Partial sums of two-sweep schedules: per block, Σ dy and Σ dy·(x − mean) of `width` entries
// (channels, or the folded columns of channels-last rows).
struct Partials {
  double* data;
  int64_t width;
  double* sum_dy(int64_t block) const { return data + block * 2 * width; }
  double* sum_dy_xc(int64_t block) const { return sum_dy(block) + width; }
};

// Finishes every channel from the partials of `blocks` blocks, adding them in block order; with
// rows folded k to one, channel c's entries are c, c + C, ..., c + (k - 1) * C of each block,
// added in that order once the blocks are. Column by column in memory order, so the compiler
// vectorizes the additions.
template <typename T, typename F>
void FinishFromPartials(const Call<T, F>& call, const Partials& partials, int64_t blocks) {
  const int64_t C = call.s.channels, width = partials.width;
  double* sums = CallScratch<double, kSumsSlot>(2 * width);
  double* __restrict sum_dy = sums;
  double* __restrict sum_dy_xc = sums + width;
  std::fill(sums, sums + 2 * width, 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const double* __restrict block_dy = partials.sum_dy(b);
    const double* __restrict block_dy_xc = partials.sum_dy_xc(b);
    for (int64_t j = 0; j < width; ++j) {
      sum_dy[j] += block_dy[j];
      sum_dy_xc[j] += block_dy_xc[j];
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    double dy = sum_dy[c], dy_xc = sum_dy_xc[c];
    for (int64_t j = c + C; j < width; j += C) {
      dy += sum_dy[j];
      dy_xc += sum_dy_xc[j];
    }
    call.Finish(c, dy, dy_xc);
  }
}

// ---- rows: channels last [R, C], fast family.

template <typename T>
void RunRows(const Call<T, float>& call) {
  const Tensors<T>& t = call.t;
  const CpuLoops<T>& loops = call.loops;
  const int64_t C = call.s.channels;
  const int64_t fold = C < kMinRowWidth ? CeilDiv(kMinRowWidth, C) : 1;
  const int64_t columns = fold * C;  // of a folded row
  // Blocks of whole folded rows.
  const int64_t unit =
      columns > kMaxDownRowsWidth ? kStripedUnitElements : kUnitElements;
  const Pieces blocks =
      Blocks(call.s.rest(), std::max(kMinBlockRows, unit / C), fold, /*taper=*/true);
  float* column_data = CallScratch<float, kColumnSlot>(4 * columns);
  const Columns<float> k{column_data, column_data + columns, column_data + 2 * columns,
                         column_data + 3 * columns};
  call.Expand(k, columns, [C](int64_t j) { return j % C; }, false);
  const Partials partials{CallScratch<double, kPartialsSlot>(blocks.count * 2 * columns), columns};

  // fn(offset, rows, width) for the folded rows of block b and a last, shorter one.
  auto for_each_window = [&](int64_t b, auto&& fn) {
    const int64_t r0 = blocks.begin(b);
    const int64_t r1 = blocks.end(b);
    const int64_t whole = (r1 - r0) / fold;
    if (whole > 0) fn(r0 * C, whole, columns);
    const int64_t left = r1 - r0 - whole * fold;
    if (left > 0) fn((r1 - left) * C, 1, left * C);
  };

  auto sums = [&](int64_t b) {
    double* sum_dy = partials.sum_dy(b);
    double* sum_dy_xc = partials.sum_dy_xc(b);
    std::fill(sum_dy, sum_dy + 2 * columns, 0.0);
    for_each_window(b, [&](int64_t offset, int64_t rows, int64_t width) {
      if (call.training) {
        loops.sum_rows(t.y_backprop + offset, t.x + offset, columns, rows, width, k.mean, sum_dy,
                       sum_dy_xc);
      } else {
        loops.sum_rows_inference(t.y_backprop + offset, t.x + offset, t.x_backprop + offset,
                                 columns, rows, width, k.mean, k.scale_inv_std, sum_dy,
                                 sum_dy_xc, call.stream_dx);
      }
    });
  };
  if (!call.training) {
    call.RunUnits(blocks.count, blocks.size * C, sums);
    FinishFromPartials(call, partials, blocks.count);
    return;
  }
  if (!call.TrainingDx()) {  // kSums
    call.RunUnits(blocks.count, blocks.size * C, sums);
    FinishFromPartials(call, partials, blocks.count);
    return;
  }
  auto finish = [&] {
    if (call.Sums()) FinishFromPartials(call, partials, blocks.count);
    call.Expand(k, columns, [C](int64_t j) { return j % C; }, true);
  };
  auto dx = [&](int64_t b) {
    for_each_window(b, [&](int64_t offset, int64_t rows, int64_t width) {
      loops.training_dx_rows(t.y_backprop + offset, t.x + offset, t.x_backprop + offset, columns,
                             rows, width, k.coefficients(), call.stream_dx, call.dx_order);
    });
  };
  if (!call.Sums()) {
    call.FinishFromGlobalSums();
    finish();
    call.RunUnits(blocks.count, blocks.size * C, dx);
    return;
  }
  call.RunTwoSweeps(blocks.count, blocks.size * C, sums, SerialStep(finish), dx);
}

// ---- planes: channels first [N, C * S] with short planes, fast family.

template <typename T>
void RunPlanes(const Call<T, float>& call) {
  const Tensors<T>& t = call.t;
  const CpuLoops<T>& loops = call.loops;
  const int64_t N = call.s.batch, C = call.s.channels, S = call.s.spatial;
  const int64_t stride = C * S;
  const Pieces groups = Groups(C, std::clamp<int64_t>(kMaxUnitColumns / S, 1, C));
  const bool fused = N * groups.size * S * 2 * static_cast<int64_t>(sizeof(T)) <= kFusedUnitBytes;
  const Pieces blocks =
      Blocks(N, fused ? N : std::max<int64_t>(1, kUnitElements / (groups.size * S)), 1);
  const Partials partials{fused ? nullptr
                                : CallScratch<double, kPartialsSlot>(blocks.count * 2 * C),
                          C};

  // Unit u: rows of block u / groups.count, channels of group u % groups.count.
  struct Unit {
    int64_t block, c0, c1, width, offset, rows;
  };
  auto unit_of = [&](int64_t u) {
    const int64_t b = u / groups.count, g = u % groups.count;
    const int64_t c0 = groups.begin(g), c1 = groups.end(g);
    return Unit{b, c0, c1, (c1 - c0) * S, blocks.begin(b) * stride + c0 * S,
                blocks.end(b) - blocks.begin(b)};
  };
  auto channel_of = [S](int64_t c0) { return [c0, S](int64_t j) { return c0 + j / S; }; };

  auto dx_unit = [&](int64_t u) {
    const Unit w = unit_of(u);
    float column_data[4][kMaxUnitColumns];
    const Columns<float> k{column_data[0], column_data[1], column_data[2], column_data[3]};
    call.Expand(k, w.width, channel_of(w.c0), true);
    loops.training_dx_rows(t.y_backprop + w.offset, t.x + w.offset, t.x_backprop + w.offset,
                           stride, w.rows, w.width, k.coefficients(), call.stream_dx,
                           call.dx_order);
  };
  auto first_sweep = [&](int64_t u) {
    const Unit w = unit_of(u);
    float column_data[4][kMaxUnitColumns];
    const Columns<float> k{column_data[0], column_data[1], column_data[2], column_data[3]};
    double sums[2][kMaxUnitColumns];
    call.Expand(k, w.width, channel_of(w.c0), false);
    std::fill(&sums[0][0], &sums[0][0] + w.width, 0.0);
    std::fill(&sums[1][0], &sums[1][0] + w.width, 0.0);
    if (call.training) {
      loops.sum_rows(t.y_backprop + w.offset, t.x + w.offset, stride, w.rows, w.width, k.mean,
                     sums[0], sums[1]);
    } else {
      loops.sum_rows_inference(t.y_backprop + w.offset, t.x + w.offset, t.x_backprop + w.offset,
                               stride, w.rows, w.width, k.mean, k.scale_inv_std, sums[0],
                               sums[1], call.stream_dx);
    }
    for (int64_t c = w.c0; c < w.c1; ++c) {
      double sum_dy = 0.0, sum_dy_xc = 0.0;
      for (int64_t j = (c - w.c0) * S; j < (c - w.c0 + 1) * S; ++j) {
        sum_dy += sums[0][j];
        sum_dy_xc += sums[1][j];
      }
      if (!fused) {
        partials.sum_dy(w.block)[c] = sum_dy;
        partials.sum_dy_xc(w.block)[c] = sum_dy_xc;
        continue;
      }
      call.Finish(c, sum_dy, sum_dy_xc);
    }
    if (!fused || !call.TrainingDx()) return;
    call.Expand(k, w.width, channel_of(w.c0), true);
    loops.training_dx_rows(t.y_backprop + w.offset, t.x + w.offset, t.x_backprop + w.offset,
                           stride, w.rows, w.width, k.coefficients(), call.stream_dx,
                           call.dx_order);
  };
  const int64_t units = blocks.count * groups.count;
  const int64_t unit_elements = blocks.size * groups.size * S;
  if (!call.Sums()) {
    call.FinishFromGlobalSums();
    call.RunUnits(units, unit_elements, dx_unit);
    return;
  }
  if (fused || !call.TrainingDx()) {
    call.RunUnits(units, unit_elements, first_sweep);
    if (!fused) FinishFromPartials(call, partials, blocks.count);
    return;
  }
  call.RunTwoSweeps(units, unit_elements, first_sweep,
                    SerialStep([&] { FinishFromPartials(call, partials, blocks.count); }), dx_unit);
}

// ---- runs: channels first, fast family.

// Groups of whole channels whose x and y_backprop fit a fused unit (kFusedUnitBytes), at least
// kMinGroupUnits of them where the channels allow it.
Pieces FusedRunsGroups(const Shape& s, int64_t element_bytes) {
  const int64_t channel_bytes = s.rest() * 2 * element_bytes;
  int64_t group = std::clamp<int64_t>(kFusedUnitBytes / channel_bytes, 1, kMaxGroupChannels);
  group = std::min(group, std::max<int64_t>(1, s.channels / kMinGroupUnits));
  return Groups(s.channels, group);
}

// Inference's groups: pieces of at least kInferencePieceBytes per image, as many groups as make
// a whole number per thread, tapered so that a thread that joins late still gets its share.
// Each channel is summed whole, in image order, in whichever group: the groups decide no bits.
Pieces InferenceRunsGroups(const Shape& s, int64_t element_bytes, int64_t threads) {
  const int64_t C = s.channels;
  const int64_t per_piece = CeilDiv(kInferencePieceBytes, s.spatial * element_bytes);
  const int64_t count = RoundUp(CeilDiv(C, std::min(per_piece, kMaxInferenceGroupChannels)),
                                std::max<int64_t>(1, threads));
  return Pieces(C, CeilDiv(C, count), 1, /*taper=*/true);
}

template <typename T>
void RunRuns(const Call<T, float>& call) {
  const Tensors<T>& t = call.t;
  const CpuLoops<T>& loops = call.loops;
  const Shape& s = call.s;
  const int64_t C = s.channels, S = s.spatial, R = s.rest();
  // `runs` runs of each of `channels` channels from c on, starting at `offset` (see
  // CpuLoops::sum_runs; inference: one), into sum_dy[0...] and sum_dy_xc[0...].
  auto sum_runs = [&](int64_t c, int64_t offset, int64_t length, int64_t channels, int64_t runs,
                      double* sum_dy, double* sum_dy_xc) {
    if (call.training) {
      loops.sum_runs(t.y_backprop + offset, t.x + offset, length, channels, runs, C * S,
                     call.mean + c, sum_dy, sum_dy_xc);
    } else {
      loops.sum_runs_inference(t.y_backprop + offset, t.x + offset, t.x_backprop + offset, length,
                               channels, call.mean + c, call.scale_inv_std + c, sum_dy,
                               sum_dy_xc, call.stream_dx);
    }
  };
  auto dx_runs = [&](int64_t c, int64_t offset, int64_t length, int64_t count) {
    const DxCoefficients<float> k{call.mean + c, call.scale_inv_std + c, call.dy_mean + c,
                                  call.xc_coef + c};
    loops.training_dx_runs(t.y_backprop + offset, t.x + offset, t.x_backprop + offset, length,
                           count, k, call.stream_dx);
  };

  const int64_t channel_bytes = R * 2 * static_cast<int64_t>(sizeof(T));
  if (channel_bytes <= kFusedUnitBytes) {
    // Whole channels per unit, walked in memory order (image by image): sums, then (training)
    // x_backprop while they are in the cache; inference writes x_backprop as it sums.
    const Pieces groups = call.training ? FusedRunsGroups(s, sizeof(T))
                                        : InferenceRunsGroups(s, sizeof(T), call.threads());
    if (!call.Sums()) call.FinishFromGlobalSums();
    call.RunUnits(groups.count, groups.size * R, [&](int64_t g) {
      const int64_t c0 = groups.begin(g), c1 = groups.end(g);
      if (!call.Sums()) {
        for (int64_t n = 0; n < s.batch; ++n) dx_runs(c0, (n * C + c0) * S, S, c1 - c0);
        return;
      }
      double sums[2][kMaxInferenceGroupChannels];
      std::fill(sums[0], sums[0] + (c1 - c0), 0.0);
      std::fill(sums[1], sums[1] + (c1 - c0), 0.0);
      // Training reads kFastGroup images at a time, side by side (measured faster); inference,
      // which also writes x_backprop, image by image (measured faster: fewer write streams).
      const int64_t images = call.training ? kFastGroup : 1;
      for (int64_t n = 0; n < s.batch; n += images) {
        const int64_t runs = std::min(images, s.batch - n);
        sum_runs(c0, (n * C + c0) * S, S, c1 - c0, runs, sums[0], sums[1]);
      }
      for (int64_t c = c0; c < c1; ++c) call.Finish(c, sums[0][c - c0], sums[1][c - c0]);
      if (!call.TrainingDx()) return;
      for (int64_t n = 0; n < s.batch; ++n) dx_runs(c0, (n * C + c0) * S, S, c1 - c0);
    });
    return;
  }

  // Channels too large for the cache: blocks of each channel, two sweeps. Unit u is block
  // u % blocks.count of channel u / blocks.count.
  const Pieces blocks = Blocks(R, kUnitElements, 1);
  const Partials partials{CallScratch<double, kPartialsSlot>(blocks.count * 2 * C), C};
  const int64_t units = C * blocks.count;
  auto sums = [&](int64_t u) {
    const int64_t c = u / blocks.count, b = u % blocks.count;
    double sum_dy = 0.0, sum_dy_xc = 0.0;
    ForEachRun(s, c, blocks.begin(b), blocks.end(b), [&](int64_t offset, int64_t length) {
      sum_runs(c, offset, length, 1, 1, &sum_dy, &sum_dy_xc);
    });
    partials.sum_dy(b)[c] = sum_dy;
    partials.sum_dy_xc(b)[c] = sum_dy_xc;
  };
  auto finish = [&] { FinishFromPartials(call, partials, blocks.count); };
  if (!call.TrainingDx()) {
    call.RunUnits(units, blocks.size, sums);
    return finish();
  }
  auto dx = [&](int64_t u) {
    const int64_t c = u / blocks.count, b = u % blocks.count;
    ForEachRun(s, c, blocks.begin(b), blocks.end(b),
               [&](int64_t offset, int64_t length) { dx_runs(c, offset, length, 1); });
  };
  if (!call.Sums()) {
    call.FinishFromGlobalSums();
    return call.RunUnits(units, blocks.size, dx);
  }
  call.RunTwoSweeps(units, blocks.size, sums, SerialStep(finish), dx);
}

// ---- exact family: channels of fewer than kFastPathRest elements, whole channels per unit.
// Bounded sums first; a channel whose sums do not stand (BoundedSumStands, cpu_loops.h) is
// summed again with compensated sums, in the same order as before, so its sums are what
// compensated sums alone would have given.

// More than this fraction of the vectors of columns summed again: the compensated sums are
// formed for every column of every block at once (memory order) rather than vector by vector
// (a line read per row).
constexpr int64_t kRecomputeAllFraction = 4;

// Channels last, the rows cut into blocks fixed by the shape. A column's sums are its bounded
// sum over each block's rows in order, the blocks' sums added in block order; whichever
// schedule walks the rows (blocks of rows, or strips of columns), so the schedule never
// decides the bits.
Pieces ExactRowBlocks(const Shape& s) {
  return Blocks(s.rest(), std::max(kExactMinBlockRows, kUnitElements / s.channels), 1,
                /*taper=*/true);
}

// The four arrays of an ExactColumns `pitch` entries apart from `p`.
ExactColumns ColumnsAt(double* p, int64_t pitch) {
  return {p, p + pitch, p + 2 * pitch, p + 3 * pitch};
}

// The same arrays from column c0 on.
ExactColumns ColumnsFrom(const ExactColumns& columns, int64_t c0) {
  return {columns.dy + c0, columns.dy_aux + c0, columns.dy_xc + c0, columns.dy_xc_aux + c0};
}

// totals += block, entry by entry, for the first n entries of each of the four arrays.
void AddBlockSums(const ExactColumns& totals, const ExactColumns& block, int64_t n) {
  double* const to[4] = {totals.dy, totals.dy_aux, totals.dy_xc, totals.dy_xc_aux};
  const double* const from[4] = {block.dy, block.dy_aux, block.dy_xc, block.dy_xc_aux};
  for (int k = 0; k < 4; ++k) {
    double* __restrict total = to[k];  // column by column, so that the compiler vectorizes it
    const double* __restrict v = from[k];
    for (int64_t c = 0; c < n; ++c) total[c] += v[c];
  }
}

// Compensated sums of columns [c0, c0 + n) of every block, the blocks combined per channel in
// block order (CompensatedSum::AddPart), into pairs[2 * n]; scratch holds 4 * RowsPitch(n).
template <typename T>
void CompensatedColumns(const Call<T, double>& call, const Pieces& blocks, int64_t c0,
                        int64_t n, double* scratch, CompensatedSum* pairs) {
  const Tensors<T>& t = call.t;
  const int64_t C = call.s.channels;
  const ExactColumns columns = ColumnsAt(scratch, RowsPitch(n));
  for (int64_t b = 0; b < blocks.count; ++b) {
    std::fill(scratch, scratch + 4 * RowsPitch(n), 0.0);
    const int64_t r0 = blocks.begin(b);
    call.loops.exact_sum_rows(t.y_backprop + r0 * C + c0, t.x + r0 * C + c0, C,
                              blocks.end(b) - r0, n, call.mean + c0, columns);
    for (int64_t c = 0; c < n; ++c) {
      pairs[2 * c].AddPart(columns.dy[c], columns.dy_aux[c]);
      pairs[2 * c + 1].AddPart(columns.dy_xc[c], columns.dy_xc_aux[c]);
    }
  }
}

// Finishes channels [c0, c0 + n) from `totals`, their blocks' bounded sums added in block
// order: the channels whose sums do not stand are summed again, by column vectors (a vector
// reads the same lines as one of its columns) or all at once where many vectors need it, in
// `scratch` (4 * RowsPitch(n) doubles, free to overwrite).
template <typename T>
void FinishExactColumns(const Call<T, double>& call, const Pieces& blocks, int64_t c0,
                        int64_t n, const ExactColumns& totals, double* scratch) {
  const int64_t R = call.s.rest();
  constexpr int64_t V = kColumnVector;
  std::vector<int64_t> again, vectors;
  for (int64_t c = 0; c < n; ++c) {
    if (!BoundedSumStands({totals.dy[c], totals.dy_aux[c]}, R) ||
        !BoundedSumStands({totals.dy_xc[c], totals.dy_xc_aux[c]}, R)) {
      again.push_back(c);
      if (vectors.empty() || vectors.back() != c / V) vectors.push_back(c / V);
    }
  }
  if (!again.empty()) {
    std::vector<CompensatedSum> exact(2 * RowsPitch(n));
    if (static_cast<int64_t>(vectors.size()) * kRecomputeAllFraction > RowsPitch(n) / V) {
      CompensatedColumns(call, blocks, c0, n, scratch, exact.data());
    } else {
      for (int64_t v : vectors) {
        CompensatedColumns(call, blocks, c0 + V * v, std::min(V, n - V * v), scratch,
                           &exact[2 * V * v]);
      }
    }
    for (int64_t c : again) {
      totals.dy[c] = exact[2 * c].Value();
      totals.dy_xc[c] = exact[2 * c + 1].Value();
    }
  }
  for (int64_t c = 0; c < n; ++c) call.Finish(c0 + c, totals.dy[c], totals.dy_xc[c]);
}

// Blocks of whole rows, read in memory order; per block each column's bounded sums, combined
// per channel in block order between the sweeps; then x_backprop by blocks. Inference writes
// x_backprop as it sums, unless x_backprop is y_backprop's buffer: a channel summed again must
// still find its y_backprop there.
template <typename T>
void RunExactRows(const Call<T, double>& call, const Pieces& blocks) {
  const Tensors<T>& t = call.t;
  const int64_t C = call.s.channels;
  const int64_t width = RowsPitch(C);  // of each partial array
  double* partials = CallScratch<double, kPartialsSlot>(blocks.count * 4 * width);
  auto columns_of = [&](int64_t b) { return ColumnsAt(partials + b * 4 * width, width); };
  const DxCoefficients<double> k{call.mean, call.scale_inv_std,
                                 call.training ? call.dy_mean : nullptr, call.xc_coef};
  auto dx = [&](int64_t b) {
    const int64_t r0 = blocks.begin(b);
    call.loops.exact_dx_rows(t.y_backprop + r0 * C, t.x + r0 * C, t.x_backprop + r0 * C, C,
                             blocks.end(b) - r0, C, k, call.stream_dx, call.dx_order);
  };
  const bool dx_as_it_sums = !call.training && t.x_backprop != t.y_backprop;
  auto sums = [&](int64_t b) {
    const ExactColumns columns = columns_of(b);
    std::fill(columns.dy, columns.dy + 4 * width, 0.0);
    const int64_t r0 = blocks.begin(b), rows = blocks.end(b) - r0;
    if (!dx_as_it_sums) {
      call.loops.exact_bounded_sum_rows(t.y_backprop + r0 * C, t.x + r0 * C, C, rows, C,
                                        call.mean, columns);
    } else {
      call.loops.exact_bounded_sum_rows_inference(t.y_backprop + r0 * C, t.x + r0 * C,
                                                  t.x_backprop + r0 * C, C, rows, C, call.mean,
                                                  call.scale_inv_std, columns, call.stream_dx);
    }
  };
  // The channels are finished in parts of whole column vectors, which the threads share: a part
  // adds its columns' block sums in block order and sums its channels again where needed, in
  // its own columns of the totals and of the scratch after them.
  double* const sums_scratch = CallScratch<double, kSumsSlot>(8 * width);
  const ExactColumns totals = ColumnsAt(sums_scratch, width);
  auto finish = [&](int64_t c0, int64_t c1) {
    const int64_t n = c1 - c0;
    const ExactColumns part_totals = ColumnsFrom(totals, c0);
    for (double* array : {part_totals.dy, part_totals.dy_aux, part_totals.dy_xc,
                          part_totals.dy_xc_aux}) {
      std::fill(array, array + n, 0.0);
    }
    for (int64_t b = 0; b < blocks.count; ++b) {
      AddBlockSums(part_totals, ColumnsFrom(columns_of(b), c0), n);
    }
    FinishExactColumns(call, blocks, c0, n, part_totals, sums_scratch + 4 * width + 4 * c0);
  };
  const BetweenStep finish_step = StepInParts(C, kStepPartChannels, finish);
  if (dx_as_it_sums || call.stage == Stage::kSums) {
    return call.RunUnits(blocks.count, blocks.size * C, sums, finish_step);
  }
  if (!call.Sums()) {
    call.FinishFromGlobalSums();
    return call.RunUnits(blocks.count, blocks.size * C, dx);
  }
  call.RunTwoSweeps(blocks.count, blocks.size * C, sums, finish_step, dx);
}

// Training, strips of whole columns: a unit holds every row of ExactStripColumns(...) columns,
// whose dy and x fit in the L2 (kFusedUnitBytes), sums them block by block, finishes their
// channels and writes their x_backprop while they are there, where the blocks schedule reads
// both tensors from the L3 twice. But a strip is read at a stride, a few lines of each row:
// where it pays is MemoryRules::exact_strips's to say (ExactStripsPay, streaming_stores.h, with
// what was measured), and strips are taken anyway where the blocks are fewer than the threads
// (64x1x1x4096 on two threads of an Intel Xeon: strips 1.9x as fast). The bits are the blocks'
// either way.
constexpr int64_t kMaxExactStripColumns = 256;
constexpr int64_t kMinExactStrips = 8;

template <typename T>
int64_t ExactStripColumns(const Shape& s) {
  const int64_t row_bytes = 2 * s.rest() * static_cast<int64_t>(sizeof(T));  // dy and x
  return std::clamp<int64_t>(kFusedUnitBytes / row_bytes / kColumnVector * kColumnVector,
                             kColumnVector, kMaxExactStripColumns);
}

template <typename T>
bool ExactStripsFit(const Call<T, double>& call, const Pieces& blocks) {
  return call.training && call.s.channels >= kMinExactStrips * ExactStripColumns<T>(call.s) &&
         (call.exact_strips || blocks.count < call.threads());
}

template <typename T>
void RunExactStrips(const Call<T, double>& call, const Pieces& blocks) {
  const Tensors<T>& t = call.t;
  const int64_t C = call.s.channels, R = call.s.rest();
  const Pieces strips = Groups(C, ExactStripColumns<T>(call.s));
  if (!call.Sums()) call.FinishFromGlobalSums();
  call.RunUnits(strips.count, strips.size * R, [&](int64_t u) {
    const int64_t c0 = strips.begin(u), n = strips.end(u) - c0;
    if (call.Sums()) {
      constexpr int64_t P = kMaxExactStripColumns;  // the pitch of the arrays below
      double totals[4 * P] = {}, block[4 * P];
      const ExactColumns block_columns = ColumnsAt(block, P), total_columns = ColumnsAt(totals, P);
      for (int64_t b = 0; b < blocks.count; ++b) {
        std::fill(block, block + 4 * P, 0.0);
        const int64_t r0 = blocks.begin(b);
        call.loops.exact_bounded_sum_rows(t.y_backprop + r0 * C + c0, t.x + r0 * C + c0, C,
                                          blocks.end(b) - r0, n, call.mean + c0,
                                          block_columns);
        AddBlockSums(total_columns, block_columns, n);
      }
      FinishExactColumns(call, blocks, c0, n, total_columns, block);
    }
    if (!call.TrainingDx()) return;
    const DxCoefficients<double> k{call.mean + c0, call.scale_inv_std + c0, call.dy_mean + c0,
                                   call.xc_coef + c0};
    call.loops.exact_dx_rows(t.y_backprop + c0, t.x + c0, t.x_backprop + c0, C, R, n, k,
                             call.stream_dx, call.dx_order);
  });
}

// Channel c (channels first) from its bounded sums where they stand; elsewhere summed again,
// alone, with compensated sums in the same order (its runs, its lanes).
template <typename T>
void FinishExactRunsChannel(const Call<T, double>& call, int64_t c, const BoundedSum& sum_dy,
                            const BoundedSum& sum_dy_xc) {
  const int64_t R = call.s.rest();
  if (BoundedSumStands(sum_dy, R) && BoundedSumStands(sum_dy_xc, R)) {
    return call.Finish(c, sum_dy.sum, sum_dy_xc.sum);
  }
  const int64_t C = call.s.channels, S = call.s.spatial;
  CompensatedSum exact_dy, exact_dy_xc;
  call.loops.exact_sum_runs(call.t.y_backprop + c * S, call.t.x + c * S, call.mean + c, S, 1,
                            call.s.batch, C * S, &exact_dy, &exact_dy_xc);
  call.Finish(c, exact_dy.Value(), exact_dy_xc.Value());
}

// Channels first: groups of whole channels, kExactRunChannels at a time read image by image.
// Inference writes x_backprop as it sums (its elements are in registers, in double, already),
// unless x_backprop is y_backprop's buffer: a channel summed again must still find its
// y_backprop there. Against a second sweep for x_backprop the core alone was 1.15-1.4x as fast
// (4x14x14x512 to 16x7x7x2048, one and two threads, an Intel Xeon; RESULTS.md).
template <typename T>
void RunExactRuns(const Call<T, double>& call) {
  const Tensors<T>& t = call.t;
  const int64_t C = call.s.channels, S = call.s.spatial, R = call.s.rest();
  const Pieces groups = Groups(C, std::clamp<int64_t>(CeilDiv(kUnitElements, R), 1, C));
  if (!call.Sums()) call.FinishFromGlobalSums();
  const bool dx_as_it_sums =
      !call.training && call.stage == Stage::kWhole && t.x_backprop != t.y_backprop;
  call.RunUnits(groups.count, groups.size * R, [&](int64_t g) {
    for (int64_t c0 = groups.begin(g); c0 < groups.end(g); c0 += kExactRunChannels) {
      const int64_t channels = std::min(kExactRunChannels, groups.end(g) - c0);
      const DxCoefficients<double> k{call.mean + c0, call.scale_inv_std + c0,
                                     call.training ? call.dy_mean + c0 : nullptr,
                                     call.xc_coef + c0};
      if (!call.Sums()) {
        call.loops.exact_dx_runs(t.y_backprop + c0 * S, t.x + c0 * S, t.x_backprop + c0 * S, S,
                                 channels, call.s.batch, C * S, k);
        continue;
      }
      BoundedSum sum_dy[kExactRunChannels], sum_dy_xc[kExactRunChannels];
      if (dx_as_it_sums) {
        call.loops.exact_bounded_sum_runs_inference(
            t.y_backprop + c0 * S, t.x + c0 * S, t.x_backprop + c0 * S, call.mean + c0,
            call.scale_inv_std + c0, S, channels, call.s.batch, C * S, sum_dy, sum_dy_xc);
      } else {
        call.loops.exact_bounded_sum_runs(t.y_backprop + c0 * S, t.x + c0 * S, call.mean + c0,
                                          S, channels, call.s.batch, C * S, sum_dy, sum_dy_xc);
      }
      for (int64_t c = 0; c < channels; ++c) {
        FinishExactRunsChannel(call, c0 + c, sum_dy[c], sum_dy_xc[c]);
      }
      if (call.stage == Stage::kSums || dx_as_it_sums) continue;
      call.loops.exact_dx_runs(t.y_backprop + c0 * S, t.x + c0 * S, t.x_backprop + c0 * S, S,
                               channels, call.s.batch, C * S, k);
    }
  });
}

// Channels first with planes shorter than kRunLanes elements (a run less than one vector;
// channels-first planes of one element are channels last already, Shape::canonical): the rows
// loops on [N, C * S], a unit being a group of channels whose planes make a row of at most
// kExactPlanesColumns columns, holding every image. Each channel's columns are reduced as its
// lanes (exact_bounded_sum_planes), so the sums, and x_backprop, are RunExactRuns's bit for
// bit. The runs loop took one channel's partial vector, its lanes with it, at a time: on an
// Intel Xeon (2026-12-02, float32, both alternated in one process) the rows took 0.27-0.32x its
// time on 2x2 planes, 0.52-0.67x on 3x3, 0.73-0.89x on 3x5, 0.68-1.00x with four or eight
// images; on 4x4 planes, whole vectors, the runs are faster (the rows 1.2x).
constexpr int64_t kExactPlanesColumns = 512;

template <typename T>
void RunExactPlanes(const Call<T, double>& call) {
  const Tensors<T>& t = call.t;
  const int64_t C = call.s.channels, S = call.s.spatial, R = call.s.rest();
  const int64_t stride = C * S;
  const Pieces groups =
      Groups(C, std::clamp<int64_t>(std::min(CeilDiv(kUnitElements, R), kExactPlanesColumns / S),
                                    1, C));
  if (!call.Sums()) call.FinishFromGlobalSums();
  const bool dx_as_it_sums =
      !call.training && call.stage == Stage::kWhole && t.x_backprop != t.y_backprop;
  call.RunUnits(groups.count, groups.size * R, [&](int64_t g) {
    const int64_t c0 = groups.begin(g), channels = groups.end(g) - c0, width = channels * S;
    const int64_t offset = c0 * S;
    double column_data[4][kExactPlanesColumns];
    const Columns<double> k{column_data[0], column_data[1], column_data[2], column_data[3]};
    const auto channel_of = [c0, S](int64_t j) { return c0 + j / S; };
    if (call.Sums()) {
      call.Expand(k, width, channel_of, false);
      double scratch[4 * kExactPlanesColumns];
      BoundedSum sum_dy[kExactPlanesColumns / 2], sum_dy_xc[kExactPlanesColumns / 2];
      call.loops.exact_bounded_sum_planes(
          t.y_backprop + offset, t.x + offset, dx_as_it_sums ? t.x_backprop + offset : nullptr,
          stride, call.s.batch, channels, S, k.mean, k.scale_inv_std,
          ColumnsAt(scratch, RowsPitch(width)), sum_dy, sum_dy_xc);
      for (int64_t c = 0; c < channels; ++c) {
        FinishExactRunsChannel(call, c0 + c, sum_dy[c], sum_dy_xc[c]);
      }
    }
    if (call.stage == Stage::kSums || dx_as_it_sums) return;
    call.Expand(k, width, channel_of, call.training);
    const DxCoefficients<double> coefficients{k.mean, k.scale_inv_std,
                                              call.training ? k.dy_mean : nullptr, k.xc_coef};
    call.loops.exact_dx_rows(t.y_backprop + offset, t.x + offset, t.x_backprop + offset, stride,
                             call.s.batch, width, coefficients, false, call.dx_order);
  });
}

}  // namespace

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
        return Call<T, double>(params, t, parallel_for, loops, rules)
            .FinishFromGlobalSums();
    }
  }
  if (s.rest() < kFastPathRest) {
    const Call<T, double> call(params, t, parallel_for, loops, rules);
    if (!s.channels_last) {
      return s.spatial < kRunLanes ? RunExactPlanes(call) : RunExactRuns(call);
    }
    const Pieces blocks = ExactRowBlocks(s);
    return ExactStripsFit(call, blocks) ? RunExactStrips(call, blocks)
                                        : RunExactRows(call, blocks);
  }
  const Call<T, float> call(params, t, parallel_for, loops, rules);
  if (s.channels_last) return RunRows(call);
  if (s.spatial < kShortPlane) return RunPlanes(call);
  RunRuns(call);
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
