// Our FFI custom-call targets (cc/xla_ffi/) in TensorFlow's XLA: registered when the library
// loads (Host) or when the GPU kernels are (CUDA), and remembered per platform, so the XLA kernels
// emit custom calls only where handlers are there to take them.
#ifndef TF_FBN_OPS_CC_XLA_XLA_FFI_TARGETS_H_
#define TF_FBN_OPS_CC_XLA_XLA_FFI_TARGETS_H_

#include <string>

#if FBN_XLA_FFI
#include <initializer_list>

#include "xla/ffi/api/c_api.h"

namespace tensorflow {
namespace fbn_kernels {

struct XlaFfiTarget {
  const char* name;  // fbn::xla_ffi::kGradTarget and the others
  XLA_FFI_Handler* handler;
};

// Registers every one of our targets for `platform` ("Host" or "CUDA") with the XLA runtime
// inside TensorFlow. On any failure, logs one warning and the HLO lowerings stay in use there.
void RegisterXlaFfiTargets(const char* platform, std::initializer_list<XlaFfiTarget> targets);

}  // namespace fbn_kernels
}  // namespace tensorflow
#endif  // FBN_XLA_FFI

namespace tensorflow {
namespace fbn_kernels {

// Whether our targets are registered for `platform`; otherwise `why` says why not.
bool XlaFfiTargetRegistered(const std::string& platform, std::string* why);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_XLA_XLA_FFI_TARGETS_H_
