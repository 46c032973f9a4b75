// The CPU core's outputs, hashed, over a fixed set of cases: the gradient's and the forward's,
// every dtype, layout and mode, the exact family (fewer than 1024 elements per channel) and the fast path, cancelling x (a large
// mean), in place, one thread and a split run on three. Two builds agree bit for bit exactly
// when their lines agree: the instruction-set copies of one machine (TF_FBN_OPS_CPU_ISA) and
// other architectures (make arm64-core-test compares an AArch64 build under qemu with this
// machine's). Exits 1 if a split run differs from the serial one.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/bn_forward.h"
#include "cc/core/cpu/cpu_loops.h"
#include "cc/tests/forward_test_util.h"
#include "cc/tests/test_util.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

// FNV-1a, 64 bits: any change of any output bit changes the line.
uint64_t Hash(uint64_t h, const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Ranges run on three threads, in reverse order, so the split is not the serial one.
ParallelFor ThreeThreads() {
  auto run = [](int64_t count, int64_t, const RangeFn& fn) {
    const int64_t step = std::max<int64_t>(1, (count + 6) / 7);
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int64_t b = 0; b < count; b += step) ranges.emplace_back(b, std::min(count, b + step));
    std::reverse(ranges.begin(), ranges.end());
    std::vector<std::thread> threads;
    for (int w = 0; w < 3; ++w) {
      threads.emplace_back([&, w] {
        for (size_t i = w; i < ranges.size(); i += 3) fn(ranges[i].first, ranges[i].second);
      });
    }
    for (auto& t : threads) t.join();
  };
  return {run, 3};
}

template <typename T>
bool Digest(const Case& k, bool in_place, uint64_t* all) {
  const Inputs<T> in(k, 17);
  const Params p = ParamsOf(k);
  Outputs<T> serial(k.shape), split(k.shape);
  BatchNormGradCpu(p, in_place ? serial.BindInPlace(in) : serial.Bind(in), SerialFor());
  BatchNormGradCpu(p, in_place ? split.BindInPlace(in) : split.Bind(in), ThreeThreads());
  uint64_t h = 0xcbf29ce484222325ull;
  h = Hash(h, serial.dx.data(), serial.dx.size() * sizeof(T));
  h = Hash(h, serial.dscale.data(), serial.dscale.size() * sizeof(float));
  h = Hash(h, serial.doffset.data(), serial.doffset.size() * sizeof(float));
  *all = Hash(*all, &h, sizeof(h));
  const bool same = serial.BitEqual(split);
  std::printf("%016llx %s%s%s\n", static_cast<unsigned long long>(h),
              Describe(k, TypeName<T>()).c_str(), in_place ? " in place" : "",
              same ? "" : "  SPLIT RUN DIFFERS");
  return same;
}

template <typename T>
bool ForwardDigest(const ForwardCase& k, bool in_place, uint64_t* all) {
  ForwardInputs<T> in = MakeForwardInputs<T>(k, 17);
  const ForwardParams p = ParamsOf(k);
  ForwardOutputs<T> serial(k.shape), split(k.shape);
  BatchNormForwardCpu(p, serial.Bind(in), SerialFor());
  ForwardTensors<T> t = split.Bind(in);
  if (in_place) t.y = in.x.data();
  BatchNormForwardCpu(p, t, ThreeThreads());
  if (in_place) split.y.assign(in.x.begin(), in.x.end());
  uint64_t h = 0xcbf29ce484222325ull;
  h = Hash(h, serial.y.data(), serial.y.size() * sizeof(T));
  for (const auto* v : {&serial.batch_mean, &serial.batch_variance, &serial.saved_mean,
                        &serial.saved_variance}) {
    h = Hash(h, v->data(), v->size() * sizeof(float));
  }
  *all = Hash(*all, &h, sizeof(h));
  const bool same = serial.SameBits(split);
  std::printf("%016llx %s%s%s\n", static_cast<unsigned long long>(h),
              DescribeForward(k, TypeName<T>()).c_str(), in_place ? " in place" : "",
              same ? "" : "  SPLIT RUN DIFFERS");
  return same;
}

int Main() {
  const Shape shapes[] = {{4, 8, 25, true},    {4, 8, 25, false},   {2, 33, 300, true},
                          {2, 33, 300, false}, {16, 64, 49, true},  {16, 64, 49, false},
                          {1, 1, 5000, true},  {3, 7, 1, false},    {8, 130, 1000, true},
                          {8, 130, 1000, false}, {3, 2100, 100, true}};
  uint64_t all = 0xcbf29ce484222325ull;
  int cases = 0;
  bool ok = true;
  for (const Shape& shape : shapes) {
    for (bool training : {true, false}) {
      for (float x_mean : {0.0f, 300.0f}) {
        for (bool saved_inv_std : {false, true}) {
          if (saved_inv_std && !training) continue;
          const Case k{shape, training, x_mean, saved_inv_std};
          for (bool in_place : {false, true}) {
            ok &= Digest<float>(k, in_place, &all);
            ok &= Digest<Half>(k, in_place, &all);
            ok &= Digest<BFloat16>(k, in_place, &all);
            cases += 3;
          }
        }
      }
    }
  }
  for (const Shape& shape : shapes) {
    for (bool training : {true, false}) {
      for (float x_mean : {0.0f, 300.0f}) {
        for (float factor : {1.0f, 0.3f}) {
          const ForwardCase k{shape, training, x_mean, factor, training && factor == 1.0f};
          for (bool in_place : {false, true}) {
            ok &= ForwardDigest<float>(k, in_place, &all);
            ok &= ForwardDigest<Half>(k, in_place, &all);
            ok &= ForwardDigest<BFloat16>(k, in_place, &all);
            cases += 3;
          }
        }
      }
    }
  }
  std::printf("core_digest: %d cases on %s, all outputs: %016llx\n", cases,
              CpuIsaName(ActiveCpuIsa()), static_cast<unsigned long long>(all));
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace fbn

int main() { return fbn::Main(); }
