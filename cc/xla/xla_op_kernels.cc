// The XLA kernels of every op (the gradients, the forward ops, synchronized batch norm's two
// backward ops), on XLA's CPU and GPU JIT devices. Under jit_compile=True and in XLA clusters
// each op compiles into a custom call of our FFI handlers, which run the same CPU and CUDA cores
// as the non-jit kernels, or, where those are not available, into an HLO lowering
// (xla_grad_lowerings.h and xla_forward_lowerings.h say which and why). A kernel reads the attrs
// and validates the shapes as the non-jit kernel does (errors surface when the function is
// compiled), then hands the op to its lowering.
//
// One file for all of them: tf2xla's xla_op_kernel.h, which an XlaOpKernel needs, takes about
// 40 s to compile, several times longer than anything else here; the lowerings see the op
// through lowering_context.h instead.
//
// Registered with REGISTER_KERNEL_BUILDER on the XLA JIT devices rather than REGISTER_XLA_OP:
// TensorFlow turns REGISTER_XLA_OP entries into kernels once, at its first op, so a library
// loaded after that would have its lowering silently ignored.
#include <string>

#include "cc/kernels/fbn_forward_validation.h"
#include "cc/kernels/fbn_grad_registration.h"
#include "cc/kernels/fbn_grad_validation.h"
#include "cc/kernels/saved_statistics.h"
#include "cc/kernels/sync_grad_validation.h"
#include "cc/xla/kernel_lowering_context.h"
#include "cc/xla/xla_forward_lowerings.h"
#include "cc/xla/xla_grad_lowerings.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"

namespace tensorflow {
namespace fbn_kernels {
namespace {

// Whether reserve_space_2 holds 1/sqrt(var + eps) rather than the variance for the op's version
// on this XLA device: what TensorFlow's own forward compiled there hands its gradient
// (saved_statistics.h). Our forward saves it so and our gradient reads it so.
bool SavedInverseStdOnDevice(OpKernelConstruction* ctx, const std::string& op) {
  const bool on_gpu = ctx->device_type().type_string() == DEVICE_GPU_XLA_JIT;
  return SavedInverseStd(on_gpu ? GradDevice::kXlaGpu : GradDevice::kXlaCpu, OpVersion(op),
                         RunningTensorFlow());
}

// FbnFusedBatchNormGrad, V2, V3: the same attrs and checks as the non-jit kernels, channels-first
// inference, an x-shaped x_backprop for empty 5-D x, outputs 3 and 4 empty [0].
class FbnBatchNormGradXlaOp : public XlaOpKernel {
 public:
  explicit FbnBatchNormGradXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    const Status status = ReadGradAttrs(ctx, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
    saved_inv_std_ = SavedInverseStdOnDevice(ctx, type_string());
    device_type_ = ctx->device_type();
  }

  void Compile(XlaOpKernelContext* ctx) override {
    fbn::Shape shape;
    const Status valid =
        ValidateGradInputs(ctx->InputShape(0), ctx->InputShape(1), ctx->InputShape(2),
                           ctx->InputShape(3), ctx->InputShape(4), attrs_, &shape);
    OP_REQUIRES(ctx, valid.ok(), valid);
    KernelLoweringContext lowering(ctx);
    std::string why_hlo;
    if (ChooseXlaGradPath(device_type_, &why_hlo) == XlaGradPath::kCustomCall) {
      BuildGradCustomCall(&lowering, attrs_, saved_inv_std_);
    } else {
      VLOG(1) << "tf-fbn-ops: " << name() << " compiles to HLO: " << why_hlo;
      BuildGradHlo(&lowering, attrs_, saved_inv_std_, shape);
    }
  }

 private:
  GradAttrs attrs_;
  bool saved_inv_std_ = false;
  DeviceType device_type_{DEVICE_CPU_XLA_JIT};
};

// FbnFusedBatchNorm, V2, V3. What training saves in reserve_space_2 is what the gradient
// compiled on the same device reads (SavedInverseStdOnDevice). V3's reserve_space_3 is float
// [0], as TensorFlow's compiled forward makes it (the non-jit CPU kernel's is a scalar 0; no
// gradient reads either).
class FbnBatchNormForwardXlaOp : public XlaOpKernel {
 public:
  explicit FbnBatchNormForwardXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    const Status status = ReadForwardAttrs(ctx, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
    save_inv_std_ = SavedInverseStdOnDevice(ctx, type_string());
    device_type_ = ctx->device_type();
  }

