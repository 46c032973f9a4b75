// The CUDA side of the numeric core. Host functions with no CUDA types in their signatures, so
// this header can be included by code compiled without CUDA headers (the TensorFlow shell).
#ifndef TF_FBN_OPS_CC_CORE_GPU_BN_GRAD_GPU_H_
#define TF_FBN_OPS_CC_CORE_GPU_BN_GRAD_GPU_H_

#include <cstddef>

#include "cc/core/bn_grad.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace fbn {

using GpuStream = CUstream_st*;

// Bytes of device scratch BatchNormGradGpu needs for a shape: per-block partial sums and
// per-channel coefficients. Depends on the shape only.
size_t GpuScratchBytes(const Shape& shape);

// Enqueues the gradient computation on `stream`. Every pointer in `t`, and `scratch` (at least
// GpuScratchBytes(params.shape) bytes), is device memory. Returns 0 (cudaSuccess) or the CUDA
// error of the first failing launch; GpuErrorString describes it.
//
// Deterministic: every sum is reduced in two stages, per-block partials in a fixed order and
// then per channel over the blocks in block order, with no floating-point atomics; two calls
// on the same inputs give the same bits.
template <typename T>
int BatchNormGradGpu(const Params& params, const Tensors<T>& t, void* scratch, GpuStream stream);

const char* GpuErrorString(int error);

// Kernel plans other than the default, for a GPU to time side by side with it
// (benchmarks/gpu_bench.cu); each gives the default's bits, none is on unless asked for.
//   kSeparateLaunches: the sums, per-channel and x_backprop kernels launched apart even where
//     one block holds every row of its channels, which by default does all three in one kernel.
//   kWideRows: channels-last 16-bit tensors of at least 256 channels read and written 16 bytes
//     (eight channels) at a time, two vectors in flight per tensor, instead of 8 bytes, four.
enum GpuVariant : unsigned { kSeparateLaunches = 1u, kWideRows = 2u };

// The variants in force: TF_FBN_OPS_GPU_VARIANTS (names, comma-separated:
// "separate_launches", "wide_rows"; an unknown name is reported on stderr and ignored), read at
// the first call, until SetGpuVariants (tests, benchmarks) replaces them.
unsigned GpuVariants();
void SetGpuVariants(unsigned variants);
// The variants named in a comma-separated list (an unknown name is reported on stderr and
// ignored), and every variant's name in that form, for benchmarks that time each.
unsigned GpuVariantsNamed(const char* names);
const char* GpuVariantNames();

// The CUDA runtime version the kernels were compiled and linked with (CUDART_VERSION, 1000 *
// major + 10 * minor). A driver runs them when it supports this major version or a newer one.
int GpuBuildCudaVersion();

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_GPU_BN_GRAD_GPU_H_
