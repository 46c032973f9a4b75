// Tests of the TensorFlow-free core: the fast CPU kernels against the double-precision
// reference on random and awkward shapes, bit-determinism under any split of the work onto
// threads, and the 16-bit conversions. Prints one line per failure and a PASS/FAIL summary.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/cpu_loops.h"
#include "cc/core/float16_convert.h"
#include "cc/tests/test_util.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

// A ParallelFor that cuts [0, count) into `pieces` ranges and runs them on `threads` real
// threads in reverse order: if any result depended on the split, the bits would change.
ParallelFor ThreadedFor(int threads, int pieces) {
  return [threads, pieces](int64_t count, int64_t, const RangeFn& fn) {
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
      const int64_t i = s.channels_last ? e * s.channels + c
                                        : ((e / s.spatial) * s.channels + c) * s.spatial +
                                              e % s.spatial;
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

template <typename T>
void RunCase(const Case& k, uint32_t seed) {
  const std::string name = Describe(k, TypeName<T>());
  Inputs<T> in(k, seed);
  const Params p = ParamsOf(k);

  Outputs<T> ref(k.shape), fast(k.shape);
  BatchNormGradReference(p, ref.Bind(in));
  BatchNormGradCpu(p, fast.Bind(in), SerialFor());

  Check(NormwiseError(fast.dx, ref.dx) <= DxTolerance<T>(), name + ": x_backprop vs reference");
  CheckSums(k, in, fast, ref, name);

  for (int threads : {2, 4}) {
    for (int pieces : {3, 64}) {
      Outputs<T> again(k.shape);
      BatchNormGradCpu(p, again.Bind(in), ThreadedFor(threads, pieces));
      Check(again.BitEqual(fast), name + ": bits differ with " + std::to_string(threads) +
                                      " threads, " + std::to_string(pieces) + " pieces");
    }
  }
}

void TestConversions() {
  // Every half value survives half -> float -> half, and matches the compiler's _Float16.
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfBitsToFloat(static_cast<uint16_t>(h));
    _Float16 native;
    const uint16_t hb = static_cast<uint16_t>(h);
    std::memcpy(&native, &hb, 2);
    const bool nan = std::isnan(f);
    if (nan != std::isnan(static_cast<float>(native))) ++bad;
    if (!nan && (f != static_cast<float>(native) || FloatToHalfBits(f) != h)) ++bad;
  }
  Check(bad == 0, "half -> float -> half round trip of all 65536 values");

  // float -> half rounding (nearest-even, overflow, subnormals) against _Float16.
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  bad = 0;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = bits(rng);
    if (i % 2) u = (u & 0x83ffffffu) | 0x30000000u;  // bias towards the half range
    const float f = FloatOf(u);
    if (std::isnan(f)) continue;
    const _Float16 native = static_cast<_Float16>(f);
    uint16_t nb;
    std::memcpy(&nb, &native, 2);
    if (FloatToHalfBits(f) != nb) ++bad;
  }
  Check(bad == 0, "float -> half matches _Float16 (round to nearest even) on 2M values");

  // double -> half / bfloat16 is one correct rounding (round-to-odd through float), also on
  // the values just off a halfway point where rounding through float would round twice.
  int bad_half = 0;
  int bad_bf16 = 0;
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-30, 20);
  for (int i = 0; i < 2000000; ++i) {
    double d = std::ldexp(mantissa(rng), exponent(rng)) * (i % 2 ? -1.0 : 1.0);
    if (i % 3 == 0) {
      // Just above or below a half/bfloat16 halfway point, closer than a float ulp.
      const int bits = i % 2 ? 11 : 8;
      int e;
      std::frexp(d, &e);
      const double unit = std::ldexp(1.0, e - bits);
      d = (std::floor(d / unit) + 0.5) * unit + (i % 4 < 2 ? 1 : -1) * std::ldexp(unit, -30);
    }
    const _Float16 native = static_cast<_Float16>(d);  // a single rounding, by the compiler
    uint16_t nb;
    std::memcpy(&nb, &native, 2);
    if (FromDouble<Half>(d).bits != nb) ++bad_half;
    int e;
    std::frexp(d, &e);
    const double unit = std::ldexp(1.0, e - 8);  // bfloat16 keeps 8 significant bits
    const double want = std::nearbyint(d / unit) * unit;
    if (static_cast<double>(BFloat16BitsToFloat(FromDouble<BFloat16>(d).bits)) != want) {
      ++bad_bf16;
    }
  }
  Check(bad_half == 0, "double -> half is a single round-to-nearest-even (2M values)");
  Check(bad_bf16 == 0, "double -> bfloat16 is a single round-to-nearest-even (2M values)");

  // bfloat16: exact halfway cases round to even, NaN stays NaN, Inf stays Inf.
  Check(FloatToBFloat16Bits(FloatOf(0x3f808000u)) == 0x3f80u, "bf16 halfway rounds to even (down)");
  Check(FloatToBFloat16Bits(FloatOf(0x3f818000u)) == 0x3f82u, "bf16 halfway rounds to even (up)");
  Check(FloatToBFloat16Bits(FloatOf(0x3f808001u)) == 0x3f81u, "bf16 above halfway rounds up");
  Check(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(NAN))), "bf16 keeps NaN");
  Check(FloatToBFloat16Bits(INFINITY) == 0x7f80u, "bf16 keeps Inf");
  Check(FloatToBFloat16Bits(FloatOf(0x7f7fffffu)) == 0x7f80u, "bf16 max float rounds to Inf");
}

