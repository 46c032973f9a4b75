// The HLO lowering of the gradient: the fallback where the FFI custom call is not available
// (TensorFlow wheels before 2.20, TF_FBN_OPS_XLA_LOWERING=hlo).
//
// Numerics follow the reference (cc/core/bn_grad_reference.cc): inputs are widened to double,
// the per-channel sums and coefficients are formed in double with the reference's grouping, and
// each output is rounded once. Compiled results then agree with the non-jit kernels to about an
// ulp, whatever order XLA's reductions take.
#include <vector>

#include "cc/xla/xla_grad_lowerings.h"

namespace tensorflow {
namespace fbn_kernels {
void BuildGradHlo(LoweringContext* ctx, const GradAttrs& attrs, bool saved_inv_std,
                  const fbn::Shape& shape) {
  xla::XlaBuilder* b = ctx->builder();
  const TensorShape x_shape = ctx->InputShape(1);
  const ChannelBroadcast channels(x_shape, attrs.channels_last);
  const xla::XlaOp dy = Widen(ctx->Input(0));
  const xla::XlaOp xc = Widen(ctx->Input(1)) - channels.Spread(Widen(ctx->Input(3)));
  const xla::XlaOp scale = Widen(ctx->Input(2));
  const xla::XlaOp saved = Widen(ctx->Input(4));
  const xla::XlaOp inv_std =
      saved_inv_std && attrs.is_training ? saved : InverseStd(saved, attrs.epsilon);

  const xla::XlaOp sum_dy = channels.SumPerChannel(ctx, dy);
  const xla::XlaOp sum_dy_xc = channels.SumPerChannel(ctx, dy * xc);
  // Training's scale gradient has the scaling inside the sum, as TensorFlow's kernel.
  const xla::XlaOp scale_backprop =
      attrs.is_training ? channels.SumPerChannel(ctx, dy * (xc * channels.Spread(inv_std)))
                        : sum_dy_xc * inv_std;

  xla::XlaOp x_backprop;
  if (attrs.is_training) {
    // rest == 0 only when x is empty; the quotients below then feed nothing.
    const xla::XlaOp rest = xla::ConstantR0<double>(b, static_cast<double>(shape.rest()));
    x_backprop = TrainingXBackprop(channels, dy, xc, scale, inv_std, sum_dy, sum_dy_xc, rest);
  } else {
    x_backprop = dy * channels.Spread(inv_std * scale);
  }

  ctx->SetOutput(0, xla::ConvertElementType(x_backprop, ctx->input_xla_type(1)));
  ctx->SetOutput(1, xla::ConvertElementType(scale_backprop, xla::F32));
  ctx->SetOutput(2, xla::ConvertElementType(sum_dy, xla::F32));
  SetEmptyReserveOutputs(ctx);
}

void BuildSyncSumsHlo(LoweringContext* ctx, const SyncAttrs& attrs) {
  const TensorShape x_shape = ctx->InputShape(1);
  const ChannelBroadcast channels(x_shape, attrs.channels_last);
  const xla::XlaOp dy = Widen(ctx->Input(0));
  const xla::XlaOp xc = Widen(ctx->Input(1)) - channels.Spread(Widen(ctx->Input(2)));
  ctx->SetOutput(0, channels.SumPerChannel(ctx, dy));
  ctx->SetOutput(1, channels.SumPerChannel(ctx, dy * xc));
}

// Inputs: y_backprop, x, scale, mean, variance, the global sum_dy and sum_dy_xc, the global
// count, the replica's own sum_dy and sum_dy_xc.
void BuildSyncFromSumsHlo(LoweringContext* ctx, const SyncAttrs& attrs) {
  const TensorShape x_shape = ctx->InputShape(1);
  const ChannelBroadcast channels(x_shape, attrs.channels_last);
  const xla::XlaOp xc = Widen(ctx->Input(1)) - channels.Spread(Widen(ctx->Input(3)));
  const xla::XlaOp inv_std = InverseStd(Widen(ctx->Input(4)), attrs.epsilon);
  const xla::XlaOp x_backprop =
      TrainingXBackprop(channels, Widen(ctx->Input(0)), xc, Widen(ctx->Input(2)), inv_std,
                        ctx->Input(5), ctx->Input(6), Widen(ctx->Input(7)));
  ctx->SetOutput(0, xla::ConvertElementType(x_backprop, ctx->input_xla_type(1)));
  ctx->SetOutput(1, xla::ConvertElementType(ctx->Input(9) * inv_std, xla::F32));
  ctx->SetOutput(2, xla::ConvertElementType(ctx->Input(8), xla::F32));
}

xla::XlaOp InverseStd(xla::XlaOp variance, float epsilon) {
  xla::XlaBuilder* b = variance.builder();
  return xla::ConstantR0<double>(b, 1.0) /
         xla::Sqrt(variance + xla::ConstantR0<double>(b, epsilon));
}

xla::XlaOp TrainingXBackprop(const ChannelBroadcast& channels, xla::XlaOp dy, xla::XlaOp xc,
                             xla::XlaOp scale, xla::XlaOp inv_std, xla::XlaOp sum_dy,
                             xla::XlaOp sum_dy_xc, xla::XlaOp count) {
  const xla::XlaOp dy_mean = sum_dy / count;
  const xla::XlaOp coef2 = inv_std * inv_std * (sum_dy_xc / count);
  return channels.Spread(scale * inv_std) *
         ((dy - channels.Spread(dy_mean)) - xc * channels.Spread(coef2));
}

xla::XlaOp EmptyFloatVector(xla::XlaBuilder* builder) {
  return xla::Broadcast(xla::ConstantR0<float>(builder, 0.0f), {0});
}

void SetEmptyReserveOutputs(LoweringContext* ctx) {
  const xla::XlaOp empty = EmptyFloatVector(ctx->builder());
  ctx->SetOutput(3, empty);
  ctx->SetOutput(4, empty);
}

}  // namespace fbn_kernels
}  // namespace tensorflow
