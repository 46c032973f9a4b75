// Device copies of one forward case for the GPU core test (real GPU or the host emulator):
// allocation, garbage in every output and the scratch before each run, one call, copies back.
#ifndef TF_FBN_OPS_CC_TESTS_GPU_FORWARD_CASE_H_
#define TF_FBN_OPS_CC_TESTS_GPU_FORWARD_CASE_H_

#include <cuda_runtime.h>

#include <vector>

#include "cc/core/bn_forward.h"
#include "cc/core/gpu/bn_forward_gpu.h"
#include "cc/tests/forward_test_util.h"
#include "cc/tests/gpu_device_case.h"

namespace fbn {
namespace testing {

template <typename T>
class ForwardDeviceCase {
 public:
  ForwardDeviceCase(const ForwardInputs<T>& in, const ForwardParams& params)
      : n_(in.x.size()), c_(in.scale.size()), scratch_bytes_(GpuForwardScratchBytes(params)) {
    ok_ = DeviceAlloc(&x_, n_) && DeviceAlloc(&y_, n_) && DeviceAlloc(&channels_, 8 * c_) &&
          DeviceAlloc(&scratch_, scratch_bytes_);
    ok_ = ok_ && CopyIn(x_, in.x.data(), n_) && CopyIn(channels_, in.scale.data(), c_) &&
          CopyIn(channels_ + c_, in.offset.data(), c_) &&
          CopyIn(channels_ + 2 * c_, in.mean.data(), c_) &&
          CopyIn(channels_ + 3 * c_, in.variance.data(), c_);
  }
  ForwardDeviceCase(const ForwardDeviceCase&) = delete;
  ForwardDeviceCase& operator=(const ForwardDeviceCase&) = delete;
  ~ForwardDeviceCase() {
    for (void* p : {static_cast<void*>(x_), static_cast<void*>(y_),
                    static_cast<void*>(channels_), static_cast<void*>(scratch_)}) {
      cudaFree(p);
    }
  }

  // Garbage into the outputs and the scratch, the core on the legacy default stream, wait,
  // copy back. In place, y is x's buffer (x is then overwritten: one run per case).
  bool Run(const ForwardParams& params, ForwardOutputs<T>* out, bool in_place = false) {
    if (!ok_) return false;
    if (!in_place && !CudaOk(cudaMemset(y_, kGarbageByte, n_ * sizeof(T) + 1), "garbage")) {
      return false;
    }
    if (!CudaOk(cudaMemset(channels_ + 4 * c_, kGarbageByte, 4 * c_ * sizeof(float) + 1),
                "garbage") ||
        !CudaOk(cudaMemset(scratch_, kGarbageByte, scratch_bytes_ + 1), "garbage")) {
      return false;
    }
    ForwardTensors<T> t;
    t.x = x_;
    t.scale = channels_;
    t.offset = channels_ + c_;
    t.mean = channels_ + 2 * c_;
    t.variance = channels_ + 3 * c_;
    t.y = in_place ? x_ : y_;
    t.batch_mean = channels_ + 4 * c_;
    t.batch_variance = channels_ + 5 * c_;
    t.saved_mean = channels_ + 6 * c_;
    t.saved_variance = channels_ + 7 * c_;
    const int error = BatchNormForwardGpu(params, t, scratch_, nullptr);
    return CudaOk(static_cast<cudaError_t>(error), "BatchNormForwardGpu") &&
           CudaOk(cudaDeviceSynchronize(), "kernels") && CopyOut(out->y.data(), t.y, n_) &&
           CopyOut(out->batch_mean.data(), t.batch_mean, c_) &&
           CopyOut(out->batch_variance.data(), t.batch_variance, c_) &&
           CopyOut(out->saved_mean.data(), t.saved_mean, c_) &&
           CopyOut(out->saved_variance.data(), t.saved_variance, c_);
  }

 private:
  size_t n_, c_, scratch_bytes_;
  bool ok_ = false;
  T *x_ = nullptr, *y_ = nullptr;
  float* channels_ = nullptr;  // [8][C]: scale, offset, mean, variance, outputs 1-4
  unsigned char* scratch_ = nullptr;
};

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_GPU_FORWARD_CASE_H_
