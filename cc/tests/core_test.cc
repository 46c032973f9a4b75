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
#include "cc/core/float16_convert.h"

namespace fbn {
namespace {

int g_passed = 0;
int g_failed = 0;

void Check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAIL %s\n", what.c_str());
  }
}

template <typename T>
const char* TypeName();
template <>
const char* TypeName<float>() { return "float"; }
template <>
const char* TypeName<Half>() { return "half"; }
template <>
const char* TypeName<BFloat16>() { return "bfloat16"; }

// Both implementations evaluate in double and round once, so they may differ by one rounding
// of T: two units of T's precision, normwise, leaves room for either rounding direction.
template <typename T>
double DxTolerance();
template <>
double DxTolerance<float>() { return 0x1p-22; }
template <>
double DxTolerance<Half>() { return 0x1p-9; }
template <>
double DxTolerance<BFloat16>() { return 0x1p-6; }
// The per-channel sums are float32 outputs of double sums: two float units, normwise.
constexpr double kSumTolerance = 0x1p-22;

struct Case {
  Shape shape;
  bool is_training;
  float x_mean;  // offset of x, to exercise cancellation in x - mean
};

std::string Describe(const Case& k, const char* type) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s N=%lld C=%lld S=%lld %s %s x_mean=%g", type,
                static_cast<long long>(k.shape.batch), static_cast<long long>(k.shape.channels),
                static_cast<long long>(k.shape.spatial),
                k.shape.channels_last ? "channels_last" : "channels_first",
                k.is_training ? "training" : "inference", k.x_mean);
  return buf;
}

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
    for (int64_t i = 0; i < c; ++i) {
      scale.push_back(uniform(rng));
      mean.push_back(k.x_mean + 0.1f * normal(rng));
      variance.push_back(4.0f * uniform(rng));
    }
  }
};

template <typename T>
struct Outputs {
  std::vector<T> dx;
  std::vector<float> dscale, doffset;
  explicit Outputs(const Shape& s) : dx(s.elements()), dscale(s.channels), doffset(s.channels) {}

  Tensors<T> Bind(const Inputs<T>& in) {
    Tensors<T> t;
    t.y_backprop = in.dy.data();
    t.x = in.x.data();
    t.scale = in.scale.data();
    t.mean = in.mean.data();
    t.variance = in.variance.data();
    t.x_backprop = dx.data();
    t.scale_backprop = dscale.data();
    t.offset_backprop = doffset.data();
    return t;
  }
  bool BitEqual(const Outputs& o) const {
    return std::memcmp(dx.data(), o.dx.data(), dx.size() * sizeof(T)) == 0 &&
           std::memcmp(dscale.data(), o.dscale.data(), dscale.size() * sizeof(float)) == 0 &&
           std::memcmp(doffset.data(), o.doffset.data(), doffset.size() * sizeof(float)) == 0;
  }
};

// Largest |got - want| relative to the largest |want| (normwise), over one output.
template <typename V>
double NormwiseError(const std::vector<V>& got, const std::vector<V>& want) {
  double err = 0.0;
  double mag = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = ToFloat(got[i]);
    const double w = ToFloat(want[i]);
    err = std::max(err, std::fabs(g - w));
    mag = std::max(mag, std::fabs(w));
  }
  return mag > 0.0 ? err / mag : err;
}

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

template <typename T>
void RunCase(const Case& k, uint32_t seed) {
  const std::string name = Describe(k, TypeName<T>());
  Inputs<T> in(k, seed);
  Params p;
  p.shape = k.shape;
  p.epsilon = 1e-3f;
  p.is_training = k.is_training;

  Outputs<T> ref(k.shape), fast(k.shape);
  BatchNormGradReference(p, ref.Bind(in));
  BatchNormGradCpu(p, fast.Bind(in), SerialFor());

  Check(NormwiseError(fast.dx, ref.dx) <= DxTolerance<T>(), name + ": x_backprop vs reference");
  Check(NormwiseError(fast.dscale, ref.dscale) <= kSumTolerance,
        name + ": scale_backprop vs reference");
  Check(NormwiseError(fast.doffset, ref.doffset) <= kSumTolerance,
        name + ": offset_backprop vs reference");

  for (int threads : {2, 4}) {
    for (int pieces : {3, 64}) {
      Outputs<T> again(k.shape);
      BatchNormGradCpu(p, again.Bind(in), ThreadedFor(threads, pieces));
      Check(again.BitEqual(fast), name + ": bits differ with " + std::to_string(threads) +
                                      " threads, " + std::to_string(pieces) + " pieces");
    }
  }
}

template <typename T>
void RunEmptyCase(const Shape& shape) {
  Params p;
  p.shape = shape;
  Inputs<T> in(Case{shape, true, 0.0f}, 1);
  Outputs<T> out(shape);
  std::fill(out.dscale.begin(), out.dscale.end(), 7.0f);
  std::fill(out.doffset.begin(), out.doffset.end(), 7.0f);
  BatchNormGradCpu(p, out.Bind(in), SerialFor());
  bool zeros = std::all_of(out.dscale.begin(), out.dscale.end(), [](float v) { return v == 0; }) &&
               std::all_of(out.doffset.begin(), out.doffset.end(), [](float v) { return v == 0; });
  Check(zeros, std::string(TypeName<T>()) + ": empty input gives zero scale/offset grads");
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

template <typename T>
void RunAllCases() {
  std::mt19937 rng(1234);
  std::vector<Case> cases;
  const std::vector<Shape> shapes = {
      {1, 1, 1, true},      {1, 3, 1, true},      {2, 7, 5, true},      {3, 129, 17, true},
      {5, 3, 1, true},      {1, 1, 70001, true},  {4, 1, 9, true},      {2, 64, 300, true},
      {8, 2048, 1, true},   {2, 3, 200000, true}, {1, 1, 1, false},     {1, 3, 1, false},
      {2, 7, 5, false},     {3, 129, 17, false},  {5, 3, 1, false},     {1, 1, 70001, false},
      {4, 1, 9, false},     {2, 64, 300, false},  {2, 3, 200000, false}, {7, 5, 33, false},
  };
  for (const Shape& s : shapes) {
    for (bool training : {true, false}) {
      cases.push_back({s, training, 0.0f});
    }
  }
  // Random shapes, some with a large x mean.
  std::uniform_int_distribution<int> dim(1, 40);
  for (int i = 0; i < 16; ++i) {
    Shape s{dim(rng), dim(rng), dim(rng) * dim(rng), i % 2 == 0};
    cases.push_back({s, i % 3 != 0, i % 4 == 0 ? 100.0f : 0.0f});
  }
  uint32_t seed = 1;
  for (const Case& k : cases) RunCase<T>(k, seed++);
  for (bool last : {true, false}) {
    RunEmptyCase<T>(Shape{0, 5, 7, last});
    RunEmptyCase<T>(Shape{2, 5, 0, last});
    RunEmptyCase<T>(Shape{2, 0, 7, last});
  }
}

}  // namespace
}  // namespace fbn

int main() {
  fbn::TestConversions();
  fbn::RunAllCases<float>();
  fbn::RunAllCases<fbn::Half>();
  fbn::RunAllCases<fbn::BFloat16>();
  std::printf("core_test: %d passed, %d failed\n", fbn::g_passed, fbn::g_failed);
  return fbn::g_failed == 0 ? 0 : 1;
}
