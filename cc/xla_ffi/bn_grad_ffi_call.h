// What the CPU and CUDA handlers share: checking a custom call against the contract in
// bn_grad_ffi.h, turning it into the core's Params and Tensors, and choosing the element type.
#ifndef TF_FBN_OPS_CC_XLA_FFI_BN_GRAD_FFI_CALL_H_
#define TF_FBN_OPS_CC_XLA_FFI_BN_GRAD_FFI_CALL_H_

#include <cstdint>
#include <string>
#include <utility>

#include "cc/core/bn_grad.h"
#include "cc/xla_ffi/xla_ffi_api.h"

namespace fbn {
namespace xla_ffi {

namespace ffi = ::xla::ffi;

using ChannelVector = ffi::Buffer<ffi::F32>;

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

// The binding both handlers start from; each adds its context (thread pool or stream) first.
template <typename Binding>
auto BindGradCall(Binding binding) {
  return std::move(binding)
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

inline std::string DimsString(ffi::AnyBuffer::Dimensions dims) {
  std::string text = "[";
  for (size_t d = 0; d < dims.size(); ++d) text += (d ? "," : "") + std::to_string(dims[d]);
  return text + "]";
}

inline bool SameDims(ffi::AnyBuffer::Dimensions a, ffi::AnyBuffer::Dimensions b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d) {
    if (a[d] != b[d]) return false;
  }
  return true;
}

// Checks the call against the contract and fills params; an InvalidArgument error otherwise.
inline ffi::Error DescribeCall(const GradCall& call, Params* params) {
  const auto dims = call.x.dimensions();
  if (dims.size() != 4 && dims.size() != 5) {
    return ffi::Error::InvalidArgument("x must be 4- or 5-dimensional, got " + DimsString(dims));
  }
  const ffi::DataType type = call.x.element_type();
  if (type != ffi::DataType::F32 && type != ffi::DataType::F16 && type != ffi::DataType::BF16) {
    return ffi::Error::InvalidArgument("x must be f32, f16 or bf16");
  }
  if (call.y_backprop.element_type() != call.x.element_type() ||
      call.x_backprop.element_type() != call.x.element_type()) {
    return ffi::Error::InvalidArgument("y_backprop, x and x_backprop must have one element type");
  }
  if (!SameDims(call.y_backprop.dimensions(), dims) ||
      !SameDims(call.x_backprop.dimensions(), dims)) {
    return ffi::Error::InvalidArgument("y_backprop " + DimsString(call.y_backprop.dimensions()) +
                                       " and x_backprop " +
                                       DimsString(call.x_backprop.dimensions()) +
                                       " must have x's shape " + DimsString(dims));
  }
  const int channel_dim = call.channels_last ? static_cast<int>(dims.size()) - 1 : 1;
  const int64_t channels = dims[channel_dim];
  const ChannelVector* vectors[] = {&call.scale, &call.mean, &call.variance,
                                    &call.scale_backprop, &call.offset_backprop};
  const char* names[] = {"scale", "reserve_space_1", "reserve_space_2", "scale_backprop",
                         "offset_backprop"};
  for (int i = 0; i < 5; ++i) {
    const auto vdims = vectors[i]->dimensions();
    if (vdims.size() != 1 || vdims[0] != channels) {
      return ffi::Error::InvalidArgument(std::string(names[i]) + " must be [" +
                                         std::to_string(channels) + "] (x's channels), got " +
                                         DimsString(vdims));
    }
  }
  int64_t spatial = 1;
  for (size_t d = 1; d < dims.size(); ++d) {
    if (static_cast<int>(d) != channel_dim) spatial *= dims[d];
  }
  params->shape = Shape{dims[0], channels, spatial, call.channels_last};
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
  switch (call.x.element_type()) {
    case ffi::DataType::F32:
      return run(CoreTensors<float>(call));
    case ffi::DataType::F16:
      return run(CoreTensors<Half>(call));
    case ffi::DataType::BF16:
      return run(CoreTensors<BFloat16>(call));
    default:
      return ffi::Error::InvalidArgument("x must be f32, f16 or bf16");
  }
}

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_BN_GRAD_FFI_CALL_H_
