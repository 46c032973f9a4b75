// Attribute parsing and input validation of the FbnFusedBatchNorm* kernels (the forward), on
// every device: TensorFlow's order and text, before any tensor data is touched.
#ifndef TF_FBN_OPS_CC_KERNELS_FBN_FORWARD_VALIDATION_H_
#define TF_FBN_OPS_CC_KERNELS_FBN_FORWARD_VALIDATION_H_

#include "cc/core/bn_forward.h"
#include "cc/kernels/fbn_grad_validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorflow {
namespace fbn_kernels {

// The gradient ops' attrs and exponential_avg_factor.
struct ForwardAttrs : GradAttrs {
  float exponential_avg_factor = 1.0f;
};

Status ReadForwardAttrs(OpKernelConstruction* ctx, ForwardAttrs* attrs);

// Whether a call reads its mean and variance inputs: in inference, or in training with
// exponential_avg_factor != 1 (otherwise they may have any length, [0] being the usual).
inline bool ReadsGivenStatistics(const ForwardAttrs& attrs) {
  return !attrs.is_training || attrs.exponential_avg_factor != 1.0f;
}

// Validates the five inputs as TensorFlow's forward kernel does and, on success, describes x
// for the core. mean and variance must be vectors always, and hold a value per channel where
// they are read: in inference, or in training with exponential_avg_factor != 1. As for the
// gradients, a 5-D x is NDHWC/NCDHW whatever 4-D name the format has.
Status ValidateForwardInputs(const TensorShape& x, const TensorShape& scale,
                             const TensorShape& offset, const TensorShape& mean,
                             const TensorShape& variance, const ForwardAttrs& attrs,
                             fbn::Shape* shape);

// The core's parameters of a call on a device whose training saves 1/sqrt(var + eps) in
// reserve_space_2 (save_inv_std: TensorFlow's GPU contract) or the variance.
fbn::ForwardParams ForwardParamsOf(const ForwardAttrs& attrs, const fbn::Shape& shape,
                                   bool save_inv_std);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_FBN_FORWARD_VALIDATION_H_
