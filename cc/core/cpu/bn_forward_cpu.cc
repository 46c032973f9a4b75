// The production CPU forward: how one call is cut into units, and how the units' moments become
// each channel's statistics. The innermost loops live in forward_loops_impl.h.
//
// Training runs two sweeps over the same units (cpu_sweeps.h), inference only the second:
//   moments    each unit computes, for every channel it touches, Σ x and the sum of squared
//              deviations about its own mean; its tile is small enough that the second of those
//              two passes reads it from the cache, so memory sees x once. Deviations about a
//              local mean, combined as Chan, Golub and LeVeque do, never cancel: the variance
//              holds whatever the data's offset (where Σx² − (Σx)²/n in float loses it all).
//   (between)  each channel's parts combined in a fixed order (CombineMoments, bn_forward.h),
//              its outputs and y's coefficients.
//   normalize  y, evaluated in double and rounded once.
// Both layouts are handled natively, never transposed, by one of two schedules:
//   rows  a row-major matrix whose columns each belong to one channel: channels last [R, C]
//         (short rows folded several to one), or channels first [N, C * S] with short planes
//         (kShortPlane).
//   runs  channels first: each channel's planes, cut into pieces of at most kMaxRunLength.
// Determinism: units depend on the shape only, each writes its own parts, and the parts are
// combined per channel in unit order. The thread count changes which thread runs a unit, never
// the bits of the result; every instruction set's loops compute the same lanes in the same order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>

#include "cc/core/bn_forward.h"
#include "cc/core/ceil_div.h"
#include "cc/core/cpu/call_scratch.h"
#include "cc/core/cpu/cpu_sweeps.h"
#include "cc/core/cpu/forward_loops.h"
#include "cc/core/cpu/streaming_stores.h"
#include "cc/core/ieee_arithmetic.h"

namespace fbn {
namespace {

// A moments tile about this large: its second pass reads it from the L2 cache (256 KiB fits
// every L2 of 512 KiB or more). The channels' parts are combined on one thread between the
// sweeps, so fewer, larger tiles shorten that serial step: 256 KiB against 64 KiB made the
// channels-last training forward 10-20 % faster (AMD EPYC Zen 5, one thread).
constexpr int64_t kMomentsTileBytes = int64_t{256} << 10;
// Columns of a rows tile (a multiple of 16, the loops' vector).
constexpr int64_t kMaxTileColumns = 256;
// A rows tile has at least this many rows (or all of them), so that its parts (two doubles per
// column) stay small next to its data.
constexpr int64_t kMinTileRows = 64;
// Channels-last rows narrower than this are folded, several rows into one.
constexpr int64_t kMinFoldedWidth = 64;
// Channels-first planes shorter than this take the rows schedule: each run costs its own two
// lane reductions and a combination, which on 7x7 planes made the runs schedule three to four
// times as slow as the rows (both modes, one thread, AMD EPYC Zen 5). Once the rows schedule
// combined its parts channels side by side, it was also 1.4-2.1x as fast as the runs in
// training on 8x8 to 11x11 planes (1 and 2 threads) and as fast or faster in inference; on
// 14x14 planes the runs stayed faster at two threads and in inference.
constexpr int64_t kShortPlane = 128;
// A run is at most this long; a unit of runs holds about kRunsUnitElements elements of one
// channel, in at most kMaxRunsPerUnit runs, or several whole channels where one is smaller
// (but no fewer than kMinGroupUnits units where the channels allow it).
constexpr int64_t kMaxRunLength = int64_t{1} << 15;
constexpr int64_t kRunsUnitElements = int64_t{1} << 15;
constexpr int64_t kMaxRunsPerUnit = 256;
// Channels whose moments RunRows combines side by side.
constexpr int64_t kCombineChannels = 16;
// The step between the sweeps goes in parts (cpu_sweeps.h): one thread combining 1024-2048
// channels' moments took 48-76 µs of an 850-2700 µs call at two threads (channels last,
// 16x7x7x2048, 64x7x7x1024, 32x8x8x2048, an Intel Xeon), and takes the same at any thread count.
static_assert(kStepPartChannels % kCombineChannels == 0, "step parts of whole combined groups");

// Rough cycles per element, for the pool's cost model.
constexpr int64_t kCyclesPerElement = 3;

// One call: the inputs, the loops for this CPU, y's coefficients per channel, and the step
// both schedules share, a channel's outputs from its moments.
template <typename T>
class ForwardCall {
 public:
  ForwardCall(const ForwardParams& params, const ForwardTensors<T>& t,
              const ParallelFor& parallel_for, const CpuForwardLoops<T>& loops,
              const MemoryRules& rules)
      : t(t),
        loops(loops),
        s(params.shape.canonical()),
        params_(params),
        parallel_for_(parallel_for),
        rules_(rules),
        coefficients_(CallScratch<NormalizeCoefficients, kForwardChannelsSlot>(s.channels)) {}

