// The CUDA handlers' tests' device memory on the host emulator (xla_ffi_emu_test.cc,
// xla_ffi_forward_emu_test.cc): arrays copied in and out whole, the fake XLA context a CUDA
// handler runs in (a stream, the emulator's memory as XLA's allocator), and what a call must
// have done with that memory.
#ifndef TF_FBN_OPS_CC_TESTS_XLA_FFI_CUDA_MEMORY_H_
#define TF_FBN_OPS_CC_TESTS_XLA_FFI_CUDA_MEMORY_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "cc/tests/test_util.h"
#include "cc/tests/xla_ffi_fake_api.h"

namespace fbn {
namespace testing {

// The fake's device memory: the emulator's cudaMalloc (host memory, 256-byte aligned and filled
// with NaN bytes) and cudaFree.
inline void* CudaAllocate(size_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}
inline void CudaRelease(void* p) { cudaFree(p); }

// One device array, copied in and out whole.
template <typename V>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count), data_(static_cast<V*>(
                                                           CudaAllocate(count * sizeof(V)))) {}
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  V* get() const { return data_; }
  bool In(const V* host) { return Copy(data_, host, cudaMemcpyHostToDevice); }
  template <typename Allocator>
  bool Out(std::vector<V, Allocator>* host) const {
    host->resize(count_);
    return Copy(host->data(), data_, cudaMemcpyDeviceToHost);
  }
  bool Garbage() { return cudaMemset(data_, 0xff, count_ * sizeof(V)) == cudaSuccess; }

 private:
  bool Copy(void* dst, const void* src, cudaMemcpyKind kind) const {
    return data_ != nullptr && cudaMemcpy(dst, src, count_ * sizeof(V), kind) == cudaSuccess;
  }
  size_t count_;
  V* data_;
};

// The fake's context for the CUDA handler: a stream and the emulator's memory.
struct CudaContext {
  XLA_FFI_ExecutionContext ctx;
  explicit CudaContext(cudaStream_t stream) {
    ctx.stream = stream;
    ctx.memory = FakeMemory{CudaAllocate, CudaRelease};
  }
};

// After one successful call: its scratch came from XLA's allocator, once where the call needs
// `scratch_bytes` > 0 (none otherwise), and was freed by the call's end.
inline void CheckScratchThroughXla(const CudaContext& c, size_t scratch_bytes,
                                   const std::string& what) {
  const int expected = scratch_bytes > 0 ? 1 : 0;
  Check(c.ctx.allocations == expected && c.ctx.frees == expected && c.ctx.bad_frees == 0 &&
            c.ctx.live.empty() && (expected == 0 || c.ctx.last_size == scratch_bytes),
        what + ": " + std::to_string(expected) + " scratch allocation(s) of " +
            std::to_string(scratch_bytes) + " bytes through XLA's allocator, freed; got " +
            std::to_string(c.ctx.allocations) + " of " + std::to_string(c.ctx.last_size) +
            ", " + std::to_string(c.ctx.frees) + " freed");
}

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_XLA_FFI_CUDA_MEMORY_H_
