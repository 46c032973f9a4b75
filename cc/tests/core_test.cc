// Tests of the TensorFlow-free core: the fast CPU kernels against the double-precision
// reference on random and awkward shapes, bit-determinism under any split of the work onto
// threads, and the 16-bit conversions. Prints one line per failure and a PASS/FAIL summary.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/cpu/streaming_stores.h"
#include "cc/core/cpu/cpu_loops.h"
#include "cc/core/float16_convert.h"
#include "cc/core/cpu/pool_parallel_for.h"
#include "cc/tests/delayed_pool.h"
#include "cc/tests/test_util.h"

namespace fbn {
namespace {

// The compiler's own IEEE binary16, and a binary128 type in which the sums of TestExactSums'
// terms are exact: _Float16 and __float128 on x86-64; on AArch64 (g++ 12 has no C++ _Float16
// there) __fp16, IEEE binary16 by default, and long double, which is binary128.
#if defined(__aarch64__)
using CompilerHalf = __fp16;
using Binary128 = long double;
#else
using CompilerHalf = _Float16;
using Binary128 = __float128;
#endif

using namespace testing;  // NOLINT: the shared test vocabulary

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

  Outputs<T> in_place(k.shape);
  BatchNormGradCpu(p, in_place.BindInPlace(in), ThreadedFor(2, 64));
  Check(in_place.BitEqual(fast), name + ": in place (x_backprop over y_backprop) differs");
}

void TestConversions() {
  // Every half value survives half -> float -> half, and matches the compiler's binary16.
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfBitsToFloat(static_cast<uint16_t>(h));
    CompilerHalf native;
    const uint16_t hb = static_cast<uint16_t>(h);
    std::memcpy(&native, &hb, 2);
    const bool nan = std::isnan(f);
    if (nan != std::isnan(static_cast<float>(native))) ++bad;
    if (!nan && (f != static_cast<float>(native) || FloatToHalfBits(f) != h)) ++bad;
  }
  Check(bad == 0, "half -> float -> half round trip of all 65536 values");

  // float -> half rounding (nearest-even, overflow, subnormals) against the compiler's binary16.
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  bad = 0;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = bits(rng);
    if (i % 2) u = (u & 0x83ffffffu) | 0x30000000u;  // bias towards the half range
    const float f = FloatOf(u);
    if (std::isnan(f)) continue;
    const CompilerHalf native = static_cast<CompilerHalf>(f);
    uint16_t nb;
    std::memcpy(&nb, &native, 2);
    if (FloatToHalfBits(f) != nb) ++bad;
  }
  Check(bad == 0, "float -> half matches the compiler's binary16 (round to nearest even) on 2M values");

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
    const CompilerHalf native = static_cast<CompilerHalf>(d);  // a single rounding, by the compiler
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
// not depend on the CPU either: whole calls, on shapes that take every schedule and family
// (cc/core/cpu/bn_grad_cpu_*.cc), odd sizes for the vector tails, and values whose conversions and
// arithmetic are special (NaNs with payloads, infinities, subnormals of T). Each copy also runs
// in place (x_backprop over y_backprop), as the op does when TensorFlow forwards dy's buffer.
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
// Ordinary stores, rows by groups, the exact family's strips where they fit; other
// combinations of MemoryRules, the exact family's blocks only among them.
constexpr MemoryRules kNeverStream{kNever, kNever, kNever, kNever, true};
constexpr MemoryRules kOtherMemoryRules[] = {{0, kNever, 0, 0, false},
                                             {kNever, 0, kNever, kNever, true},
                                             {0, 0, 0, 0, true},
                                             {kNever, kNever, kNever, kNever, false}};

