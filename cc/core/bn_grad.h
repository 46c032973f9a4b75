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

#include <cmath>
#include <cstdint>
#include <functional>

// Marks the few helpers the CUDA kernels share with host code.
#ifdef __CUDACC__
#define FBN_HOST_DEVICE __host__ __device__
#else
#define FBN_HOST_DEVICE
#endif

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

  // Where element i of channel c of image n lies (i runs over the spatial positions).
  FBN_HOST_DEVICE int64_t Offset(int64_t n, int64_t c, int64_t i) const {
    return channels_last ? (n * spatial + i) * channels + c : (n * channels + c) * spatial + i;
  }
  // Where element e of channel c lies, its elements counted in (n, i) order.
  FBN_HOST_DEVICE int64_t ChannelElement(int64_t c, int64_t e) const {
    if (channels_last) return e * channels + c;
    const int64_t n = e / spatial;
    return Offset(n, c, e - n * spatial);
  }

  // The same memory in the view that vectorizes: channels-last with C == 1 is one long
  // channels-first run, and channels-first with S == 1 is a channels-last [N, C] matrix.
  Shape canonical() const {
    if (channels_last && channels == 1) return Shape{1, 1, rest(), false};
    if (!channels_last && spatial == 1) return Shape{batch, channels, 1, true};
    return *this;
  }
};

// Synchronized batch norm (batch statistics over several replicas) splits training's backward
// around one exchange of per-channel sums: each replica computes its own Σ dy and
// Σ dy·(x − mean) (kSums), the replicas add them up, and each computes its x_backprop from the
// global sums and its share of the scale and offset gradients from its own (kDxFromSums). With
// one replica the two stages give the bits of kWhole: the same sums, the same coefficients, the
// same x_backprop loops.
enum class Stage {
  kWhole,       // the gradient of one call (the ops)
  kSums,        // training only: Tensors::sum_dy and sum_dy_xc, nothing else
  kDxFromSums,  // training only: outputs from Tensors::global_* and replica_* sums
};

struct Params {
  Shape shape;
  float epsilon = 1e-4f;
  bool is_training = true;
  // TensorFlow's GPU contract: in training mode reserve_space_2 holds the inverse standard
  // deviation 1/sqrt(var + eps) that the GPU forward (cuDNN) saves, not the variance, and
  // epsilon is not used. The CPU ops never set it; inference mode always takes a variance.
  bool saved_inv_std = false;
  Stage stage = Stage::kWhole;
  // kDxFromSums: elements per channel over every replica, the count the global sums are of.
  int64_t global_count = 0;

  // 1/sqrt(var + eps) of a channel, from that channel's reserve_space_2 value.
  FBN_HOST_DEVICE double InvStd(float reserve_space_2) const {
    if (saved_inv_std && is_training) return reserve_space_2;
    return 1.0 / sqrt(static_cast<double>(reserve_space_2) + static_cast<double>(epsilon));
  }
};

// A channel's outputs, and training's x_backprop coefficients, from its two sums over `count`
// elements: the one formula of the CPU and CUDA cores. x_backprop is then TrainingXBackprop
// (training_x_backprop.h) with a = scale · inv_std.
struct ChannelGradients {
  float offset_backprop;
  float scale_backprop;
  double dy_mean;
  double xc_coef;
};

// The scale and offset gradients of sums over a channel, each rounded once. kDxFromSums gives a
// replica's share this way, from its own sums: the replicas' shares add up to the whole.
FBN_HOST_DEVICE inline void ScaleOffsetFromSums(double sum_dy, double sum_dy_xc, double inv_std,
                                                ChannelGradients* g) {
  g->offset_backprop = static_cast<float>(sum_dy);
  g->scale_backprop = static_cast<float>(sum_dy_xc * inv_std);
}

FBN_HOST_DEVICE inline ChannelGradients GradientsFromSums(double sum_dy, double sum_dy_xc,
                                                          double inv_std, double count) {
  ChannelGradients g;
  ScaleOffsetFromSums(sum_dy, sum_dy_xc, inv_std, &g);
  g.dy_mean = sum_dy / count;
  g.xc_coef = inv_std * inv_std * (sum_dy_xc / count);
  return g;
}

// Buffers of one call. T is the element type of x, y_backprop and x_backprop; everything
// per-channel is float (TensorFlow's U, and T for V1 where T is float). x_backprop may be
// y_backprop's own buffer: every kernel reads an element of y_backprop before it writes that
// element of x_backprop, and writes no other element before it has read all it needs.
template <typename T>
struct Tensors {
  const T* y_backprop = nullptr;
  const T* x = nullptr;
  const float* scale = nullptr;
  const float* mean = nullptr;      // reserve_space_1: saved batch mean or population mean
  const float* variance = nullptr;  // reserve_space_2: variance (see Params::saved_inv_std)
  T* x_backprop = nullptr;
  float* scale_backprop = nullptr;
  float* offset_backprop = nullptr;
  // Stage::kSums writes this replica's Σ dy and Σ dy·(x − mean) per channel here.
  double* sum_dy = nullptr;
  double* sum_dy_xc = nullptr;
  // Stage::kDxFromSums reads the sums over every replica here (x_backprop's coefficients) ...
  const double* global_sum_dy = nullptr;
  const double* global_sum_dy_xc = nullptr;
  // ... and this replica's own here (its share of scale_backprop and offset_backprop).
  const double* replica_sum_dy = nullptr;
  const double* replica_sum_dy_xc = nullptr;
  // CUDA core, kDxFromSums: where the global count lives in device memory (an XLA:GPU operand,
  // the all-reduce's result), read there instead of Params::global_count. No error can come
  // back from the device, so a count below this call's own elements per channel (the sums
  // include them) makes every output NaN rather than quietly wrong.
  const int64_t* device_global_count = nullptr;
};

// Σ dy·((x − mean)·inv_std) over channel c, term by term in TensorFlow's grouping: for
// var + eps == 0, where only that order gives TensorFlow's infinities and NaNs (factoring the
// infinite inv_std out of the sum would not). Serial over the channel, so never taken for
// finite statistics. widen(v) is the device's conversion of an element to double.
template <typename T, typename Widen>
FBN_HOST_DEVICE double ScaledSumInTfOrder(const Shape& s, const Tensors<T>& t, int64_t c,
                                          double inv_std, Widen widen) {
  double sum = 0.0;
  for (int64_t e = 0; e < s.batch * s.spatial; ++e) {
    const int64_t i = s.ChannelElement(c, e);
    sum += widen(t.y_backprop[i]) * ((widen(t.x[i]) - t.mean[c]) * inv_std);
  }
  return sum;
}

// Runs fn(begin, end) over sub-ranges covering [0, count) exactly once, possibly in parallel,
// on at most `threads` threads. cost_per_unit is a rough cycle estimate so a pool can decide how
// finely to split. The core never depends on how the range is split: every unit writes only its
// own outputs. `threads` (the pool's size) may choose how a call uses memory, never its bits.
using RangeFn = std::function<void(int64_t begin, int64_t end)>;
struct ParallelFor {
  std::function<void(int64_t count, int64_t cost_per_unit, const RangeFn& fn)> run;
  int64_t threads = 1;

  void operator()(int64_t count, int64_t cost_per_unit, const RangeFn& fn) const {
    run(count, cost_per_unit, fn);
  }
};

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
