// What every handler's contract shares (bn_grad_ffi.h, sync_grad_ffi.h, bn_forward_ffi.h): x and
// the tensors of its shape, and the per-channel vectors, checked the same way with the same
// words; x's view for the core; the core's storage type for x's element type.
#ifndef TF_FBN_OPS_CC_XLA_FFI_FFI_CHECKS_H_
#define TF_FBN_OPS_CC_XLA_FFI_FFI_CHECKS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "cc/core/bn_grad.h"
#include "cc/xla_ffi/xla_ffi_api.h"

namespace fbn {
namespace xla_ffi {

namespace ffi = ::xla::ffi;

using ChannelVector = ffi::Buffer<ffi::F32>;
using ChannelSums = ffi::Buffer<ffi::F64>;

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

// x is 4- or 5-D of f32, f16 or bf16. On success, x's view for the core (channels last:
// NHWC/NDHWC).
inline ffi::Error DescribeX(const ffi::AnyBuffer& x, bool channels_last, Shape* shape) {
  const auto dims = x.dimensions();
  if (dims.size() != 4 && dims.size() != 5) {
    return ffi::Error::InvalidArgument("x must be 4- or 5-dimensional, got " + DimsString(dims));
  }
  const ffi::DataType type = x.element_type();
  if (type != ffi::DataType::F32 && type != ffi::DataType::F16 && type != ffi::DataType::BF16) {
    return ffi::Error::InvalidArgument("x must be f32, f16 or bf16");
  }
  const int channel_dim = channels_last ? static_cast<int>(dims.size()) - 1 : 1;
  int64_t spatial = 1;
  for (size_t d = 1; d < dims.size(); ++d) {
    if (static_cast<int>(d) != channel_dim) spatial *= dims[d];
  }
  *shape = Shape{dims[0], dims[channel_dim], spatial, channels_last};
  return ffi::Error::Success();
}

// DescribeX, then y_backprop and x_backprop (where the call has one) of x's type and shape.
inline ffi::Error DescribeElementTensors(const ffi::AnyBuffer& y_backprop, const ffi::AnyBuffer& x,
                                         const ffi::AnyBuffer* x_backprop, bool channels_last,
                                         Shape* shape) {
  ffi::Error error = DescribeX(x, channels_last, shape);
  if (error.failure()) return error;
  const auto dims = x.dimensions();
  const ffi::DataType type = x.element_type();
  if (y_backprop.element_type() != type ||
      (x_backprop != nullptr && x_backprop->element_type() != type)) {
    return ffi::Error::InvalidArgument(x_backprop != nullptr
                                           ? "y_backprop, x and x_backprop must have one element type"
                                           : "y_backprop and x must have one element type");
  }
  if (!SameDims(y_backprop.dimensions(), dims) ||
      (x_backprop != nullptr && !SameDims(x_backprop->dimensions(), dims))) {
    const std::string also =
        x_backprop != nullptr ? " and x_backprop " + DimsString(x_backprop->dimensions()) : "";
    return ffi::Error::InvalidArgument("y_backprop " + DimsString(y_backprop.dimensions()) +
                                       also + " must have x's shape " + DimsString(dims));
  }
  return ffi::Error::Success();
}

// The per-channel operands and results, by name in the call's order: each a vector of x's
// channel count. The first that is not is named.
inline ffi::Error CheckChannelVectors(
    std::initializer_list<std::pair<const char*, ffi::AnyBuffer::Dimensions>> vectors,
    int64_t channels) {
  for (const auto& [name, dims] : vectors) {
    if (dims.size() != 1 || dims[0] != channels) {
      return ffi::Error::InvalidArgument(std::string(name) + " must be [" +
                                         std::to_string(channels) + "] (x's channels), got " +
                                         DimsString(dims));
    }
  }
  return ffi::Error::Success();
}

// Calls run(T{}) with the core's storage type T for an element type DescribeElementTensors
// accepted.
template <typename Run>
ffi::Error WithCoreType(ffi::DataType type, Run&& run) {
  switch (type) {
    case ffi::DataType::F32:
      return run(float{});
    case ffi::DataType::F16:
      return run(Half{});
    case ffi::DataType::BF16:
      return run(BFloat16{});
    default:
      return ffi::Error::InvalidArgument("x must be f32, f16 or bf16");
  }
}

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_FFI_CHECKS_H_
