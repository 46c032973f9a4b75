// XLA kernels of synchronized batch norm's two backward ops (cc/ops/fbn_sync_ops.cc), on XLA's
// CPU and GPU JIT devices, with the gradient ops' two paths (xla_grad_lowerings.h):
//   - custom calls of our FFI targets (cc/xla_ffi/sync_grad_ffi.h): the core's stages inside the
//     compiled program, with the non-jit kernels' bits;
//   - HLO lowerings with the gradient lowering's numerics (inputs widened to double, sums and
//     coefficients in double, each output rounded once): within about an ulp of the kernels,
//     the sums' bits XLA's reduction order's, the same on every replica that runs the same
//     program.
//
// Checks are the kernels' (sync_grad_validation.*) at compile time. The count is a run-time
// value under XLA: it is checked where it is a compile-time constant; otherwise the CPU custom
// call checks it when it runs, the CUDA one makes every output NaN for a count below the
// replica's own elements, and the HLO lowering gives wrong gradients.
#include <string>
#include <vector>

#include "cc/kernels/sync_grad_validation.h"
#include "cc/xla/kernel_lowering_context.h"
#include "cc/xla/xla_grad_lowerings.h"
#include "cc/xla_ffi/sync_grad_ffi.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"

namespace tensorflow {
namespace fbn_kernels {
namespace {

class SyncGradSumsXlaOp : public XlaOpKernel {
 public:
  explicit SyncGradSumsXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    const Status status = ReadSyncAttrs(ctx, /*has_epsilon=*/false, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
    device_type_ = ctx->device_type();
  }

  void Compile(XlaOpKernelContext* ctx) override {
    fbn::Shape shape;
    const TensorShape mean_shape = ctx->InputShape(2);
    const Status valid = ValidateSyncInputs(ctx->InputShape(0), ctx->InputShape(1),
                                            {{"mean", &mean_shape}}, attrs_, &shape);
    OP_REQUIRES(ctx, valid.ok(), valid);
    KernelLoweringContext lowering(ctx);
    std::string why_hlo;
    if (ChooseXlaGradPath(device_type_, &why_hlo) == XlaGradPath::kCustomCall) {
      const FfiResult sums{xla::F64, mean_shape};
      const std::vector<xla::XlaOp> outputs =
          CallFfiTarget(&lowering, fbn::xla_ffi::kSyncSumsTarget, {0, 1, 2}, {sums, sums},
                        FfiAttributes().Bool("channels_last", attrs_.channels_last));
      for (size_t i = 0; i < outputs.size(); ++i) ctx->SetOutput(static_cast<int>(i), outputs[i]);
      return;
    }
    const TensorShape x_shape = ctx->InputShape(1);
    const ChannelBroadcast channels(x_shape, attrs_.channels_last ? x_shape.dims() - 1 : 1);
    const xla::XlaOp dy = Widen(ctx->Input(0));
    const xla::XlaOp xc = Widen(ctx->Input(1)) - channels.Spread(Widen(ctx->Input(2)));
    ctx->SetOutput(0, channels.SumPerChannel(&lowering, dy));
    ctx->SetOutput(1, channels.SumPerChannel(&lowering, dy * xc));
  }

 private:
  SyncAttrs attrs_;
  DeviceType device_type_{DEVICE_CPU_XLA_JIT};
};

class SyncGradFromSumsXlaOp : public XlaOpKernel {
 public:
  explicit SyncGradFromSumsXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    const Status status = ReadSyncAttrs(ctx, /*has_epsilon=*/true, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
    device_type_ = ctx->device_type();
  }

