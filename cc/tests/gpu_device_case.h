// Device copies of one test case's inputs and outputs for the GPU core test (real GPU or the
// host emulator): allocation, garbage before every run, one call of the core, copies back.
#ifndef TF_FBN_OPS_CC_TESTS_GPU_DEVICE_CASE_H_
#define TF_FBN_OPS_CC_TESTS_GPU_DEVICE_CASE_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/gpu/bn_grad_gpu.h"
#include "cc/tests/test_util.h"

namespace fbn {
namespace testing {

inline bool CudaOk(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::printf("CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

// Device buffers of `count` elements and 16 spare bytes (the shifted buffers still hold `count`
// elements past their start), and copies in and out; false on a CUDA error (printed).
template <typename V>
bool DeviceAlloc(V** p, size_t count) {
  return CudaOk(cudaMalloc(reinterpret_cast<void**>(p), count * sizeof(V) + 16), "cudaMalloc");
}
template <typename V>
bool CopyIn(V* dst, const V* src, size_t count) {
  return CudaOk(cudaMemcpy(dst, src, count * sizeof(V), cudaMemcpyHostToDevice), "copy in");
}
template <typename V>
bool CopyOut(V* dst, const V* src, size_t count) {
  return CudaOk(cudaMemcpy(dst, src, count * sizeof(V), cudaMemcpyDeviceToHost), "copy out");
}

// Every output and the scratch are filled with this byte before each run, so an element the
// kernels fail to write, or a partial read before it is written, reads as NaN.
constexpr int kGarbageByte = 0xff;

// `shift` offsets the element buffers by one element so they are not 16-byte aligned (the
// kernels' scalar path).
template <typename T>
class DeviceCase {
 public:
  DeviceCase(const Inputs<T>& in, const Shape& shape, int shift)
      : DeviceCase(in.dy.data(), in.x.data(), in, shape, shift) {}

  // Element inputs from other host buffers (the large-tensor test builds its own).
  DeviceCase(const T* dy, const T* x, const Inputs<T>& per_channel, const Shape& shape,
             int shift)
      : n_(static_cast<size_t>(shape.elements())),
        c_(static_cast<size_t>(shape.channels)),
        scratch_bytes_(GpuScratchBytes(shape)),
        shift_(shift) {
    ok_ = Alloc(&dy_, n_ + shift) && Alloc(&x_, n_ + shift) && Alloc(&dx_, n_ + shift) &&
          Alloc(&scale_, c_) && Alloc(&mean_, c_) && Alloc(&var_, c_) && Alloc(&dscale_, c_) &&
          Alloc(&doffset_, c_) && Alloc(&scratch_, scratch_bytes_) && Alloc(&sums_, 6 * c_);
    ok_ = ok_ && Copy(dy_ + shift, dy, n_) && Copy(x_ + shift, x, n_) &&
          Copy(scale_, per_channel.scale.data(), c_) &&
          Copy(mean_, per_channel.mean.data(), c_) &&
          Copy(var_, per_channel.variance.data(), c_);
  }
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;
  ~DeviceCase() {
    for (void* p : {static_cast<void*>(dy_), static_cast<void*>(x_), static_cast<void*>(dx_),
                    static_cast<void*>(scale_), static_cast<void*>(mean_),
                    static_cast<void*>(var_), static_cast<void*>(dscale_),
                    static_cast<void*>(doffset_), static_cast<void*>(scratch_),
                    static_cast<void*>(sums_)}) {
      cudaFree(p);
    }
  }

  bool ok() const { return ok_; }

  // Garbage into every output and the scratch, then the core, all on `stream` alone. False on
  // any CUDA error (printed). Does not wait for the kernels. In place, x_backprop starts as a
  // copy of y_backprop and is passed as both, as when TensorFlow forwards dy's buffer.
  bool Launch(const Params& params, cudaStream_t stream, bool in_place = false) {
    if (!ok_) return false;
    const bool dx_ready =
        in_place ? CudaOk(cudaMemcpyAsync(dx_, dy_, (n_ + shift_) * sizeof(T),
                                          cudaMemcpyDeviceToDevice, stream),
                          "dy into dx")
                 : Garbage(dx_, n_ + shift_, stream);
    if (!(dx_ready && Garbage(dscale_, c_, stream) && Garbage(doffset_, c_, stream) &&
          Garbage(scratch_, scratch_bytes_, stream) && Garbage(sums_, 2 * c_, stream))) {
      return false;
    }
    Tensors<T> t;
    t.y_backprop = (in_place ? dx_ : dy_) + shift_;
    t.x = x_ + shift_;
    t.scale = scale_;
    t.mean = mean_;
    t.variance = var_;
    t.x_backprop = dx_ + shift_;
    t.scale_backprop = dscale_;
    t.offset_backprop = doffset_;
    // Synchronized batch norm's stages: this case's sums, and the global and replica's ones
    // kDxFromSums reads (SetGivenSums).
    t.sum_dy = sums_;
    t.sum_dy_xc = sums_ + c_;
    t.global_sum_dy = sums_ + 2 * c_;
    t.global_sum_dy_xc = sums_ + 3 * c_;
    t.replica_sum_dy = sums_ + 4 * c_;
    t.replica_sum_dy_xc = sums_ + 5 * c_;
    const int error = BatchNormGradGpu(params, t, scratch_, stream);
    return CudaOk(static_cast<cudaError_t>(error), "BatchNormGradGpu");
  }

  // Copies the outputs back (after the kernels have finished).
  bool Fetch(Outputs<T>* out) const {
    return Back(out->dx.data(), dx_ + shift_, n_) && Back(out->dscale.data(), dscale_, c_) &&
           Back(out->doffset.data(), doffset_, c_);
  }

  // The sums Stage::kSums wrote (after the kernels have finished): Σ dy, then Σ dy·(x − mean).
  bool FetchSums(std::vector<double>* sum_dy, std::vector<double>* sum_dy_xc) const {
    sum_dy->resize(c_);
    sum_dy_xc->resize(c_);
    return Back(sum_dy->data(), sums_, c_) && Back(sum_dy_xc->data(), sums_ + c_, c_);
  }

  // The sums Stage::kDxFromSums reads: every replica's, then this replica's own.
  bool SetGivenSums(const std::vector<double>& global_dy, const std::vector<double>& global_dy_xc,
                    const std::vector<double>& replica_dy,
                    const std::vector<double>& replica_dy_xc) {
    return Copy(sums_ + 2 * c_, global_dy.data(), c_) &&
           Copy(sums_ + 3 * c_, global_dy_xc.data(), c_) &&
           Copy(sums_ + 4 * c_, replica_dy.data(), c_) &&
           Copy(sums_ + 5 * c_, replica_dy_xc.data(), c_);
  }

  // Launch on the legacy default stream, wait, fetch.
  bool Run(const Params& params, Outputs<T>* out, bool in_place = false) {
    return Launch(params, nullptr, in_place) && CudaOk(cudaDeviceSynchronize(), "kernels") &&
           Fetch(out);
  }

 private:
  template <typename V>
  static bool Alloc(V** p, size_t count) {
    return DeviceAlloc(p, count);
  }
  template <typename V>
  static bool Copy(V* dst, const V* src, size_t count) {
    return CopyIn(dst, src, count);
  }
  template <typename V>
  static bool Back(V* dst, const V* src, size_t count) {
    return CopyOut(dst, src, count);
  }
  template <typename V>
  static bool Garbage(V* p, size_t count, cudaStream_t stream) {
    return CudaOk(cudaMemsetAsync(p, kGarbageByte, count * sizeof(V), stream), "garbage fill");
  }

  size_t n_, c_, scratch_bytes_;
  int shift_;
  bool ok_ = false;
  T *dy_ = nullptr, *x_ = nullptr, *dx_ = nullptr;
  float *scale_ = nullptr, *mean_ = nullptr, *var_ = nullptr, *dscale_ = nullptr,
        *doffset_ = nullptr;
  unsigned char* scratch_ = nullptr;
  double* sums_ = nullptr;  // [6][C]: this case's Σ dy, Σ dy·(x − mean); global; replica's
};

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_GPU_DEVICE_CASE_H_
