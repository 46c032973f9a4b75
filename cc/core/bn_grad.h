// The numeric core of tf-fbn-ops: batch-norm gradients over a tensor whose layout has been
// reduced to one of two views. Nothing in cc/core/ includes TensorFlow, so the same code builds
// into the op library, the standalone C++ tests, sanitizer builds and benchmarks.
//
//   channels last  (NHWC, NDHWC):  [R, C]     with R = N * S
//   channels first (NCHW, NCDHW):  [N, C, S]
//
// S is the product of the spatial dims. The caller validates shapes; the core assumes them.
#ifndef TF_FBN_OPS_CC_CORE_BN_GRAD_H_
#define TF_FBN_OPS_CC_CORE_BN_GRAD_H_

#include <cstdint>
#include <functional>

namespace fbn {

// 16-bit floating-point storage. Bit-compatible with Eigen::half / Eigen::bfloat16 and with
// CUDA's __half / __nv_bfloat16, so the TensorFlow shell can pass its buffers straight in.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

struct Shape {
  int64_t batch = 0;     // N
  int64_t channels = 0;  // C
  int64_t spatial = 0;   // S, product of the spatial dims
  bool channels_last = true;

  int64_t rest() const { return batch * spatial; }  // R: elements per channel
  int64_t elements() const { return batch * channels * spatial; }
};

struct Params {
  Shape shape;
  float epsilon = 1e-4f;
  bool is_training = true;
};

// Buffers of one call. T is the element type of x, y_backprop and x_backprop; everything
// per-channel is float (TensorFlow's U, and T for V1 where T is float).
template <typename T>
struct Tensors {
  const T* y_backprop = nullptr;
  const T* x = nullptr;
  const float* scale = nullptr;
  const float* mean = nullptr;      // reserve_space_1: saved batch mean or population mean
  const float* variance = nullptr;  // reserve_space_2: variance (CPU contract)
  T* x_backprop = nullptr;
  float* scale_backprop = nullptr;
  float* offset_backprop = nullptr;
};

// Runs fn(begin, end) over sub-ranges covering [0, count) exactly once, possibly in parallel.
// cost_per_unit is a rough cycle estimate so a pool can decide how finely to split. The core
// never depends on how the range is split: every unit writes only its own outputs.
using RangeFn = std::function<void(int64_t begin, int64_t end)>;
using ParallelFor =
    std::function<void(int64_t count, int64_t cost_per_unit, const RangeFn& fn)>;

// A ParallelFor that runs everything on the calling thread.
ParallelFor SerialFor();

// Plain loops with double accumulators: the oracle the fast kernels are tested against.
template <typename T>
void BatchNormGradReference(const Params& params, const Tensors<T>& t);

// The production CPU kernels. Results are bit-identical for any ParallelFor (thread count),
// because work is cut into blocks that depend only on the shape and partial sums are
// combined in a fixed order.
template <typename T>
void BatchNormGradCpu(const Params& params, const Tensors<T>& t, const ParallelFor& parallel_for);

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_BN_GRAD_H_
