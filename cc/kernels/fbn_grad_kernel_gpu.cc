// GPU registration of the three ops and of synchronized batch norm's two, compiled only into
// CUDA builds. The functor hands device
// buffers to the CUDA core (cc/core/bn_grad_gpu.cu) on the op's stream; no CUDA headers here.
//
// TensorFlow's GPU contract differs from the CPU one in one place: in training mode
// reserve_space_2 is the inverse standard deviation 1/sqrt(var + eps) that the GPU forward
// (cuDNN) saves, not the variance (saved_statistics.h).
#include "cc/core/bn_grad_gpu.h"
#include "cc/kernels/driver_check_gpu.h"
#include "cc/kernels/fbn_grad_kernel.h"
#include "cc/kernels/gpu_stream_gpu.h"
#include "cc/kernels/saved_statistics.h"
#include "cc/kernels/sync_grad_kernel.h"

#if FBN_XLA_FFI
#include "cc/kernels/xla_ffi_targets.h"
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
        SavedInverseStd(GradDevice::kGpu, GradOpVersion(ctx->op_kernel().type_string()),
                        /*release: cuDNN's contract is the same in every one*/ {0, 0});
    stream_executor::Stream* stream =
        ctx->op_device_context() ? ctx->op_device_context()->stream() : nullptr;
    if (stream == nullptr) return errors::Internal("No GPU stream available");
    // A null CUstream would mean CUDA's legacy default stream: the kernels would run unordered
    // with the op's inputs and outputs on TensorFlow's own stream.
    const auto cuda_stream = static_cast<fbn::GpuStream>(CudaStreamOf(stream));
    if (cuda_stream == nullptr) return errors::Internal("No CUDA stream behind the GPU stream");
    Tensor scratch;
    const int64_t bytes = static_cast<int64_t>(fbn::GpuScratchBytes(params.shape));
    TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_INT8, TensorShape({bytes}), &scratch));
    const int error = fbn::BatchNormGradGpu(
        params, tensors, scratch.flat<int8_t>().data(), cuda_stream);
    if (error != 0) {
      return errors::Internal("CUDA error in ", ctx->op_kernel().type_string(), ": ",
                              fbn::GpuErrorString(error));
    }
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
