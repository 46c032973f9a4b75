// The forward's handler, written once for any platform (cpu/host_platform.h): the call of
// bn_forward_ffi.h bound, checked against the contract, turned into the core's ForwardParams
// and ForwardTensors for x's element type, and run on the platform.
#ifndef TF_FBN_OPS_CC_XLA_FFI_BN_FORWARD_FFI_CALL_H_
#define TF_FBN_OPS_CC_XLA_FFI_BN_FORWARD_FFI_CALL_H_

#include "cc/core/bn_forward.h"
#include "cc/xla_ffi/ffi_checks.h"

namespace fbn {
namespace xla_ffi {

// One decoded call: the handler's bound operands, results and attributes.
struct ForwardCall {
  ffi::AnyBuffer x;
  ChannelVector scale;
  ChannelVector offset;
  ChannelVector mean;
  ChannelVector variance;
  ffi::AnyBuffer y;
  ChannelVector batch_mean;
  ChannelVector batch_variance;
  ChannelVector saved_mean;
  ChannelVector saved_variance;
  float epsilon;
  float exponential_avg_factor;
  bool is_training;
  bool channels_last;
  bool save_inv_std;

  // Whether the call reads mean and variance (TensorFlow's kernels read them only then).
  bool ReadsGivenStatistics() const { return !is_training || exponential_avg_factor != 1.0f; }
};

// The binding: the platform's context, then the call's operands, results and attributes.
template <typename Platform>
auto BindForwardCall() {
  return ffi::Ffi::Bind()
      .template Ctx<Platform>()
      .template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ChannelVector>()   // scale
      .template Arg<ChannelVector>()   // offset
      .template Arg<ChannelVector>()   // mean
      .template Arg<ChannelVector>()   // variance
      .template Ret<ffi::AnyBuffer>()  // y
      .template Ret<ChannelVector>()   // batch_mean
      .template Ret<ChannelVector>()   // batch_variance
      .template Ret<ChannelVector>()   // reserve_space_1
      .template Ret<ChannelVector>()   // reserve_space_2
      .template Attr<float>("epsilon")
      .template Attr<float>("exponential_avg_factor")
      .template Attr<bool>("is_training")
      .template Attr<bool>("channels_last")
      .template Attr<bool>("save_inv_std");
}

// Checks the call against the contract and fills params; an InvalidArgument error otherwise.
inline ffi::Error DescribeForwardCall(const ForwardCall& call, ForwardParams* params) {
  Shape shape;
  ffi::Error error = DescribeX(call.x, call.channels_last, &shape);
  if (error.failure()) return error;
  if (call.y.element_type() != call.x.element_type()) {
    return ffi::Error::InvalidArgument("x and y must have one element type");
  }
  if (!SameDims(call.y.dimensions(), call.x.dimensions())) {
    return ffi::Error::InvalidArgument("y " + DimsString(call.y.dimensions()) +
                                       " must have x's shape " + DimsString(call.x.dimensions()));
  }
  error = CheckChannelVectors({{"scale", call.scale.dimensions()},
                               {"offset", call.offset.dimensions()},
                               {"batch_mean", call.batch_mean.dimensions()},
                               {"batch_variance", call.batch_variance.dimensions()},
                               {"reserve_space_1", call.saved_mean.dimensions()},
                               {"reserve_space_2", call.saved_variance.dimensions()}},
                              shape.channels);
  if (error.failure()) return error;
  if (call.ReadsGivenStatistics()) {
    error = CheckChannelVectors(
        {{"mean", call.mean.dimensions()}, {"variance", call.variance.dimensions()}},
        shape.channels);
    if (error.failure()) return error;
  }
  params->shape = shape;
  params->epsilon = call.epsilon;
  params->exponential_avg_factor = call.exponential_avg_factor;
  params->is_training = call.is_training;
  params->save_inv_std = call.save_inv_std && call.is_training;
  return ffi::Error::Success();
}

template <typename T>
ForwardTensors<T> CoreForwardTensors(const ForwardCall& call) {
  ForwardTensors<T> t;
  t.x = static_cast<const T*>(call.x.untyped_data());
  t.scale = call.scale.typed_data();
  t.offset = call.offset.typed_data();
  t.mean = call.ReadsGivenStatistics() ? call.mean.typed_data() : nullptr;
  t.variance = call.ReadsGivenStatistics() ? call.variance.typed_data() : nullptr;
  t.y = static_cast<T*>(call.y.untyped_data());
  t.batch_mean = call.batch_mean.typed_data();
  t.batch_variance = call.batch_variance.typed_data();
  t.saved_mean = call.saved_mean.typed_data();
  t.saved_variance = call.saved_variance.typed_data();
  return t;
}

template <typename Platform>
ffi::Error ForwardHandler(Platform platform, ffi::AnyBuffer x, ChannelVector scale,
                          ChannelVector offset, ChannelVector mean, ChannelVector variance,
                          ffi::Result<ffi::AnyBuffer> y, ffi::Result<ChannelVector> batch_mean,
                          ffi::Result<ChannelVector> batch_variance,
                          ffi::Result<ChannelVector> saved_mean,
                          ffi::Result<ChannelVector> saved_variance, float epsilon,
                          float exponential_avg_factor, bool is_training, bool channels_last,
                          bool save_inv_std) {
  const ForwardCall call{x,           scale,           offset,          mean,
                         variance,    *y,              *batch_mean,     *batch_variance,
                         *saved_mean, *saved_variance, epsilon,         exponential_avg_factor,
                         is_training, channels_last,   save_inv_std};
  ForwardParams params;
  ffi::Error described = DescribeForwardCall(call, &params);
  if (described.failure()) return described;
  return WithCoreType(call.x.element_type(), [&](auto type) {
    return platform.Run(params, CoreForwardTensors<decltype(type)>(call), "batch-norm forward");
  });
}

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_BN_FORWARD_FFI_CALL_H_
