// Attributes and input checks of synchronized batch norm's two backward ops
// (cc/ops/fbn_sync_ops.cc), on every device, before any tensor data is touched.
#ifndef TF_FBN_OPS_CC_KERNELS_SYNC_GRAD_VALIDATION_H_
#define TF_FBN_OPS_CC_KERNELS_SYNC_GRAD_VALIDATION_H_

#include <initializer_list>
#include <string>
#include <utility>

#include "cc/core/bn_grad.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorflow {
namespace fbn_kernels {

struct SyncAttrs {
  std::string data_format;
  bool channels_last = true;
  int rank = 4;
  float epsilon = 1e-4f;  // FbnSyncBatchNormGradFromSums only
};

Status ReadSyncAttrs(OpKernelConstruction* ctx, bool has_epsilon, SyncAttrs* attrs);

// y_backprop and x: the same shape, of the rank data_format names; each named per-channel
// input: a vector of x's channel count. On success, describes x for the core.
Status ValidateSyncInputs(
    const TensorShape& y_backprop, const TensorShape& x,
    std::initializer_list<std::pair<const char*, const TensorShape*>> per_channel,
    const SyncAttrs& attrs, fbn::Shape* shape);

// The global count of FbnSyncBatchNormGradFromSums: a scalar, at least this replica's own
// elements per channel (the sums include them), positive unless every batch is empty.
Status ValidateGlobalCount(const Tensor& count, const fbn::Shape& shape, int64_t* value);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_SYNC_GRAD_VALIDATION_H_
