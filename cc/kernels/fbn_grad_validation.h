// Attribute parsing and input validation shared by every FbnFusedBatchNormGrad* kernel, on
// every device. Checks run in TensorFlow's order with TensorFlow's text, before any tensor
// data is touched, so the numeric core may assume valid input.
#ifndef TF_FBN_OPS_CC_KERNELS_FBN_GRAD_VALIDATION_H_
#define TF_FBN_OPS_CC_KERNELS_FBN_GRAD_VALIDATION_H_

#include <string>

#include "cc/core/bn_grad.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorflow {
namespace fbn_kernels {

// The attrs all three ops share.
struct GradAttrs {
  float epsilon = 1e-4f;
  bool channels_last = true;  // NHWC / NDHWC, else NCHW / NCDHW
  bool is_training = true;
};

Status ReadGradAttrs(OpKernelConstruction* ctx, GradAttrs* attrs);

// TensorFlow's check of a per-channel input against the channel count of x:
// "<name> must have the same number of elements as the channels of x, got A and B".
Status CheckChannels(const std::string& name, const TensorShape& t, int64_t channels);

// x's channel dimension: the last in a channels-last format (NHWC, NDHWC), the second in a
// channels-first one (NCHW, NCDHW).
inline int ChannelDimension(const TensorShape& x, bool channels_last) {
  return channels_last ? x.dims() - 1 : 1;
}

// x (4-D or 5-D, rank already checked) as the core sees it: [N, C, S] with S the product of the
// spatial dims (0 for an empty x).
fbn::Shape CoreShapeOf(const TensorShape& x, bool channels_last);

// Validates the shapes of the five inputs TensorFlow validates (reserve_space_3 of V3 is never
// examined, as in TensorFlow) and, on success, describes x for the core. The layout is keyed on
// x's rank, not on the data_format string: a 5-D x is NDHWC/NCDHW whatever 4-D name the format
// has, as in TF. Shapes only, so the XLA kernel runs the same checks at compile time.
Status ValidateGradInputs(const TensorShape& y_backprop, const TensorShape& x,
                          const TensorShape& scale, const TensorShape& reserve_space_1,
                          const TensorShape& reserve_space_2, const GradAttrs& attrs,
                          fbn::Shape* shape);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_FBN_GRAD_VALIDATION_H_