  void Compile(XlaOpKernelContext* ctx) override {
    fbn::Shape shape;
    const Status valid =
        ValidateForwardInputs(ctx->InputShape(0), ctx->InputShape(1), ctx->InputShape(2),
                              ctx->InputShape(3), ctx->InputShape(4), attrs_, &shape);
    OP_REQUIRES(ctx, valid.ok(), valid);
    KernelLoweringContext lowering(ctx);
    std::string why_hlo;
    if (ChooseXlaForwardPath(device_type_, &why_hlo) == XlaGradPath::kCustomCall) {
      BuildForwardCustomCall(&lowering, attrs_, save_inv_std_);
    } else {
      VLOG(1) << "tf-fbn-ops: " << name() << " compiles to HLO: " << why_hlo;
      BuildForwardHlo(&lowering, attrs_, save_inv_std_, shape);
    }
    if (ctx->num_outputs() == 6) {
      ctx->SetOutput(5, EmptyFloatVector(ctx->builder()));
    }
  }

 private:
  ForwardAttrs attrs_;
  bool save_inv_std_ = false;
  DeviceType device_type_{DEVICE_CPU_XLA_JIT};
};

// FbnSyncBatchNormGradSums (cc/ops/fbn_sync_ops.cc).
class SyncGradSumsXlaOp : public XlaOpKernel {
 public:
  explicit SyncGradSumsXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    const Status status = ReadSyncAttrs(ctx, /*has_epsilon=*/false, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
    device_type_ = ctx->device_type();
  }

  void Compile(XlaOpKernelContext* ctx) override {
    fbn::Shape shape;
    const TensorShape mean = ctx->InputShape(2);
    const Status valid = ValidateSyncInputs(ctx->InputShape(0), ctx->InputShape(1),
                                            {{"mean", &mean}}, attrs_, &shape);
    OP_REQUIRES(ctx, valid.ok(), valid);
    KernelLoweringContext lowering(ctx);
    std::string why_hlo;
    if (ChooseXlaGradPath(device_type_, &why_hlo) == XlaGradPath::kCustomCall) {
      BuildSyncSumsCustomCall(&lowering, attrs_);
    } else {
      BuildSyncSumsHlo(&lowering, attrs_);
    }
  }

 private:
  SyncAttrs attrs_;
  DeviceType device_type_{DEVICE_CPU_XLA_JIT};
};

// FbnSyncBatchNormGradFromSums. The count is a run-time value under XLA (the all-reduce's): it
// is checked here where it is a compile-time constant; otherwise the CPU custom call checks it
// when it runs, the CUDA one makes every output NaN for a count below the replica's own
// elements, and the HLO lowering gives wrong gradients.
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
      BuildSyncFromSumsCustomCall(&lowering, attrs_);
    } else {
      BuildSyncFromSumsHlo(&lowering, attrs_);
    }
  }

 private:
  SyncAttrs attrs_;
  DeviceType device_type_{DEVICE_CPU_XLA_JIT};
};

// One kernel serves every element type: both paths take the types from the inputs.
template <typename T>
using XlaGradOp = FbnBatchNormGradXlaOp;
template <typename T>
using XlaForwardOp = FbnBatchNormForwardXlaOp;

FBN_REGISTER_GRAD_KERNELS(DEVICE_CPU_XLA_JIT, XlaGradOp);
FBN_REGISTER_GRAD_KERNELS(DEVICE_GPU_XLA_JIT, XlaGradOp);
FBN_REGISTER_VERSIONS("FbnFusedBatchNorm", DEVICE_CPU_XLA_JIT, XlaForwardOp);
FBN_REGISTER_VERSIONS("FbnFusedBatchNorm", DEVICE_GPU_XLA_JIT, XlaForwardOp);

// The count is an XLA operand like any other, a run-time value: no host memory, no
// compile-time constant required.
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
