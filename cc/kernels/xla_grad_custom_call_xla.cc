// The custom-call path: the op compiles into one call of our FFI target (cc/xla_ffi/), which
// runs the core's kernels on XLA's thread pool or stream.
//
// Layouts are pinned: every operand and result is declared row-major (CustomCallWithLayout), so
// XLA transposes, if ever, before and after the call, and the handler gets the dense NHWC or
// NCHW memory the core expects. Attributes travel as the MLIR dictionary XLA's typed FFI reads
// from the backend config, epsilon as its exact bit pattern.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cc/kernels/xla_ffi_targets.h"
#include "cc/kernels/xla_grad_lowerings.h"
#include "cc/xla_ffi/bn_grad_ffi.h"

#if FBN_XLA_FFI  // TensorFlow 2.20 and later, all with XLA under xla/
#include "xla/shape_util.h"
#endif

namespace tensorflow {
namespace fbn_kernels {
namespace {

constexpr char kLoweringVariable[] = "TF_FBN_OPS_XLA_LOWERING";

#if FBN_XLA_FFI

std::string BackendConfig(const GradAttrs& attrs, bool saved_inv_std) {
  uint32_t epsilon_bits;
  std::memcpy(&epsilon_bits, &attrs.epsilon, sizeof(epsilon_bits));
  char epsilon[16];
  std::snprintf(epsilon, sizeof(epsilon), "0x%08X", epsilon_bits);
  auto flag = [](bool value) { return value ? "true" : "false"; };
  return std::string("{channels_last = ") + flag(attrs.channels_last) + ", epsilon = " + epsilon +
         " : f32, is_training = " + flag(attrs.is_training) +
         ", saved_inv_std = " + flag(saved_inv_std) + "}";
}

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

void BuildGradCustomCall(XlaOpKernelContext* ctx, const GradAttrs& attrs, bool saved_inv_std) {
#if FBN_XLA_FFI
  const TensorShape x_shape = ctx->InputShape(1);
  const TensorShape channel_shape = ctx->InputShape(2);
  const xla::Shape x = RowMajor(ctx->input_xla_type(1), x_shape);
  const xla::Shape channel = RowMajor(xla::F32, channel_shape);
  const xla::XlaOp result = xla::CustomCallWithLayout(
      ctx->builder(), fbn::xla_ffi::kGradTarget,
      {ctx->Input(0), ctx->Input(1), ctx->Input(2), ctx->Input(3), ctx->Input(4)},
      xla::ShapeUtil::MakeTupleShape({x, channel, channel}), {x, x, channel, channel, channel},
      BackendConfig(attrs, saved_inv_std), /*has_side_effect=*/false,
      /*output_operand_aliasing=*/{}, /*literal=*/nullptr, xla::CustomCallSchedule::SCHEDULE_NONE,
      xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
  for (int i = 0; i < 3; ++i) ctx->SetOutput(i, xla::GetTupleElement(result, i));
  SetEmptyReserveOutputs(ctx);
#else
  // ChooseXlaGradPath never picks the custom call in a build without the handlers.
  ctx->SetStatus(errors::Internal("tf-fbn-ops was built without XLA FFI handlers"));
#endif
}

}  // namespace fbn_kernels
}  // namespace tensorflow
