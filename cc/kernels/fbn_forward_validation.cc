#include "cc/kernels/fbn_forward_validation.h"

#include <string>

namespace tensorflow {
namespace fbn_kernels {

Status ReadForwardAttrs(OpKernelConstruction* ctx, ForwardAttrs* attrs) {
  TF_RETURN_IF_ERROR(ReadGradAttrs(ctx, attrs));
  return ctx->GetAttr("exponential_avg_factor", &attrs->exponential_avg_factor);
}

Status ValidateForwardInputs(const TensorShape& x, const TensorShape& scale,
                             const TensorShape& offset, const TensorShape& mean,
                             const TensorShape& variance, const ForwardAttrs& attrs,
                             fbn::Shape* shape) {
  if (x.dims() != 4 && x.dims() != 5) {
    return errors::InvalidArgument("input must be 4 or 5-dimensional", x.DebugString());
  }
  const std::pair<const char*, const TensorShape*> vectors[] = {
      {"scale", &scale},
      {"offset", &offset},
      {"estimated_mean", &mean},
      {"estimated_variance", &variance}};
  for (const auto& [name, t] : vectors) {
    if (t->dims() != 1) {
      return errors::InvalidArgument(name, " must be 1-dimensional", t->DebugString());
    }
  }
  *shape = CoreShapeOf(x, attrs.channels_last);
  TF_RETURN_IF_ERROR(CheckChannels("scale", scale, shape->channels));
  TF_RETURN_IF_ERROR(CheckChannels("offset", offset, shape->channels));
  if (!ReadsGivenStatistics(attrs)) return OkStatus();
  const std::string when = attrs.is_training ? "When exponential_avg_factor != 1, "
                                             : "When is_training=false, ";
  TF_RETURN_IF_ERROR(CheckChannels(when + "mean", mean, shape->channels));
  return CheckChannels(when + "variance", variance, shape->channels);
}

fbn::ForwardParams ForwardParamsOf(const ForwardAttrs& attrs, const fbn::Shape& shape,
                                   bool save_inv_std) {
  fbn::ForwardParams params;
  params.shape = shape;
  params.epsilon = attrs.epsilon;
  params.exponential_avg_factor = attrs.exponential_avg_factor;
  params.is_training = attrs.is_training;
  params.save_inv_std = save_inv_std && attrs.is_training;
  return params;
}

}  // namespace fbn_kernels
}  // namespace tensorflow
