// The HLO lowering of the forward: where the FFI custom call is not available (TensorFlow
// wheels before 2.20, TF_FBN_OPS_XLA_LOWERING=hlo) and on a GPU (ChooseXlaForwardPath).
//
// Numerics follow the reference (cc/core/bn_forward_reference.cc) and FinishForwardChannel
// (cc/core/bn_forward.h): x widened to double, the batch mean, then the squared deviations about
// it (two passes: no cancellation whatever x's offset, unlike XLA's own BatchNormTraining), the
// per-channel outputs and y's coefficients in double, each output rounded once. Compiled results
// agree with the non-jit kernels to about an ulp, whatever order XLA's reductions take.
#include <limits>

#include "cc/xla/xla_forward_lowerings.h"

namespace tensorflow {
namespace fbn_kernels {
namespace {

xla::XlaOp PerChannel(LoweringContext* ctx, float value, int64_t channels) {
  return xla::Broadcast(xla::ConstantR0<float>(ctx->builder(), value), {channels});
}

// An empty x (no element in a channel): y empty, batch statistics NaN, the reserve spaces 0,
// in both modes and whatever the factor (FinishEmptyChannel).
void SetEmptyForwardOutputs(LoweringContext* ctx, int64_t channels) {
  ctx->SetOutput(0, ctx->Input(0));
  const xla::XlaOp nan = PerChannel(ctx, std::numeric_limits<float>::quiet_NaN(), channels);
  const xla::XlaOp zero = PerChannel(ctx, 0.0f, channels);
  ctx->SetOutput(1, nan);
  ctx->SetOutput(2, nan);
  ctx->SetOutput(3, zero);
  ctx->SetOutput(4, zero);
}

}  // namespace

void BuildForwardHlo(LoweringContext* ctx, const ForwardAttrs& attrs, bool save_inv_std,
                     const fbn::Shape& shape) {
  if (shape.rest() == 0) {
    SetEmptyForwardOutputs(ctx, shape.channels);
    return;
  }
  xla::XlaBuilder* b = ctx->builder();
  const TensorShape x_shape = ctx->InputShape(0);
  const ChannelBroadcast channels(x_shape, attrs.channels_last);
  const xla::XlaOp x = Widen(ctx->Input(0));
  const double count = static_cast<double>(shape.rest());
  const auto constant = [b](double value) { return xla::ConstantR0<double>(b, value); };

  xla::XlaOp mean, variance, xc;
  if (attrs.is_training) {
    mean = channels.SumPerChannel(ctx, x) / constant(count);
    xc = x - channels.Spread(mean);
    variance = channels.SumPerChannel(ctx, xc * xc) / constant(count);
  } else {
    mean = Widen(ctx->Input(3));
    variance = Widen(ctx->Input(4));
    xc = x - channels.Spread(mean);
  }
  const xla::XlaOp inv_std = InverseStd(variance, attrs.epsilon);
  const xla::XlaOp y = xc * channels.Spread(Widen(ctx->Input(1)) * inv_std) +
                       channels.Spread(Widen(ctx->Input(2)));
  ctx->SetOutput(0, xla::ConvertElementType(y, ctx->input_xla_type(0)));

  if (!attrs.is_training) {  // the given statistics, as they came
    ctx->SetOutput(1, ctx->Input(3));
    ctx->SetOutput(2, ctx->Input(4));
    ctx->SetOutput(3, ctx->Input(3));
    ctx->SetOutput(4, ctx->Input(4));
    return;
  }
  const xla::XlaOp unbiased = variance * constant(count > 1 ? count / (count - 1) : 1.0);
  const double f = attrs.exponential_avg_factor;
  xla::XlaOp batch_mean = mean, batch_variance = unbiased;
  if (f != 1.0) {
    batch_mean = constant(1.0 - f) * Widen(ctx->Input(3)) + constant(f) * mean;
    batch_variance = constant(1.0 - f) * Widen(ctx->Input(4)) + constant(f) * unbiased;
  }
  const auto to_float = [](xla::XlaOp value) { return xla::ConvertElementType(value, xla::F32); };
  ctx->SetOutput(1, to_float(batch_mean));
  ctx->SetOutput(2, to_float(batch_variance));
  ctx->SetOutput(3, to_float(mean));
  ctx->SetOutput(4, to_float(save_inv_std ? inv_std : variance));
}

}  // namespace fbn_kernels
}  // namespace tensorflow
