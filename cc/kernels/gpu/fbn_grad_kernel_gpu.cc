// GPU registration of the three ops and of synchronized batch norm's two, compiled only into
// CUDA builds. The functor hands device
// buffers to the CUDA core (cc/core/gpu/bn_grad_gpu.cu) on the op's stream; no CUDA headers here.
//
// TensorFlow's GPU contract differs from the CPU one in one place: in training mode
// reserve_space_2 is the inverse standard deviation 1/sqrt(var + eps) that the GPU forward
// (cuDNN) saves, not the variance (saved_statistics.h).
#include "cc/core/gpu/gpu_call.h"
#include "cc/runtime/gpu/driver_check.h"
#include "cc/kernels/fbn_grad_kernel.h"
#include "cc/kernels/gpu/gpu_stream.h"
#include "cc/kernels/saved_statistics.h"
#include "cc/kernels/sync_grad_kernel.h"

#if FBN_XLA_FFI
#include "cc/xla/xla_ffi_targets.h"
#include "cc/xla_ffi/bn_grad_ffi.h"
#include "cc/xla_ffi/sync_grad_ffi.h"
#endif

namespace tensorflow {
namespace fbn_kernels {

// Device tag for the functor; the kernels need no Eigen GPU device.
struct GpuDevice {};

template <typename T>
struct BatchNormGradFunctor<GpuDevice, T> {
  Status operator()(OpKernelContext* ctx, const fbn::Params& cpu_params,
                          const fbn::Tensors<typename CoreType<T>::type>& tensors) {
    fbn::Params params = cpu_params;
    // Synchronized batch norm's halves take the variance on every device (their forward is
    // ours, not cuDNN's).
    params.saved_inv_std =
        params.is_training && params.stage == fbn::Stage::kWhole &&
        SavedInverseStd(GradDevice::kGpu, OpVersion(ctx->op_kernel().type_string()),
                        /*release: cuDNN's contract is the same in every one*/ {0, 0});
    stream_executor::Stream* stream =
        ctx->op_device_context() ? ctx->op_device_context()->stream() : nullptr;
    if (stream == nullptr) return errors::Internal("No GPU stream available");
    Tensor scratch;
    Status scratch_status;
    const fbn::GpuCallError error = fbn::RunGpuCall(
        params, tensors, static_cast<fbn::GpuStream>(CudaStreamOf(stream)),
        [&](size_t bytes) -> void* {
          scratch_status = ctx->allocate_temp(
              DT_INT8, TensorShape({static_cast<int64_t>(bytes)}), &scratch);
          return scratch_status.ok() ? scratch.flat<int8_t>().data() : nullptr;
        });
    TF_RETURN_IF_ERROR(scratch_status);  // TensorFlow's own words for an allocation failure
    if (error) return errors::Internal(ctx->op_kernel().type_string(), ": ", error.message);
    return OkStatus();
  }
};

template <typename T>
using GpuGradOp = FbnFusedBatchNormGradOp<GpuDevice, T>;

// The registrations are static locals of this function, so they happen only if it runs. XLA's
// CUDA custom-call target goes with them: where the kernels cannot run, XLA on the GPU keeps
// the HLO lowering.
void RegisterGpuKernels() {
  FBN_REGISTER_GRAD_KERNELS(DEVICE_GPU, GpuGradOp);
  FBN_REGISTER_SYNC_KERNELS(DEVICE_GPU, GpuDevice);
#if FBN_XLA_FFI
  RegisterXlaFfiTargets("CUDA", {{fbn::xla_ffi::kGradTarget, FbnBatchNormGradCuda},
                                 {fbn::xla_ffi::kSyncSumsTarget, FbnSyncGradSumsCuda},
                                 {fbn::xla_ffi::kSyncFromSumsTarget, FbnSyncGradFromSumsCuda}});
#endif
}

// At load: a driver too old for the CUDA code would fail every GPU call, so then the kernels
// stay unregistered (TensorFlow places the ops on the CPU) and the reason is said once.
const bool gpu_kernels_registered = [] {
  const GpuDriverVerdict& driver = ThisMachineGpuDriver();
  if (driver.register_kernels) {
    RegisterGpuKernels();
  } else {
    LOG(WARNING) << "tf-fbn-ops: " << driver.message;
  }
  return driver.register_kernels;
}();

}  // namespace fbn_kernels
}  // namespace tensorflow