  // Channel c's outputs and y's coefficients; training from its combined moments.
  void Finish(int64_t c, const ChannelMoments& m) {
    double mean, variance;
    MeanAndVariance(m, &mean, &variance);
    coefficients_[c] = FinishForwardChannel(params_, t, c, m.count, mean, variance);
  }
  // Inference: channels [c0, c1)'s outputs and coefficients from the given statistics.
  void FinishInference(int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      coefficients_[c] = FinishForwardChannel(params_, t, c, static_cast<double>(s.rest()),
                                              static_cast<double>(t.mean[c]),
                                              static_cast<double>(t.variance[c]));
    }
  }
  const NormalizeCoefficients& coefficients(int64_t c) const { return coefficients_[c]; }
  bool training() const { return params_.is_training; }

  // Training: moments(u) for every unit, then the parts of `finish` (shared by the threads),
  // then normalize(u) for every unit. Inference: the parts of `finish` on this thread, then
  // normalize(u) for every unit.
  void Run(int64_t units, int64_t unit_elements, const UnitFn& moments,
           const BetweenStep& finish, const UnitFn& normalize) {
    const SweepPlan plan{units, unit_elements * kCyclesPerElement,
                         s.elements() <= kInlineElements};
    if (!training()) {
      for (int64_t p = 0; p < finish.parts; ++p) finish.part(p);
      return RunSweeps(parallel_for_, plan, normalize);
    }
    RunSweeps(parallel_for_, plan, moments, finish, normalize);
  }

  // Whether y is written with non-temporal stores (streaming_stores.h): where it can be, with
  // rows (or runs) of row_elements, beyond the footprint the rules set for the threads the call
  // may use.
  bool StreamY(int64_t row_elements) const {
    const int64_t footprint = parallel_for_.threads > 1 ? rules_.parallel_streaming_footprint
                                                         : rules_.forward_streaming_footprint;
    return CanStream(t.y, t.x, row_elements * kElementBytes) && 2 * XBytes() > footprint;
  }
  // Whether x fits the last-level cache as the rules size it (MemoryRules::grouped_bytes).
  bool XCached() const { return XBytes() <= rules_.grouped_bytes; }
  // Whether x takes more than a quarter of the last-level cache (the moments' prefetch rule).
  bool XBeyondQuarterCache() const { return XBytes() > rules_.grouped_bytes / 4; }
  int64_t XBytes() const { return s.elements() * kElementBytes; }
  static constexpr int64_t kElementBytes = sizeof(T);
  // How the rows schedule writes y (RowOrder): by groups where x fits the cache.
  RowOrder Order() const { return XCached() ? RowOrder::kByGroups : RowOrder::kInOrder; }

  const ForwardTensors<T>& t;
  const CpuForwardLoops<T>& loops;
  const Shape s;  // canonical

