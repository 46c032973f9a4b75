// The gradient's handler, written once for any platform (cpu/host_platform.h,
// gpu/cuda_platform.h): the call of bn_grad_ffi.h bound, checked against the contract, turned
// into the core's Params and Tensors for x's element type, and run on the platform.
#ifndef TF_FBN_OPS_CC_XLA_FFI_BN_GRAD_FFI_CALL_H_
#define TF_FBN_OPS_CC_XLA_FFI_BN_GRAD_FFI_CALL_H_

#include <utility>

#include "cc/core/bn_grad.h"
#include "cc/xla_ffi/ffi_checks.h"

namespace fbn {
namespace xla_ffi {

// One decoded call: the handler's bound operands, results and attributes.
struct GradCall {
  ffi::AnyBuffer y_backprop;
  ffi::AnyBuffer x;
  ChannelVector scale;
  ChannelVector mean;
  ChannelVector variance;
  ffi::AnyBuffer x_backprop;
  ChannelVector scale_backprop;
  ChannelVector offset_backprop;
  float epsilon;
  bool is_training;
  bool channels_last;
  bool saved_inv_std;
};

// The binding: the platform's context, then the call's operands, results and attributes.
template <typename Platform>
auto BindGradCall() {
  return ffi::Ffi::Bind()
      .template Ctx<Platform>()
      .template Arg<ffi::AnyBuffer>()             // y_backprop
      .template Arg<ffi::AnyBuffer>()             // x
      .template Arg<ChannelVector>()              // scale
      .template Arg<ChannelVector>()              // reserve_space_1
      .template Arg<ChannelVector>()              // reserve_space_2
      .template Ret<ffi::AnyBuffer>()             // x_backprop
      .template Ret<ChannelVector>()              // scale_backprop
      .template Ret<ChannelVector>()              // offset_backprop
      .template Attr<float>("epsilon")
      .template Attr<bool>("is_training")
      .template Attr<bool>("channels_last")
      .template Attr<bool>("saved_inv_std");
}

// Checks the call against the contract and fills params; an InvalidArgument error otherwise.
inline ffi::Error DescribeCall(const GradCall& call, Params* params) {
  Shape shape;
  ffi::Error error =
      DescribeElementTensors(call.y_backprop, call.x, &call.x_backprop, call.channels_last, &shape);
  if (error.failure()) return error;
  error = CheckChannelVectors({{"scale", call.scale.dimensions()},
                               {"reserve_space_1", call.mean.dimensions()},
                               {"reserve_space_2", call.variance.dimensions()},
                               {"scale_backprop", call.scale_backprop.dimensions()},
                               {"offset_backprop", call.offset_backprop.dimensions()}},
                              shape.channels);
  if (error.failure()) return error;
  params->shape = shape;
  params->epsilon = call.epsilon;
  params->is_training = call.is_training;
  params->saved_inv_std = call.saved_inv_std;
  return ffi::Error::Success();
}

template <typename T>
Tensors<T> CoreTensors(const GradCall& call) {
  Tensors<T> t;
  t.y_backprop = static_cast<const T*>(call.y_backprop.untyped_data());
  t.x = static_cast<const T*>(call.x.untyped_data());
  t.scale = call.scale.typed_data();
  t.mean = call.mean.typed_data();
  t.variance = call.variance.typed_data();
  t.x_backprop = static_cast<T*>(call.x_backprop.untyped_data());
  t.scale_backprop = call.scale_backprop.typed_data();
  t.offset_backprop = call.offset_backprop.typed_data();
  return t;
}

// Calls run(Tensors<T>{...}) with the core's storage type for x's element type (one that
// DescribeCall accepted).
template <typename Run>
ffi::Error WithCoreTensors(const GradCall& call, Run&& run) {
  return WithCoreType(call.x.element_type(),
                      [&](auto type) { return run(CoreTensors<decltype(type)>(call)); });
}

template <typename Platform>
ffi::Error GradHandler(Platform platform, ffi::AnyBuffer y_backprop, ffi::AnyBuffer x,
                       ChannelVector scale, ChannelVector mean, ChannelVector variance,
                       ffi::Result<ffi::AnyBuffer> x_backprop,
                       ffi::Result<ChannelVector> scale_backprop,
                       ffi::Result<ChannelVector> offset_backprop, float epsilon,
                       bool is_training, bool channels_last, bool saved_inv_std) {
  const GradCall call{y_backprop,      x,           scale,         mean,
                      variance,        *x_backprop, *scale_backprop, *offset_backprop,
                      epsilon,         is_training, channels_last, saved_inv_std};
  Params params;
  ffi::Error described = DescribeCall(call, &params);
  if (described.failure()) return described;
  return WithCoreTensors(call, [&](const auto& tensors) {
    return platform.Run(params, tensors, "batch-norm gradient");
  });
}

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_BN_GRAD_FFI_CALL_H_
