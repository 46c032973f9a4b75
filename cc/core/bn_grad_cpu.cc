// The production CPU kernels: how the work is cut into units, in which order units run, and how
// partial sums are combined. The innermost loops live in cpu_loops_impl.h.
//
// Both layouts are handled natively, never transposed. Two schedules (see Plan):
//   matrix  the tensor as a row-major matrix whose columns each belong to one channel:
//           channels last [R, C] (column = channel), or channels first [N, C * S] with short
//           planes (column j = channel j / S). Loops run along rows, vectorized across columns,
//           with per-column means, coefficients and accumulators, folded into channels at the
//           end of a unit. Channels last folds k rows into one (k * C >= kMinRowWidth columns)
//           so that short rows do not cost a loop start each. A unit is a block of rows times a
//           group of channels.
//   runs    channels first with long planes: a unit is a channel group (or a block of one
//           channel) walked plane by plane, with scalar coefficients along each run.
// A unit that holds all rows of its channels and fits in the L2 cache sums them and writes
// their x_backprop right away (channels first), so main memory sees x and dy once. Otherwise
// training makes two sweeps: sums, then x_backprop.
//
// Blocks depend on the shape only, each unit writes its own partial sums, and the partials are
// combined per channel in block order. The thread count changes which thread runs a unit but
// never the bits of the result.
//
// Memory traffic is what limits these kernels, so the rest is about bytes: the second sweep
// visits units in reverse, starting with the data the first sweep touched last and may have
// left in the last-level cache; in inference x_backprop bypasses the caches (non-temporal
// stores) when the tensors are too large to stay there anyway.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/cpu_loops.h"
#include "cc/core/float16_convert.h"
#include "cc/core/ieee_arithmetic.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace fbn {
namespace {

// About this many elements per unit of the two-sweep schedules, and per chunk that an inference
// unit sums and then writes while the chunk is in L1/L2.
constexpr int64_t kUnitElements = int64_t{1} << 15;
// Channels-last blocks are summed (and in inference written) in chunks of about this many
// elements, which stay in L1/L2 while the column tiles go over them.
constexpr int64_t kChunkElements = int64_t{1} << 14;
// Upper bound on row blocks; bounds the scratch to O(C * kMaxBlocks).
constexpr int64_t kMaxBlocks = 64;
// A unit whose x and dy fit in this many bytes (about half of a typical 1-2 MiB L2) and holds
// all rows of its channels does both sweeps at once.
constexpr int64_t kFusedUnitBytes = int64_t{1} << 20;
// Channels-first planes shorter than this go through the matrix schedule.
constexpr int64_t kShortPlane = 512;
// Columns of a channels-first matrix unit (its per-column arrays live on the stack).
constexpr int64_t kMaxUnitColumns = 1024;
// Channels-last rows are folded to at least this many columns.
constexpr int64_t kMinRowWidth = 64;
// x_backprop of wider rows is written this many columns at a time.
constexpr int64_t kDxColumnTile = 512;
// Channel groups of the runs schedule: at most this many channels, at least this many units.
constexpr int64_t kMaxGroupChannels = 64;
constexpr int64_t kMinGroupUnits = 16;
// Calls this small run on the calling thread: a pool dispatch would cost more than the work.
constexpr int64_t kInlineElements = int64_t{1} << 15;
// Inference writes x_backprop with non-temporal stores from this tensor size up: three tensors
// of it no longer fit a typical last-level cache, and skipping the read-for-ownership saves a
// pass. Training does not: its second sweep re-reads x and dy partly from the cache (see
// above), and measured slower with them.
constexpr int64_t kStreamingBytes = int64_t{8} << 20;
// Pieces shorter than this are stored normally: a non-temporal store of a partial cache line
// costs a read-modify-write in memory.
constexpr int64_t kMinStreamElements = 512;
// Elements staged in L1 before a non-temporal copy out.
constexpr int64_t kStageElements = 2048;
// Rough cycles per element, for the pool's cost model.
constexpr int64_t kCyclesPerElement = 4;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }

