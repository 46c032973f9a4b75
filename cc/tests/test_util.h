// Helpers shared by the core test programs (CPU: core_test.cc, GPU: gpu_core_test.cu): random
// inputs, host output buffers, error measures, the awkward-shape list and PASS/FAIL counting.
#ifndef TF_FBN_OPS_CC_TESTS_TEST_UTIL_H_
#define TF_FBN_OPS_CC_TESTS_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/cpu/cpu_loops.h"
#include "cc/core/float16_convert.h"
#include "cc/tests/cache_line_vector.h"

namespace fbn {
namespace testing {

inline int g_passed = 0;
inline int g_failed = 0;

inline void Check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAIL %s\n", what.c_str());
  }
}

// Prints the summary line and returns the process exit code.
inline int Summary(const char* program) {
  std::printf("%s: %d passed, %d failed\n", program, g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}

template <typename T>
const char* TypeName();
template <>
inline const char* TypeName<float>() { return "float"; }
template <>
inline const char* TypeName<Half>() { return "half"; }
template <>
inline const char* TypeName<BFloat16>() { return "bfloat16"; }

struct Case {
  Shape shape;
  bool is_training;
  float x_mean;          // offset of x, to exercise cancellation in x - mean
  bool saved_inv_std = false;  // reserve_space_2 holds 1/sqrt(var + eps) (GPU contract)
};

inline std::string Describe(const Case& k, const char* type) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%s N=%lld C=%lld S=%lld %s %s x_mean=%g%s", type,
                static_cast<long long>(k.shape.batch), static_cast<long long>(k.shape.channels),
                static_cast<long long>(k.shape.spatial),
                k.shape.channels_last ? "channels_last" : "channels_first",
                k.is_training ? "training" : "inference", k.x_mean,
                k.saved_inv_std ? " saved_inv_std" : "");
  return buf;
}

inline Params ParamsOf(const Case& k) {
  Params p;
  p.shape = k.shape;
  p.epsilon = 1e-3f;
  p.is_training = k.is_training;
  p.saved_inv_std = k.saved_inv_std;
  return p;
}

// Every implementation evaluates in double and rounds once, so two of them may differ by one
// rounding of T: two units of T's precision, normwise, leaves room for either direction.
template <typename T>
double DxTolerance();
template <>
inline double DxTolerance<float>() { return 0x1p-22; }
template <>
inline double DxTolerance<Half>() { return 0x1p-9; }
template <>
inline double DxTolerance<BFloat16>() { return 0x1p-6; }
// The per-channel sums are float32 outputs of double sums: two float units, normwise.
constexpr double kSumTolerance = 0x1p-22;

// Inputs of one case, with dy and x already rounded to T.
template <typename T>
struct Inputs {
  std::vector<T> dy, x;
  std::vector<float> scale, mean, variance;

  Inputs(const Case& k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
    const int64_t n = k.shape.elements();
    const int64_t c = k.shape.channels;
    dy.resize(n);
    x.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      dy[i] = FromFloat<T>(normal(rng));
      x[i] = FromFloat<T>(k.x_mean + 2.0f * normal(rng));
    }
    const Params p = ParamsOf(k);
    for (int64_t i = 0; i < c; ++i) {
      scale.push_back(uniform(rng));
      mean.push_back(k.x_mean + 0.1f * normal(rng));
      const float var = 4.0f * uniform(rng);
      variance.push_back(k.saved_inv_std && k.is_training
                             ? static_cast<float>(1.0 / std::sqrt(var + p.epsilon))
                             : var);
    }
  }
};

// Host buffers for the three outputs.
template <typename T>
struct Outputs {
  CacheLineVector<T> dx;
  std::vector<float> dscale, doffset;
  explicit Outputs(const Shape& s) : dx(s.elements()), dscale(s.channels), doffset(s.channels) {}

  Tensors<T> Bind(const Inputs<T>& in) { return Bind(in.dy.data(), in.x.data(), in); }
  // Element inputs from other buffers (the GPU test's large tensors), per-channel ones from `in`.
  Tensors<T> Bind(const T* dy, const T* x, const Inputs<T>& in) {
    Tensors<T> t;
    t.y_backprop = dy;
    t.x = x;
    t.scale = in.scale.data();
    t.mean = in.mean.data();
    t.variance = in.variance.data();
    t.x_backprop = dx.data();
    t.scale_backprop = dscale.data();
    t.offset_backprop = doffset.data();
    return t;
  }
  // In place, as the op runs when TensorFlow lets x_backprop take over y_backprop's buffer:
  // dx starts as a copy of dy and is both.
  Tensors<T> BindInPlace(const Inputs<T>& in) {
    dx.assign(in.dy.begin(), in.dy.end());
    return Bind(dx.data(), in.x.data(), in);
  }
  bool BitEqual(const Outputs& o) const {
    return std::memcmp(dx.data(), o.dx.data(), dx.size() * sizeof(T)) == 0 &&
           std::memcmp(dscale.data(), o.dscale.data(), dscale.size() * sizeof(float)) == 0 &&
           std::memcmp(doffset.data(), o.doffset.data(), doffset.size() * sizeof(float)) == 0;
  }
};

