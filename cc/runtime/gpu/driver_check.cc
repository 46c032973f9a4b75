#include "cc/runtime/gpu/driver_check.h"

#include <dlfcn.h>

#include <cstdio>

#include "cc/core/gpu/bn_grad_gpu.h"

namespace tensorflow {
namespace fbn_kernels {
namespace {

std::string CudaVersionText(int version) {
  char text[32];
  std::snprintf(text, sizeof(text), "%d.%d", version / 1000, version % 1000 / 10);
  return text;
}

// Asks the driver library itself: the static CUDA runtime would refuse to start on an old
// driver, which is the case to detect. Returns -1 when the library is there but cannot answer.
int InstalledDriverVersion() {
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (libcuda == nullptr) return 0;
  using DriverGetVersion = int (*)(int*);  // CUresult cuDriverGetVersion(int*)
  const auto get_version = reinterpret_cast<DriverGetVersion>(dlsym(libcuda, "cuDriverGetVersion"));
  int version = -1;
  if (get_version == nullptr || get_version(&version) != 0) version = -1;
  dlclose(libcuda);
  return version;
}

}  // namespace

const char* MinimumDriverFor(int cuda_major) {
  // NVIDIA's minimum Linux drivers for CUDA minor-version compatibility.
  switch (cuda_major) {
    case 11:
      return "450.80.02";
    case 12:
      return "525.60.13";
    case 13:
      return "580.65.06";
    default:
      return "one for this CUDA version";
  }
}

GpuDriverVerdict JudgeGpuDriver(int driver_version, int build_version) {
  const int needed_major = build_version / 1000;
  const std::string built = "built with CUDA " + CudaVersionText(build_version) +
                            ", which needs an NVIDIA driver " +
                            MinimumDriverFor(needed_major) + " or newer";
  if (driver_version == 0) {
    return {true, "GPU kernels registered (" + built + "; no NVIDIA driver is installed here)"};
  }
  if (driver_version < 0) {
    return {true, "GPU kernels registered (" + built +
                      "; the installed driver did not report its version)"};
  }
  if (driver_version / 1000 >= needed_major) {
    return {true, "GPU kernels registered (" + built + "; the driver supports CUDA " +
                      CudaVersionText(driver_version) + ")"};
  }
  return {false, "GPU kernels NOT registered: the library was " + built +
                     ", but the installed driver supports only CUDA " +
                     CudaVersionText(driver_version) +
                     "; TensorFlow runs the shim's ops on the CPU instead. Update the NVIDIA "
                     "driver, or build tf-fbn-ops from source with a CUDA toolkit that this "
                     "driver supports"};
}

const GpuDriverVerdict& ThisMachineGpuDriver() {
  static const GpuDriverVerdict verdict =
      JudgeGpuDriver(InstalledDriverVersion(), fbn::GpuBuildCudaVersion());
  return verdict;
}

}  // namespace fbn_kernels
}  // namespace tensorflow

// For `python -m tf_fbn_ops info` (through ctypes) and anyone else who loads the library: what
// the load-time check decided, in one line.
extern "C" __attribute__((visibility("default"))) const char* TfFbnOpsGpuKernelStatus() {
  return tensorflow::fbn_kernels::ThisMachineGpuDriver().message.c_str();
}
