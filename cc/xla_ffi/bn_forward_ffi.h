// XLA FFI custom-call target for the batch-norm forward (the ops FbnFusedBatchNorm, V2, V3):
// the core's CPU or CUDA forward inside compiled XLA programs, with the non-jit kernels' bits. Like
// bn_grad_ffi.h's target, it needs XLA's FFI headers and nothing of TensorFlow.
//
// tf_fbn_ops_batch_norm_forward:
//   operands  x                 T[x's dims], T in {f32, f16, bf16}, rank 4 or 5, row-major
//             scale, offset     f32[C]
//             mean, variance    f32[C] where read: in inference (the population statistics) and
//                               in training with exponential_avg_factor != 1 (the running
//                               averages); any f32 vector otherwise, unread
//   results   y                 T[x's dims], row-major
//             batch_mean, batch_variance, reserve_space_1, reserve_space_2   f32[C]
//   attrs     epsilon: f32, exponential_avg_factor: f32, is_training: bool,
//             channels_last: bool (NHWC/NDHWC, else NCHW/NCDHW),
//             save_inv_std: bool (training saves 1/sqrt(var + eps) in reserve_space_2 instead
//             of the biased variance)
// The outputs are those of cc/core/bn_forward.h's ForwardTensors. A call that breaks the
// contract returns an FFI error (InvalidArgument) naming what is wrong.
#ifndef TF_FBN_OPS_CC_XLA_FFI_BN_FORWARD_FFI_H_
#define TF_FBN_OPS_CC_XLA_FFI_BN_FORWARD_FFI_H_

#include "cc/xla_ffi/bn_grad_ffi.h"

// The CPU handler: the core's CPU forward on XLA's intra-op thread pool.
FBN_FFI_EXPORT XLA_FFI_Error* FbnBatchNormForwardHost(XLA_FFI_CallFrame* call_frame);
// The CUDA handler: the core's CUDA forward on XLA's stream (in builds with CUDA only). Built and
// tested under the host emulator; TensorFlow's XLA does not register it until a GPU has run it
// (ChooseXlaForwardPath), JAX can (make xla-ffi-lib XLA_FFI_CUDA=1).
FBN_FFI_EXPORT XLA_FFI_Error* FbnBatchNormForwardCuda(XLA_FFI_CallFrame* call_frame);

namespace fbn {
namespace xla_ffi {

inline constexpr char kForwardTarget[] = "tf_fbn_ops_batch_norm_forward";

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_BN_FORWARD_FFI_H_