// How the work of one call is cut into units. Depends on the shape and element size only.
struct Plan {
  Shape shape;
  bool matrix = true;       // the matrix schedule; else the runs schedule
  int64_t rows = 0;         // matrix rows (R or N); runs: elements per channel (R)
  int64_t row_stride = 0;   // elements from one matrix row to the next
  int64_t fold = 1;         // channels last: rows folded into one matrix row
  int64_t dx_fold = 1;      // channels last: rows of x_backprop written as one piece
  int64_t group = 1;        // channels per unit
  int64_t groups = 1;
  int64_t blocks = 1;       // blocks of rows (runs: of a channel's elements)
  int64_t block_length = 0;
  int64_t width = 1;        // columns (matrix) or channels (runs) of a unit
  bool fused = false;       // one unit holds all rows of its channels and does both sweeps
  bool stream_dx = false;

  Plan(const Shape& s, int64_t element_bytes, bool is_training) : shape(s) {
    const int64_t C = s.channels;
    stream_dx = !is_training && s.elements() * element_bytes >= kStreamingBytes;
    matrix = s.channels_last || s.spatial < kShortPlane;
    if (s.channels_last) {
      rows = s.rest();
      row_stride = C;
      // Short rows are folded to kMinRowWidth columns, exactly where C divides it (the width
      // of the sums' register tile).
      fold = C >= kMinRowWidth ? 1 : CeilDiv(kMinRowWidth, C);
      // Pieces whose coefficient arrays stay in L1: training reads four of them per element,
      // inference one (and streams its pieces, which must be long).
      dx_fold = C > kDxColumnTile
                    ? 1
                    : std::max(fold, (is_training ? kDxColumnTile : kStageElements) / C);
      group = C;
    } else if (matrix) {
      rows = s.batch;
      row_stride = C * s.spatial;
      group = std::clamp<int64_t>(kMaxUnitColumns / s.spatial, 1, C);
    } else {
      rows = s.rest();
      const int64_t channel_bytes = 2 * rows * element_bytes;
      group = std::clamp<int64_t>(kFusedUnitBytes / channel_bytes, 1, kMaxGroupChannels);
      group = std::min(group, std::max<int64_t>(1, C / kMinGroupUnits));
    }
    groups = CeilDiv(C, group);
    width = s.channels_last ? C : group * (matrix ? s.spatial : 1);
    // Channels first: keep a group's rows in one unit when they fit the L2 (or must: runs with
    // whole channels in a group).
    const bool fits = rows * width * 2 * element_bytes <= kFusedUnitBytes;
    if (!s.channels_last && (fits || (!matrix && group > 1))) {
      fused = true;
      block_length = rows;
      return;
    }
    const int64_t wanted = CeilDiv(rows * width, kUnitElements);
    block_length = CeilDiv(rows, std::clamp<int64_t>(wanted, 1, std::min(kMaxBlocks, rows)));
    block_length = RoundUp(block_length, fold);  // blocks start on a whole folded row
    blocks = CeilDiv(rows, block_length);
  }

  int64_t units() const { return blocks * groups; }
  int64_t unit_elements() const { return block_length * width; }
  int64_t block_begin(int64_t b) const { return b * block_length; }
  int64_t block_end(int64_t b) const { return std::min(rows, (b + 1) * block_length); }
  int64_t group_begin(int64_t g) const { return g * group; }
  int64_t group_end(int64_t g) const { return std::min(shape.channels, (g + 1) * group); }
};

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

// Copies n elements to dst with non-temporal stores, which write whole cache lines without
// reading them first and without evicting x and dy from the caches.
template <typename T>
void StreamOut(T* dst, const T* src, int64_t n) {
#if defined(__SSE2__)
  char* d = reinterpret_cast<char*>(dst);
  const char* s = reinterpret_cast<const char*>(src);
  int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  const int64_t head = std::min<int64_t>(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 16; d += 16, s += 16, bytes -= 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  }
  std::memcpy(d, s, bytes);
#else
  std::memcpy(dst, src, n * sizeof(T));
#endif
}