// Every compiled copy of the loops (portable, AVX2, AVX-512) gives the same bits, so results do
// not depend on the CPU either. Odd sizes exercise the vector tails.
template <typename T, typename F>
void TestIsaCopiesAgree() {
  const int64_t rows = 23, channels = 37, n = rows * channels;
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<T> dy(n), x(n);
  for (int64_t i = 0; i < n; ++i) {
    dy[i] = FromFloat<T>(normal(rng));
    x[i] = FromFloat<T>(3.0f + normal(rng));
  }
  // And values whose conversions are special: NaNs with payloads, infinities, subnormals of T.
  const uint32_t specials[] = {0x7fc12345u, 0xffa00001u, 0x7f800000u, 0x00000001u, 0x33800000u,
                               0x38000000u, 0x477ff000u, 0x47800000u};
  for (int i = 0; i < 8; ++i) dy[5 + 40 * i] = FromFloat<T>(FloatOf(specials[i]));
  std::vector<F> coef(4 * n);  // per column (and per channel for the runs)
  for (F& v : coef) v = static_cast<F>(normal(rng));
  const DxCoefficients<F> k{coef.data(), coef.data() + n, coef.data() + 2 * n, coef.data() + 3 * n};
  struct Result {
    std::vector<double> sums;
    std::vector<T> dx;
  };
  auto run = [&](const CpuLoops<T, F>& loops) {
    Result r{std::vector<double>(2 * channels + 2 * kLanes, 0.0), std::vector<T>(4 * n)};
    // Rows of `channels - 2` columns, `channels` apart: a strided window.
    loops.sum_rows(dy.data(), x.data(), channels, rows, channels - 2, coef.data(), r.sums.data(),
                   r.sums.data() + channels);
    LaneSums lanes;
    lanes.Clear();
    loops.sum_run(dy.data() + 1, x.data() + 1, coef[5], n - 1, &lanes);
    std::copy(lanes.dy, lanes.dy + kLanes, r.sums.begin() + 2 * channels);
    std::copy(lanes.dy_xc, lanes.dy_xc + kLanes, r.sums.begin() + 2 * channels + kLanes);
    loops.inference_dx(dy.data() + 3, r.dx.data(), k, n - 3);
    loops.training_dx(dy.data() + 3, x.data() + 3, r.dx.data() + n, k, n - 3);
    loops.inference_dx_run(dy.data(), r.dx.data() + 2 * n, k, 4, n);
    loops.training_dx_run(dy.data(), x.data(), r.dx.data() + 3 * n, k, 4, n);
    return r;
  };
  const Result base = run(LoopsFor<T, F>(CpuIsa::kBaseline));
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa > DetectedCpuIsa()) continue;  // this CPU cannot run that copy
    const Result other = run(LoopsFor<T, F>(isa));
    const bool same =
        std::memcmp(base.sums.data(), other.sums.data(), base.sums.size() * sizeof(double)) == 0 &&
        std::memcmp(base.dx.data(), other.dx.data(), base.dx.size() * sizeof(T)) == 0;
    Check(same, std::string(TypeName<T>()) + (sizeof(F) == 8 ? " exact" : " fast") +
                    " loops: " + CpuIsaName(isa) + " copy gives the portable copy's bits");
  }
}

template <typename T>
void RunAllCases() {
  TestIsaCopiesAgree<T, double>();
  TestIsaCopiesAgree<T, float>();
  uint32_t seed = 1;
  for (const Case& k : TestCases()) RunCase<T>(k, seed++);
  for (const Shape& s : EmptyShapes()) {
    CheckEmptyInput<T>(s, [](const Params& p, const Inputs<T>& in, Outputs<T>* out) {
      BatchNormGradCpu(p, out->Bind(in), SerialFor());
      return true;
    });
  }
}

}  // namespace
}  // namespace fbn

int main() {
  fbn::TestConversions();
  fbn::RunAllCases<float>();
  fbn::RunAllCases<fbn::Half>();
  fbn::RunAllCases<fbn::BFloat16>();
  return fbn::testing::Summary("core_test");
}
