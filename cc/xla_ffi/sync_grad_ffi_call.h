// Synchronized batch norm's two handlers, written once for any platform (cpu/host_platform.h,
// gpu/cuda_platform.h): the calls of sync_grad_ffi.h bound, checked against the contract, turned
// into the core's Params (one Stage each) and Tensors, and run on the platform.
#ifndef TF_FBN_OPS_CC_XLA_FFI_SYNC_GRAD_FFI_CALL_H_
#define TF_FBN_OPS_CC_XLA_FFI_SYNC_GRAD_FFI_CALL_H_

#include <cstdint>
#include <string>
#include <utility>

#include "cc/core/bn_grad.h"
#include "cc/xla_ffi/ffi_checks.h"

namespace fbn {
namespace xla_ffi {

using Count = ffi::BufferR0<ffi::S64>;

// tf_fbn_ops_sync_batch_norm_grad_sums, decoded.
struct SumsCall {
  ffi::AnyBuffer y_backprop;
  ffi::AnyBuffer x;
  ChannelVector mean;
  ChannelSums sum_dy;
  ChannelSums sum_dy_xc;
  bool channels_last;
};

// tf_fbn_ops_sync_batch_norm_grad_from_sums, decoded.
struct FromSumsCall {
  ffi::AnyBuffer y_backprop;
  ffi::AnyBuffer x;
  ChannelVector scale;
  ChannelVector mean;
  ChannelVector variance;
  ChannelSums sum_dy;
  ChannelSums sum_dy_xc;
  Count count;
  ChannelSums replica_sum_dy;
  ChannelSums replica_sum_dy_xc;
  ffi::AnyBuffer x_backprop;
  ChannelVector scale_backprop;
  ChannelVector offset_backprop;
  float epsilon;
  bool channels_last;
};

// The bindings: the platform's context, then the call's operands, results and attributes.
template <typename Platform>
auto BindSumsCall() {
  return ffi::Ffi::Bind()
      .template Ctx<Platform>()
      .template Arg<ffi::AnyBuffer>()  // y_backprop
      .template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ChannelVector>()   // mean
      .template Ret<ChannelSums>()     // sum_dy
      .template Ret<ChannelSums>()     // sum_dy_xc
      .template Attr<bool>("channels_last");
}

template <typename Platform>
auto BindFromSumsCall() {
  return ffi::Ffi::Bind()
      .template Ctx<Platform>()
      .template Arg<ffi::AnyBuffer>()  // y_backprop
      .template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ChannelVector>()   // scale
      .template Arg<ChannelVector>()   // mean
      .template Arg<ChannelVector>()   // variance
      .template Arg<ChannelSums>()     // sum_dy
      .template Arg<ChannelSums>()     // sum_dy_xc
      .template Arg<Count>()           // count
      .template Arg<ChannelSums>()     // replica_sum_dy
      .template Arg<ChannelSums>()     // replica_sum_dy_xc
      .template Ret<ffi::AnyBuffer>()  // x_backprop
      .template Ret<ChannelVector>()   // scale_backprop
      .template Ret<ChannelVector>()   // offset_backprop
      .template Attr<float>("epsilon")
      .template Attr<bool>("channels_last");
}

inline ffi::Error DescribeSumsCall(const SumsCall& call, Params* params) {
  Shape shape;
  ffi::Error error =
      DescribeElementTensors(call.y_backprop, call.x, nullptr, call.channels_last, &shape);
  if (error.failure()) return error;
  error = CheckChannelVectors({{"mean", call.mean.dimensions()},
                               {"sum_dy", call.sum_dy.dimensions()},
                               {"sum_dy_xc", call.sum_dy_xc.dimensions()}},
                              shape.channels);
  if (error.failure()) return error;
  params->shape = shape;
  params->stage = Stage::kSums;
  return ffi::Error::Success();
}

// params->global_count stays 0: where the count is read is the handler's business.
inline ffi::Error DescribeFromSumsCall(const FromSumsCall& call, Params* params) {
  Shape shape;
  ffi::Error error =
      DescribeElementTensors(call.y_backprop, call.x, &call.x_backprop, call.channels_last, &shape);
  if (error.failure()) return error;
  error = CheckChannelVectors({{"scale", call.scale.dimensions()},
                               {"mean", call.mean.dimensions()},
                               {"variance", call.variance.dimensions()},
                               {"sum_dy", call.sum_dy.dimensions()},
                               {"sum_dy_xc", call.sum_dy_xc.dimensions()},
                               {"replica_sum_dy", call.replica_sum_dy.dimensions()},
                               {"replica_sum_dy_xc", call.replica_sum_dy_xc.dimensions()},
                               {"scale_backprop", call.scale_backprop.dimensions()},
                               {"offset_backprop", call.offset_backprop.dimensions()}},
                              shape.channels);
  if (error.failure()) return error;
  params->shape = shape;
  params->epsilon = call.epsilon;
  params->stage = Stage::kDxFromSums;
  return ffi::Error::Success();
}

// The count checked as the op's kernels check it (sync_grad_validation.cc), in the same words:
// the global sums include this replica's own elements.
inline ffi::Error CheckGlobalCount(int64_t count, const Shape& shape) {
  const int64_t local = shape.elements() > 0 ? shape.rest() : 0;
  if (count >= local) return ffi::Error::Success();
  return ffi::Error::InvalidArgument("count (" + std::to_string(count) +
                                     ") must be at least this replica's " +
                                     std::to_string(local) +
                                     " elements per channel: it counts every replica's");
}

template <typename T>
Tensors<T> SumsTensors(const SumsCall& call) {
  Tensors<T> t;
  t.y_backprop = static_cast<const T*>(call.y_backprop.untyped_data());
  t.x = static_cast<const T*>(call.x.untyped_data());
  t.mean = call.mean.typed_data();
  t.sum_dy = call.sum_dy.typed_data();
  t.sum_dy_xc = call.sum_dy_xc.typed_data();
  return t;
}

template <typename T>
Tensors<T> FromSumsTensors(const FromSumsCall& call) {
  Tensors<T> t;
  t.y_backprop = static_cast<const T*>(call.y_backprop.untyped_data());
  t.x = static_cast<const T*>(call.x.untyped_data());
  t.scale = call.scale.typed_data();
  t.mean = call.mean.typed_data();
  t.variance = call.variance.typed_data();
  t.global_sum_dy = call.sum_dy.typed_data();
  t.global_sum_dy_xc = call.sum_dy_xc.typed_data();
  t.replica_sum_dy = call.replica_sum_dy.typed_data();
  t.replica_sum_dy_xc = call.replica_sum_dy_xc.typed_data();
  t.x_backprop = static_cast<T*>(call.x_backprop.untyped_data());
  t.scale_backprop = call.scale_backprop.typed_data();
  t.offset_backprop = call.offset_backprop.typed_data();
  return t;
}

inline constexpr char kSyncWhat[] = "synchronized batch-norm gradient";

template <typename Platform>
ffi::Error SumsHandler(Platform platform, ffi::AnyBuffer y_backprop, ffi::AnyBuffer x,
                       ChannelVector mean, ffi::Result<ChannelSums> sum_dy,
                       ffi::Result<ChannelSums> sum_dy_xc, bool channels_last) {
  const SumsCall call{y_backprop, x, mean, *sum_dy, *sum_dy_xc, channels_last};
  Params params;
  ffi::Error described = DescribeSumsCall(call, &params);
  if (described.failure()) return described;
  return WithCoreType(x.element_type(), [&](auto type) {
    return platform.Run(params, SumsTensors<decltype(type)>(call), kSyncWhat);
  });
}

template <typename Platform>
ffi::Error FromSumsHandler(Platform platform, ffi::AnyBuffer y_backprop, ffi::AnyBuffer x,
                           ChannelVector scale, ChannelVector mean, ChannelVector variance,
                           ChannelSums sum_dy, ChannelSums sum_dy_xc, Count count,
                           ChannelSums replica_sum_dy, ChannelSums replica_sum_dy_xc,
                           ffi::Result<ffi::AnyBuffer> x_backprop,
                           ffi::Result<ChannelVector> scale_backprop,
                           ffi::Result<ChannelVector> offset_backprop, float epsilon,
                           bool channels_last) {
  const FromSumsCall call{y_backprop,     x,
                          scale,          mean,
                          variance,       sum_dy,
                          sum_dy_xc,      count,
                          replica_sum_dy, replica_sum_dy_xc,
                          *x_backprop,    *scale_backprop,
                          *offset_backprop, epsilon,
                          channels_last};
  Params params;
  ffi::Error described = DescribeFromSumsCall(call, &params);
  if (described.failure()) return described;
  return WithCoreType(x.element_type(), [&](auto type) {
    Tensors<decltype(type)> tensors = FromSumsTensors<decltype(type)>(call);
    ffi::Error counted = platform.UseGlobalCount(count, &params, &tensors);
    if (counted.failure()) return counted;
    return platform.Run(params, tensors, kSyncWhat);
  });
}

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_SYNC_GRAD_FFI_CALL_H_
