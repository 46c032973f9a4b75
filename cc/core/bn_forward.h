// The numeric core of the forward batch norm (TensorFlow's FusedBatchNorm, V2, V3) over the two
// views of bn_grad.h's Shape. No TensorFlow here either.
//
// Training normalizes x with its own batch statistics: per channel the mean and the biased
// variance, accumulated in double in an order fixed by the shape, so the bits never depend on
// the thread count or the instruction set. Every y is evaluated in double and rounded once.
// Inference normalizes with given (population) statistics.
#ifndef TF_FBN_OPS_CC_CORE_BN_FORWARD_H_
#define TF_FBN_OPS_CC_CORE_BN_FORWARD_H_

#include <cmath>
#include <cstdint>

#include "cc/core/bn_grad.h"

namespace fbn {

struct ForwardParams {
  Shape shape;
  float epsilon = 1e-4f;
  // Training's running averages: out = (1 − f) · old + f · batch (f == 1: the batch's own).
  float exponential_avg_factor = 1.0f;
  bool is_training = true;
  // What training saves in reserve_space_2 for the gradient: the biased variance (TensorFlow's
  // CPU and XLA contract), or 1/sqrt(var + eps) (its GPU contract, cuDNN's saved inverse std).
  bool save_inv_std = false;
};

// Buffers of one forward call. T is x's and y's element type; everything per channel is float.
// y may be x's own buffer: every element of x is read before that element of y is written, and
// the statistics are complete before any y is.
template <typename T>
struct ForwardTensors {
  const T* x = nullptr;
  const float* scale = nullptr;
  const float* offset = nullptr;
  // Inference: the population statistics. Training: the running averages that
  // exponential_avg_factor != 1 updates (not read when it is 1: TensorFlow then takes any size).
  const float* mean = nullptr;
  const float* variance = nullptr;
  T* y = nullptr;
  float* batch_mean = nullptr;      // output 1
  float* batch_variance = nullptr;  // output 2
  float* saved_mean = nullptr;      // output 3, reserve_space_1
  float* saved_variance = nullptr;  // output 4, reserve_space_2 (see ForwardParams::save_inv_std)
};

// y of a channel: (x − mean) · scale_inv_std + offset, in double, grouped as TensorFlow's
// expression (so var + eps == 0 gives its infinities and NaNs).
struct NormalizeCoefficients {
  double mean;
  double scale_inv_std;
  double offset;
};

// A channel's four statistics outputs and y's coefficients, from its batch mean and biased
// variance over `count` elements (training) or from the given statistics (inference): the one
// formula of every device. Bessel's correction count / (count − 1) goes into batch_variance
// only, 1 for a single element (TensorFlow's CPU kernel: 0, where cuDNN gives NaN); each output
// is evaluated in double and rounded once. The inputs are read before any output is written:
// TensorFlow may hand the mean and variance inputs' buffers to batch_mean and batch_variance.
template <typename T>
FBN_HOST_DEVICE NormalizeCoefficients FinishForwardChannel(const ForwardParams& p,
                                                           const ForwardTensors<T>& t, int64_t c,
                                                           double count, double mean,
                                                           double variance) {
  const double scale = t.scale[c], offset = t.offset[c];
  const double inv_std = 1.0 / sqrt(variance + static_cast<double>(p.epsilon));
  if (!p.is_training) {
    const float given_mean = t.mean[c], given_variance = t.variance[c];
    t.batch_mean[c] = t.saved_mean[c] = given_mean;
    t.batch_variance[c] = t.saved_variance[c] = given_variance;
  } else {
    const double unbiased = variance * (count > 1 ? count / (count - 1) : 1.0);
    const double f = p.exponential_avg_factor;
    if (f == 1.0) {
      t.batch_mean[c] = static_cast<float>(mean);
      t.batch_variance[c] = static_cast<float>(unbiased);
    } else {
      const double old_mean = t.mean[c], old_variance = t.variance[c];
      t.batch_mean[c] = static_cast<float>((1.0 - f) * old_mean + f * mean);
      t.batch_variance[c] = static_cast<float>((1.0 - f) * old_variance + f * unbiased);
    }
    t.saved_mean[c] = static_cast<float>(mean);
    t.saved_variance[c] = static_cast<float>(p.save_inv_std ? inv_std : variance);
  }
  return NormalizeCoefficients{mean, scale * inv_std, offset};
}

// The moments of a part of a channel: its elements, Σ x, and Σ (x − Σ x / count)², the squared
// deviations about the part's own mean.
struct ChannelMoments {
  double count = 0.0;
  double sum = 0.0;
  double m2 = 0.0;
};

// A part's squared deviations about the mean of the parts it is combined with: its own plus
// count · (its mean − that mean)² (Chan, Golub and LeVeque). Non-negative: nothing cancels,
// whatever the data's offset. The one combination rule of the CPU and CUDA kernels, which add
// these terms in orders of their own (CombineMoments; the CUDA Finish kernel's tree).
FBN_HOST_DEVICE inline double PartSquaredDeviations(const ChannelMoments& p, double mean) {
  if (p.count == 0.0) return 0.0;
  const double d = p.sum / p.count - mean;
  return p.m2 + p.count * d * d;
}

// Parts of one channel combined in the order given (part_at(i) for i < parts): the mean of all,
// then the parts' squared deviations about it.
template <typename PartAt>
FBN_HOST_DEVICE ChannelMoments CombineMoments(int64_t parts, PartAt&& part_at) {
  ChannelMoments all;
  for (int64_t i = 0; i < parts; ++i) {
    const ChannelMoments p = part_at(i);
    all.count += p.count;
    all.sum += p.sum;
  }
  if (all.count == 0.0) return all;
  const double mean = all.sum / all.count;
  for (int64_t i = 0; i < parts; ++i) all.m2 += PartSquaredDeviations(part_at(i), mean);
  return all;
}

// A channel's mean and biased variance from its moments. A NaN becomes the default quiet NaN:
// which NaN payload survives vector arithmetic must not decide bits.
FBN_HOST_DEVICE inline void MeanAndVariance(const ChannelMoments& m, double* mean,
                                            double* variance) {
  *mean = m.sum / m.count;
  *variance = m.m2 / m.count;
  if (*mean != *mean) *mean = NAN;
  if (*variance != *variance) *variance = NAN;
}

// The statistics of an empty x (no elements, any channels): batch_mean and batch_variance NaN
// in both modes, whatever the factor (TensorFlow's kernels), the reserve spaces 0 (oneDNN's; the
// stock kernel leaves them unwritten).
template <typename T>
FBN_HOST_DEVICE void FinishEmptyChannel(const ForwardTensors<T>& t, int64_t c) {
  t.batch_mean[c] = t.batch_variance[c] = NAN;
  t.saved_mean[c] = t.saved_variance[c] = 0.0f;
}

// Plain two-pass loops in double: the oracle the fast kernels are tested against.
template <typename T>
void BatchNormForwardReference(const ForwardParams& params, const ForwardTensors<T>& t);

// The production CPU kernels: bit-identical for any ParallelFor and any instruction set.
template <typename T>
void BatchNormForwardCpu(const ForwardParams& params, const ForwardTensors<T>& t,
                         const ParallelFor& parallel_for);

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_BN_FORWARD_H_
