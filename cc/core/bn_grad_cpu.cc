// The production CPU kernels.
//
// Two sweeps in training mode (sums, then dx), one fused sweep in inference mode (dx does not
// depend on the sums there). Both layouts are handled natively, never transposed:
//   channels last  [R, C]:    a work unit is a block of rows, vectorized across channels;
//   channels first [N, C, S]: a work unit is (channel, block of that channel's R elements),
//                             vectorized along the contiguous spatial runs.
// Blocks depend on the shape only, each unit writes its own partial sums, and the partials are
// combined per channel in block order, in double. So the thread count can change how units are
// grouped onto threads but never the bits of the result.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/float16_convert.h"
#include "cc/core/ieee_arithmetic.h"

namespace fbn {
namespace {

// About this many elements per work unit: large enough to amortize dispatch, small enough
// that a unit's x and dy stay in L2 between the two training sweeps.
constexpr int64_t kUnitElements = int64_t{1} << 15;
// Upper bound on blocks per channel group; bounds the scratch to O(C * kMaxBlocks).
constexpr int64_t kMaxBlocks = 64;
// Calls this small run on the calling thread: a pool dispatch would cost more than the work.
constexpr int64_t kInlineElements = int64_t{1} << 15;
// Independent accumulators along a contiguous run (a multiple of any SIMD width).
constexpr int kLanes = 16;
// Rough cycles per element, for the pool's cost model.
constexpr int64_t kCyclesPerElement = 4;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Every term is formed in double: a float is exact there, so x - mean and dy * (x - mean) carry
// no rounding error of their own.
inline double Wide(float v) { return static_cast<double>(v); }

// How the R elements of every channel are cut into blocks. Depends on the shape only.
struct Plan {
  Shape shape;
  int64_t blocks = 1;          // blocks per channel
  int64_t block_length = 0;    // elements of one channel in a full block (rows, channels last)

  explicit Plan(const Shape& s) : shape(s) {
    const int64_t rest = s.rest();
    const int64_t width = s.channels_last ? s.channels : 1;  // elements per row of a unit
    const int64_t wanted = CeilDiv(rest * width, kUnitElements);
    block_length = CeilDiv(rest, std::clamp<int64_t>(wanted, 1, std::min(kMaxBlocks, rest)));
    blocks = CeilDiv(rest, block_length);
  }
  // Channels last: one unit per block, covering all channels. Channels first: one unit per
  // (channel, block), numbered channel-major.
  int64_t units() const { return shape.channels_last ? blocks : blocks * shape.channels; }
  int64_t unit_elements() const {
    return block_length * (shape.channels_last ? shape.channels : 1);
  }
  int64_t block_begin(int64_t b) const { return b * block_length; }
  int64_t block_end(int64_t b) const { return std::min(shape.rest(), (b + 1) * block_length); }
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

// Σ dy and Σ dy·(x − mean) over `rows` rows of a channels-last block, added to sum_dy[C] and
// sum_dy_xc[C]. With kInference it also writes dx = dy · k[c] in the same sweep.
//
// Each term is formed and summed in double: a float is exact in double, so x − mean and
// dy·(x − mean) carry no rounding and the sums are as good as the inputs allow. That is what
// makes the scale and offset gradients at least as accurate as TensorFlow's on every input,
// not just on average. The sweep stays memory-bound.
template <typename T, bool kInference>
void SumRows(const T* dy, const T* x, T* dx, const float* mean, const double* k, int64_t channels,
             int64_t rows, double* sum_dy, double* sum_dy_xc) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const double d = Wide(ToFloat(dy[row + c]));
      sum_dy[c] += d;
      sum_dy_xc[c] += d * (Wide(ToFloat(x[row + c])) - Wide(mean[c]));
      if (kInference) dx[row + c] = FromDouble<T>(d * k[c]);
    }
  }
}

// The same over one contiguous run of a single channel (channels first), with kLanes
// independent accumulators so the loop vectorizes along the run.
template <typename T, bool kInference>
void SumRun(const T* dy, const T* x, T* dx, double mean, double k, int64_t length,
            double* sum_dy, double* sum_dy_xc) {
  double lane_dy[kLanes] = {};
  double lane_dy_xc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= length; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double d = Wide(ToFloat(dy[i + j]));
      lane_dy[j] += d;
      lane_dy_xc[j] += d * (Wide(ToFloat(x[i + j])) - mean);
      if (kInference) dx[i + j] = FromDouble<T>(d * k);
    }
  }
  for (int j = 0; i < length; ++i, ++j) {  // tail shorter than kLanes
    const double d = Wide(ToFloat(dy[i]));
    lane_dy[j] += d;
    lane_dy_xc[j] += d * (Wide(ToFloat(x[i])) - mean);
    if (kInference) dx[i] = FromDouble<T>(d * k);
  }
  for (int j = 0; j < kLanes; ++j) {
    *sum_dy += lane_dy[j];
    *sum_dy_xc += lane_dy_xc[j];
  }
}

