#include "cc/xla/xla_ffi_targets.h"

#include <map>
#include <mutex>

#include "tensorflow/core/platform/logging.h"

#if FBN_XLA_FFI
#include "cc/xla_ffi/bn_forward_ffi.h"
#include "cc/xla_ffi/bn_grad_ffi.h"
#include "cc/xla_ffi/sync_grad_ffi.h"
#include "cc/xla_ffi/xla_ffi_api.h"

// Exported by libtensorflow_cc.so.2. Declared here because the header that declares it
// (xla/ffi/ffi_api.h) includes MLIR headers that TensorFlow's wheel does not ship.
namespace xla {
namespace ffi {
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace ffi
}  // namespace xla
#endif

namespace tensorflow {
namespace fbn_kernels {
namespace {

// Platform -> empty when registered, else why not.
std::map<std::string, std::string>& Registrations(std::unique_lock<std::mutex>* lock) {
  static std::mutex mutex;
  static auto* registrations = new std::map<std::string, std::string>;
  *lock = std::unique_lock<std::mutex>(mutex);
  return *registrations;
}

}  // namespace

#if FBN_XLA_FFI
void RegisterXlaFfiTargets(const char* platform, std::initializer_list<XlaFfiTarget> targets) {
  const XLA_FFI_Api* api = xla::ffi::GetXlaFfiApi();
  std::string why;
  for (const XlaFfiTarget& target : targets) {
    XLA_FFI_Error* error =
        xla::ffi::Ffi::RegisterStaticHandler(api, target.name, platform, target.handler);
    if (error != nullptr) {
      why = std::string("XLA refused the custom-call target ") + target.name + ": " +
            xla::ffi::internal::GetErrorMessage(api, error);
      xla::ffi::internal::DestroyError(api, error);
      LOG(WARNING) << "tf-fbn-ops: " << why << " (platform " << platform
                   << "); XLA compiles the ops with the HLO lowerings there";
      break;
    }
  }
  std::unique_lock<std::mutex> lock;
  Registrations(&lock)[platform] = why;
}

namespace {
// The CPU targets go in as the library loads: TensorFlow's XLA is already there.
const bool host_targets_registered = [] {
  RegisterXlaFfiTargets("Host", {{fbn::xla_ffi::kGradTarget, FbnBatchNormGradHost},
                                 {fbn::xla_ffi::kForwardTarget, FbnBatchNormForwardHost},
                                 {fbn::xla_ffi::kSyncSumsTarget, FbnSyncGradSumsHost},
                                 {fbn::xla_ffi::kSyncFromSumsTarget, FbnSyncGradFromSumsHost}});
  return true;
}();
}  // namespace
#endif  // FBN_XLA_FFI

bool XlaFfiTargetRegistered(const std::string& platform, std::string* why) {
#if FBN_XLA_FFI
  std::unique_lock<std::mutex> lock;
  const auto& registrations = Registrations(&lock);
  const auto found = registrations.find(platform);
  if (found == registrations.end()) {
    *why = platform == "CUDA" ? "the GPU kernels are not registered (tf_fbn_ops.gpu_kernel_status())"
                              : "no custom-call target for " + platform;
    return false;
  }
  *why = found->second;
  return why->empty();
#else
  *why = "this build has no XLA FFI handlers (python -m tf_fbn_ops info says why)";
  return false;
#endif
}

}  // namespace fbn_kernels
}  // namespace tensorflow
