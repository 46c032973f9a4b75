// The CUstream behind TensorFlow's GPU stream, in every TensorFlow the project builds against
// (2.12-2.21). StreamExecutor moved from tensorflow/compiler/xla/ to xla/, and the handle's
// accessor changed from the implementation's GpuStreamHack() to platform_specific_handle().
#ifndef TF_FBN_OPS_CC_KERNELS_GPU_GPU_STREAM_H_
#define TF_FBN_OPS_CC_KERNELS_GPU_GPU_STREAM_H_

#if __has_include("xla/stream_executor/stream.h")
#include "xla/stream_executor/stream.h"
#else
#include "tensorflow/compiler/xla/stream_executor/stream.h"
#endif
#if __has_include("tensorflow/compiler/xla/stream_executor/stream_executor_internal.h")
#include "tensorflow/compiler/xla/stream_executor/stream_executor_internal.h"
#endif

namespace tensorflow {
namespace fbn_kernels {
namespace stream_handle_detail {

template <typename Stream>
auto Handle(Stream* stream, int) -> decltype(stream->platform_specific_handle().stream) {
  return stream->platform_specific_handle().stream;
}

// Chosen only where platform_specific_handle() does not exist (TensorFlow before 2.16 or so).
template <typename Stream>
void* Handle(Stream* stream, long) {
  return stream->implementation()->GpuStreamHack();
}

}  // namespace stream_handle_detail

// The CUDA stream (a CUstream) of `stream`, or null if it has none.
template <typename Stream>
void* CudaStreamOf(Stream* stream) {
  return stream_handle_detail::Handle(stream, 0);
}

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_GPU_GPU_STREAM_H_
