// The one way the core starts a kernel. Every launch goes through cudaLaunchKernel (a runtime
// API call, not the <<<>>> syntax), so the same kernel source also runs under the host
// emulator of cc/tests/gpu_emulator, which supplies its own cudaLaunchKernel for typed kernels.
#ifndef TF_FBN_OPS_CC_CORE_GPU_GPU_LAUNCH_CUH_
#define TF_FBN_OPS_CC_CORE_GPU_GPU_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <tuple>

namespace fbn {

// Launches kernel<<<grid, block, 0, stream>>>(args...) and returns the launch's own error
// (a bad configuration, no kernel image for this GPU, ...). The arguments are converted to the
// kernel's parameter types first, as <<<>>> would, and passed by address.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                         const Args&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
  std::tuple<Params...> values(args...);
  return std::apply(
      [&](Params&... v) {
        void* pointers[] = {static_cast<void*>(&v)...};
#ifdef FBN_GPU_EMULATOR
        return cudaLaunchKernel(kernel, grid, block, pointers, 0, stream);
#else
        // The runtime's C entry point, which the typed overload forwards to: CUDA 12's overload
        // takes `const T*`, which cannot be deduced from a kernel pointer (CUDA 13's takes T*).
        return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, pointers, 0,
                                stream);
#endif
      },
      values);
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_GPU_GPU_LAUNCH_CUH_