// Largest |got - want| relative to the largest |want| (normwise), over the finite elements of
// one output. Non-finite elements must match exactly: a NaN where the reference has none (or
// none where it has one), or an infinity that differs, gives +infinity, which fails every
// tolerance. (std::max ignores a NaN operand, so an all-NaN output would otherwise measure 0.)
template <typename V, typename GotAllocator, typename WantAllocator>
double NormwiseError(const std::vector<V, GotAllocator>& got,
                     const std::vector<V, WantAllocator>& want) {
  double err = 0.0;
  double mag = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = ToFloat(got[i]);
    const double w = ToFloat(want[i]);
    if (std::isnan(g) || std::isnan(w)) {
      if (std::isnan(g) != std::isnan(w)) return INFINITY;
      continue;
    }
    if (std::isinf(g) || std::isinf(w)) {
      if (g != w) return INFINITY;
      continue;
    }
    err = std::max(err, std::fabs(g - w));
    mag = std::max(mag, std::fabs(w));
  }
  return mag > 0.0 ? err / mag : err;
}

// The error measure itself: an output that is all NaN, or NaN where the reference is finite,
// or finite where it is NaN, or off by an infinity, must fail any tolerance.
inline void CheckErrorMeasureCatchesSpecials() {
  const std::vector<float> want = {1.0f, -2.0f, NAN, INFINITY};
  const std::vector<float> all_nan(want.size(), NAN);
  const std::vector<float> nan_lost = {1.0f, -2.0f, 0.0f, INFINITY};
  const std::vector<float> inf_flipped = {1.0f, -2.0f, NAN, -INFINITY};
  Check(!(NormwiseError(all_nan, want) <= 1.0), "error measure: an all-NaN output fails");
  Check(!(NormwiseError(want, all_nan) <= 1.0), "error measure: a finite output vs NaN fails");
  Check(!(NormwiseError(nan_lost, want) <= 1.0), "error measure: a lost NaN fails");
  Check(!(NormwiseError(inf_flipped, want) <= 1.0), "error measure: a flipped infinity fails");
  Check(NormwiseError(want, want) == 0.0, "error measure: equal outputs with specials measure 0");
}

// A ParallelFor that cuts [0, count) into `pieces` ranges and runs them on `threads` real
// threads in reverse order: if any result depended on the split, the bits would change.
inline ParallelFor ThreadedFor(int threads, int pieces) {
  auto run = [threads, pieces](int64_t count, int64_t, const RangeFn& fn) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    const int64_t step = std::max<int64_t>(1, (count + pieces - 1) / pieces);
    for (int64_t b = 0; b < count; b += step) ranges.emplace_back(b, std::min(count, b + step));
    std::reverse(ranges.begin(), ranges.end());
    std::vector<std::thread> pool;
    for (int w = 0; w < threads; ++w) {
      pool.emplace_back([&, w] {
        for (size_t i = w; i < ranges.size(); i += threads) fn(ranges[i].first, ranges[i].second);
      });
    }
    for (auto& th : pool) th.join();
  };
  return {run, threads};
}

// For channels on the fast path (kFastPathRest elements or more) the sums are built from float
// terms, so their error is bounded by the terms' magnitudes, not the sum's (cpu_loops.h):
// |error| <= 2^-20 * Σ|term| per channel. Returns the largest error / that bound, and (in
// *float_sum_error) the normwise error of TensorFlow's arithmetic, a sequential float sum of
// float terms, on the same data: the fast path must not be worse than that.
template <typename T>
double FastSumErrorRatio(const Case& k, const Inputs<T>& in, const std::vector<float>& got,
                         const std::vector<float>& want, bool scale_sums,
                         double* float_sum_error) {
  const Shape& s = k.shape;
  const Params p = ParamsOf(k);
  double worst_ratio = 0.0, float_err = 0.0, mag = 0.0;
  for (int64_t c = 0; c < s.channels; ++c) {
    const double inv_std = p.InvStd(in.variance[c]);
    double abs_terms = 0.0;
    float sequential = 0.0f;
    for (int64_t e = 0; e < s.rest(); ++e) {
      const int64_t i = s.ChannelElement(c, e);
      const float dy = ToFloat(in.dy[i]);
      const float term = scale_sums
                             ? dy * ((ToFloat(in.x[i]) - in.mean[c]) * static_cast<float>(inv_std))
                             : dy;
      abs_terms += std::fabs(static_cast<double>(scale_sums ? dy * (ToFloat(in.x[i]) - in.mean[c])
                                                            : dy)) *
                   (scale_sums ? inv_std : 1.0);
      sequential += term;
    }
    const double err = std::fabs(static_cast<double>(got[c]) - want[c]);
    worst_ratio = std::max(worst_ratio, err / (0x1p-20 * abs_terms + 1e-300));
    float_err = std::max(float_err, std::fabs(static_cast<double>(sequential) - want[c]));
    mag = std::max(mag, std::fabs(static_cast<double>(want[c])));
  }
  *float_sum_error = mag > 0.0 ? float_err / mag : float_err;
  return worst_ratio;
}

