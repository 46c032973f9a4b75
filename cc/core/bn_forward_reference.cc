// The forward's reference: one channel at a time, two passes in double (the mean, then the
// variance about it), written to be read rather than to be fast.
#include "cc/core/bn_forward.h"
#include "cc/core/float16_convert.h"
#include "cc/core/ieee_arithmetic.h"

namespace fbn {

template <typename T>
void BatchNormForwardReference(const ForwardParams& params, const ForwardTensors<T>& t) {
  ScopedIeeeArithmetic ieee;
  const Shape& s = params.shape;
  const int64_t rest = s.rest();
  for (int64_t c = 0; c < s.channels; ++c) {
    if (rest == 0) {
      FinishEmptyChannel(t, c);
      continue;
    }
    double mean = 0.0, variance = 0.0;
    if (params.is_training) {
      for (int64_t n = 0; n < s.batch; ++n) {
        for (int64_t i = 0; i < s.spatial; ++i) mean += ToFloat(t.x[s.Offset(n, c, i)]);
      }
      mean /= static_cast<double>(rest);
      for (int64_t n = 0; n < s.batch; ++n) {
        for (int64_t i = 0; i < s.spatial; ++i) {
          const double d = ToFloat(t.x[s.Offset(n, c, i)]) - mean;
          variance += d * d;
        }
      }
      variance /= static_cast<double>(rest);
    } else {
      mean = t.mean[c];
      variance = t.variance[c];
    }
    const NormalizeCoefficients k =
        FinishForwardChannel(params, t, c, static_cast<double>(rest), mean, variance);
    for (int64_t n = 0; n < s.batch; ++n) {
      for (int64_t i = 0; i < s.spatial; ++i) {
        const int64_t e = s.Offset(n, c, i);
        t.y[e] = FromDouble<T>((ToFloat(t.x[e]) - k.mean) * k.scale_inv_std + k.offset);
      }
    }
  }
}

template void BatchNormForwardReference<float>(const ForwardParams&, const ForwardTensors<float>&);
template void BatchNormForwardReference<Half>(const ForwardParams&, const ForwardTensors<Half>&);
template void BatchNormForwardReference<BFloat16>(const ForwardParams&,
                                                  const ForwardTensors<BFloat16>&);

}  // namespace fbn
