// The exact family's schedules (channels of fewer than kFastPathRest elements, double loops,
// cpu_loops.h): rows by blocks or strips (channels last), runs and planes (channels first),
// whole channels per unit. bn_grad_cpu.cc says how the schedules are chosen and why.
// Bounded sums first; a sum that does not stand (BoundedSumStands, cpu_loops.h) is summed again
// with compensated sums, in the same order as before, so it is what compensated sums alone
// would have given; a sum that stands stays (within 2^-26 of the exact sum either way).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cc/core/cpu/bn_grad_cpu_call.h"

namespace fbn {
namespace grad_cpu {
namespace {

// Exact rows blocks have at least this many rows, so that their partial sums (four doubles
// per column) stay small next to the block's own data, and are at most kExactMaxBlocks before
// the taper (four, the fewest it tapers: Pieces). The finish reads every block's sums back:
// 16x7x7x2048's thirteen blocks (784 rows, 128 a block, tapered) spent 9 % of an inference call
// there at two threads of an Intel Xeon. Thirteen against seven on 576-784 rows of 512-2048
// channels (2026-12-02, make cores-interleaved, two runs of 31 rounds): 1.00-1.03x the time at
// one thread, 1.00-1.10x at two, where 8x8x8x1024, whose blocks stay, read 0.94-1.00x.
constexpr int64_t kExactMinBlockRows = 128;
constexpr int64_t kExactMaxBlocks = 4;
// The exact rows' finish goes in parts (cpu_sweeps.h): 2048 channels in 8 parts, 57 KB of
// block sums each on 16x7x7x2048 (seven blocks).
static_assert(kStepPartChannels % kColumnVector == 0, "step parts of whole column vectors");

// More than this fraction of the vectors of columns summed again: the compensated sums are
// formed for every column of every block at once (memory order) rather than vector by vector
// (a line read per row).
constexpr int64_t kRecomputeAllFraction = 4;

// Channels last, the rows cut into blocks fixed by the shape. A column's sums are its bounded
// sum over each block's rows in order, the blocks' sums added in block order; whichever
// schedule walks the rows (blocks of rows, or strips of columns), so the schedule never
// decides the bits.
Pieces ExactRowBlocks(const Shape& s) {
  return Blocks(s.rest(),
                std::max({kExactMinBlockRows, kUnitElements / s.channels,
                          CeilDiv(s.rest(), kExactMaxBlocks)}),
                1, /*taper=*/true);
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
// Without `products` only Σ dy (pairs[2 * c]), x unread: where only Σ dy cancels (a y_backprop
// whose channels sum to about zero, as a 1x1 convolution's gradient of a batch norm's
// x_backprop does), half the bytes and under half the arithmetic.
template <typename T>
void CompensatedColumns(const Call<T, double>& call, const Pieces& blocks, int64_t c0,
                        int64_t n, bool products, double* scratch, CompensatedSum* pairs) {
  const Tensors<T>& t = call.t;
  const int64_t C = call.s.channels;
  const ExactColumns columns = ColumnsAt(scratch, RowsPitch(n));
  for (int64_t b = 0; b < blocks.count; ++b) {
    // ColumnsAt lays out dy and dy_aux first: the arrays Σ dy alone uses.
    std::fill(scratch, scratch + (products ? 4 : 2) * RowsPitch(n), 0.0);
    const int64_t r0 = blocks.begin(b), rows = blocks.end(b) - r0;
    if (products) {
      call.loops.exact_sum_rows(t.y_backprop + r0 * C + c0, t.x + r0 * C + c0, C, rows, n,
                                call.mean + c0, columns);
    } else {
      call.loops.exact_sum_dy_rows(t.y_backprop + r0 * C + c0, C, rows, n, columns);
    }
    for (int64_t c = 0; c < n; ++c) {
      pairs[2 * c].AddPart(columns.dy[c], columns.dy_aux[c]);
      if (products) pairs[2 * c + 1].AddPart(columns.dy_xc[c], columns.dy_xc_aux[c]);
    }
  }
}

// Finishes channels [c0, c0 + n) from `totals`, their blocks' bounded sums added in block
// order: the sums that do not stand are summed again, by column vectors (a vector reads the
// same lines as one of its columns) or all at once where many vectors need it, in `scratch`
// (4 * RowsPitch(n) doubles, free to overwrite); Σ dy alone where every Σ dy·(x − mean) stands.
template <typename T>
void FinishExactColumns(const Call<T, double>& call, const Pieces& blocks, int64_t c0,
                        int64_t n, const ExactColumns& totals, double* scratch) {
  const int64_t R = call.s.rest();
  constexpr int64_t V = kColumnVector;
  struct Again {
    int64_t column;
    bool dy, dy_xc;  // which of its sums do not stand
  };
  std::vector<Again> again;
  std::vector<int64_t> vectors;
  bool products = false;
  for (int64_t c = 0; c < n; ++c) {
    const bool dy = !BoundedSumStands({totals.dy[c], totals.dy_aux[c]}, R);
    const bool dy_xc = !BoundedSumStands({totals.dy_xc[c], totals.dy_xc_aux[c]}, R);
    if (dy || dy_xc) {
      again.push_back({c, dy, dy_xc});
      products = products || dy_xc;
      if (vectors.empty() || vectors.back() != c / V) vectors.push_back(c / V);
    }
  }
  if (!again.empty()) {
    std::vector<CompensatedSum> exact(2 * RowsPitch(n));
    if (static_cast<int64_t>(vectors.size()) * kRecomputeAllFraction > RowsPitch(n) / V) {
      CompensatedColumns(call, blocks, c0, n, products, scratch, exact.data());
    } else {
      for (int64_t v : vectors) {
        CompensatedColumns(call, blocks, c0 + V * v, std::min(V, n - V * v), products, scratch,
                           &exact[2 * V * v]);
      }
    }
    for (const Again& a : again) {
      if (a.dy) totals.dy[a.column] = exact[2 * a.column].Value();
      if (a.dy_xc) totals.dy_xc[a.column] = exact[2 * a.column + 1].Value();
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
    // Zeroed here: the loops' first group starting the sums from zero instead took training on
    // 2048 channels 1.02-1.08x the time (an Intel Xeon, 2026-12-02; why was not established).
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

// Channel c (channels first) from its bounded sums where they stand; a sum that does not is
// summed again, the channel alone, with compensated sums in the same order (its runs, its
// lanes): Σ dy alone where Σ dy·(x − mean) stands (half the bytes, as channels last; on a
// y_backprop centred per channel, where every channel's Σ dy cancels, 16x2048x7x7 and
// 32x1024x3x3 took 0.68-0.81x the time at one thread and 0.76-0.81x at two, an Intel Xeon,
// 2026-12-02, builds_interleaved.py --centred).
template <typename T>
void FinishExactRunsChannel(const Call<T, double>& call, int64_t c, const BoundedSum& sum_dy,
                            const BoundedSum& sum_dy_xc) {
  const int64_t R = call.s.rest();
  const bool dy_stands = BoundedSumStands(sum_dy, R);
  const bool dy_xc_stands = BoundedSumStands(sum_dy_xc, R);
  if (dy_stands && dy_xc_stands) return call.Finish(c, sum_dy.sum, sum_dy_xc.sum);
  const int64_t C = call.s.channels, S = call.s.spatial;
  CompensatedSum exact_dy, exact_dy_xc;
  if (dy_xc_stands) {
    call.loops.exact_sum_dy_runs(call.t.y_backprop + c * S, S, 1, call.s.batch, C * S,
                                 &exact_dy);
  } else {
    call.loops.exact_sum_runs(call.t.y_backprop + c * S, call.t.x + c * S, call.mean + c, S, 1,
                              call.s.batch, C * S, &exact_dy, &exact_dy_xc);
  }
  call.Finish(c, dy_stands ? sum_dy.sum : exact_dy.Value(),
              dy_xc_stands ? sum_dy_xc.sum : exact_dy_xc.Value());
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

template <typename T>
void RunExactFamily(const Call<T, double>& call) {
  const Shape& s = call.s;
  if (!s.channels_last) {
    return s.spatial < kRunLanes ? RunExactPlanes(call) : RunExactRuns(call);
  }
  const Pieces blocks = ExactRowBlocks(s);
  return ExactStripsFit(call, blocks) ? RunExactStrips(call, blocks) : RunExactRows(call, blocks);
}

template void RunExactFamily<float>(const Call<float, double>& call);
template void RunExactFamily<Half>(const Call<Half, double>& call);
template void RunExactFamily<BFloat16>(const Call<BFloat16, double>& call);

}  // namespace grad_cpu
}  // namespace fbn