template <typename T>
void TestIsaCopiesAgree() {
  const Shape shapes[] = {
      {3, 100, 400, true},     // rows, fast: one whole register tile and a short one
      {40, 5, 30, true},       // rows, fast, folded
      {2, 2048, 520, true},    // rows, fast, wide
      {70, 13, 23, false},     // planes, fused
      {20000, 3, 5, false},    // planes, two sweeps
      {5, 6, 333, false},      // runs, fused groups
      {3, 2, 140001, false},   // runs, blocks of a channel
      {3, 2, 140016, false},   // runs, blocks of a channel, whole lines (streamed if asked)
      {4, 8, 4096, false},     // runs, fused groups, whole lines (streamed if asked)
      {7, 45, 9, true},        // exact rows
      {9, 80, 100, true},      // exact rows, blocks, whole lines (streamed if asked)
      {2, 2048, 64, true},     // exact rows in strips (training), whole lines
      {3, 2100, 100, true},    // exact rows in strips over three blocks, a short last vector
      {3, 20, 21, false},      // exact runs
  };
  const uint32_t specials[] = {0x7fc12345u, 0xffa00001u, 0x7f800000u, 0x00000001u, 0x33800000u,
                               0x38000000u, 0x477ff000u, 0x47800000u};
  for (const Shape& shape : shapes) {
    for (bool training : {true, false}) {
      const Case k{shape, training, 0.5f};
      Inputs<T> in(k, 7);
      // A few specials in one channel each, so the other channels stay finite.
      for (int i = 0; i < 8; ++i) {
        const int64_t at = (i * 7919) % shape.elements();
        (i % 2 ? in.dy : in.x)[at] = FromFloat<T>(FloatOf(specials[i]));
      }
      const Params p = ParamsOf(k);
      Outputs<T> base(shape);
      BatchNormGradCpuWithLoops(p, base.Bind(in), SerialFor(), LoopsFor<T>(CpuIsa::kBaseline),
                                kNeverStream);
      for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        if (isa > DetectedCpuIsa()) continue;  // this CPU cannot run that copy
        // Ordinary and non-temporal stores of x_backprop, rows by groups and in order, the
        // exact family by strips and by blocks, whatever this machine's cache.
        std::vector<MemoryRules> all_rules = {kNeverStream};
        all_rules.insert(all_rules.end(), std::begin(kOtherMemoryRules),
                         std::end(kOtherMemoryRules));
        for (const MemoryRules& rules : all_rules) {
          const std::string copy = Describe(k, TypeName<T>()) + ": " + CpuIsaName(isa) +
                                   " copy" +
                                   (rules.streaming_footprint == 0 ? ", streamed" : "") +
                                   (rules.grouped_bytes == 0 ? ", rows in order" : "") +
                                   (rules.exact_strips ? "" : ", exact blocks only");
          if (isa != CpuIsa::kBaseline || rules.streaming_footprint != kNever ||
              rules.grouped_bytes != kNever || !rules.exact_strips) {
            Outputs<T> other(shape);
            BatchNormGradCpuWithLoops(p, other.Bind(in), SerialFor(), LoopsFor<T>(isa), rules);
            Check(other.BitEqual(base), copy + " gives the portable copy's bits");
          }
          Outputs<T> in_place(shape);
          BatchNormGradCpuWithLoops(p, in_place.BindInPlace(in), SerialFor(), LoopsFor<T>(isa),
                                    rules);
          Check(in_place.BitEqual(base), copy + " in place gives the portable copy's bits");
        }
      }
    }
  }
}

// The pool adapter (pool_parallel_for.h) and the sweeps (cpu_sweeps.h) give SerialFor's bits
// however late the pool's threads join: at once, while the first sweep runs, around the
// barrier between the sweeps, or only after the call has returned. Every schedule with two
// sweeps, and one with one.
template <typename T>
void TestLateThreadsAgree() {
  const Shape shapes[] = {
      {2, 2048, 520, true},   // rows, wide
      {64, 40, 500, true},    // rows
      {20000, 3, 5, false},   // planes, two sweeps
      {3, 2, 140001, false},  // runs, blocks of a channel
      {5, 6, 333, false},     // runs, fused groups (one sweep)
  };
  const std::chrono::microseconds delays[] = {std::chrono::microseconds(0),
                                              std::chrono::microseconds(300),
                                              std::chrono::microseconds(3000)};
  for (const Shape& shape : shapes) {
    for (bool training : {true, false}) {
      const Case k{shape, training, 0.0f};
      Inputs<T> in(k, 11);
      const Params p = ParamsOf(k);
      Outputs<T> serial(shape);
      BatchNormGradCpu(p, serial.Bind(in), SerialFor());
      for (int threads : {2, 3, 8}) {
        for (int when = 0; when < 4; ++when) {
          const bool held = when == 3;
          DelayedPool pool(threads - 1, held ? delays[0] : delays[when], held);
          const ParallelFor parallel_for = PoolParallelFor(
              threads, [&pool](std::function<void()> task) { pool.Schedule(std::move(task)); });
          Outputs<T> pooled(shape);
          BatchNormGradCpu(p, pooled.Bind(in), parallel_for);
          pool.Release();  // held tasks start now, after the call
          Check(pooled.BitEqual(serial),
                Describe(k, TypeName<T>()) + ": " + std::to_string(threads) + " threads joining " +
                    (held ? "after the call" : std::to_string(delays[when].count()) + " us late") +
                    " differ from one thread");
        }
      }
    }
  }
}