 private:
  const ForwardParams& params_;
  const ParallelFor& parallel_for_;
  const MemoryRules rules_;
  NormalizeCoefficients* coefficients_;  // per channel
};

// The rows schedule. The matrix is [rows, width]; channel c owns columns
// c * first + i * step for i < per_channel. Channels-last rows
// folded `fold` to one leave R % fold rows of C columns after the matrix (left_rows).
template <typename T>
void RunRows(ForwardCall<T>& call) {
  const Shape& s = call.s;
  const int64_t C = s.channels;
  int64_t rows, width, first, step, per_channel, left_rows = 0;
  if (s.channels_last) {
    const int64_t fold = std::max<int64_t>(1, std::min(kMinFoldedWidth / C, s.rest()));
    rows = s.rest() / fold;
    left_rows = s.rest() - rows * fold;
    width = fold * C;
    first = 1, step = C, per_channel = fold;
  } else {
    rows = s.batch;
    width = C * s.spatial;
    first = s.spatial, step = 1, per_channel = s.spatial;
  }

  const int64_t tile_columns = std::min(width, kMaxTileColumns);
  const int64_t column_tiles = CeilDiv(width, tile_columns);
  const int64_t tile_rows = std::min(
      rows, std::max(kMinTileRows, kMomentsTileBytes / (tile_columns * int64_t{sizeof(T)})));
  const int64_t row_tiles = rows == 0 ? 0 : CeilDiv(rows, tile_rows);
  const int64_t tiles = row_tiles * column_tiles;
  const int64_t units = tiles + (left_rows > 0 ? 1 : 0);

  // Parts: Σ x and the squared deviations per row tile and column, then the left rows' C.
  const int64_t parts_size = (row_tiles + 1) * width;
  double* sums = CallScratch<double, kForwardPartsSlot>(2 * parts_size);
  double* m2s = sums + parts_size;
  // y's coefficients per column, each array padded to whole vectors.
  const int64_t padded = RoundUp(width, 16);
  double* mean = CallScratch<double, kForwardColumnsSlot>(3 * padded);
  double* scale_inv_std = mean + padded;
  double* offset = mean + 2 * padded;
  const NormalizeColumns columns{mean, scale_inv_std, offset};
  const bool stream = call.StreamY(width) && (left_rows == 0 || call.StreamY(C));
  const RowOrder order = call.Order();

  auto tile = [&](int64_t u, int64_t* r0, int64_t* nrows, int64_t* j0, int64_t* ncols) {
    *r0 = (u / column_tiles) * tile_rows;
    *nrows = std::min(tile_rows, rows - *r0);
    *j0 = (u % column_tiles) * tile_columns;
    *ncols = std::min(tile_columns, width - *j0);
  };
  const T* left_x = call.t.x + rows * width;
  T* left_y = call.t.y + rows * width;
  double* left_sums = sums + row_tiles * width;
  double* left_m2s = m2s + row_tiles * width;

  // The moments prefetch (forward_loops.h) where x takes more than a quarter of the last-level
  // cache: the L3, shared with other cores (and on AMD filled only by what the L2s evict), then
  // no longer holds x whole from one call to the next. Measured on a Zen 5 (core_bench --op
  // forward, training, one thread, builds alternated): 32x8x8x2048 channels last (x 16.8 MB,
  // L3 32 MiB) 1.2x as fast while other tenants loaded the host, 1.03x on a quiet one; 6.4 MB
  // channels last 1-3 % slower with prefetches (the L3 kept up; they took load slots), channels
  // first within 4 % either way.
  const bool prefetch = call.XBeyondQuarterCache();
  auto moments = [&](int64_t u) {
    if (u == tiles) {
      return call.loops.moments_rows(left_x, C, left_rows, C, left_sums, left_m2s, nullptr);
    }
    int64_t r0, nrows, j0, ncols;
    tile(u, &r0, &nrows, &j0, &ncols);
    const T* next = nullptr;
    if (prefetch) {
      int64_t next_r0, next_rows, next_j0, next_cols;
      tile(std::min(u + 1, tiles - 1), &next_r0, &next_rows, &next_j0, &next_cols);
      next = call.t.x + next_r0 * width + next_j0;
    }
    const int64_t part = (u / column_tiles) * width + j0;
    call.loops.moments_rows(call.t.x + r0 * width + j0, width, nrows, ncols, &sums[part],
                            &m2s[part], next);
  };
  // Channel c's parts lie at rt * width + c * first + k * step (row tile rt, its k-th column
  // of the channel), then the left rows' at c. They are combined kCombineChannels channels at
  // a time, the channel innermost, each channel's in CombineMoments' order (row tile, column,
  // left rows) and by its rule: the same operations and bits as channel by channel, but the
  // channels' sums are independent chains, their divisions vectorize, and a block's parts stay
  // in L1 channels first. Channel by channel, the division per part and its dependent sum took
  // 40 of 430 µs on 16x7x7x2048 channels last and 390 of 970 µs channels first (49 parts a
  // channel), at one thread, in the step between the sweeps, which the threads now share in
  // parts of kStepPartChannels channels.
  auto for_each_part = [&](auto&& fn) {  // fn(part's count, channel 0's sum and m2, stride)
    for (int64_t rt = 0; rt < row_tiles; ++rt) {
      const double count = static_cast<double>(std::min(tile_rows, rows - rt * tile_rows));
      for (int64_t k = 0; k < per_channel; ++k) {
        const int64_t at = rt * width + k * step;
        fn(count, sums + at, m2s + at, first);
      }
    }
    if (left_rows > 0) fn(static_cast<double>(left_rows), left_sums, left_m2s, int64_t{1});
  };
  double count = 0.0;  // of every channel: the rows
  for_each_part([&](double part_count, const double*, const double*, int64_t) {
    count += part_count;
  });
  auto combine = [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c0 = c_begin; c0 < c_end; c0 += kCombineChannels) {
      const int64_t n = std::min(kCombineChannels, c_end - c0);
      double sum[kCombineChannels] = {}, m2[kCombineChannels] = {}, mean[kCombineChannels];
      for_each_part([&](double, const double* part_sum, const double*, int64_t stride) {
        for (int64_t i = 0; i < n; ++i) sum[i] += part_sum[(c0 + i) * stride];
      });
      if (count != 0.0) {
        for (int64_t i = 0; i < n; ++i) mean[i] = sum[i] / count;
        for_each_part([&](double part_count, const double* part_sum, const double* part_m2,
                          int64_t stride) {
          for (int64_t i = 0; i < n; ++i) {
            const int64_t at = (c0 + i) * stride;
            m2[i] += PartSquaredDeviations({part_count, part_sum[at], part_m2[at]}, mean[i]);
          }
        });
      }
      for (int64_t i = 0; i < n; ++i) call.Finish(c0 + i, ChannelMoments{count, sum[i], m2[i]});
    }
  };
  auto finish = [&](int64_t c0, int64_t c1) {
    if (call.training()) {
      combine(c0, c1);
    } else {
      call.FinishInference(c0, c1);
    }
    for (int64_t c = c0; c < c1; ++c) {  // channel by channel: no division per column
      const NormalizeCoefficients& k = call.coefficients(c);
      for (int64_t i = 0, j = c * first; i < per_channel; ++i, j += step) {
        mean[j] = k.mean;
        scale_inv_std[j] = k.scale_inv_std;
        offset[j] = k.offset;
      }
    }
  };
  auto normalize = [&](int64_t u) {
    if (u == tiles) {
      return call.loops.normalize_rows(left_x, left_y, C, left_rows, C, columns, stream, order);
    }
    int64_t r0, nrows, j0, ncols;
    tile(u, &r0, &nrows, &j0, &ncols);
    const NormalizeColumns k{mean + j0, scale_inv_std + j0, offset + j0};
    call.loops.normalize_rows(call.t.x + r0 * width + j0, call.t.y + r0 * width + j0, width,
                              nrows, ncols, k, stream, order);
  };
  call.Run(units, tile_rows * tile_columns, moments, StepInParts(C, kStepPartChannels, finish),
           normalize);
}

