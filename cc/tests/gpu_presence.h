// Whether a program that needs a GPU (the GPU test, the GPU benchmark) should run, skip or fail,
// decided the same way for both: no device, or no NVIDIA driver at all, is a SKIP (a failure
// when FBN_REQUIRE_GPU=1, so that a GPU machine cannot pass without running anything); any other
// CUDA error, a driver too old for this runtime included, is a failure.
#ifndef TF_FBN_OPS_CC_TESTS_GPU_PRESENCE_H_
#define TF_FBN_OPS_CC_TESTS_GPU_PRESENCE_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fbn {

inline bool EnvironmentSays(const char* name, const char* value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::string(set) == value;
}

inline std::string CudaVersion(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

enum class GpuPresence { kRun, kSkip, kFail };

// Prints one line naming `program` and what it found (the device, or why there is none, with the
// driver's and the runtime's CUDA versions).
inline GpuPresence ProbeGpu(const char* program) {
  int driver = 0, runtime = 0, devices = 0;
  cudaDriverGetVersion(&driver);  // 0: no NVIDIA driver installed
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t error = cudaGetDeviceCount(&devices);
  const std::string versions = "driver for CUDA " + CudaVersion(driver) + ", runtime CUDA " +
                               CudaVersion(runtime);
  const bool no_gpu = error == cudaErrorNoDevice || (error == cudaSuccess && devices == 0) ||
                      (error == cudaErrorInsufficientDriver && driver == 0);
  if (no_gpu) {
    const bool required = EnvironmentSays("FBN_REQUIRE_GPU", "1");
    std::printf("%s: %s: no CUDA GPU (%s)%s\n", program, required ? "FAIL" : "SKIP",
                driver == 0 ? "no NVIDIA driver installed" : cudaGetErrorString(error),
                required ? "; FBN_REQUIRE_GPU=1 makes that a failure" : "");
    return required ? GpuPresence::kFail : GpuPresence::kSkip;
  }
  cudaDeviceProp prop;
  const cudaError_t props = error == cudaSuccess ? cudaGetDeviceProperties(&prop, 0) : error;
  if (props != cudaSuccess) {
    std::printf("%s: FAIL: %s (%s)\n", program, cudaGetErrorString(props), versions.c_str());
    return GpuPresence::kFail;
  }
  std::printf("%s on %s (sm_%d%d), %s\n", program, prop.name, prop.major, prop.minor,
              versions.c_str());
  return GpuPresence::kRun;
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_GPU_PRESENCE_H_