// Channels whose terms cancel, where the exact family's bounded sums do not stand and the
// channel is summed again with compensated sums (bn_grad_cpu_exact.cc). In each such channel dy
// holds +2^50 and -2^50 (over equal x) among small multiples of 2^-10: the exact Σdy, the small
// values' sum, is a float and must be offset_backprop exactly, and scale_backprop within an ulp
// of the exact Σdy·(x − mean) (in binary128, where these terms add exactly) times 1/std; a
// plain double sum loses the small terms' low bits to the large ones. Channels last, with few
// such channels their vectors of 16 columns are summed again one by one (4x1024x200), with many
// all at once (kRecomputeAllFraction); channels first, channel by channel. In both modes, on
// any split of the work, in place, and with every copy of the loops. With the two large terms
// over different x only Σdy cancels (Σdy·(x − mean) stands, and only Σdy is summed again).
void TestExactSumsWhereTermsCancel() {
  const Shape shapes[] = {{8, 40, 100, true}, {8, 40, 100, false}, {5, 37, 7, true},
                          {5, 37, 7, false}, {4, 1024, 200, true}, {4, 1024, 200, false}};
  for (const Shape& shape : shapes) {
    for (bool training : {true, false}) {
      for (int64_t every : {1, 257}) {
        for (bool products_cancel : {true, false}) {
          const Case k{shape, training, 0.25f};
          Inputs<float> in(k, 5);
          const Params p = ParamsOf(k);
          const int64_t C = shape.channels, R = shape.rest();
          auto at = [&](int64_t c, int64_t e) {
            return shape.channels_last ? e * C + c
                                       : ((e / shape.spatial) * C + c) * shape.spatial +
                                             e % shape.spatial;
          };
          std::vector<double> want_dy(C), want_dy_xc(C);
          for (int64_t c = 0; c < C; c += every) {
            double sum_dy = 0.0;
            Binary128 sum_dy_xc = 0;
            for (int64_t e = 0; e < R; ++e) {
              float d = std::ldexp(static_cast<float>((e * 7 + c * 3) % 2001 - 1000), -10);
              if (e == R / 3 || e == 2 * R / 3) d = e == R / 3 ? 0x1p50f : -0x1p50f;
              if (e == 2 * R / 3 && products_cancel) in.x[at(c, e)] = in.x[at(c, R / 3)];
              in.dy[at(c, e)] = d;
              if (e != R / 3 && e != 2 * R / 3) sum_dy += d;  // small integers · 2^-10: exact
              const double xc = static_cast<double>(in.x[at(c, e)]) - in.mean[c];
              sum_dy_xc += static_cast<Binary128>(d) * static_cast<Binary128>(xc);
            }
            want_dy[c] = sum_dy;
            want_dy_xc[c] = static_cast<double>(sum_dy_xc);
          }
          const std::string name = Describe(k, "float") +
                                   (every == 1 ? ", every channel" : ", a few channels") +
                                   (products_cancel ? "" : ", only Σdy cancelling");
          Outputs<float> serial(shape);
          BatchNormGradCpu(p, serial.Bind(in), SerialFor());
          bool dy_exact = true, dy_xc_close = true;
          for (int64_t c = 0; c < C; c += every) {
            dy_exact &= serial.doffset[c] == static_cast<float>(want_dy[c]);
            const double inv_std = 1.0 / std::sqrt(static_cast<double>(in.variance[c]) + p.epsilon);
            const double want = want_dy_xc[c] * inv_std;
            dy_xc_close &= std::fabs(serial.dscale[c] - want) <=
                           std::ldexp(1.0, std::ilogb(want) - 23) + 1e-300;
          }
          Check(dy_exact, name + ": cancelling channels' offset_backprop is the exact sum");
          Check(dy_xc_close, name + ": cancelling channels' scale_backprop within an ulp");
          for (int threads : {2, 4}) {
            Outputs<float> again(shape);
            BatchNormGradCpu(p, again.Bind(in), ThreadedFor(threads, 64));
            Check(again.BitEqual(serial),
                  name + ": bits differ with " + std::to_string(threads) + " threads");
          }
          // In place the channels summed again must still read y_backprop, not x_backprop.
          Outputs<float> in_place(shape);
          BatchNormGradCpu(p, in_place.BindInPlace(in), ThreadedFor(2, 64));
          Check(in_place.BitEqual(serial),
                name + ": in place (x_backprop over y_backprop) differs");
          for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
            if (isa > DetectedCpuIsa()) continue;
            Outputs<float> copy(shape);
            BatchNormGradCpuWithLoops(p, copy.Bind(in), SerialFor(), LoopsFor<float>(isa),
                                      kNeverStream);
            Check(copy.BitEqual(serial), name + ": the " + CpuIsaName(isa) + " copy differs");
          }
        }
      }
    }
  }
}