// The runs schedule: channel c's runs in (n, piece) order, cut into blocks of at most
// kMaxRunsPerUnit runs; a block combines its runs' moments into one part, and the channel its
// blocks' parts. A unit is one block, or whole channels of one block each: with a unit per
// small channel two threads were no faster than one (channels first, 4x14x14x512 and
// 8x14x14x256 on an Intel Xeon), each unit paying the shared unit counter and a cache line its
// planes share with the next channel's for a few microseconds of work.
template <typename T>
void RunRuns(ForwardCall<T>& call) {
  const Shape& s = call.s;
  const int64_t C = s.channels, S = s.spatial;
  const int64_t piece = std::min(S, kMaxRunLength);
  const int64_t pieces = CeilDiv(S, piece);  // per plane
  const int64_t runs = s.batch * pieces;     // per channel
  const int64_t runs_per_unit =
      std::max<int64_t>(1, std::min(kMaxRunsPerUnit, kRunsUnitElements / piece));
  const int64_t blocks = CeilDiv(runs, runs_per_unit);  // per channel
  const int64_t blocks_per_unit =
      blocks > 1 ? 1
                 : std::clamp<int64_t>(kRunsUnitElements / (runs * piece), 1,
                                       std::max<int64_t>(1, C / kMinGroupUnits));
  ChannelMoments* parts = CallScratch<ChannelMoments, kForwardPartsSlot>(C * blocks);
  const bool stream = call.StreamY(S) && piece % 16 == 0;
  // Block b (channel b / blocks) for each block of unit u.
  auto each_block = [&](int64_t u, const auto& fn) {
    const int64_t end = std::min(C * blocks, (u + 1) * blocks_per_unit);
    for (int64_t b = u * blocks_per_unit; b < end; ++b) fn(b);
  };

  // Run k of channel c: its first element and length.
  auto run = [&](int64_t c, int64_t k, int64_t* length) {
    const int64_t n = k / pieces, p = k % pieces;
    *length = std::min(piece, S - p * piece);
    return (n * C + c) * S + p * piece;
  };
  auto moments = [&](int64_t u) {
    each_block(u, [&](int64_t b) {
      const int64_t c = b / blocks, k0 = (b % blocks) * runs_per_unit;
      const int64_t count = std::min(runs_per_unit, runs - k0);
      ChannelMoments own[kMaxRunsPerUnit];
      for (int64_t i = 0; i < count; ++i) {
        int64_t length;
        const int64_t at = run(c, k0 + i, &length);
        own[i].count = static_cast<double>(length);
        call.loops.moments_run(call.t.x + at, length, &own[i].sum, &own[i].m2);
      }
      parts[b] = CombineMoments(count, [&](int64_t i) { return own[i]; });
    });
  };
  auto finish = [&](int64_t c0, int64_t c1) {
    if (!call.training()) return call.FinishInference(c0, c1);
    for (int64_t c = c0; c < c1; ++c) {
      call.Finish(c, CombineMoments(blocks, [&](int64_t b) { return parts[c * blocks + b]; }));
    }
  };
  auto normalize = [&](int64_t u) {
    each_block(u, [&](int64_t b) {
      const int64_t c = b / blocks, k0 = (b % blocks) * runs_per_unit;
      const int64_t count = std::min(runs_per_unit, runs - k0);
      for (int64_t i = 0; i < count; ++i) {
        int64_t length;
        const int64_t at = run(c, k0 + i, &length);
        call.loops.normalize_run(call.t.x + at, call.t.y + at, length, call.coefficients(c),
                                 stream);
      }
    });
    if (stream) FenceStreamingStores();
  };
  call.Run(CeilDiv(C * blocks, blocks_per_unit), blocks_per_unit * runs_per_unit * piece, moments,
           StepInParts(C, kStepPartChannels, finish), normalize);
}

}  // namespace