// Makes the non-temporal stores of this thread visible before it reports its work done.
void FenceStreamedStores() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Writes `count` elements of x_backprop at dx: produce(out, first, n) computes elements
// [first, first + n) into out. Directly, or staged in L1 and streamed out.
template <typename T, typename Produce>
void WriteDx(T* dx, int64_t count, bool stream, Produce&& produce) {
  if (!stream || count < kMinStreamElements) {  // short pieces would stream partial lines
    produce(dx, 0, count);
    return;
  }
  alignas(64) T staged[kStageElements];
  for (int64_t first = 0; first < count; first += kStageElements) {
    const int64_t n = std::min(kStageElements, count - first);
    produce(staged, first, n);
    StreamOut(dx + first, staged, n);
  }
}

// Per-call scratch, reused across calls on the same calling thread so that a call does not
// page-fault a fresh allocation. One buffer per (type, slot).
enum ScratchSlot { kSumsSlot, kCoefficientsSlot };
template <typename F, ScratchSlot kSlot>
F* CallScratch(size_t size) {
  thread_local std::vector<F> scratch;
  if (scratch.size() < size) scratch.resize(size);
  return scratch.data();
}

// Per-column arrays of a matrix unit: accumulators and the column-expanded mean and
// coefficients. On the stack; a unit has at most kMaxUnitColumns columns (channels first) or
// uses the per-call arrays (channels last).
template <typename F>
struct ColumnArrays {
  double sum_dy[kMaxUnitColumns];
  double sum_dy_xc[kMaxUnitColumns];
  F mean[kMaxUnitColumns];
  F scale_inv_std[kMaxUnitColumns];
  F dy_mean[kMaxUnitColumns];
  F xc_coef[kMaxUnitColumns];
};

// A double sum with a running error term (Knuth's TwoSum): exact but for the final rounding as
// long as the error term does not overflow. Infinities and NaNs go to the sum alone, so they
// propagate as in a plain sum. Needs IEEE arithmetic without contraction (-ffp-contract=off).
struct CompensatedSum {
  double sum = 0.0;
  double error = 0.0;
  void Add(double v) {
    const double t = sum + v;
    if (std::isfinite(t)) {
      const double z = t - sum;
      error += (sum - (t - z)) + (v - z);
    }
    sum = t;
  }
  double Value() const { return sum + error; }
};

// One call, with its arithmetic in F (double: exact loops, float: fast loops; cpu_loops.h).
template <typename T, typename F>
class GradComputation {
 public:
  GradComputation(const Params& params, const Tensors<T>& t, const ParallelFor& parallel_for)
      : params_(params),
        t_(t),
        parallel_for_(parallel_for),
        s_(params.shape.canonical()),
        plan_(s_, sizeof(T), params.is_training),
        loops_(LoopsFor<T, F>(ActiveCpuIsa())),
        channels_(s_.channels),
        training_(params.is_training) {}