// An infinite mean (reserve_space_1) in a channel whose runs end in a partial vector: the
// vector's missing lanes must add nothing, where 0 · (0 − ∞) would add a NaN. scale_backprop
// is then -∞ (dy > 0, finite x), as in the reference and TensorFlow. Exact runs (channels
// first, and channels last with one channel), fast runs one run at a time and side by side.
void TestInfiniteMeanInRunTails() {
  const Shape shapes[] = {{1, 3, 4, false}, {2, 1, 5, true}, {1, 2, 1089, false},
                          {3, 2, 1089, false}};
  for (const Shape& shape : shapes) {
    for (bool training : {true, false}) {
      const Case k{shape, training, 0.0f};
      Inputs<float> in(k, 3);
      for (float& d : in.dy) d = std::fabs(d) + 0.125f;
      in.mean[0] = INFINITY;
      const Params p = ParamsOf(k);
      Outputs<float> ref(shape), got(shape);
      BatchNormGradReference(p, ref.Bind(in));
      BatchNormGradCpu(p, got.Bind(in), SerialFor());
      const std::string name = Describe(k, "float") + ", infinite mean";
      Check(got.dscale[0] == -INFINITY && ref.dscale[0] == -INFINITY,
            name + ": scale_backprop is -inf");
      Check(NormwiseError(got.dscale, ref.dscale) <= kSumTolerance,
            name + ": scale_backprop vs reference");
      Check(NormwiseError(got.doffset, ref.doffset) <= kSumTolerance,
            name + ": offset_backprop vs reference");
    }
  }
}

// Page-aligned room for `count` tensors of `bytes` bytes each, a page or more apart: tensor i
// at any offset into its first page.
class PagedTensors {
 public:
  static constexpr int64_t kPage = 4096;
  PagedTensors(int64_t bytes, int count)
      : span_((bytes / kPage + 2) * kPage), memory_(count * span_ + kPage) {}
  template <typename T>
  T* At(int i, int64_t offset) {
    unsigned char* const base =
        memory_.data() + (kPage - reinterpret_cast<uintptr_t>(memory_.data()) % kPage);
    return reinterpret_cast<T*>(base + i * span_ + offset);
  }
  // y_backprop at the start of tensor 0 and x 2048 bytes into tensor 1, `count` elements of
  // each drawn from a normal distribution seeded with `seed`.
  template <typename T>
  std::pair<T*, T*> NormalInputs(int64_t count, uint32_t seed) {
    T* dy = At<T>(0, 0);
    T* x = At<T>(1, 2048);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < count; ++i) {
      dy[i] = FromFloat<T>(normal(rng));
      x[i] = FromFloat<T>(normal(rng));
    }
    return {dy, x};
  }

 private:
  int64_t span_;
  std::vector<unsigned char> memory_;
};

