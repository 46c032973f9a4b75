// XLA FFI custom-call targets for the batch-norm gradient: they run the numeric core (cc/core/)
// inside compiled XLA programs. They need XLA's FFI headers (xla/ffi/api/) and nothing of
// TensorFlow, so the same handlers register into TensorFlow's XLA (cc/kernels/
// xla_ffi_targets.cc) and, built as a standalone library, into JAX's.
//
// The call, on either platform:
//   operands  y_backprop, x       T[x's dims], T in {f32, f16, bf16}, rank 4 or 5, row-major
//             scale, reserve_space_1, reserve_space_2               f32[C]
//   results   x_backprop          T[x's dims], row-major
//             scale_backprop, offset_backprop                       f32[C]
//   attrs     epsilon: f32, is_training: bool, channels_last: bool (NHWC/NDHWC, else NCHW/NCDHW),
//             saved_inv_std: bool (in training, reserve_space_2 is 1/sqrt(var + eps), as the
//             GPU forward saves it; TensorFlow's GPU contract)
// A call that breaks the contract returns an FFI error (InvalidArgument) naming what is wrong.
#ifndef TF_FBN_OPS_CC_XLA_FFI_BN_GRAD_FFI_H_
#define TF_FBN_OPS_CC_XLA_FFI_BN_GRAD_FFI_H_

// XLA's C API names for the handler signature (xla/ffi/api/c_api.h), declared rather than
// included so that code which only names the target needs no XLA headers.
struct XLA_FFI_Error;
struct XLA_FFI_CallFrame;

// Exported even from a library built with hidden visibility: JAX finds them by name (ctypes).
#define FBN_FFI_EXPORT extern "C" __attribute__((visibility("default")))

// The CPU handler: the core's CPU kernels on XLA's intra-op thread pool.
FBN_FFI_EXPORT XLA_FFI_Error* FbnBatchNormGradHost(XLA_FFI_CallFrame* call_frame);
// The CUDA handler: the core's CUDA kernels on XLA's stream (in builds with CUDA only).
FBN_FFI_EXPORT XLA_FFI_Error* FbnBatchNormGradCuda(XLA_FFI_CallFrame* call_frame);

namespace fbn {
namespace xla_ffi {

// Custom-call target names are global in an XLA process: ours carry the package's name.
inline constexpr char kGradTarget[] = "tf_fbn_ops_batch_norm_grad";

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_BN_GRAD_FFI_H_
