// A C entry point to the CUDA core, for the peer benchmark (peers.py loads it with ctypes and
// hands it PyTorch's device buffers and stream) and for tools/jax_ffi_check.py (JAX's buffers).
// Built with nvcc for a GPU, or as C++ against the host emulator (cc/tests/gpu_emulator) so
// that the plumbing runs without one.
#include <cuda_runtime.h>

#include <cstdint>

#include "cc/core/bn_grad.h"
#include "cc/core/gpu/bn_grad_gpu.h"

namespace {

fbn::Shape MakeShape(int64_t n, int64_t c, int64_t s, int channels_last) {
  return fbn::Shape{n, c, s, channels_last != 0};
}

template <typename T>
int Run(const fbn::Params& p, const void* dy, const void* x, const float* scale,
        const float* mean, const float* variance, void* dx, float* dscale, float* doffset,
        void* scratch, void* stream) {
  fbn::Tensors<T> t;
  t.y_backprop = static_cast<const T*>(dy);
  t.x = static_cast<const T*>(x);
  t.scale = scale;
  t.mean = mean;
  t.variance = variance;
  t.x_backprop = static_cast<T*>(dx);
  t.scale_backprop = dscale;
  t.offset_backprop = doffset;
  return fbn::BatchNormGradGpu(p, t, scratch, static_cast<fbn::GpuStream>(stream));
}

}  // namespace

extern "C" {

// Bytes of device scratch fbn_gpu_grad needs for this shape.
__attribute__((visibility("default"))) uint64_t fbn_gpu_scratch_bytes(int64_t n, int64_t c,
                                                                      int64_t s,
                                                                      int channels_last) {
  return fbn::GpuScratchBytes(MakeShape(n, c, s, channels_last));
}

// dtype: 0 float32, 1 float16, 2 bfloat16. saved_inv_std: variance holds 1/sqrt(var + eps)
// (TensorFlow's GPU contract in training). Returns 0 or a CUDA error code.
__attribute__((visibility("default"))) int fbn_gpu_grad(
    int dtype, int64_t n, int64_t c, int64_t s, int channels_last, int training,
    int saved_inv_std, float epsilon, const void* dy, const void* x, const float* scale,
    const float* mean, const float* variance, void* dx, float* dscale, float* doffset,
    void* scratch, void* stream) {
  fbn::Params p;
  p.shape = MakeShape(n, c, s, channels_last);
  p.epsilon = epsilon;
  p.is_training = training != 0;
  p.saved_inv_std = saved_inv_std != 0;
  switch (dtype) {
    case 0:
      return Run<float>(p, dy, x, scale, mean, variance, dx, dscale, doffset, scratch, stream);
    case 1:
      return Run<fbn::Half>(p, dy, x, scale, mean, variance, dx, dscale, doffset, scratch,
                            stream);
    case 2:
      return Run<fbn::BFloat16>(p, dy, x, scale, mean, variance, dx, dscale, doffset, scratch,
                                stream);
    default:
      return -1;
  }
}

// Every kernel variant's name, comma-separated (GpuVariant), and the variants in force from now
// on, by name ("" for the default kernels); returns what the names select.
__attribute__((visibility("default"))) const char* fbn_gpu_variant_names() {
  return fbn::GpuVariantNames();
}
__attribute__((visibility("default"))) unsigned fbn_gpu_set_variants(const char* names) {
  const unsigned variants = fbn::GpuVariantsNamed(names);
  fbn::SetGpuVariants(variants);
  return variants;
}

__attribute__((visibility("default"))) const char* fbn_gpu_error_string(int error) {
  return error == -1 ? "unknown dtype" : fbn::GpuErrorString(error);
}

// For a caller without a CUDA runtime of its own (tools/jax_ffi_check.py, whose device arrays
// are JAX's and must not be written): device memory (null on failure), its release, a copy to
// the host, and a wait for everything queued on the device (such a caller passes the default
// stream).
__attribute__((visibility("default"))) void* fbn_gpu_alloc(uint64_t bytes) {
  void* pointer = nullptr;
  return cudaMalloc(&pointer, bytes) == cudaSuccess ? pointer : nullptr;
}

__attribute__((visibility("default"))) void fbn_gpu_free(void* pointer) { cudaFree(pointer); }

__attribute__((visibility("default"))) int fbn_gpu_copy_to_host(void* host, const void* device,
                                                                uint64_t bytes) {
  return cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost);
}

__attribute__((visibility("default"))) int fbn_gpu_synchronize() {
  return cudaDeviceSynchronize();
}

__attribute__((visibility("default"))) int fbn_gpu_cuda_version() {
  return fbn::GpuBuildCudaVersion();
}

}  // extern "C"