template <typename T>
void BatchNormForwardCpuWithLoops(const ForwardParams& params, const ForwardTensors<T>& t,
                                  const ParallelFor& parallel_for,
                                  const CpuForwardLoops<T>& loops,
                                  const MemoryRules& rules) {
  ScopedIeeeArithmetic ieee;
  ForwardCall<T> call(params, t, parallel_for, loops, rules);
  const Shape& s = call.s;
  if (s.elements() == 0) {
    for (int64_t c = 0; c < s.channels; ++c) FinishEmptyChannel(t, c);
    return;
  }
  if (s.channels_last || s.spatial < kShortPlane) return RunRows(call);
  RunRuns(call);
}

template <typename T>
void BatchNormForwardCpu(const ForwardParams& params, const ForwardTensors<T>& t,
                         const ParallelFor& parallel_for) {
  BatchNormForwardCpuWithLoops(params, t, parallel_for, ForwardLoopsFor<T>(ActiveCpuIsa()),
                               KernelMemoryRules());
}

#define FBN_INSTANTIATE_FORWARD_CPU(T)                                                    \
  template void BatchNormForwardCpu<T>(const ForwardParams&, const ForwardTensors<T>&,    \
                                       const ParallelFor&);                               \
  template void BatchNormForwardCpuWithLoops<T>(const ForwardParams&,                     \
                                                const ForwardTensors<T>&, const ParallelFor&, \
                                                const CpuForwardLoops<T>&,                \
                                                const MemoryRules&);
FBN_INSTANTIATE_FORWARD_CPU(float)
FBN_INSTANTIATE_FORWARD_CPU(Half)
FBN_INSTANTIATE_FORWARD_CPU(BFloat16)
#undef FBN_INSTANTIATE_FORWARD_CPU

}  // namespace fbn
