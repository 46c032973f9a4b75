#include "cc/kernels/sync_grad_validation.h"

#include "cc/kernels/fbn_grad_validation.h"
#include "tensorflow/core/util/tensor_format.h"

namespace tensorflow {
namespace fbn_kernels {

Status ReadSyncAttrs(OpKernelConstruction* ctx, bool has_epsilon, SyncAttrs* attrs) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("data_format", &attrs->data_format));
  TensorFormat format;
  if (!FormatFromString(attrs->data_format, &format) ||
      (format != FORMAT_NHWC && format != FORMAT_NCHW)) {
    return errors::InvalidArgument("Invalid data format ", attrs->data_format);
  }
  attrs->channels_last = format == FORMAT_NHWC;
  attrs->rank = static_cast<int>(attrs->data_format.size());
  if (!has_epsilon) return OkStatus();
  return ctx->GetAttr("epsilon", &attrs->epsilon);
}

Status ValidateSyncInputs(
    const TensorShape& y_backprop, const TensorShape& x,
    std::initializer_list<std::pair<const char*, const TensorShape*>> per_channel,
    const SyncAttrs& attrs, fbn::Shape* shape) {
  if (x.dims() != attrs.rank) {
    return errors::InvalidArgument("x must be ", attrs.rank, "-dimensional for data_format ",
                                   attrs.data_format, ", got shape ", x.DebugString());
  }
  if (x != y_backprop) {
    return errors::InvalidArgument("x and y_backprop must have the same shape, got ",
                                   x.DebugString(), " and ", y_backprop.DebugString());
  }
  *shape = CoreShapeOf(x, attrs.channels_last);
  for (const auto& [name, vector] : per_channel) {
    if (vector->dims() != 1 || vector->dim_size(0) != shape->channels) {
      return errors::InvalidArgument(name, " must be a vector of the ", shape->channels,
                                     " channels of x, got shape ", vector->DebugString());
    }
  }
  return OkStatus();
}

Status ValidateGlobalCount(const Tensor& count, const fbn::Shape& shape, int64_t* value) {
  if (!TensorShapeUtils::IsScalar(count.shape())) {
    return errors::InvalidArgument("count must be a scalar, got shape ",
                                   count.shape().DebugString());
  }
  *value = count.scalar<int64_t>()();
  const int64_t local = shape.elements() > 0 ? shape.rest() : 0;
  if (*value < local) {
    return errors::InvalidArgument("count (", *value, ") must be at least this replica's ",
                                   local, " elements per channel: it counts every replica's");
  }
  return OkStatus();
}

}  // namespace fbn_kernels
}  // namespace tensorflow
