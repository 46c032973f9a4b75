// XLA registration of the three ops: under jit_compile=True (and in XLA clusters) the op is
// lowered to HLO instead of calling the CPU or CUDA core. Same semantics as those kernels:
// the same attrs and shape validation (errors surface when the function is compiled),
// channels-first inference, an x-shaped x_backprop for empty 5-D x, outputs 3 and 4 empty [0].
//
// Numerics follow the reference (cc/core/bn_grad_reference.cc): inputs are widened to double,
// the per-channel sums and coefficients are formed in double with the reference's grouping, and
// each output is rounded once. Compiled results then agree with the non-jit kernels to about an
// ulp, whatever order XLA's reductions take.
//
// Registered with REGISTER_KERNEL_BUILDER on the XLA JIT devices rather than REGISTER_XLA_OP:
// TensorFlow turns REGISTER_XLA_OP entries into kernels once, at its first op, so a library
// loaded after that would have its lowering silently ignored.
#include "cc/kernels/fbn_grad_registration.h"
#include "cc/kernels/fbn_grad_validation.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"

// XLA's builder moved twice: under tensorflow/compiler/ up to TF 2.13 or so, then xla/client,
// then xla/hlo/builder (setup.py checks that one of them is there).
#if __has_include("xla/hlo/builder/xla_builder.h")
#include "xla/hlo/builder/xla_builder.h"
#elif __has_include("xla/client/xla_builder.h")
#include "xla/client/xla_builder.h"
#else
#include "tensorflow/compiler/xla/client/xla_builder.h"
#endif

namespace tensorflow {
namespace fbn_kernels {
namespace {

// The per-channel vectors (shape [C]) spread along x's channel dimension.
class ChannelBroadcast {
 public:
  ChannelBroadcast(const TensorShape& x, int channel_dim)
      : channel_dim_(channel_dim) {
    for (int d = 0; d < x.dims(); ++d) {
      dims_.push_back(x.dim_size(d));
      if (d != channel_dim) reduce_dims_.push_back(d);
    }
  }

  xla::XlaOp Spread(xla::XlaOp per_channel) const {
    return xla::BroadcastInDim(per_channel, dims_, {channel_dim_});
  }

  // Sum over every dimension but the channel one, in double.
  xla::XlaOp SumPerChannel(XlaOpKernelContext* ctx, xla::XlaOp values) const {
    return xla::Reduce(values, xla::ConstantR0<double>(ctx->builder(), 0.0),
                       *ctx->GetOrCreateAdd(DT_DOUBLE), reduce_dims_);
  }

 private:
  std::vector<int64_t> dims_;
  std::vector<int64_t> reduce_dims_;
  int64_t channel_dim_;
};

xla::XlaOp Widen(xla::XlaOp value) { return xla::ConvertElementType(value, xla::F64); }

class FbnBatchNormGradXlaOp : public XlaOpKernel {
 public:
  explicit FbnBatchNormGradXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    const Status status = ReadGradAttrs(ctx, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
    // TensorFlow's GPU contract: in training, reserve_space_2 is the saved inverse std.
    saved_inv_std_ = ctx->device_type().type_string() == DEVICE_GPU_XLA_JIT;
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const TensorShape x_shape = ctx->InputShape(1);
    fbn::Shape shape;
    const Status valid =
        ValidateGradInputs(ctx->InputShape(0), x_shape, ctx->InputShape(2), ctx->InputShape(3),
                           ctx->InputShape(4), attrs_, &shape);
    OP_REQUIRES(ctx, valid.ok(), valid);

    xla::XlaBuilder* b = ctx->builder();
    const ChannelBroadcast channels(x_shape, attrs_.channels_last ? x_shape.dims() - 1 : 1);
    const xla::XlaOp dy = Widen(ctx->Input(0));
    const xla::XlaOp xc = Widen(ctx->Input(1)) - channels.Spread(Widen(ctx->Input(3)));
    const xla::XlaOp scale = Widen(ctx->Input(2));
    const xla::XlaOp saved = Widen(ctx->Input(4));
    const xla::XlaOp inv_std =
        saved_inv_std_ && attrs_.is_training
            ? saved
            : xla::ConstantR0<double>(b, 1.0) /
                  xla::Sqrt(saved + xla::ConstantR0<double>(b, attrs_.epsilon));

    const xla::XlaOp sum_dy = channels.SumPerChannel(ctx, dy);
    const xla::XlaOp sum_dy_xc = channels.SumPerChannel(ctx, dy * xc);
    // Training's scale gradient has the scaling inside the sum, as TensorFlow's kernel.
    const xla::XlaOp scale_backprop =
        attrs_.is_training ? channels.SumPerChannel(ctx, dy * (xc * channels.Spread(inv_std)))
                           : sum_dy_xc * inv_std;

    xla::XlaOp x_backprop;
    if (attrs_.is_training) {
      // rest == 0 only when x is empty; the quotients below then feed nothing.
      const xla::XlaOp rest = xla::ConstantR0<double>(b, static_cast<double>(shape.rest()));
      const xla::XlaOp dy_mean = sum_dy / rest;
      const xla::XlaOp coef2 = inv_std * inv_std * (sum_dy_xc / rest);
      x_backprop = channels.Spread(scale * inv_std) *
                   ((dy - channels.Spread(dy_mean)) - xc * channels.Spread(coef2));
    } else {
      x_backprop = dy * channels.Spread(inv_std * scale);
    }

    ctx->SetOutput(0, xla::ConvertElementType(x_backprop, ctx->input_xla_type(1)));
    ctx->SetOutput(1, xla::ConvertElementType(scale_backprop, xla::F32));
    ctx->SetOutput(2, xla::ConvertElementType(sum_dy, xla::F32));
    // Outputs 3 and 4 exist for compatibility only: empty [0], as TensorFlow's CPU kernel.
    const xla::XlaOp empty = xla::Broadcast(xla::ConstantR0<float>(b, 0.0f), {0});
    ctx->SetOutput(3, empty);
    ctx->SetOutput(4, empty);
  }

 private:
  GradAttrs attrs_;
  bool saved_inv_std_ = false;
};

// One lowering serves every element type: the HLO is built from the inputs' own types.
template <typename T>
using XlaGradOp = FbnBatchNormGradXlaOp;

FBN_REGISTER_GRAD_KERNELS(DEVICE_CPU_XLA_JIT, XlaGradOp);
FBN_REGISTER_GRAD_KERNELS(DEVICE_GPU_XLA_JIT, XlaGradOp);

}  // namespace
}  // namespace fbn_kernels
}  // namespace tensorflow