// Channels-last inference's striped rows, x_backprop stored or streamed, at y_backprop's page
// offset (the later stripes' loads alias its stores: on rows of 2 KiB or more each position's
// x_backprop waits for its loads; streamed where a line takes several stores, the sums and then
// x_backprop in order) and at one that aliases nothing: every way gives the same bits,
// x_backprop and sums, on every copy. The last stripe is three rows short.
template <typename T>
void TestStripedInferenceRowsAgree() {
  constexpr int64_t kRows = 317, kStripeRows = 40;  // stripes whole pages apart
  for (int64_t width : {256, 1024}) {
    const int64_t bytes = kRows * width * static_cast<int64_t>(sizeof(T));
    const int64_t stripe_bytes = kStripeRows * width * static_cast<int64_t>(sizeof(T));
    PagedTensors memory(bytes, 4);
    const std::pair<T*, T*> inputs = memory.NormalInputs<T>(kRows * width, 11);
    T* const dy = inputs.first;
    T* const x = inputs.second;
    std::vector<float> mean(width, 0.25f), scale_inv_std(width, 1.5f);
    for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (isa > DetectedCpuIsa()) continue;
      const CpuLoops<T>& loops = LoopsFor<T>(isa);
      auto run = [&](T* dx, bool stream, std::vector<double>* sums) {
        sums->assign(2 * width, 0.0);
        loops.sum_rows_inference(dy, x, dx, width, kRows, width, mean.data(),
                                 scale_inv_std.data(), sums->data(), sums->data() + width,
                                 stream);
      };
      T* reference = memory.At<T>(2, 1024);
      std::vector<double> reference_sums, sums;
      run(reference, false, &reference_sums);
      for (int64_t offset : {0, 1024}) {  // dy's page offset (aliasing), and one that is not
        T* dx = memory.At<T>(3, offset);
        Check(StoresAliasLoads(dx, dy, stripe_bytes, kFastGroup) == (offset == 0),
              "x_backprop at page offset " + std::to_string(offset) +
                  (offset == 0 ? " aliases y_backprop" : " does not alias y_backprop"));
        for (bool stream : {false, true}) {
          std::memset(static_cast<void*>(dx), 0, bytes);
          run(dx, stream, &sums);
          Check(std::memcmp(dx, reference, bytes) == 0 && sums == reference_sums,
                std::string(TypeName<T>()) + ", " + CpuIsaName(isa) + " copy: " +
                    std::to_string(width) + " columns' rows " +
                    (stream ? "streamed" : "stored") + " at page offset " +
                    std::to_string(offset) + " give the reference's bits");
        }
      }
    }
  }
}

// The exact family's x_backprop of rows (training's float by register parts on the AVX2 copy,
// two rows a group where its stores alias y_backprop's loads), by groups where the stores
// alias and where they do not, and in order, streamed or not: every element the double
// expression rounded once, training and inference, on every copy this CPU runs. Rows of 2056
// columns end in a partial vector and alias at any row distance (StoresAliasLoads).
template <typename T>
void TestExactDxRowsAgree() {
  constexpr int64_t kRows = 37, kWidth = 2056;
  const int64_t bytes = kRows * kWidth * static_cast<int64_t>(sizeof(T));
  const int64_t row_bytes = kWidth * static_cast<int64_t>(sizeof(T));
  PagedTensors memory(bytes, 3);
  const std::pair<T*, T*> inputs = memory.NormalInputs<T>(kRows * kWidth, 12);
  T* const dy = inputs.first;
  T* const x = inputs.second;
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  std::vector<double> mean(kWidth), scale_inv_std(kWidth), dy_mean(kWidth), xc_coef(kWidth);
  for (int64_t c = 0; c < kWidth; ++c) {
    mean[c] = normal(rng) / 3.0;
    scale_inv_std[c] = 1.0 + c / 4096.0;
    dy_mean[c] = normal(rng) / 7.0;
    xc_coef[c] = normal(rng) / 5.0;
  }
  for (bool training : {true, false}) {
    const DxCoefficients<double> k{mean.data(), scale_inv_std.data(),
                                   training ? dy_mean.data() : nullptr, xc_coef.data()};
    std::vector<T> want(kRows * kWidth);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kWidth; ++c) {
        const int64_t i = r * kWidth + c;
        const double d = ToFloat(dy[i]), v = ToFloat(x[i]);
        want[i] = FromDouble<T>(training ? scale_inv_std[c] * ((d - dy_mean[c]) -
                                                               (v - mean[c]) * xc_coef[c])
                                         : d * scale_inv_std[c]);
      }
    }
    for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (isa > DetectedCpuIsa()) continue;
      for (int64_t offset : {0, 1024}) {  // dy's page offset (aliasing), and one that is not
        T* dx = memory.At<T>(2, offset);
        Check(StoresAliasLoads(dx, dy, row_bytes, 4) == (offset == 0),
              "exact x_backprop at page offset " + std::to_string(offset) +
                  (offset == 0 ? " aliases y_backprop" : " does not alias y_backprop"));
        for (RowOrder order : {RowOrder::kByGroups, RowOrder::kInOrder}) {
          for (bool stream : {false, true}) {
            std::memset(static_cast<void*>(dx), 0, bytes);
            LoopsFor<T>(isa).exact_dx_rows(dy, x, dx, kWidth, kRows, kWidth, k, stream, order);
            Check(std::memcmp(dx, want.data(), bytes) == 0,
                  std::string(TypeName<T>()) + ", " + CpuIsaName(isa) + " copy: exact " +
                      (training ? "training" : "inference") + " x_backprop " +
                      (order == RowOrder::kByGroups ? "by groups" : "in order") +
                      (stream ? ", streamed" : "") + ", page offset " +
                      std::to_string(offset) + ": each element rounded once");
          }
        }
      }
    }
  }
}

