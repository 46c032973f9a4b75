// The two ways the XLA kernels (xla_op_kernels.cc) compile a gradient op, and synchronized
// batch norm's two backward ops:
//   - a custom call to our own handlers (cc/xla_ffi/) through XLA's typed FFI: the core's CPU or
//     CUDA kernels run inside the compiled program, with the non-jit kernels' bits;
//   - an HLO lowering, for TensorFlow wheels without what the FFI needs and on request.
// Each takes inputs that the op's validation (ValidateGradInputs, ValidateSyncInputs) has
// accepted and sets all the op's outputs.
#ifndef TF_FBN_OPS_CC_XLA_XLA_GRAD_LOWERINGS_H_
#define TF_FBN_OPS_CC_XLA_XLA_GRAD_LOWERINGS_H_

#include <map>
#include <string>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/kernels/fbn_grad_validation.h"
#include "cc/kernels/sync_grad_validation.h"
#include "cc/xla/lowering_context.h"
#include "cc/xla/xla_path.h"

namespace tensorflow {
namespace fbn_kernels {

void BuildGradCustomCall(LoweringContext* ctx, const GradAttrs& attrs, bool saved_inv_std);

// A custom call's attributes, as the MLIR dictionary XLA's typed FFI decodes.
class FfiAttributes {
 public:
  FfiAttributes& Bool(const std::string& name, bool value);
  FfiAttributes& F32(const std::string& name, float value);  // bit-exact
  std::string Dictionary() const;

 private:
  std::map<std::string, std::string> entries_;  // sorted by name, as MLIR keeps them
};

struct FfiResult {
  xla::PrimitiveType type;
  TensorShape shape;
};

// One call of our FFI target `target` (cc/xla_ffi/) on the kernel's inputs `inputs`, every
// operand and result row-major: its results in order. Only on the custom-call path
// (ChooseXlaGradPath); in a build without the handlers it sets an error and returns none.
std::vector<xla::XlaOp> CallFfiTarget(LoweringContext* ctx, const char* target,
                                      const std::vector<int>& inputs,
                                      const std::vector<FfiResult>& results,
                                      const FfiAttributes& attributes);

void BuildGradHlo(LoweringContext* ctx, const GradAttrs& attrs, bool saved_inv_std,
                  const fbn::Shape& shape);

// FbnSyncBatchNormGradSums: float64 sum_dy and sum_dy_xc. The custom call has the kernels' bits;
// the HLO lowering sums in double in XLA's order, the same on every replica that runs the same
// program.
void BuildSyncSumsCustomCall(LoweringContext* ctx, const SyncAttrs& attrs);
void BuildSyncSumsHlo(LoweringContext* ctx, const SyncAttrs& attrs);

// FbnSyncBatchNormGradFromSums: x_backprop from the global sums and count (a run-time operand,
// the all-reduce's), the replica's own scale_backprop and offset_backprop. The HLO lowering has
// the gradient lowering's numerics (double, each output rounded once).
void BuildSyncFromSumsCustomCall(LoweringContext* ctx, const SyncAttrs& attrs);
void BuildSyncFromSumsHlo(LoweringContext* ctx, const SyncAttrs& attrs);

// The per-channel vectors (shape [C]) spread along x's channel dimension.
class ChannelBroadcast {
 public:
  ChannelBroadcast(const TensorShape& x, bool channels_last)
      : channel_dim_(ChannelDimension(x, channels_last)) {
    for (int d = 0; d < x.dims(); ++d) {
      dims_.push_back(x.dim_size(d));
      if (d != channel_dim_) reduce_dims_.push_back(d);
    }
  }

  xla::XlaOp Spread(xla::XlaOp per_channel) const {
    return xla::BroadcastInDim(per_channel, dims_, {channel_dim_});
  }

  // Sum over every dimension but the channel one, in double.
  xla::XlaOp SumPerChannel(LoweringContext* ctx, xla::XlaOp values) const {
    return xla::Reduce(values, xla::ConstantR0<double>(ctx->builder(), 0.0),
                       *ctx->GetOrCreateAdd(DT_DOUBLE), reduce_dims_);
  }

 private:
  std::vector<int64_t> dims_;
  std::vector<int64_t> reduce_dims_;
  int64_t channel_dim_;
};

inline xla::XlaOp Widen(xla::XlaOp value) { return xla::ConvertElementType(value, xla::F64); }

// 1/sqrt(variance + epsilon) in double, epsilon being the op's float attribute.
xla::XlaOp InverseStd(xla::XlaOp variance, float epsilon);

// Training's x_backprop in double, with the reference's grouping (cc/core/bn_grad_reference.cc),
// from x − mean (`xc`) and the per-channel sums of dy and dy·xc over `count` elements per
// channel (the batch's, or every replica's for synchronized batch norm). Every operand is F64.
xla::XlaOp TrainingXBackprop(const ChannelBroadcast& channels, xla::XlaOp dy, xla::XlaOp xc,
                             xla::XlaOp scale, xla::XlaOp inv_std, xla::XlaOp sum_dy,
                             xla::XlaOp sum_dy_xc, xla::XlaOp count);

// Float [0]: what TensorFlow's compiled ops give for outputs nothing reads.
xla::XlaOp EmptyFloatVector(xla::XlaBuilder* builder);

// Outputs 3 and 4 exist for compatibility only: empty [0], as TensorFlow's CPU kernel.
void SetEmptyReserveOutputs(LoweringContext* ctx);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_XLA_XLA_GRAD_LOWERINGS_H_
