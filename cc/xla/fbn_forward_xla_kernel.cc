// XLA registration of the forward ops (FbnFusedBatchNorm, V2, V3): under jit_compile=True (and in
// XLA clusters) each compiles into a custom call of our FFI handler, which runs the core's CPU
// forward as the non-jit kernel does, or into the HLO lowering (xla_forward_lowerings.h says
// which and why). Same attrs and shape validation as the non-jit kernels (errors surface when
// the function is compiled).
//
// What training saves in reserve_space_2 is what the gradient compiled on the same device reads
// (SavedInverseStd): the biased variance on XLA's CPU, and on its GPU as TensorFlow's compiled
// forward of the same version writes it. V3's reserve_space_3 is float [0], as TensorFlow's
// compiled forward makes it (the non-jit CPU kernel's is a scalar 0; no gradient reads either).
//
// Registered with REGISTER_KERNEL_BUILDER on the XLA JIT devices, as the gradients' XLA kernel
// (fbn_grad_xla_kernel.cc says why).
#include <string>

#include "cc/kernels/fbn_forward_validation.h"
#include "cc/kernels/fbn_grad_registration.h"
#include "cc/kernels/saved_statistics.h"
#include "cc/xla/kernel_lowering_context.h"
#include "cc/xla/xla_forward_lowerings.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"

namespace tensorflow {
namespace fbn_kernels {
namespace {

class FbnBatchNormForwardXlaOp : public XlaOpKernel {
 public:
  explicit FbnBatchNormForwardXlaOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    const Status status = ReadForwardAttrs(ctx, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
    const bool on_gpu = ctx->device_type().type_string() == DEVICE_GPU_XLA_JIT;
    save_inv_std_ = SavedInverseStd(on_gpu ? GradDevice::kXlaGpu : GradDevice::kXlaCpu,
                                    OpVersion(type_string()), RunningTensorFlow());
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

// One kernel serves every element type: both paths take the types from the inputs.
template <typename T>
using XlaForwardOp = FbnBatchNormForwardXlaOp;

FBN_REGISTER_VERSIONS("FbnFusedBatchNorm", DEVICE_CPU_XLA_JIT, XlaForwardOp);
FBN_REGISTER_VERSIONS("FbnFusedBatchNorm", DEVICE_GPU_XLA_JIT, XlaForwardOp);

}  // namespace
}  // namespace fbn_kernels
}  // namespace tensorflow