// The exact family's inference rows with x_backprop written as they sum: rows one page long,
// x_backprop at y_backprop's page offset, at x's, and at neither. Where the next row's loads
// alias its stores, the rows' x_backprop waits in registers until their loads are done; every
// placement gives each element rounded once and the sums without x_backprop, bit for bit.
template <typename T>
void TestExactInferenceRowsWhereStoresAlias() {
  constexpr int64_t kWidth = PagedTensors::kPage / sizeof(T), kRows = 19;  // 8 + 8 + 3 rows
  const int64_t bytes = kRows * kWidth * static_cast<int64_t>(sizeof(T));
  PagedTensors memory(bytes, 3);
  const std::pair<T*, T*> inputs = memory.NormalInputs<T>(kRows * kWidth, 14);
  T* const dy = inputs.first;
  T* const x = inputs.second;
  std::mt19937 rng(15);
  std::normal_distribution<float> normal;
  std::vector<double> mean(kWidth), scale_inv_std(kWidth);
  for (int64_t c = 0; c < kWidth; ++c) {
    mean[c] = normal(rng) / 3.0;
    scale_inv_std[c] = 1.0 + c / 4096.0;
  }
  std::vector<T> want(kRows * kWidth);
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    want[i] = FromDouble<T>(static_cast<double>(ToFloat(dy[i])) * scale_inv_std[i % kWidth]);
  }
  const int64_t pitch = RowsPitch(kWidth);
  auto sums = [&](const CpuLoops<T>& loops, T* dx, bool stream) {
    std::vector<double> scratch(4 * pitch, 0.0);
    const ExactColumns columns{scratch.data(), scratch.data() + pitch,
                               scratch.data() + 2 * pitch, scratch.data() + 3 * pitch};
    if (dx == nullptr) {
      loops.exact_bounded_sum_rows(dy, x, kWidth, kRows, kWidth, mean.data(), columns);
    } else {
      loops.exact_bounded_sum_rows_inference(dy, x, dx, kWidth, kRows, kWidth, mean.data(),
                                             scale_inv_std.data(), columns, stream);
    }
    return scratch;
  };
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa > DetectedCpuIsa()) continue;
    const CpuLoops<T>& loops = LoopsFor<T>(isa);
    const std::vector<double> want_sums = sums(loops, nullptr, false);
    for (int64_t offset : {0, 2048, 1024}) {  // y_backprop's page offset, x's, neither
      T* dx = memory.At<T>(2, offset);
      const bool aliases = StoresAliasLoads(dx, dy + kWidth, kWidth * sizeof(T), 1) ||
                           StoresAliasLoads(dx, x + kWidth, kWidth * sizeof(T), 1);
      Check(aliases == (offset != 1024),
            "x_backprop at page offset " + std::to_string(offset) +
                (offset != 1024 ? " aliases the next row's loads" : " aliases no loads"));
      for (bool stream : {false, true}) {
        std::memset(static_cast<void*>(dx), 0, bytes);
        const bool same_sums = sums(loops, dx, stream) == want_sums;
        Check(same_sums && std::memcmp(dx, want.data(), bytes) == 0,
              std::string(TypeName<T>()) + ", " + CpuIsaName(isa) + " copy: exact inference" +
                  " rows" + (stream ? ", streamed" : "") + ", x_backprop at page offset " +
                  std::to_string(offset) + ": each element rounded once, the sums' bits");
      }
    }
  }
}

