#include "cc/kernels/fbn_grad_validation.h"

#include <string>

#include "tensorflow/core/util/tensor_format.h"

namespace tensorflow {
namespace fbn_kernels {

Status CheckChannels(const std::string& name, const TensorShape& t, int64_t channels) {
  if (t.num_elements() == channels) return OkStatus();
  return errors::InvalidArgument(
      name, " must have the same number of elements as the channels of x, got ", t.num_elements(),
      " and ", channels);
}

fbn::Shape CoreShapeOf(const TensorShape& x, bool channels_last) {
  // [N, spatial..., C] or [N, C, spatial...]; TF folds 5-D into 4-D the same way.
  const int channel_dim = ChannelDimension(x, channels_last);
  fbn::Shape shape;
  shape.channels_last = channels_last;
  shape.batch = x.dim_size(0);
  shape.channels = x.dim_size(channel_dim);
  // An empty x may have dims whose product overflows int64 (TensorShape allows [0, 2^62, 2^62, 1]);
  // the core only needs spatial when there is data, so leave it 0 then.
  shape.spatial = 0;
  if (x.num_elements() > 0) {
    shape.spatial = 1;
    for (int d = 1; d < x.dims(); ++d) {
      if (d != channel_dim) shape.spatial *= x.dim_size(d);
    }
  }
  return shape;
}

Status ReadGradAttrs(OpKernelConstruction* ctx, GradAttrs* attrs) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("epsilon", &attrs->epsilon));
  std::string data_format;
  TF_RETURN_IF_ERROR(ctx->GetAttr("data_format", &data_format));
  TensorFormat format;
  // FormatFromString maps NDHWC to NHWC and NCDHW to NCHW; rank decides 4-D vs 5-D later.
  if (!FormatFromString(data_format, &format) ||
      (format != FORMAT_NHWC && format != FORMAT_NCHW)) {
    return errors::InvalidArgument("Invalid data format");
  }
  attrs->channels_last = format == FORMAT_NHWC;
  return ctx->GetAttr("is_training", &attrs->is_training);
}

Status ValidateGradInputs(const TensorShape& y_backprop, const TensorShape& x,
                          const TensorShape& scale, const TensorShape& reserve_space_1,
                          const TensorShape& reserve_space_2, const GradAttrs& attrs,
                          fbn::Shape* shape) {
  for (const TensorShape* t : {&y_backprop, &x}) {
    if (t->dims() != 4 && t->dims() != 5) {
      return errors::InvalidArgument("input must be 4 or 5-dimensional", t->DebugString());
    }
  }
  if (scale.dims() != 1) {
    return errors::InvalidArgument("scale must be 1-dimensional", scale.DebugString());
  }
  if (reserve_space_1.dims() != 1) {
    return errors::InvalidArgument("saved mean must be 1-dimensional",
                                   reserve_space_1.DebugString());
  }
  if (reserve_space_2.dims() != 1) {
    return errors::InvalidArgument("saved variance must be 1-dimensional",
                                   reserve_space_2.DebugString());
  }
  if (x != y_backprop) {
    return errors::InvalidArgument("x and y_backprop must have same shape, but x has shape ",
                                   x.DebugString(), " and y_backprop has shape ",
                                   y_backprop.DebugString());
  }

  *shape = CoreShapeOf(x, attrs.channels_last);
  TF_RETURN_IF_ERROR(CheckChannels("scale", scale, shape->channels));
  TF_RETURN_IF_ERROR(CheckChannels("reserve_space_1", reserve_space_1, shape->channels));
  return CheckChannels("reserve_space_2", reserve_space_2, shape->channels);
}

}  // namespace fbn_kernels
}  // namespace tensorflow
