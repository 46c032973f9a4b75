// Standalone test of the CUDA core (no TensorFlow, no Python): the GPU kernels against the
// double-precision reference on the same random and awkward shapes as the CPU test, for every
// layout, dtype and mode, with and without the inverse-std contract; two runs must give the same
// bits; unaligned buffers take the scalar path. Prints PASS/FAIL counts; exits non-zero on any
// failure, and 0 with a SKIP line where no CUDA GPU is visible.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/bn_grad_gpu.h"
#include "cc/tests/test_util.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

bool Ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::printf("CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

// Device copies of one case's inputs and outputs. `shift` offsets the element buffers by one
// element so they are not 16-byte aligned.
template <typename T>
class DeviceCase {
 public:
  DeviceCase(const Inputs<T>& in, const Shape& shape, int shift) : shape_(shape), shift_(shift) {
    const size_t n = static_cast<size_t>(shape.elements()) + shift;
    const size_t c = static_cast<size_t>(shape.channels);
    ok_ = Alloc(&dy_, n) && Alloc(&x_, n) && Alloc(&dx_, n) && Alloc(&scale_, c) &&
          Alloc(&mean_, c) && Alloc(&var_, c) && Alloc(&dscale_, c) && Alloc(&doffset_, c) &&
          Alloc(&scratch_, GpuScratchBytes(shape) + 1);
    ok_ = ok_ && Copy(dy_ + shift, in.dy) && Copy(x_ + shift, in.x) && Copy(scale_, in.scale) &&
          Copy(mean_, in.mean) && Copy(var_, in.variance);
  }
  ~DeviceCase() {
    for (void* p : {static_cast<void*>(dy_), static_cast<void*>(x_), static_cast<void*>(dx_),
                    static_cast<void*>(scale_), static_cast<void*>(mean_),
                    static_cast<void*>(var_), static_cast<void*>(dscale_),
                    static_cast<void*>(doffset_), static_cast<void*>(scratch_)}) {
      cudaFree(p);
    }
  }

  // Runs the kernels and copies the outputs back; false on any CUDA error.
  bool Run(const Params& params, Outputs<T>* out) {
    if (!ok_) return false;
    Tensors<T> t;
    t.y_backprop = dy_ + shift_;
    t.x = x_ + shift_;
    t.scale = scale_;
    t.mean = mean_;
    t.variance = var_;
    t.x_backprop = dx_ + shift_;
    t.scale_backprop = dscale_;
    t.offset_backprop = doffset_;
    const int error = BatchNormGradGpu(params, t, scratch_, nullptr);
    return Ok(static_cast<cudaError_t>(error), "BatchNormGradGpu") &&
           Ok(cudaDeviceSynchronize(), "kernels") && Back(&out->dx, dx_ + shift_) &&
           Back(&out->dscale, dscale_) && Back(&out->doffset, doffset_);
  }

 private:
  template <typename V>
  static bool Alloc(V** p, size_t count) {
    return Ok(cudaMalloc(reinterpret_cast<void**>(p), count * sizeof(V) + 16), "cudaMalloc");
  }
  template <typename V>
  static bool Copy(V* dst, const std::vector<V>& src) {
    return Ok(cudaMemcpy(dst, src.data(), src.size() * sizeof(V), cudaMemcpyHostToDevice),
              "copy in");
  }
  template <typename V>
  static bool Back(std::vector<V>* dst, const V* src) {
    return Ok(cudaMemcpy(dst->data(), src, dst->size() * sizeof(V), cudaMemcpyDeviceToHost),
              "copy out");
  }

  Shape shape_;
  int shift_;
  bool ok_ = false;
  T *dy_ = nullptr, *x_ = nullptr, *dx_ = nullptr;
  float *scale_ = nullptr, *mean_ = nullptr, *var_ = nullptr, *dscale_ = nullptr,
        *doffset_ = nullptr;
  unsigned char* scratch_ = nullptr;
};

template <typename T>
void CheckAgainstReference(const std::string& name, const Outputs<T>& got,
                           const Outputs<T>& ref) {
  Check(NormwiseError(got.dx, ref.dx) <= DxTolerance<T>(), name + ": x_backprop");
  Check(NormwiseError(got.dscale, ref.dscale) <= kSumTolerance, name + ": scale_backprop");
  Check(NormwiseError(got.doffset, ref.doffset) <= kSumTolerance, name + ": offset_backprop");
}

template <typename T>
void RunCase(const Case& k, uint32_t seed) {
  const std::string name = Describe(k, TypeName<T>());
  Inputs<T> in(k, seed);
  const Params p = ParamsOf(k);
  Outputs<T> ref(k.shape), first(k.shape), second(k.shape), unaligned(k.shape);
  BatchNormGradReference(p, ref.Bind(in));

  DeviceCase<T> aligned_case(in, k.shape, 0);
  const bool ran = aligned_case.Run(p, &first) && aligned_case.Run(p, &second);
  Check(ran, name + ": runs");
  if (!ran) return;
  CheckAgainstReference(name, first, ref);
  Check(first.BitEqual(second), name + ": two runs bit-identical");

  DeviceCase<T> shifted_case(in, k.shape, 1);
  Check(shifted_case.Run(p, &unaligned), name + " unaligned: runs");
  CheckAgainstReference(name + " unaligned", unaligned, ref);
}

template <typename T>
void RunAllCases() {
  uint32_t seed = 1;
  for (Case k : TestCases()) {
    RunCase<T>(k, seed);
    k.saved_inv_std = !k.saved_inv_std;  // both reserve_space_2 contracts
    RunCase<T>(k, seed++);
  }
  for (const Shape& s : EmptyShapes()) {
    CheckEmptyInput<T>(s, [&s](const Params& p, const Inputs<T>& in, Outputs<T>* out) {
      DeviceCase<T> device(in, s, 0);
      return device.Run(p, out);
    });
  }
}

}  // namespace
}  // namespace fbn

int main() {
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    std::printf("gpu_core_test: SKIP: no CUDA GPU visible (%s)\n",
                error != cudaSuccess ? cudaGetErrorString(error) : "0 devices");
    return 0;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("gpu_core_test on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  fbn::RunAllCases<float>();
  fbn::RunAllCases<fbn::Half>();
  fbn::RunAllCases<fbn::BFloat16>();
  return fbn::testing::Summary("gpu_core_test");
}