  void Compile(XlaOpKernelContext* ctx) override {
    fbn::Shape shape;
    const TensorShape scale = ctx->InputShape(2), mean = ctx->InputShape(3),
                      variance = ctx->InputShape(4), sum_dy = ctx->InputShape(5),
                      sum_dy_xc = ctx->InputShape(6), count_shape = ctx->InputShape(7),
                      replica_sum_dy = ctx->InputShape(8), replica_sum_dy_xc = ctx->InputShape(9);
    const Status valid = ValidateSyncInputs(
        ctx->InputShape(0), ctx->InputShape(1),
        {{"scale", &scale}, {"mean", &mean}, {"variance", &variance}, {"sum_dy", &sum_dy},
         {"sum_dy_xc", &sum_dy_xc}, {"replica_sum_dy", &replica_sum_dy},
         {"replica_sum_dy_xc", &replica_sum_dy_xc}},
        attrs_, &shape);
    OP_REQUIRES(ctx, valid.ok(), valid);
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(count_shape),
                errors::InvalidArgument("count must be a scalar, got shape ",
                                        count_shape.DebugString()));
    int64_t constant_count;
    if (ctx->ConstantInputAsIntScalar(7, &constant_count).ok()) {
      Tensor count(DT_INT64, TensorShape({}));
      count.scalar<int64_t>()() = constant_count;
      const Status counted = ValidateGlobalCount(count, shape, &constant_count);
      OP_REQUIRES(ctx, counted.ok(), counted);
    }
    KernelLoweringContext lowering(ctx);
    std::string why_hlo;
    if (ChooseXlaGradPath(device_type_, &why_hlo) == XlaGradPath::kCustomCall) {
      const FfiResult channel{xla::F32, scale};
      const std::vector<xla::XlaOp> outputs = CallFfiTarget(
          &lowering, fbn::xla_ffi::kSyncFromSumsTarget, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
          {{ctx->input_xla_type(1), ctx->InputShape(1)}, channel, channel},
          FfiAttributes()
              .Bool("channels_last", attrs_.channels_last)
              .F32("epsilon", attrs_.epsilon));
      for (size_t i = 0; i < outputs.size(); ++i) ctx->SetOutput(static_cast<int>(i), outputs[i]);
      return;
    }

    const TensorShape x_shape = ctx->InputShape(1);
    const ChannelBroadcast channels(x_shape, attrs_.channels_last ? x_shape.dims() - 1 : 1);
    const xla::XlaOp xc = Widen(ctx->Input(1)) - channels.Spread(Widen(ctx->Input(3)));
    const xla::XlaOp inv_std = InverseStd(Widen(ctx->Input(4)), attrs_.epsilon);
    const xla::XlaOp global_dy = ctx->Input(5);
    const xla::XlaOp global_dy_xc = ctx->Input(6);
    const xla::XlaOp x_backprop =
        TrainingXBackprop(channels, Widen(ctx->Input(0)), xc, Widen(ctx->Input(2)), inv_std,
                          global_dy, global_dy_xc, Widen(ctx->Input(7)));
    ctx->SetOutput(0, xla::ConvertElementType(x_backprop, ctx->input_xla_type(1)));
    ctx->SetOutput(1, xla::ConvertElementType(ctx->Input(9) * inv_std, xla::F32));
    ctx->SetOutput(2, xla::ConvertElementType(ctx->Input(8), xla::F32));
  }

 private:
  SyncAttrs attrs_;
  DeviceType device_type_{DEVICE_CPU_XLA_JIT};
};

// The count is an XLA operand like any other, a run-time value (the all-reduce's): no host
// memory, no compile-time constant required.
#define FBN_REGISTER_SYNC_XLA_KERNELS_FOR(DEVICE_NAME, T)                                 \
  REGISTER_KERNEL_BUILDER(Name("FbnSyncBatchNormGradSums")                                \
                              .Device(DEVICE_NAME)                                        \
                              .TypeConstraint<T>("T")                                     \
                              .TypeConstraint<float>("U"),                                \
                          SyncGradSumsXlaOp);                                             \
  REGISTER_KERNEL_BUILDER(Name("FbnSyncBatchNormGradFromSums")                            \
                              .Device(DEVICE_NAME)                                        \
                              .TypeConstraint<T>("T")                                     \
                              .TypeConstraint<float>("U"),                                \
                          SyncGradFromSumsXlaOp)

#define FBN_REGISTER_SYNC_XLA_KERNELS(DEVICE_NAME)                                        \
  FBN_REGISTER_SYNC_XLA_KERNELS_FOR(DEVICE_NAME, float);                                  \
  FBN_REGISTER_SYNC_XLA_KERNELS_FOR(DEVICE_NAME, Eigen::half);                            \
  FBN_REGISTER_SYNC_XLA_KERNELS_FOR(DEVICE_NAME, Eigen::bfloat16)

FBN_REGISTER_SYNC_XLA_KERNELS(DEVICE_CPU_XLA_JIT);
FBN_REGISTER_SYNC_XLA_KERNELS(DEVICE_GPU_XLA_JIT);

}  // namespace
}  // namespace fbn_kernels
}  // namespace tensorflow
