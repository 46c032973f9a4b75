// The reference implementation: one channel at a time, every sum and coefficient in double,
// written to be read rather than to be fast. The fast kernels are tested against it.
#include "cc/core/bn_grad.h"
#include "cc/core/float16_convert.h"
#include "cc/core/ieee_arithmetic.h"

namespace fbn {

template <typename T>
void BatchNormGradReference(const Params& params, const Tensors<T>& t) {
  ScopedIeeeArithmetic ieee;
  const Shape& s = params.shape;
  const int64_t rest = s.rest();

  // The expressions are grouped exactly as TensorFlow's (so infinities and NaNs propagate the
  // same way), evaluated in double.
  for (int64_t c = 0; c < s.channels; ++c) {
    const double mean = t.mean[c];
    const double inv_std = params.InvStd(t.variance[c]);
    double sum_dy = 0.0;
    double sum_dy_xc = 0.0;
    double sum_dy_xc_scaled = 0.0;  // training's scale gradient: the scaling is inside the sum
    for (int64_t n = 0; n < s.batch; ++n) {
      for (int64_t i = 0; i < s.spatial; ++i) {
        const double dy = ToFloat(t.y_backprop[s.Offset(n, c, i)]);
        const double xc = ToFloat(t.x[s.Offset(n, c, i)]) - mean;
        sum_dy += dy;
        sum_dy_xc += dy * xc;
        sum_dy_xc_scaled += dy * (xc * inv_std);
      }
    }
    t.offset_backprop[c] = static_cast<float>(sum_dy);
    t.scale_backprop[c] =
        static_cast<float>(params.is_training ? sum_dy_xc_scaled : sum_dy_xc * inv_std);
    if (rest == 0) continue;

    const double scale = t.scale[c];
    const double dy_mean = sum_dy / static_cast<double>(rest);
    const double coef2 = inv_std * inv_std * (sum_dy_xc / static_cast<double>(rest));
    for (int64_t n = 0; n < s.batch; ++n) {
      for (int64_t i = 0; i < s.spatial; ++i) {
        const int64_t k = s.Offset(n, c, i);
        const double dy = ToFloat(t.y_backprop[k]);
        const double xc = ToFloat(t.x[k]) - mean;
        // Training: the batch statistics depend on x, so dx has the two centring terms.
        const double dx = params.is_training ? (scale * inv_std) * ((dy - dy_mean) - xc * coef2)
                                             : dy * (inv_std * scale);
        t.x_backprop[k] = FromDouble<T>(dx);
      }
    }
  }
}

template void BatchNormGradReference<float>(const Params&, const Tensors<float>&);
template void BatchNormGradReference<Half>(const Params&, const Tensors<Half>&);
template void BatchNormGradReference<BFloat16>(const Params&, const Tensors<BFloat16>&);

}  // namespace fbn
