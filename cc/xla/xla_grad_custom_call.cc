// The custom-call path: the op compiles into one call of our FFI target (cc/xla_ffi/), which
// runs the core's kernels on XLA's thread pool or stream.
//
// Layouts are pinned: every operand and result is declared row-major (CustomCallWithLayout), so
// XLA transposes, if ever, before and after the call, and the handler gets the dense NHWC or
// NCHW memory the core expects. Attributes travel as the MLIR dictionary XLA's typed FFI reads
// from the backend config, floats as their exact bit patterns. Synchronized batch norm's
// backward ops call their own targets (cc/xla_ffi/sync_grad_ffi.h) the same way.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cc/xla/xla_ffi_targets.h"
#include "cc/xla/xla_grad_lowerings.h"
#include "cc/xla_ffi/bn_grad_ffi.h"
#include "cc/xla_ffi/sync_grad_ffi.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"

#if FBN_XLA_FFI  // TensorFlow 2.20 and later, all with XLA under xla/
#include "xla/shape_util.h"
#endif

namespace tensorflow {
namespace fbn_kernels {
namespace {

constexpr char kLoweringVariable[] = "TF_FBN_OPS_XLA_LOWERING";

#if FBN_XLA_FFI
xla::Shape RowMajor(xla::PrimitiveType type, const TensorShape& shape) {
  const auto dims = shape.dim_sizes();
  return xla::ShapeUtil::MakeShapeWithDescendingLayout(
      type, std::vector<int64_t>(dims.begin(), dims.end()));
}
#endif  // FBN_XLA_FFI

}  // namespace

XlaGradPath ChooseXlaGradPath(const DeviceType& device_type, std::string* why) {
  const char* requested = std::getenv(kLoweringVariable);
  if (requested != nullptr && std::strcmp(requested, "hlo") == 0) {
    *why = std::string(kLoweringVariable) + "=hlo";
    return XlaGradPath::kHlo;
  }
  const std::string platform = device_type.type_string() == DEVICE_GPU_XLA_JIT ? "CUDA" : "Host";
  if (!XlaFfiTargetRegistered(platform, why)) return XlaGradPath::kHlo;
  why->clear();
  return XlaGradPath::kCustomCall;
}

FfiAttributes& FfiAttributes::Bool(const std::string& name, bool value) {
  entries_[name] = value ? "true" : "false";
  return *this;
}

FfiAttributes& FfiAttributes::F32(const std::string& name, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%08X", bits);
  entries_[name] = std::string(hex) + " : f32";
  return *this;
}

std::string FfiAttributes::Dictionary() const {
  std::string text;
  for (const auto& [name, value] : entries_) text += (text.empty() ? "" : ", ") + name + " = " + value;
  return "{" + text + "}";
}

std::vector<xla::XlaOp> CallFfiTarget(LoweringContext* ctx, const char* target,
                                      const std::vector<int>& inputs,
                                      const std::vector<FfiResult>& results,
                                      const FfiAttributes& attributes) {
#if FBN_XLA_FFI
  std::vector<xla::XlaOp> operands;
  std::vector<xla::Shape> operand_shapes;
  for (int i : inputs) {
    operands.push_back(ctx->Input(i));
    operand_shapes.push_back(RowMajor(ctx->input_xla_type(i), ctx->InputShape(i)));
  }
  std::vector<xla::Shape> result_shapes;
  for (const FfiResult& result : results) {
    result_shapes.push_back(RowMajor(result.type, result.shape));
  }
  const xla::XlaOp tuple = xla::CustomCallWithLayout(
      ctx->builder(), target, operands, xla::ShapeUtil::MakeTupleShape(result_shapes),
      operand_shapes, attributes.Dictionary(), /*has_side_effect=*/false,
      /*output_operand_aliasing=*/{}, /*literal=*/nullptr, xla::CustomCallSchedule::SCHEDULE_NONE,
      xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
  std::vector<xla::XlaOp> outputs;
  for (size_t i = 0; i < results.size(); ++i) {
    outputs.push_back(xla::GetTupleElement(tuple, static_cast<int64_t>(i)));
  }
  return outputs;
#else
  // ChooseXlaGradPath never picks the custom call in a build without the handlers.
  ctx->SetStatus(errors::Internal("tf-fbn-ops was built without XLA FFI handlers"));
  return {};
#endif
}

void BuildGradCustomCall(LoweringContext* ctx, const GradAttrs& attrs, bool saved_inv_std) {
  const FfiResult x_backprop{ctx->input_xla_type(1), ctx->InputShape(1)};
  const FfiResult channel{xla::F32, ctx->InputShape(2)};
  const std::vector<xla::XlaOp> outputs = CallFfiTarget(
      ctx, fbn::xla_ffi::kGradTarget, {0, 1, 2, 3, 4}, {x_backprop, channel, channel},
      FfiAttributes()
          .Bool("channels_last", attrs.channels_last)
          .F32("epsilon", attrs.epsilon)
          .Bool("is_training", attrs.is_training)
          .Bool("saved_inv_std", saved_inv_std));
  if (outputs.empty()) return;
  for (int i = 0; i < 3; ++i) ctx->SetOutput(i, outputs[i]);
  SetEmptyReserveOutputs(ctx);
}

namespace {

void SetAllOutputs(LoweringContext* ctx, const std::vector<xla::XlaOp>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) ctx->SetOutput(static_cast<int>(i), outputs[i]);
}

}  // namespace

void BuildSyncSumsCustomCall(LoweringContext* ctx, const SyncAttrs& attrs) {
  const FfiResult sums{xla::F64, ctx->InputShape(2)};
  SetAllOutputs(ctx, CallFfiTarget(ctx, fbn::xla_ffi::kSyncSumsTarget, {0, 1, 2}, {sums, sums},
                                   FfiAttributes().Bool("channels_last", attrs.channels_last)));
}

void BuildSyncFromSumsCustomCall(LoweringContext* ctx, const SyncAttrs& attrs) {
  const FfiResult x_backprop{ctx->input_xla_type(1), ctx->InputShape(1)};
  const FfiResult channel{xla::F32, ctx->InputShape(2)};
  SetAllOutputs(ctx, CallFfiTarget(ctx, fbn::xla_ffi::kSyncFromSumsTarget,
                                   {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
                                   {x_backprop, channel, channel},
                                   FfiAttributes()
                                       .Bool("channels_last", attrs.channels_last)
                                       .F32("epsilon", attrs.epsilon)));
}

}  // namespace fbn_kernels
}  // namespace tensorflow