// Per-channel coefficients of the training dx, grouped exactly as TensorFlow's expression
// (so infinities and NaNs propagate the same way): dx = c1 * ((dy - dy_mean) - (x - mean) * c2)
// with c1 = scale / std and c2 = mean(dy * (x - mean)) / var. Like the sums, dx is evaluated in
// double and rounded once to T, so every element is within half a unit of T (plus ~1e-16
// relative) of the exact result, for any input: accuracy that does not depend on luck.
struct TrainingCoefficients {
  std::vector<double> c1, dy_mean, c2;
  explicit TrainingCoefficients(int64_t channels)
      : c1(channels), dy_mean(channels), c2(channels) {}
};

template <typename T>
void TrainingDxRows(const T* dy, const T* x, T* dx, const float* mean,
                    const TrainingCoefficients& k, int64_t channels, int64_t rows) {
  const double* c1 = k.c1.data();
  const double* dy_mean = k.dy_mean.data();
  const double* c2 = k.c2.data();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const double v = c1[c] * ((Wide(ToFloat(dy[row + c])) - dy_mean[c]) -
                                (Wide(ToFloat(x[row + c])) - Wide(mean[c])) * c2[c]);
      dx[row + c] = FromDouble<T>(v);
    }
  }
}

template <typename T>
void TrainingDxRun(const T* dy, const T* x, T* dx, double mean, double c1, double dy_mean,
                   double c2, int64_t length) {
  for (int64_t i = 0; i < length; ++i) {
    const double v = c1 * ((Wide(ToFloat(dy[i])) - dy_mean) - (Wide(ToFloat(x[i])) - mean) * c2);
    dx[i] = FromDouble<T>(v);
  }
}

// Training's scale gradient with TensorFlow's grouping, sum of dy * ((x - mean) * inv_std), for a
// channel whose inv_std is infinite: factoring inv_std out of the sum (the fast path) would turn
// TF's per-term infinities and NaNs into a different result. Serial; only for var + eps == 0.
template <typename T>
double ScaledSumInTensorFlowOrder(const Shape& s, const Tensors<T>& t, int64_t c, double inv_std) {
  double sum = 0.0;
  for (int64_t e = 0; e < s.rest(); ++e) {
    const int64_t k = s.channels_last ? e * s.channels + c
                                      : ((e / s.spatial) * s.channels + c) * s.spatial +
                                            e % s.spatial;
    sum += Wide(ToFloat(t.y_backprop[k])) * ((Wide(ToFloat(t.x[k])) - Wide(t.mean[c])) * inv_std);
  }
  return sum;
}

// Runs units [0, count) through the pool, or inline when the whole call is tiny; in IEEE
// arithmetic on whichever thread runs them.
void RunUnits(const Plan& plan, const ParallelFor& parallel_for, const RangeFn& fn) {
  const int64_t count = plan.units();
  if (plan.shape.elements() <= kInlineElements) {
    fn(0, count);
  } else {
    parallel_for(count, plan.unit_elements() * kCyclesPerElement,
                 [&fn](int64_t begin, int64_t end) {
                   ScopedIeeeArithmetic ieee;
                   fn(begin, end);
                 });
  }
}

}  // namespace

ParallelFor SerialFor() {
  return [](int64_t count, int64_t /*cost_per_unit*/, const RangeFn& fn) {
    if (count > 0) fn(0, count);
  };
}

