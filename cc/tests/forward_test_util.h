// Helpers shared by the forward core's test programs (core_forward_test.cc, core_digest.cc,
// gpu_core_test.cu): cases, their random inputs, host output buffers, the statistics' measure.
#ifndef TF_FBN_OPS_CC_TESTS_FORWARD_TEST_UTIL_H_
#define TF_FBN_OPS_CC_TESTS_FORWARD_TEST_UTIL_H_

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cc/core/bn_forward.h"
#include "cc/core/float16_convert.h"
#include "cc/tests/test_util.h"

namespace fbn {
namespace testing {

struct ForwardCase {
  Shape shape;
  bool is_training;
  float x_mean;  // offset of x: the variance must survive it
  float factor = 1.0f;
  bool save_inv_std = false;
};

inline std::string DescribeForward(const ForwardCase& k, const char* type) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "forward %s N=%lld C=%lld S=%lld %s %s x_mean=%g f=%g%s", type,
                static_cast<long long>(k.shape.batch), static_cast<long long>(k.shape.channels),
                static_cast<long long>(k.shape.spatial), k.shape.channels_last ? "NHWC" : "NCHW",
                k.is_training ? "train" : "infer", k.x_mean, k.factor,
                k.save_inv_std ? " inv_std" : "");
  return buf;
}

inline ForwardParams ParamsOf(const ForwardCase& k) {
  ForwardParams p;
  p.shape = k.shape;
  p.epsilon = 1e-3f;
  p.exponential_avg_factor = k.factor;
  p.is_training = k.is_training;
  p.save_inv_std = k.save_inv_std;
  return p;
}

template <typename T>
struct ForwardInputs {
  std::vector<T> x;
  std::vector<float> scale, offset, mean, variance;
};

template <typename T>
ForwardInputs<T> MakeForwardInputs(const ForwardCase& k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> positive(0.5f, 2.0f);
  ForwardInputs<T> in;
  const int64_t C = k.shape.channels;
  in.x.resize(k.shape.elements());
  for (auto& v : in.x) v = FromDouble<T>(k.x_mean + 3.0f * normal(rng));
  for (int64_t c = 0; c < C; ++c) {
    in.scale.push_back(positive(rng));
    in.offset.push_back(normal(rng));
    in.mean.push_back(k.x_mean + normal(rng));
    in.variance.push_back(positive(rng) * 9.0f);
  }
  return in;
}

template <typename T>
struct ForwardOutputs {
  CacheLineVector<T> y;
  std::vector<float> batch_mean, batch_variance, saved_mean, saved_variance;

  explicit ForwardOutputs(const Shape& s)
      : y(s.elements(), FromDouble<T>(7.0)),
        batch_mean(s.channels, 7.0f),
        batch_variance(s.channels, 7.0f),
        saved_mean(s.channels, 7.0f),
        saved_variance(s.channels, 7.0f) {}

  ForwardTensors<T> Bind(const ForwardInputs<T>& in) {
    ForwardTensors<T> t;
    t.x = in.x.data();
    t.scale = in.scale.data();
    t.offset = in.offset.data();
    t.mean = in.mean.data();
    t.variance = in.variance.data();
    t.y = y.data();
    t.batch_mean = batch_mean.data();
    t.batch_variance = batch_variance.data();
    t.saved_mean = saved_mean.data();
    t.saved_variance = saved_variance.data();
    return t;
  }

  bool SameBits(const ForwardOutputs& o) const {
    auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    return same(y, o.y) && same(batch_mean, o.batch_mean) &&
           same(batch_variance, o.batch_variance) && same(saved_mean, o.saved_mean) &&
           same(saved_variance, o.saved_variance);
  }
};

inline std::vector<ForwardCase> ForwardCases() {
  std::vector<ForwardCase> cases;
  std::vector<Shape> shapes;
  for (const Case& k : TestCases()) shapes.push_back(k.shape);
  // Every schedule of bn_forward_cpu.cc: planes shorter than a vector and than kShortPlane
  // (rows), planes from kShortPlane on (runs), runs cut into pieces, wide rows in several column
  // tiles, folded rows with a remainder, several row tiles with a shorter last one.
  for (Shape s : std::vector<Shape>{{4, 300, 15, false}, {3, 5, 16, false}, {3, 5, 64, false},
                                    {2, 2, 70000, false}, {2, 700, 3, true}, {1000, 7, 9, true},
                                    {700, 19, 1, true}, {2000, 16, 8, true}}) {
    shapes.push_back(s);
  }
  int i = 0;
  for (const Shape& s : shapes) {
    for (bool training : {true, false}) {
      ForwardCase k{s, training, 0.0f};
      switch (i++ % 4) {
        case 1: k.x_mean = 1e4f; break;  // deviations 3e-4 of the values
        case 2: k.factor = 0.25f; break;
        case 3: k.save_inv_std = true; break;
      }
      cases.push_back(k);
    }
  }
  return cases;
}

// |got − want| per channel relative to |want|: the statistics are float outputs of double
// arithmetic, each rounded once, so two of them differ by at most about one float rounding.
inline bool ChannelsClose(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t c = 0; c < got.size(); ++c) {
    if (std::isnan(got[c]) || std::isnan(want[c])) {
      if (std::isnan(got[c]) != std::isnan(want[c])) return false;
      continue;
    }
    if (std::fabs(static_cast<double>(got[c]) - want[c]) > 0x1p-22 * std::fabs(want[c])) {
      return false;
    }
  }
  return true;
}

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_FORWARD_TEST_UTIL_H_
