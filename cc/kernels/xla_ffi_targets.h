// Our FFI custom-call targets (cc/xla_ffi/) in TensorFlow's XLA: registered when the library
// loads (Host) or when the GPU kernels are (CUDA), and remembered per platform, so the XLA kernel
// emits a custom call only where a handler is there to take it.
#ifndef TF_FBN_OPS_CC_KERNELS_XLA_FFI_TARGETS_H_
#define TF_FBN_OPS_CC_KERNELS_XLA_FFI_TARGETS_H_

#include <string>

#if FBN_XLA_FFI
#include "xla/ffi/api/c_api.h"

namespace tensorflow {
namespace fbn_kernels {

// Registers `handler` as fbn::xla_ffi::kGradTarget for `platform` ("Host" or "CUDA") with the
// XLA runtime inside TensorFlow. On failure, logs one warning and the HLO lowering stays in use.
void RegisterXlaFfiTarget(const char* platform, XLA_FFI_Handler* handler);

}  // namespace fbn_kernels
}  // namespace tensorflow
#endif  // FBN_XLA_FFI

namespace tensorflow {
namespace fbn_kernels {

// Whether our target is registered for `platform`; otherwise `why` says why not.
bool XlaFfiTargetRegistered(const std::string& platform, std::string* why);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_XLA_FFI_TARGETS_H_
