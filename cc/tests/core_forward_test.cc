// The forward core (bn_forward.h) against its reference, TensorFlow's worked example and the
// contracts of its outputs; and its bits across thread counts, splits, instruction sets, in place
// and with streaming stores.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cc/core/bn_forward.h"
#include "cc/core/cpu/forward_loops.h"
#include "cc/tests/forward_test_util.h"
#include "cc/tests/test_util.h"

namespace fbn {
namespace testing {
namespace {

template <typename T>
void CheckCase(const ForwardCase& k, unsigned seed) {
  const std::string name = DescribeForward(k, TypeName<T>());
  const ForwardParams p = ParamsOf(k);
  const ForwardInputs<T> in = MakeForwardInputs<T>(k, seed);

  ForwardOutputs<T> ref(k.shape), fast(k.shape);
  BatchNormForwardReference(p, ref.Bind(in));
  BatchNormForwardCpu(p, fast.Bind(in), SerialFor());
  Check(NormwiseError(fast.y, ref.y) <= DxTolerance<T>(), name + ": y vs reference");
  Check(ChannelsClose(fast.batch_mean, ref.batch_mean), name + ": batch_mean vs reference");
  Check(ChannelsClose(fast.batch_variance, ref.batch_variance),
        name + ": batch_variance vs reference");
  Check(ChannelsClose(fast.saved_mean, ref.saved_mean), name + ": reserve_space_1 vs reference");
  Check(ChannelsClose(fast.saved_variance, ref.saved_variance),
        name + ": reserve_space_2 vs reference");

  // The same bits for any thread count and split, copy of the loops, in place, streamed and in
  // either order of y's rows.
  bool same_threads = true;
  for (auto [threads, pieces] : {std::pair{2, 3}, std::pair{3, 64}, std::pair{2, 1000}}) {
    ForwardOutputs<T> again(k.shape);
    BatchNormForwardCpu(p, again.Bind(in), ThreadedFor(threads, pieces));
    same_threads = same_threads && again.SameBits(fast);
  }
  Check(same_threads, name + ": same bits on 2 and 3 threads, any split");
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa > DetectedCpuIsa()) continue;
    constexpr int64_t kAll = std::numeric_limits<int64_t>::max();
    for (const MemoryRules rules :
         {MemoryRules{0, 0, 0, 0, true}, MemoryRules{0, kAll, 0, 0, true},
          MemoryRules{kAll, 0, kAll, kAll, true}, MemoryRules{kAll, kAll, kAll, kAll, true}}) {
      ForwardOutputs<T> again(k.shape);
      BatchNormForwardCpuWithLoops(p, again.Bind(in), ThreadedFor(2, 7),
                                   ForwardLoopsFor<T>(isa), rules);
      const bool streamed = rules.forward_streaming_footprint == 0;
      Check(again.SameBits(fast), name + ": same bits with the " + CpuIsaName(isa) + " loops" +
                                      (streamed ? ", streamed" : "") +
                                      (rules.grouped_bytes == 0 ? ", rows in order" : ""));
    }
  }
  ForwardInputs<T> shared = in;
  ForwardOutputs<T> in_place(k.shape);
  ForwardTensors<T> t = in_place.Bind(shared);
  t.y = shared.x.data();
  BatchNormForwardCpu(p, t, ThreadedFor(2, 64));
  in_place.y.assign(shared.x.begin(), shared.x.end());
  Check(in_place.SameBits(fast), name + ": same bits in place (y is x's buffer)");
}

// TensorFlow's kernel test (fused_batch_norm_op_test.cc): x [1, 1, 6, 2], each channel 5, 7,
// ..., 15, scale 4, offset 2, epsilon 0.001.
void CheckWorkedExample() {
  ForwardCase k{{1, 2, 6, true}, true, 0.0f};
  ForwardParams p = ParamsOf(k);
  ForwardInputs<float> in;
  for (float v : {5, 7, 9, 11, 13, 15}) in.x.insert(in.x.end(), {v, v});
  in.scale = {4, 4};
  in.offset = {2, 2};
  in.mean = {6, 6};
  in.variance = {16, 16};
  const std::vector<double> want_y = {-3.86, -1.51, 0.83, 3.17, 5.51, 7.86};
  for (float factor : {1.0f, 0.5f}) {
    p.exponential_avg_factor = factor;
    ForwardOutputs<float> out(k.shape);
    BatchNormForwardCpu(p, out.Bind(in), SerialFor());
    bool y_ok = true;
    for (int i = 0; i < 6; ++i) y_ok = y_ok && std::fabs(out.y[2 * i] - want_y[i]) < 0.01;
    Check(y_ok, "worked example: y");
    Check(out.batch_mean[0] == (factor == 1 ? 10.0f : 8.0f), "worked example: batch_mean");
    Check(out.batch_variance[0] == (factor == 1 ? 14.0f : 15.0f),
          "worked example: batch_variance is Bessel-corrected (and averaged)");
    Check(out.saved_mean[0] == 10.0f, "worked example: reserve_space_1 is the batch mean");
    Check(out.saved_variance[0] == static_cast<float>(70.0 / 6.0),
          "worked example: reserve_space_2 is the biased variance");
  }
  p.save_inv_std = true;
  ForwardOutputs<float> gpu(k.shape);
  BatchNormForwardCpu(p, gpu.Bind(in), SerialFor());
  Check(gpu.saved_variance[0] == static_cast<float>(1.0 / std::sqrt(70.0 / 6.0 + 0.001f)),
        "worked example: the GPU contract saves 1/sqrt(var + eps)");
  p.is_training = false;
  in.mean = {10, 10};
  in.variance = {11.67f, 11.67f};
  ForwardOutputs<float> infer(k.shape);
  BatchNormForwardCpu(p, infer.Bind(in), SerialFor());
  bool y_ok = true;
  for (int i = 0; i < 6; ++i) y_ok = y_ok && std::fabs(infer.y[2 * i] - want_y[i]) < 0.01;
  Check(y_ok && infer.batch_mean[0] == 10.0f && infer.batch_variance[0] == 11.67f &&
            infer.saved_mean[0] == 10.0f && infer.saved_variance[0] == 11.67f,
        "worked example: inference's y, and its statistics outputs are the given ones");
}

// One element per channel: a zero variance, and no NaN from Bessel's correction.
void CheckSingleElement() {
  ForwardCase k{{1, 3, 1, true}, true, 0.0f};
  const ForwardInputs<float> in = MakeForwardInputs<float>(k, 5);
  ForwardOutputs<float> out(k.shape);
  BatchNormForwardCpu(ParamsOf(k), out.Bind(in), SerialFor());
  bool ok = true;
  for (int c = 0; c < 3; ++c) {
    ok = ok && out.batch_variance[c] == 0.0f && out.saved_variance[c] == 0.0f &&
         out.y[c] == in.offset[c] && out.batch_mean[c] == in.x[c];
  }
  Check(ok, "one element per channel: variance 0, y = offset");
}

// An empty x: batch statistics NaN in both modes, reserve spaces 0, y untouched.
void CheckEmpty() {
  for (const Shape& s : EmptyShapes()) {
    for (bool training : {true, false}) {
      ForwardCase k{s, training, 0.0f, 0.5f};
      ForwardInputs<float> in;
      in.scale = in.offset = in.mean = in.variance = std::vector<float>(s.channels, 1.0f);
      ForwardOutputs<float> out(s);
      BatchNormForwardCpu(ParamsOf(k), out.Bind(in), SerialFor());
      bool ok = true;
      for (int64_t c = 0; c < s.channels; ++c) {
        ok = ok && std::isnan(out.batch_mean[c]) && std::isnan(out.batch_variance[c]) &&
             out.saved_mean[c] == 0.0f && out.saved_variance[c] == 0.0f;
      }
      Check(ok, DescribeForward(k, "float") + ": empty x: NaN statistics, zero reserve spaces");
    }
  }
}

// x far from zero: the variance about a mean 10^4 times the deviations is still exact to a
// float rounding, where the one-pass E[x²] − E[x]² in float has nothing left.
void CheckLargeOffset() {
  ForwardCase k{{64, 8, 300, true}, true, 1e4f};
  const ForwardInputs<float> in = MakeForwardInputs<float>(k, 9);
  ForwardOutputs<float> out(k.shape);
  BatchNormForwardCpu(ParamsOf(k), out.Bind(in), ThreadedFor(2, 16));
  bool ok = true;
  for (int64_t c = 0; c < 8; ++c) {
    long double sum = 0, sq = 0;
    const int64_t R = k.shape.rest();
    for (int64_t r = 0; r < R; ++r) sum += in.x[r * 8 + c];
    const long double mean = sum / R;
    for (int64_t r = 0; r < R; ++r) sq += (in.x[r * 8 + c] - mean) * (in.x[r * 8 + c] - mean);
    const double biased = static_cast<double>(sq / R);
    ok = ok && std::fabs(out.saved_variance[c] - biased) <= 0x1p-23 * biased;
  }
  Check(ok, "x about 1e4 (std 3): the biased variance within half a float ulp of exact");
}

template <typename T>
void CheckType() {
  unsigned seed = 100;
  for (const ForwardCase& k : ForwardCases()) CheckCase<T>(k, seed++);
}

}  // namespace
}  // namespace testing
}  // namespace fbn

int main() {
  using namespace fbn::testing;
  CheckWorkedExample();
  CheckSingleElement();
  CheckEmpty();
  CheckLargeOffset();
  CheckType<float>();
  CheckType<fbn::Half>();
  CheckType<fbn::BFloat16>();
  return Summary("core_forward_test");
}
