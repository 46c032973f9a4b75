// Whether the NVIDIA driver on this machine can run the library's CUDA code, decided once when
// the library loads. The GPU kernels are registered only when it can: otherwise TensorFlow
// places the ops on the CPU instead of failing at the first GPU call.
#ifndef TF_FBN_OPS_CC_RUNTIME_GPU_DRIVER_CHECK_H_
#define TF_FBN_OPS_CC_RUNTIME_GPU_DRIVER_CHECK_H_

#include <string>

namespace tensorflow {
namespace fbn_kernels {

struct GpuDriverVerdict {
  bool register_kernels;
  std::string message;  // one line for logs, `python -m tf_fbn_ops info` and bug reports
};

// driver_version: what cuDriverGetVersion reports (1000 * major + 10 * minor), 0 when no
// driver is installed, negative when the driver could not be asked. build_version: the CUDA
// runtime the kernels were built with. CUDA's minor-version compatibility lets any driver of
// the same major version (or newer) run them.
GpuDriverVerdict JudgeGpuDriver(int driver_version, int build_version);

// The verdict for this machine (libcuda.so.1 is asked directly, without the CUDA runtime),
// computed on first use.
const GpuDriverVerdict& ThisMachineGpuDriver();

// The oldest Linux driver that supports a CUDA major version, e.g. "580.65.06" for 13.
const char* MinimumDriverFor(int cuda_major);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_RUNTIME_GPU_DRIVER_CHECK_H_
