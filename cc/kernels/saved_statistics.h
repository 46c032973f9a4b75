// What reserve_space_2 holds when a gradient op runs in training mode: the one place that
// decides it, for every kernel (CPU, GPU, XLA on either), and so what the library's own forward
// ops save there on the same device. A gradient must read what TensorFlow's
// forward in the same program wrote, and that depends on where the pair runs, on the op's
// version and, under XLA on a GPU, on the TensorFlow release:
//
//   - CPU, eagerly or compiled by XLA: the biased batch variance.
//   - GPU, not compiled: cuDNN's saved "inverse variance", which is 1/sqrt(var + eps).
//   - XLA on a GPU: tf2xla's own kernels (batch_norm_op.cc) write and read 1/sqrt(var + eps)
//     there. From TensorFlow 2.15 on, FusedBatchNormV3 and FusedBatchNormGradV3 are lowered by
//     the MLIR patterns of legalize_tf.cc instead (MlirXlaOpKernel), which write and read the
//     variance on every device; FusedBatchNorm and V2 and their gradients kept tf2xla's kernels.
//
// In inference mode reserve_space_2 is the population variance everywhere. docs/xla.md has the
// table and how it was established.
#ifndef TF_FBN_OPS_CC_KERNELS_SAVED_STATISTICS_H_
#define TF_FBN_OPS_CC_KERNELS_SAVED_STATISTICS_H_

#include <cstdio>
#include <string>

// TensorFlow's C API, from libtensorflow_cc, which XLA builds link (its header pulls in more).
extern "C" const char* TF_Version(void);

namespace tensorflow {
namespace fbn_kernels {

enum class GradDevice { kCpu, kGpu, kXlaCpu, kXlaGpu };

struct TfRelease {
  int major;
  int minor;
};

// The first release that lowers FusedBatchNorm{,Grad}V3 through MLIR under XLA.
inline constexpr TfRelease kMlirLoweredV3{2, 15};

constexpr bool AtLeast(TfRelease release, TfRelease since) {
  return release.major != since.major ? release.major > since.major
                                      : release.minor >= since.minor;
}

// True where, in training mode, the gradient op of `op_version` (1, 2 or 3) on `device` reads
// reserve_space_2 as 1/sqrt(var + eps), and the forward op of that version saves it so; false
// where it reads the variance. `release` is the TensorFlow the op runs in; only XLA on a GPU
// depends on it.
constexpr bool SavedInverseStd(GradDevice device, int op_version, TfRelease release) {
  switch (device) {
    case GradDevice::kGpu:
      return true;
    case GradDevice::kXlaGpu:
      return op_version < 3 || !AtLeast(release, kMlirLoweredV3);
    case GradDevice::kCpu:
    case GradDevice::kXlaCpu:
      return false;
  }
  return false;
}

// The TensorFlow this process runs (the wheels of one build serve one release; asked at run
// time all the same, so the answer is the running release's). Only where XLA is built.
inline TfRelease RunningTensorFlow() {
  TfRelease release{0, 0};
  std::sscanf(TF_Version(), "%d.%d", &release.major, &release.minor);
  return release;
}

// 1, 2 or 3 for an op of either family: FbnFusedBatchNormGrad (FbnFusedBatchNorm), V2, V3.
inline int OpVersion(const std::string& op_type) {
  if (op_type.size() >= 2 && op_type[op_type.size() - 2] == 'V') return op_type.back() - '0';
  return 1;
}

// The table of docs/xla.md, checked wherever this header is compiled.
inline constexpr TfRelease kTf214{2, 14}, kTf215{2, 15}, kTf221{2, 21};
static_assert(!SavedInverseStd(GradDevice::kCpu, 3, kTf221) &&
              !SavedInverseStd(GradDevice::kXlaCpu, 1, kTf214) &&
              !SavedInverseStd(GradDevice::kXlaCpu, 3, kTf221));
static_assert(SavedInverseStd(GradDevice::kGpu, 1, kTf221) &&
              SavedInverseStd(GradDevice::kGpu, 3, kTf221));
static_assert(SavedInverseStd(GradDevice::kXlaGpu, 3, kTf214) &&
              SavedInverseStd(GradDevice::kXlaGpu, 2, kTf214) &&
              !SavedInverseStd(GradDevice::kXlaGpu, 3, kTf215) &&
              !SavedInverseStd(GradDevice::kXlaGpu, 3, kTf221) &&
              SavedInverseStd(GradDevice::kXlaGpu, 2, kTf221) &&
              SavedInverseStd(GradDevice::kXlaGpu, 1, kTf221) &&
              !SavedInverseStd(GradDevice::kXlaGpu, 3, {3, 0}));

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_SAVED_STATISTICS_H_