  void Run() {
    const int64_t C = channels_;
    // Channels last: the per-column arrays, a piece of x_backprop wide, are per call.
    const int64_t columns = s_.channels_last ? plan_.dx_fold * C : 0;
    partial_ = CallScratch<double, kSumsSlot>((plan_.blocks * 2 + 1) * C);
    inv_std_ = partial_ + plan_.blocks * 2 * C;
    mean_ = CallScratch<F, kCoefficientsSlot>(4 * (C + columns));
    scale_inv_std_ = mean_ + C;
    dy_mean_ = scale_inv_std_ + C;
    xc_coef_ = dy_mean_ + C;
    for (int64_t c = 0; c < C; ++c) {
      inv_std_[c] = params_.InvStd(t_.variance[c]);
      mean_[c] = static_cast<F>(t_.mean[c]);
      scale_inv_std_[c] = static_cast<F>(t_.scale[c] * inv_std_[c]);
    }
    k_ = {mean_, scale_inv_std_, dy_mean_, xc_coef_};
    if (s_.channels_last) {
      row_columns_ = xc_coef_ + C;  // mean, scale_inv_std, dy_mean, xc_coef per column
      row_k_ = {row_columns_, row_columns_ + columns, row_columns_ + 2 * columns,
                row_columns_ + 3 * columns};
      ExpandRowColumns(mean_, row_columns_);
      ExpandRowColumns(scale_inv_std_, row_columns_ + columns);
    }

    RunUnits(/*reverse=*/false, [this](int64_t u) { FirstSweep(u); });
    CombineBlocks();
    if (kExact && !plan_.fused) {  // fused units compensated their channels themselves
      parallel_for_(C, s_.rest() * 8, [this](int64_t begin, int64_t end) {
        ScopedIeeeArithmetic ieee;
        for (int64_t c = begin; c < end; ++c) {
          CompensatedChannelSums(c, &SumDy(0)[c], &SumDyXc(0)[c]);
        }
      });
    }
    for (int64_t c = 0; c < C; ++c) Finish(c);
    if (training_ && !plan_.fused) {
      if (s_.channels_last) {
        ExpandRowColumns(dy_mean_, row_columns_ + 2 * columns);
        ExpandRowColumns(xc_coef_, row_columns_ + 3 * columns);
      }
      RunUnits(/*reverse=*/true, [this](int64_t u) { SecondSweep(u); });
    }
  }

 private:
  double* SumDy(int64_t block) const { return partial_ + block * 2 * channels_; }
  double* SumDyXc(int64_t block) const { return SumDy(block) + channels_; }

  // Runs unit(u) for every unit, through the pool or inline when the call is tiny; in IEEE
  // arithmetic on whichever thread runs them.
  template <typename Unit>
  void RunUnits(bool reverse, const Unit& unit) {
    const int64_t count = plan_.units();
    const bool stream = plan_.stream_dx;
    auto range = [&](int64_t begin, int64_t end) {
      ScopedIeeeArithmetic ieee;
      for (int64_t i = begin; i < end; ++i) unit(reverse ? count - 1 - i : i);
      if (stream) FenceStreamedStores();
    };
    if (s_.elements() <= kInlineElements) {
      range(0, count);
    } else {
      parallel_for_(count, plan_.unit_elements() * kCyclesPerElement, range);
    }
  }

  void FirstSweep(int64_t u) {
    const int64_t b = u / plan_.groups;
    const int64_t g = u % plan_.groups;
    if (s_.channels_last) return RowBlock(b);
    if (plan_.matrix) return PlaneGroup(b, g);
    if (plan_.fused) return RunGroup(g);
    return RunBlock(g, b);
  }

  void SecondSweep(int64_t u) {
    const int64_t b = u / plan_.groups;
    const int64_t g = u % plan_.groups;
    if (s_.channels_last) return RowBlockDx(plan_.block_begin(b), plan_.block_end(b));
    if (plan_.matrix) {
      ColumnArrays<F> a;
      ExpandPlaneColumns(g, &a);
      return PlaneGroupDx(g, plan_.block_begin(b), plan_.block_end(b), a);
    }
    const int64_t c = g;  // runs with blocks: one channel per group
    ForEachRun(s_, c, plan_.block_begin(b), plan_.block_end(b),
               [&](int64_t offset, int64_t length) { WriteDxRun(c, offset, length); });
  }

  // ---- Channels last: blocks of rows, k rows folded into one matrix row of k * C columns.

  void ExpandRowColumns(const F* per_channel, F* per_column) const {
    for (int64_t i = 0; i < plan_.dx_fold; ++i) {
      std::copy(per_channel, per_channel + channels_, per_column + i * channels_);
    }
  }