// The exact family's planes loop (channels first, planes shorter than a vector, read as rows)
// against its runs loop, bit for bit: each channel's bounded sums and Σ|term|, and inference's
// x_backprop, for every plane length up to kRunLanes, a few image counts (the runs go side by
// side in fours) and channel counts, in every copy; one channel with an infinite mean.
template <typename T>
void TestExactPlanesMatchRuns() {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  for (int64_t plane = 1; plane <= kRunLanes; ++plane) {
    for (int64_t images : {1, 3, 4, 9, 17}) {
      for (int64_t channels : {1, 5, 37}) {
        const int64_t stride = channels * plane, n = images * stride;
        std::vector<T> dy(n), x(n);
        for (int64_t i = 0; i < n; ++i) {
          dy[i] = FromFloat<T>(normal(rng));
          x[i] = FromFloat<T>(normal(rng) + 2.0f);
        }
        std::vector<double> mean(channels), scale_inv_std(channels);
        for (int64_t c = 0; c < channels; ++c) {
          mean[c] = c == 3 ? std::numeric_limits<double>::infinity() : 2.0 + normal(rng) / 9.0;
          scale_inv_std[c] = 1.0 + c / 64.0;
        }
        std::vector<double> mean_columns(stride), scale_columns(stride);
        for (int64_t j = 0; j < stride; ++j) {
          mean_columns[j] = mean[j / plane];
          scale_columns[j] = scale_inv_std[j / plane];
        }
        for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
          if (isa > DetectedCpuIsa()) continue;
          const CpuLoops<T>& loops = LoopsFor<T>(isa);
          for (bool inference : {false, true}) {
            std::vector<BoundedSum> runs_dy(channels), runs_dy_xc(channels);
            std::vector<BoundedSum> planes_dy(channels), planes_dy_xc(channels);
            std::vector<T> runs_dx(n), planes_dx(n);
            for (int64_t c0 = 0; c0 < channels; c0 += kExactRunChannels) {
              const int64_t k = std::min(kExactRunChannels, channels - c0);
              const int64_t at = c0 * plane;
              if (inference) {
                loops.exact_bounded_sum_runs_inference(
                    dy.data() + at, x.data() + at, runs_dx.data() + at, mean.data() + c0,
                    scale_inv_std.data() + c0, plane, k, images, stride, &runs_dy[c0],
                    &runs_dy_xc[c0]);
              } else {
                loops.exact_bounded_sum_runs(dy.data() + at, x.data() + at, mean.data() + c0,
                                             plane, k, images, stride, &runs_dy[c0],
                                             &runs_dy_xc[c0]);
              }
            }
            std::vector<double> scratch(4 * RowsPitch(stride));
            const int64_t pitch = RowsPitch(stride);
            const ExactColumns columns{scratch.data(), scratch.data() + pitch,
                                       scratch.data() + 2 * pitch, scratch.data() + 3 * pitch};
            loops.exact_bounded_sum_planes(dy.data(), x.data(),
                                           inference ? planes_dx.data() : nullptr, stride,
                                           images, channels, plane, mean_columns.data(),
                                           scale_columns.data(), columns, planes_dy.data(),
                                           planes_dy_xc.data());
            bool same = std::memcmp(runs_dx.data(), planes_dx.data(), n * sizeof(T)) == 0;
            for (int64_t c = 0; c < channels; ++c) {
              for (const auto& [a, b] : {std::make_pair(runs_dy[c], planes_dy[c]),
                                         std::make_pair(runs_dy_xc[c], planes_dy_xc[c])}) {
                same &= std::memcmp(&a.sum, &b.sum, sizeof(double)) == 0 &&
                        std::memcmp(&a.abs_sum, &b.abs_sum, sizeof(double)) == 0;
              }
            }
            Check(same, std::string(TypeName<T>()) + ", " + CpuIsaName(isa) + " copy: exact " +
                            (inference ? "inference" : "sums") + " of " +
                            std::to_string(images) + " images of " + std::to_string(channels) +
                            " planes of " + std::to_string(plane) +
                            ": the planes loop gives the runs loop's bits");
          }
        }
      }
    }
  }
}

