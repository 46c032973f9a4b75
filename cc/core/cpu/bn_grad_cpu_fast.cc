// The fast family's schedules (channels of at least kFastPathRest elements, float loops):
// rows (channels last), planes and runs (channels first), each cutting a call into units and
// combining their partial sums. bn_grad_cpu.cc says how the schedules are chosen and why.
#include <algorithm>
#include <cstdint>

#include "cc/core/cpu/bn_grad_cpu_call.h"

namespace fbn {
namespace grad_cpu {
namespace {

// Rows wider than kMaxDownRowsWidth are summed in stripes (cpu_loops.h), which read memory as
// kFastGroup streams; blocks of them this large keep the streams long.
constexpr int64_t kStripedUnitElements = int64_t{1} << 17;
// A rows block has at least this many rows, so that its partial sums (two doubles per column)
// stay small next to the block's own data.
constexpr int64_t kMinBlockRows = 128;
// Channels-first planes shorter than this go through the planes schedule: a run would fill
// too few of a vector's lanes.
constexpr int64_t kShortPlane = 16;
// Columns of a planes unit (its per-column arrays are on the stack).
constexpr int64_t kMaxUnitColumns = 1024;
// Channels-last rows are folded to at least this many columns.
constexpr int64_t kMinRowWidth = 64;
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

}  // namespace

template <typename T>
void RunFastFamily(const Call<T, float>& call) {
  if (call.s.channels_last) return RunRows(call);
  if (call.s.spatial < kShortPlane) return RunPlanes(call);
  RunRuns(call);
}

template void RunFastFamily<float>(const Call<float, float>& call);
template void RunFastFamily<Half>(const Call<Half, float>& call);
template void RunFastFamily<BFloat16>(const Call<BFloat16, float>& call);

}  // namespace grad_cpu
}  // namespace fbn