  void RowBlock(int64_t b) {
    const int64_t C = channels_;
    const int64_t columns = plan_.fold * C;
    // The folded columns' sums, folded into channels at the end; with no folding the
    // channel partials themselves.
    double local[2 * 2 * kMinRowWidth];  // a folded row has fewer than 2 * kMinRowWidth
    double* sum_dy = plan_.fold == 1 ? SumDy(b) : local;
    double* sum_dy_xc = plan_.fold == 1 ? SumDyXc(b) : local + columns;
    std::fill(sum_dy, sum_dy + columns, 0.0);
    std::fill(sum_dy_xc, sum_dy_xc + columns, 0.0);
    // Chunks small enough for L1/L2, where the sums' column tiles re-read them; inference
    // writes x_backprop of a chunk right after summing it.
    const int64_t chunk_rows =
        RoundUp(std::max<int64_t>(1, kChunkElements / C), plan_.fold * kFastGroup);
    for (int64_t r0 = plan_.block_begin(b); r0 < plan_.block_end(b); r0 += chunk_rows) {
      const int64_t r1 = std::min(plan_.block_end(b), r0 + chunk_rows);
      const int64_t whole = (r1 - r0) / plan_.fold;
      loops_.sum_rows(t_.y_backprop + r0 * C, t_.x + r0 * C, columns, whole, columns, row_k_.mean,
                      sum_dy, sum_dy_xc);
      const int64_t rest = r0 + whole * plan_.fold;
      if (rest < r1) {
        loops_.sum_rows(t_.y_backprop + rest * C, t_.x + rest * C, columns, 1, (r1 - rest) * C,
                        row_k_.mean, sum_dy, sum_dy_xc);
      }
      if (!training_) RowBlockDx(r0, r1);
    }
    if (plan_.fold == 1) return;
    std::fill(SumDy(b), SumDy(b) + 2 * C, 0.0);
    for (int64_t i = 0; i < plan_.fold; ++i) {
      for (int64_t c = 0; c < C; ++c) {
        SumDy(b)[c] += sum_dy[i * C + c];
        SumDyXc(b)[c] += sum_dy_xc[i * C + c];
      }
    }
  }

  // x_backprop of rows [r0, r1): pieces of dx_fold whole rows (a few thousand elements, one
  // staged and streamed piece each), or, for rows wider than kDxColumnTile, a tile of columns at
  // a time down the rows, so the tile's coefficients stay in L1 (a 2048-channel row's would not).
  void RowBlockDx(int64_t r0, int64_t r1) {
    const int64_t C = channels_;
    if (C <= kDxColumnTile) {
      for (int64_t r = r0; r < r1; r += plan_.dx_fold) {
        WriteDxColumns(row_k_, r * C, 0, std::min(plan_.dx_fold, r1 - r) * C);
      }
      return;
    }
    for (int64_t c0 = 0; c0 < C; c0 += kDxColumnTile) {
      for (int64_t r = r0; r < r1; ++r) {
        WriteDxColumns(row_k_, r * C + c0, c0, std::min(kDxColumnTile, C - c0));
      }
    }
  }

  // Elements [offset, offset + count) of x_backprop, whose first column is `column`.
  void WriteDxColumns(const DxCoefficients<F>& k, int64_t offset, int64_t column, int64_t count) {
    WriteDx(t_.x_backprop + offset, count, plan_.stream_dx, [&](T* out, int64_t first, int64_t n) {
      const DxCoefficients<F> kc = Columns(k, column + first);
      if (training_) {
        loops_.training_dx(t_.y_backprop + offset + first, t_.x + offset + first, out, kc, n);
      } else {
        loops_.inference_dx(t_.y_backprop + offset + first, out, kc, n);
      }
    });
  }

  // ---- Channels first, short planes: [N, C * S], a unit = rows [r0, r1) x a channel group.