// The number a shell command prints, 0 where it prints none.
long long ShellNumber(const char* command) {
  long long number = 0;
  if (std::FILE* pipe = popen(command, "r")) {
    if (std::fscanf(pipe, "%lld", &number) != 1) number = 0;
    pclose(pipe);
  }
  return number;
}

// Where Linux lists the caches, the size the streaming rules start from is the largest cache
// cpu0 shares, whatever sysconf says (glibc's CPUID answer is the whole package's L3 on AMD).
// Read here with the shell's own tools, so the check does not reuse the core's parser.
void TestLastLevelCacheIsSysfs() {
  const long long largest = ShellNumber(
      "cat /sys/devices/system/cpu/cpu0/cache/index*/size 2>/dev/null | numfmt --from=iec "
      "2>/dev/null | sort -n | tail -1");
  if (largest > 0) {
    testing::Check(LastLevelCacheBytes() == largest, "the last-level cache is sysfs's largest");
  } else {
    testing::Check(LastLevelCacheBytes() >= (int64_t{64} << 10),
                   "the last-level cache size is known or defaulted");
  }
  const bool socket_wide = LastLevelCacheBytes() > (int64_t{64} << 20);
  testing::Check(LastLevelCacheIsSocketWide() == socket_wide,
                 "a last-level cache above 64 MiB is a socket's");
  if (std::getenv("TF_FBN_OPS_STREAMING_MIB") == nullptr) {
    testing::Check(StreamingFootprintBytes() ==
                       (socket_wide ? kSocketWideStreamingBytes
                                    : std::min(kStreamingBytes, LastLevelCacheBytes())),
                   "x_backprop streams from 64 MiB beside a socket's last-level cache, else "
                   "from 12 MiB or the last-level cache, whichever is less");
    testing::Check(ParallelStreamingFootprintBytes() == LastLevelCacheBytes() / 4 * 3,
                   "on several threads the forward's y streams from 3/4 of the last-level cache");
    testing::Check(ForwardStreamingFootprintBytes() == (socket_wide
                                                            ? ParallelStreamingFootprintBytes()
                                                            : StreamingFootprintBytes()),
                   "on one thread the forward's y streams as x_backprop does beside a core "
                   "complex's L3, as on several threads beside a socket's");
  }
}

// The core's L2 is sysfs's level-2 data or unified cache of cpu0, read here with the shell's
// tools; the exact family takes strips where that L2 holds a strip beside a core complex's L3.
void TestSecondLevelCacheIsSysfs() {
  const long long l2 = ShellNumber(
      "for d in /sys/devices/system/cpu/cpu0/cache/index*; do "
      "[ \"$(cat $d/level)\" = 2 ] && [ \"$(cat $d/type)\" != Instruction ] && cat $d/size; "
      "done 2>/dev/null | numfmt --from=iec 2>/dev/null | head -1");
  testing::Check(SecondLevelCacheBytes() == l2, "the L2 is sysfs's level-2 cache, or 0");
  testing::Check(KernelMemoryRules().exact_strips ==
                     (!LastLevelCacheIsSocketWide() && l2 >= kFusedUnitBytes),
                 "strips where the L2 holds a strip beside a core complex's L3");
}

template <typename T>
void RunAllCases() {
  TestIsaCopiesAgree<T>();
  TestStripedInferenceRowsAgree<T>();
  TestExactDxRowsAgree<T>();
  TestExactInferenceRowsWhereStoresAlias<T>();
  TestExactPlanesMatchRuns<T>();
  TestLateThreadsAgree<T>();
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
  fbn::testing::CheckErrorMeasureCatchesSpecials();
  fbn::TestLastLevelCacheIsSysfs();
  fbn::TestSecondLevelCacheIsSysfs();
  fbn::TestConversions();
  fbn::TestExactSumsWhereTermsCancel();
  fbn::TestInfiniteMeanInRunTails();
  fbn::RunAllCases<float>();
  fbn::RunAllCases<fbn::Half>();
  fbn::RunAllCases<fbn::BFloat16>();
  return fbn::testing::Summary("core_test");
}
