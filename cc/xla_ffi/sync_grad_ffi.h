// XLA FFI custom-call targets for synchronized batch norm's two backward halves (the ops
// FbnSyncBatchNormGradSums and FbnSyncBatchNormGradFromSums, cc/ops/fbn_sync_ops.cc): the core's
// Stage::kSums and Stage::kDxFromSums inside compiled XLA programs, with the non-jit kernels'
// bits. Like bn_grad_ffi.h's target, they need XLA's FFI headers and nothing of TensorFlow.
//
// tf_fbn_ops_sync_batch_norm_grad_sums, this replica's per-channel sums:
//   operands  y_backprop, x              T[x's dims], T in {f32, f16, bf16}, rank 4 or 5
//             mean                       f32[C]
//   results   sum_dy, sum_dy_xc          f64[C]: Σ dy and Σ dy·(x − mean)
//   attrs     channels_last: bool (NHWC/NDHWC, else NCHW/NCDHW)
// tf_fbn_ops_sync_batch_norm_grad_from_sums, the gradients from every replica's sums:
//   operands  y_backprop, x              T[x's dims]
//             scale, mean, variance      f32[C]
//             sum_dy, sum_dy_xc          f64[C]: the sums over every replica
//             count                      s64[]: elements per channel over every replica
//             replica_sum_dy, replica_sum_dy_xc  f64[C]: this replica's own sums
//   results   x_backprop                 T[x's dims]
//             scale_backprop, offset_backprop   f32[C]: this replica's share
//   attrs     epsilon: f32, channels_last: bool
// Every tensor row-major. A call that breaks the contract returns an FFI error (InvalidArgument)
// naming what is wrong; so does, on the CPU, a count below this replica's own elements per
// channel. The CUDA handler reads the count on the device, where no error can come back: there
// such a count makes every output NaN (Tensors::device_global_count, cc/core/bn_grad.h).
#ifndef TF_FBN_OPS_CC_XLA_FFI_SYNC_GRAD_FFI_H_
#define TF_FBN_OPS_CC_XLA_FFI_SYNC_GRAD_FFI_H_

#include "cc/xla_ffi/bn_grad_ffi.h"

// The CPU handlers: the core's CPU kernels on XLA's intra-op thread pool.
FBN_FFI_EXPORT XLA_FFI_Error* FbnSyncGradSumsHost(XLA_FFI_CallFrame* call_frame);
FBN_FFI_EXPORT XLA_FFI_Error* FbnSyncGradFromSumsHost(XLA_FFI_CallFrame* call_frame);
// The CUDA handlers: the core's CUDA kernels on XLA's stream (in builds with CUDA only).
FBN_FFI_EXPORT XLA_FFI_Error* FbnSyncGradSumsCuda(XLA_FFI_CallFrame* call_frame);
FBN_FFI_EXPORT XLA_FFI_Error* FbnSyncGradFromSumsCuda(XLA_FFI_CallFrame* call_frame);

namespace fbn {
namespace xla_ffi {

inline constexpr char kSyncSumsTarget[] = "tf_fbn_ops_sync_batch_norm_grad_sums";
inline constexpr char kSyncFromSumsTarget[] = "tf_fbn_ops_sync_batch_norm_grad_from_sums";

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_SYNC_GRAD_FFI_H_