  // Mean and (where known) coefficients of group g's columns.
  void ExpandPlaneColumns(int64_t g, ColumnArrays<F>* a) const {
    const int64_t S = s_.spatial;
    for (int64_t c = plan_.group_begin(g); c < plan_.group_end(g); ++c) {
      const int64_t j = (c - plan_.group_begin(g)) * S;
      std::fill(a->mean + j, a->mean + j + S, mean_[c]);
      std::fill(a->scale_inv_std + j, a->scale_inv_std + j + S, scale_inv_std_[c]);
      std::fill(a->dy_mean + j, a->dy_mean + j + S, training_ ? dy_mean_[c] : F(0));
      std::fill(a->xc_coef + j, a->xc_coef + j + S, training_ ? xc_coef_[c] : F(0));
    }
  }

  void PlaneGroup(int64_t b, int64_t g) {
    const int64_t S = s_.spatial;
    const int64_t c0 = plan_.group_begin(g);
    const int64_t c1 = plan_.group_end(g);
    const int64_t width = (c1 - c0) * S;
    const int64_t r0 = plan_.block_begin(b);
    const int64_t r1 = plan_.block_end(b);
    ColumnArrays<F> a;
    ExpandPlaneColumns(g, &a);
    std::fill(a.sum_dy, a.sum_dy + width, 0.0);
    std::fill(a.sum_dy_xc, a.sum_dy_xc + width, 0.0);
    const int64_t offset = c0 * S;
    loops_.sum_rows(t_.y_backprop + r0 * plan_.row_stride + offset,
                    t_.x + r0 * plan_.row_stride + offset, plan_.row_stride, r1 - r0, width,
                    a.mean, a.sum_dy, a.sum_dy_xc);
    for (int64_t c = c0; c < c1; ++c) {
      double sum_dy = 0.0, sum_dy_xc = 0.0;
      for (int64_t j = (c - c0) * S; j < (c - c0 + 1) * S; ++j) {
        sum_dy += a.sum_dy[j];
        sum_dy_xc += a.sum_dy_xc[j];
      }
      if (kExact && plan_.fused) CompensatedChannelSums(c, &sum_dy, &sum_dy_xc);
      SumDy(b)[c] = sum_dy;
      SumDyXc(b)[c] = sum_dy_xc;
      if (training_ && plan_.fused) {
        SetTrainingCoefficients(c, sum_dy, sum_dy_xc);
        std::fill(a.dy_mean + (c - c0) * S, a.dy_mean + (c - c0 + 1) * S, dy_mean_[c]);
        std::fill(a.xc_coef + (c - c0) * S, a.xc_coef + (c - c0 + 1) * S, xc_coef_[c]);
      }
    }
    if (!training_ || plan_.fused) PlaneGroupDx(g, r0, r1, a);
  }

  void PlaneGroupDx(int64_t g, int64_t r0, int64_t r1, const ColumnArrays<F>& a) {
    const int64_t c0 = plan_.group_begin(g);
    const int64_t width = (plan_.group_end(g) - c0) * s_.spatial;
    const DxCoefficients<F> k{a.mean, a.scale_inv_std, a.dy_mean, a.xc_coef};
    for (int64_t r = r0; r < r1; ++r) {
      WriteDxColumns(k, r * plan_.row_stride + c0 * s_.spatial, 0, width);
    }
  }

  // ---- Channels first, long planes: runs along each plane.

  // A block of one channel's elements (two sweeps).
  void RunBlock(int64_t c, int64_t b) {
    LaneSums lanes;
    lanes.Clear();
    ForEachRun(s_, c, plan_.block_begin(b), plan_.block_end(b),
               [&](int64_t offset, int64_t length) {
                 loops_.sum_run(t_.y_backprop + offset, t_.x + offset, mean_[c], length, &lanes);
                 if (!training_) WriteDxRun(c, offset, length);
               });
    SumDy(b)[c] = 0.0;
    SumDyXc(b)[c] = 0.0;
    lanes.Reduce(&SumDy(b)[c], &SumDyXc(b)[c]);
  }

