// The two ways the XLA kernel of the forward ops (xla_op_kernels.cc) compiles them, as
// for the gradients (xla_grad_lowerings.h): a custom call of our FFI target (the core's CPU
// forward, the non-jit kernels' bits), or an HLO lowering in double. Both take inputs that
// ValidateForwardInputs has accepted and set outputs 0-4 (V3's output 5 is the kernel's).
#ifndef TF_FBN_OPS_CC_XLA_XLA_FORWARD_LOWERINGS_H_
#define TF_FBN_OPS_CC_XLA_XLA_FORWARD_LOWERINGS_H_

#include "cc/core/bn_forward.h"
#include "cc/kernels/fbn_forward_validation.h"
#include "cc/xla/xla_grad_lowerings.h"

namespace tensorflow {
namespace fbn_kernels {

// save_inv_std: training saves 1/sqrt(var + eps) in reserve_space_2 (SavedInverseStd).
void BuildForwardCustomCall(LoweringContext* ctx, const ForwardAttrs& attrs,
                            bool save_inv_std);

// The reference's arithmetic (cc/core/bn_forward_reference.cc) in HLO: inputs widened to
// double, the mean, then the squared deviations about it, each output rounded once from double.
void BuildForwardHlo(LoweringContext* ctx, const ForwardAttrs& attrs, bool save_inv_std,
                     const fbn::Shape& shape);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_XLA_XLA_FORWARD_LOWERINGS_H_
