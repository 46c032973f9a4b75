// Which way an op compiles under XLA: a custom call of our FFI handlers or the HLO lowering
// (xla_grad_lowerings.h, xla_forward_lowerings.h). Its own header, so that the auto-clustering
// pass can ask without reading XLA's builder.
#ifndef TF_FBN_OPS_CC_XLA_XLA_PATH_H_
#define TF_FBN_OPS_CC_XLA_XLA_PATH_H_

#include <string>

#include "tensorflow/core/framework/types.h"

namespace tensorflow {
namespace fbn_kernels {

// What compiles an op, as `python -m tf_fbn_ops info` and the tests name it.
enum class XlaGradPath { kCustomCall, kHlo };

// The path for gradient ops compiled on `device_type` (XLA_CPU_JIT or XLA_GPU_JIT). kCustomCall
// unless this build has no FFI handlers, they could not be registered for that platform, the
// GPU kernels are off (driver too old), or TF_FBN_OPS_XLA_LOWERING=hlo asks for the HLO
// lowering. `why` says why the HLO path was taken (empty for the custom call).
XlaGradPath ChooseXlaGradPath(const DeviceType& device_type, std::string* why);

// The gradients' choice, except on a GPU: the forward's CUDA kernels have not yet run on one,
// so there it compiles to the HLO lowering.
XlaGradPath ChooseXlaForwardPath(const DeviceType& device_type, std::string* why);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_XLA_XLA_PATH_H_