  // Whole channels of group g: sums, then (training) their coefficients and x_backprop,
  // visiting memory in address order both times.
  void RunGroup(int64_t g) {
    const int64_t c0 = plan_.group_begin(g);
    const int64_t c1 = plan_.group_end(g);
    const int64_t S = s_.spatial;
    LaneSums lanes[kMaxGroupChannels];
    for (int64_t c = c0; c < c1; ++c) lanes[c - c0].Clear();
    for (int64_t n = 0; n < s_.batch; ++n) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t offset = (n * channels_ + c) * S;
        loops_.sum_run(t_.y_backprop + offset, t_.x + offset, mean_[c], S, &lanes[c - c0]);
        if (!training_) WriteDxRun(c, offset, S);
      }
    }
    for (int64_t c = c0; c < c1; ++c) {
      SumDy(0)[c] = 0.0;
      SumDyXc(0)[c] = 0.0;
      lanes[c - c0].Reduce(&SumDy(0)[c], &SumDyXc(0)[c]);
      if (kExact) CompensatedChannelSums(c, &SumDy(0)[c], &SumDyXc(0)[c]);
      if (training_) SetTrainingCoefficients(c, SumDy(0)[c], SumDyXc(0)[c]);
    }
    if (!training_) return;
    for (int64_t n = 0; n < s_.batch; ++n) {
      for (int64_t c = c0; c < c1; ++c) WriteDxRun(c, (n * channels_ + c) * S, S);
    }
  }

  // x_backprop of one run of channel c, written to the tensor.
  void WriteDxRun(int64_t c, int64_t offset, int64_t length) {
    WriteDx(t_.x_backprop + offset, length, plan_.stream_dx,
            [&](T* out, int64_t first, int64_t n) {
              if (training_) {
                loops_.training_dx_run(t_.y_backprop + offset + first, t_.x + offset + first,
                                       out, k_, c, n);
              } else {
                loops_.inference_dx_run(t_.y_backprop + offset + first, out, k_, c, n);
              }
            });
  }

  // ---- Per channel.

  // The coefficients of columns [first, ...).
  static DxCoefficients<F> Columns(const DxCoefficients<F>& k, int64_t first) {
    return {k.mean + first, k.scale_inv_std + first, k.dy_mean + first, k.xc_coef + first};
  }

  void SetTrainingCoefficients(int64_t c, double sum_dy, double sum_dy_xc) {
    const double rest = static_cast<double>(s_.rest());
    dy_mean_[c] = static_cast<F>(sum_dy / rest);
    xc_coef_[c] = static_cast<F>(inv_std_[c] * inv_std_[c] * (sum_dy_xc / rest));
  }

  // Adds every block's partial sums into block 0's, in block order for each channel.
  void CombineBlocks() {
    for (int64_t b = 1; b < plan_.blocks; ++b) {
      for (int64_t c = 0; c < channels_; ++c) {
        SumDy(0)[c] += SumDy(b)[c];
        SumDyXc(0)[c] += SumDyXc(b)[c];
      }
    }
  }

  // Channel c's outputs and training coefficients, from its combined sums.
  void Finish(int64_t c) {
    const double sum_dy = SumDy(0)[c];
    const double sum_dy_xc = SumDyXc(0)[c];
    t_.offset_backprop[c] = static_cast<float>(sum_dy);
    t_.scale_backprop[c] = static_cast<float>(sum_dy_xc * inv_std_[c]);
    if (!training_) return;
    // var + eps == 0: factoring inv_std out of the sum would turn TF's per-term infinities and
    // NaNs into a different result, so that channel is summed again in TF's grouping.
    if (std::isinf(inv_std_[c])) t_.scale_backprop[c] = static_cast<float>(ScaledSumInTfOrder(c));
    if (!plan_.fused) SetTrainingCoefficients(c, sum_dy, sum_dy_xc);
  }

  // Calls fn(element index) for every element of channel c, in (n, spatial) order.
  template <typename Fn>
  void ForEachElement(int64_t c, Fn&& fn) const {
    for (int64_t e = 0; e < s_.rest(); ++e) {
      fn(s_.channels_last ? e * channels_ + c
                          : ((e / s_.spatial) * channels_ + c) * s_.spatial + e % s_.spatial);
    }
  }

  // The exact family's sums of channel c: every term exact in double, added with a running
  // error term (TwoSum), so the result is within about 2^-100 of Σ|term| of the true sum and no
  // summation order (TensorFlow's included) can be more accurate, however ill-conditioned the
  // sum. The vectorized sweep's plain double sums can lose to a lucky order when terms of 1e15
  // cancel. Serial, only for channels of fewer than kFastPathRest elements.
  void CompensatedChannelSums(int64_t c, double* sum_dy, double* sum_dy_xc) const {
    CompensatedSum dy, dy_xc;
    const double mean = t_.mean[c];
    ForEachElement(c, [&](int64_t i) {
      const double d = ToFloat(t_.y_backprop[i]);
      dy.Add(d);
      dy_xc.Add(d * (static_cast<double>(ToFloat(t_.x[i])) - mean));
    });
    *sum_dy = dy.Value();
    *sum_dy_xc = dy_xc.Value();
  }

  // Σ dy · ((x − mean) · inv_std) of channel c, serially. Only for infinite inv_std.
  double ScaledSumInTfOrder(int64_t c) const {
    double sum = 0.0;
    ForEachElement(c, [&](int64_t i) {
      sum += static_cast<double>(ToFloat(t_.y_backprop[i])) *
             ((static_cast<double>(ToFloat(t_.x[i])) - t_.mean[c]) * inv_std_[c]);
    });
    return sum;
  }

  static constexpr bool kExact = std::is_same<F, double>::value;
  const Params& params_;
  const Tensors<T>& t_;
  const ParallelFor& parallel_for_;
  const Shape s_;
  const Plan plan_;
  const CpuLoops<T, F>& loops_;
  const int64_t channels_;
  const bool training_;
  double* partial_ = nullptr;
  double* inv_std_ = nullptr;
  F* mean_ = nullptr;  // per channel, then x_backprop's coefficients
  F* scale_inv_std_ = nullptr;
  F* dy_mean_ = nullptr;
  F* xc_coef_ = nullptr;
  F* row_columns_ = nullptr;
  DxCoefficients<F> k_{nullptr, nullptr, nullptr, nullptr};      // per channel (runs)
  DxCoefficients<F> row_k_{nullptr, nullptr, nullptr, nullptr};  // per folded column
};

}  // namespace

ParallelFor SerialFor() {
  return [](int64_t count, int64_t /*cost_per_unit*/, const RangeFn& fn) {
    if (count > 0) fn(0, count);
  };
}

template <typename T>
void BatchNormGradCpu(const Params& params, const Tensors<T>& t, const ParallelFor& parallel_for) {
  ScopedIeeeArithmetic ieee;
  const int64_t channels = params.shape.channels;
  if (params.shape.elements() == 0) {
    std::fill(t.scale_backprop, t.scale_backprop + channels, 0.0f);
    std::fill(t.offset_backprop, t.offset_backprop + channels, 0.0f);
    return;
  }
  if (params.shape.rest() >= kFastPathRest) {
    GradComputation<T, float>(params, t, parallel_for).Run();
  } else {
    GradComputation<T, double>(params, t, parallel_for).Run();
  }
}

template void BatchNormGradCpu<float>(const Params&, const Tensors<float>&, const ParallelFor&);
template void BatchNormGradCpu<Half>(const Params&, const Tensors<Half>&, const ParallelFor&);
template void BatchNormGradCpu<BFloat16>(const Params&, const Tensors<BFloat16>&,
                                         const ParallelFor&);

}  // namespace fbn
