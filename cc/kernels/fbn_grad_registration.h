// One macro that registers a kernel for the three versions of an op on one device, with
// TensorFlow's type constraints: V1 for float; V2 and V3 for float, half and bfloat16, with
// U = float. Every device file (CPU, GPU, XLA) of the gradient ops and the forward ops registers
// through it, so the type lists cannot drift apart.
#ifndef TF_FBN_OPS_CC_KERNELS_FBN_GRAD_REGISTRATION_H_
#define TF_FBN_OPS_CC_KERNELS_FBN_GRAD_REGISTRATION_H_

#include "tensorflow/core/framework/op_kernel.h"

// OP is V1's name ("FbnFusedBatchNormGrad"); KernelFor is a template of one type parameter, T:
// KernelFor<T> is the kernel class for x's type.
#define FBN_REGISTER_VERSIONS(OP, DEVICE_NAME, KernelFor)                                     \
  REGISTER_KERNEL_BUILDER(Name(OP).Device(DEVICE_NAME).TypeConstraint<float>("T"),           \
                          KernelFor<float>);                                                 \
  FBN_REGISTER_V2_V3(OP, DEVICE_NAME, KernelFor, float);                                     \
  FBN_REGISTER_V2_V3(OP, DEVICE_NAME, KernelFor, Eigen::half);                               \
  FBN_REGISTER_V2_V3(OP, DEVICE_NAME, KernelFor, Eigen::bfloat16)

#define FBN_REGISTER_V2_V3(OP, DEVICE_NAME, KernelFor, T)                                     \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name(OP "V2").Device(DEVICE_NAME).TypeConstraint<T>("T").TypeConstraint<float>("U"),   \
      KernelFor<T>);                                                                         \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name(OP "V3").Device(DEVICE_NAME).TypeConstraint<T>("T").TypeConstraint<float>("U"),   \
      KernelFor<T>)

#define FBN_REGISTER_GRAD_KERNELS(DEVICE_NAME, KernelFor) \
  FBN_REGISTER_VERSIONS("FbnFusedBatchNormGrad", DEVICE_NAME, KernelFor)

#endif  // TF_FBN_OPS_CC_KERNELS_FBN_GRAD_REGISTRATION_H_