template <typename T>
void CheckSums(const Case& k, const Inputs<T>& in, const Outputs<T>& fast, const Outputs<T>& ref,
               const std::string& name) {
  if (k.shape.rest() < kFastPathRest) {  // exact terms: one rounding of the result
    Check(NormwiseError(fast.dscale, ref.dscale) <= kSumTolerance,
          name + ": scale_backprop vs reference");
    Check(NormwiseError(fast.doffset, ref.doffset) <= kSumTolerance,
          name + ": offset_backprop vs reference");
    return;
  }
  for (bool scale_sums : {true, false}) {
    const auto& got = scale_sums ? fast.dscale : fast.doffset;
    const auto& want = scale_sums ? ref.dscale : ref.doffset;
    const std::string what = name + (scale_sums ? ": scale_backprop" : ": offset_backprop");
    double float_sum_error = 0.0;
    const double ratio = FastSumErrorRatio(k, in, got, want, scale_sums, &float_sum_error);
    Check(ratio <= 1.0, what + " within 2^-20 * sum of |terms| (fast path)");
    Check(NormwiseError(got, want) <= float_sum_error + kSumTolerance,
          what + " no worse than a sequential float sum (fast path)");
  }
}

// Awkward and ordinary shapes in both layouts and modes (C = 1, 3, 7, 129, 2048; S = 1;
// R = 1; large R; every schedule of bn_grad_cpu_*.cc), plus random shapes, some with a large x
// mean.
inline std::vector<Case> TestCases() {
  const std::vector<Shape> shapes = {
      {1, 1, 1, true},     {1, 3, 1, true},      {2, 7, 5, true},      {3, 129, 17, true},
      {5, 3, 1, true},     {1, 1, 70001, true},  {4, 1, 9, true},      {2, 64, 300, true},
      {8, 2048, 1, true},  {2, 3, 200000, true}, {1, 1, 1, false},     {1, 3, 1, false},
      {2, 7, 5, false},    {3, 129, 17, false},  {5, 3, 1, false},     {1, 1, 70001, false},
      {4, 1, 9, false},    {2, 64, 300, false},  {2, 3, 200000, false}, {7, 5, 33, false},
      // Short planes with too many rows for one unit; short rows folded, with a remainder.
      {3000, 4, 50, false}, {500, 3, 301, true},
      // Long planes in fused groups; wide rows with a short register tile.
      {8, 6, 333, false},   {6, 40, 130, false},  {1, 300, 1100, true},
      // Exact rows in strips (or blocks) over three blocks, the last strip narrower, its last
      // vector short.
      {3, 2100, 100, true},
      // Channels-first inference in more groups than threads, tapered (InferenceRunsGroups).
      {3, 700, 100, false},
  };
  std::vector<Case> cases;
  for (const Shape& s : shapes) {
    for (bool training : {true, false}) cases.push_back({s, training, 0.0f});
  }
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> dim(1, 40);
  for (int i = 0; i < 16; ++i) {
    Shape s{dim(rng), dim(rng), dim(rng) * dim(rng), i % 2 == 0};
    cases.push_back({s, i % 3 != 0, i % 4 == 0 ? 100.0f : 0.0f, i % 5 == 0});
  }
  return cases;
}

inline std::vector<Shape> EmptyShapes() {
  std::vector<Shape> shapes;
  for (bool last : {true, false}) {
    shapes.push_back({0, 5, 7, last});
    shapes.push_back({2, 5, 0, last});
    shapes.push_back({2, 0, 7, last});
  }
  return shapes;
}

inline bool AllZero(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return f == 0.0f; });
}

// An empty input must give zero scale/offset gradients: `run(params, inputs, outputs)` computes
// into outputs pre-filled with 7s and returns false on a failure of its own.
template <typename T, typename Run>
void CheckEmptyInput(const Shape& shape, Run&& run) {
  Params p;
  p.shape = shape;
  Inputs<T> in(Case{shape, true, 0.0f}, 1);
  Outputs<T> out(shape);
  std::fill(out.dscale.begin(), out.dscale.end(), 7.0f);
  std::fill(out.doffset.begin(), out.doffset.end(), 7.0f);
  Check(run(p, in, &out) && AllZero(out.dscale) && AllZero(out.doffset),
        std::string(TypeName<T>()) + ": empty input gives zero scale/offset grads");
}

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_TEST_UTIL_H_