template <typename T>
void BatchNormGradCpu(const Params& params, const Tensors<T>& t, const ParallelFor& parallel_for) {
  ScopedIeeeArithmetic ieee;
  const Shape s = params.shape.canonical();
  const int64_t channels = s.channels;
  if (s.elements() == 0) {
    std::fill(t.scale_backprop, t.scale_backprop + channels, 0.0f);
    std::fill(t.offset_backprop, t.offset_backprop + channels, 0.0f);
    return;
  }
  const Plan plan(s);
  const double rest = static_cast<double>(s.rest());
  std::vector<double> inv_std(channels);
  for (int64_t c = 0; c < channels; ++c) inv_std[c] = params.InvStd(t.variance[c]);
  // Inference: dx = dy · k with k = scale / sqrt(var + eps), known before any sum.
  std::vector<double> k(params.is_training ? 0 : channels);
  for (int64_t c = 0; c < static_cast<int64_t>(k.size()); ++c) {
    k[c] = inv_std[c] * t.scale[c];
  }

  // Sweep 1: partial sums per (block, channel): partial[(b * 2 + 0) * C + c] = Σ dy,
  // partial[(b * 2 + 1) * C + c] = Σ dy·(x − mean).
  std::vector<double> partial(plan.blocks * 2 * channels, 0.0);
  RunUnits(plan, parallel_for, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      if (s.channels_last) {
        const int64_t offset = plan.block_begin(u) * channels;
        const int64_t rows = plan.block_end(u) - plan.block_begin(u);
        double* sums = &partial[u * 2 * channels];
        auto sum = params.is_training ? SumRows<T, false> : SumRows<T, true>;
        sum(t.y_backprop + offset, t.x + offset, t.x_backprop + offset, t.mean, k.data(),
            channels, rows, sums, sums + channels);
      } else {
        const int64_t c = u / plan.blocks;
        const int64_t b = u % plan.blocks;
        double* sum_dy = &partial[b * 2 * channels + c];
        double* sum_dy_xc = sum_dy + channels;
        const double kc = params.is_training ? 0.0 : k[c];
        auto sum = params.is_training ? SumRun<T, false> : SumRun<T, true>;
        ForEachRun(s, c, plan.block_begin(b), plan.block_end(b),
                   [&](int64_t offset, int64_t length) {
                     sum(t.y_backprop + offset, t.x + offset, t.x_backprop + offset, t.mean[c],
                         kc, length, sum_dy, sum_dy_xc);
                   });
      }
    }
  });

  // Combine partials in block order and derive the per-channel outputs and coefficients.
  TrainingCoefficients coef(params.is_training ? channels : 0);
  for (int64_t c = 0; c < channels; ++c) {
    double sum_dy = 0.0;
    double sum_dy_xc = 0.0;
    for (int64_t b = 0; b < plan.blocks; ++b) {
      sum_dy += partial[b * 2 * channels + c];
      sum_dy_xc += partial[(b * 2 + 1) * channels + c];
    }
    t.offset_backprop[c] = static_cast<float>(sum_dy);
    t.scale_backprop[c] = static_cast<float>(sum_dy_xc * inv_std[c]);
    if (params.is_training) {
      if (std::isinf(inv_std[c])) {  // var + eps == 0: only TF's order gives TF's inf/NaN
        t.scale_backprop[c] = static_cast<float>(ScaledSumInTensorFlowOrder(s, t, c, inv_std[c]));
      }
      coef.c1[c] = t.scale[c] * inv_std[c];
      coef.dy_mean[c] = sum_dy / rest;
      coef.c2[c] = inv_std[c] * inv_std[c] * (sum_dy_xc / rest);
    }
  }
  if (!params.is_training) return;

  // Sweep 2 (training only): dx.
  RunUnits(plan, parallel_for, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      if (s.channels_last) {
        const int64_t offset = plan.block_begin(u) * channels;
        TrainingDxRows(t.y_backprop + offset, t.x + offset, t.x_backprop + offset, t.mean, coef,
                       channels, plan.block_end(u) - plan.block_begin(u));
      } else {
        const int64_t c = u / plan.blocks;
        const int64_t b = u % plan.blocks;
        ForEachRun(s, c, plan.block_begin(b), plan.block_end(b),
                   [&](int64_t offset, int64_t length) {
                     TrainingDxRun(t.y_backprop + offset, t.x + offset, t.x_backprop + offset,
                                   t.mean[c], coef.c1[c], coef.dy_mean[c], coef.c2[c], length);
                   });
      }
    }
  });
}

template void BatchNormGradCpu<float>(const Params&, const Tensors<float>&, const ParallelFor&);
template void BatchNormGradCpu<Half>(const Params&, const Tensors<Half>&, const ParallelFor&);
template void BatchNormGradCpu<BFloat16>(const Params&, const Tensors<BFloat16>&,
                                         const ParallelFor&);

}  // namespace fbn
