// XLA registration of the three ops: under jit_compile=True (and in XLA clusters) each op
// compiles into a custom call of our FFI handlers, which run the same CPU and CUDA cores as the
// non-jit kernels, or, where those are not available, into the HLO lowering
// (xla_grad_lowerings.h says which and why). Same semantics as the non-jit kernels either way:
// the same attrs and shape validation (errors surface when the function is compiled),
// channels-first inference, an x-shaped x_backprop for empty 5-D x, outputs 3 and 4 empty [0].
//
// Registered with REGISTER_KERNEL_BUILDER on the XLA JIT devices rather than REGISTER_XLA_OP:
// TensorFlow turns REGISTER_XLA_OP entries into kernels once, at its first op, so a library
// loaded after that would have its lowering silently ignored.
#include <string>

#include "cc/kernels/fbn_grad_registration.h"
#include "cc/kernels/fbn_grad_validation.h"
#include "cc/kernels/saved_statistics.h"
#include "cc/xla/kernel_lowering_context.h"
#include "cc/xla/xla_grad_lowerings.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"

namespace tensorflow {
namespace fbn_kernels {
namespace {

class FbnBatchNormGradXlaOp : public XlaOpKernel {
 public:
  explicit FbnBatchNormGradXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    const Status status = ReadGradAttrs(ctx, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
    // What TensorFlow's own forward, compiled in the same program, hands this op.
    const bool on_gpu = ctx->device_type().type_string() == DEVICE_GPU_XLA_JIT;
    saved_inv_std_ = SavedInverseStd(on_gpu ? GradDevice::kXlaGpu : GradDevice::kXlaCpu,
                                     OpVersion(type_string()), RunningTensorFlow());
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

// One kernel serves every element type: both paths take the types from the inputs.
template <typename T>
using XlaGradOp = FbnBatchNormGradXlaOp;

FBN_REGISTER_GRAD_KERNELS(DEVICE_CPU_XLA_JIT, XlaGradOp);
FBN_REGISTER_GRAD_KERNELS(DEVICE_GPU_XLA_JIT, XlaGradOp);

}  // namespace
}  // namespace fbn_kernels
}  // namespace tensorflow
