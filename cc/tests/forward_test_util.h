// Helpers shared by the forward core's test programs (core_forward_test.cc, core_digest.cc):
// a case, its random inputs and host output buffers.
#ifndef TF_FBN_OPS_CC_TESTS_FORWARD_TEST_UTIL_H_
#define TF_FBN_OPS_CC_TESTS_FORWARD_TEST_UTIL_H_

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cc/core/bn_forward.h"
#include "cc/core/float16_convert.h"

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
  std::vector<T> y;
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

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_FORWARD_TEST_UTIL_H_
