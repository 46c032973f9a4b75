// The forward's custom-call path: the op compiles into one call of our FFI target
// (cc/xla_ffi/bn_forward_ffi.h), which runs the core's CPU forward on XLA's thread pool.
#include <string>
#include <vector>

#include "cc/xla/xla_forward_lowerings.h"
#include "cc/xla_ffi/bn_forward_ffi.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"

namespace tensorflow {
namespace fbn_kernels {

XlaGradPath ChooseXlaForwardPath(const DeviceType& device_type, std::string* why) {
  if (device_type.type_string() == DEVICE_GPU_XLA_JIT) {
    *why = "the forward's CUDA kernels have not run on a GPU yet";
    return XlaGradPath::kHlo;
  }
  return ChooseXlaGradPath(device_type, why);
}

void BuildForwardCustomCall(LoweringContext* ctx, const ForwardAttrs& attrs,
                            bool save_inv_std) {
  const FfiResult y{ctx->input_xla_type(0), ctx->InputShape(0)};
  const FfiResult channel{xla::F32, ctx->InputShape(1)};
  const std::vector<xla::XlaOp> outputs = CallFfiTarget(
      ctx, fbn::xla_ffi::kForwardTarget, {0, 1, 2, 3, 4}, {y, channel, channel, channel, channel},
      FfiAttributes()
          .Bool("channels_last", attrs.channels_last)
          .F32("epsilon", attrs.epsilon)
          .F32("exponential_avg_factor", attrs.exponential_avg_factor)
          .Bool("is_training", attrs.is_training)
          .Bool("save_inv_std", save_inv_std));
  for (size_t i = 0; i < outputs.size(); ++i) ctx->SetOutput(static_cast<int>(i), outputs[i]);
}

}  // namespace fbn_kernels
}  // namespace tensorflow
