// The forward handlers' call (the contract in cc/xla_ffi/bn_forward_ffi.h) as the FFI tests build
// it (xla_ffi_forward_test.cc, the CPU handler; xla_ffi_forward_emu_test.cc, the CUDA one): one
// call's operands, results and attributes, and the outputs' comparison.
#ifndef TF_FBN_OPS_CC_TESTS_XLA_FFI_FORWARD_CALL_H_
#define TF_FBN_OPS_CC_TESTS_XLA_FFI_FORWARD_CALL_H_

#include <functional>
#include <string>
#include <vector>

#include "cc/core/bn_forward.h"
#include "cc/tests/forward_test_util.h"
#include "cc/tests/xla_ffi_fake_api.h"
#include "cc/tests/xla_ffi_grad_call.h"

namespace fbn {
namespace testing {

// Every operand and result of one forward call, in the frame's order, and its attributes. A
// test breaks the contract by changing one field.
struct ForwardCallSpec {
  enum Slot { kX, kScale, kOffset, kMean, kVariance, kY, kBatchMean, kBatchVariance, kSavedMean,
              kSavedVariance };
  static constexpr int kSlots = 10;
  static constexpr int kOperands = 5;  // the slots before kY

  XLA_FFI_DataType types[kSlots];
  std::vector<int64_t> dims[kSlots];
  void* data[kSlots];

  float epsilon = 1e-3f;
  float factor = 1.0f;
  bool is_training = true;
  bool channels_last = true;
  bool save_inv_std = false;
  bool omit_factor = false;  // an attribute missing

  void AddTo(CallFrame* frame) const {
    for (int i = 0; i < kOperands; ++i) frame->Arg(types[i], data[i], dims[i]);
    for (int i = kOperands; i < kSlots; ++i) frame->Ret(types[i], data[i], dims[i]);
    frame->Attr("save_inv_std", save_inv_std);
    frame->Attr("is_training", is_training);
    if (!omit_factor) frame->Attr("exponential_avg_factor", factor);
    frame->Attr("epsilon", epsilon);
    frame->Attr("channels_last", channels_last);
  }
};

inline bool IsElement(int slot) {
  return slot == ForwardCallSpec::kX || slot == ForwardCallSpec::kY;
}

// The call for one tensor of `s` on the buffers of `t`. Where plain training does not read the
// given statistics, they go in as [0], as the usual caller passes them.
template <typename T>
ForwardCallSpec ForwardSpecFor(const FfiShape& s, const ForwardParams& p,
                               const ForwardTensors<T>& t) {
  using S = ForwardCallSpec;
  ForwardCallSpec spec;
  const bool reads = !p.is_training || p.exponential_avg_factor != 1.0f;
  void* const data[] = {const_cast<T*>(t.x),          const_cast<float*>(t.scale),
                        const_cast<float*>(t.offset), const_cast<float*>(t.mean),
                        const_cast<float*>(t.variance), t.y,
                        t.batch_mean,                 t.batch_variance,
                        t.saved_mean,                 t.saved_variance};
  for (int i = 0; i < S::kSlots; ++i) {
    spec.types[i] = IsElement(i) ? FfiType<T>() : XLA_FFI_DataType_F32;
    spec.dims[i] =
        IsElement(i) ? XDims(s, p.shape.channels_last) : std::vector<int64_t>{s.channels};
    spec.data[i] = data[i];
  }
  if (!reads) spec.dims[S::kMean] = spec.dims[S::kVariance] = {0};
  spec.epsilon = p.epsilon;
  spec.factor = p.exponential_avg_factor;
  spec.is_training = p.is_training;
  spec.channels_last = p.shape.channels_last;
  spec.save_inv_std = p.save_inv_std;
  return spec;
}

// The modes every forward handler test runs on a shape: plain training, a running-average factor
// with x about 10^4, training saving the inverse std, inference.
inline std::vector<ForwardCase> ForwardModes(const Shape& shape) {
  return {{shape, true, 0.0f},
          {shape, true, 1e4f, 0.25f},
          {shape, true, 0.0f, 1.0f, true},
          {shape, false, 3.0f}};
}

// Fills every output with 0xff bytes (NaN in each type), so an element the handler leaves
// unwritten cannot match the core's.
template <typename T>
void Garbage(ForwardOutputs<T>* out) {
  FillBytes(&out->y, 0xff);
  FillBytes(&out->batch_mean, 0xff);
  FillBytes(&out->batch_variance, 0xff);
  FillBytes(&out->saved_mean, 0xff);
  FillBytes(&out->saved_variance, 0xff);
}

template <typename T>
bool SameOutputs(const ForwardOutputs<T>& a, const ForwardOutputs<T>& b) {
  return SameBytes(a.y, b.y) && SameBytes(a.batch_mean, b.batch_mean) &&
         SameBytes(a.batch_variance, b.batch_variance) && SameBytes(a.saved_mean, b.saved_mean) &&
         SameBytes(a.saved_variance, b.saved_variance);
}

// Calls that break the contract, each refused (CheckRefused), on `handler` in `ctx` (which
// the caller sets up for it). The buffers are host memory, which the emulated GPU shares.
inline void CheckForwardBadCalls(XLA_FFI_Handler* handler, XLA_FFI_ExecutionContext* ctx,
                                 const std::string& handler_name) {
  using S = ForwardCallSpec;
  struct BadCall {
    const char* what;
    std::function<void(S*)> breaks;
    const char* message;
  };
  const auto x_and_y_dims = [](S* s, std::vector<int64_t> dims) {
    s->dims[S::kX] = s->dims[S::kY] = dims;
  };
  const std::vector<BadCall> bad_calls = {
      {"3-D x", [&](S* s) { x_and_y_dims(s, {2, 4, 3}); },
       "x must be 4- or 5-dimensional, got [2,4,3]"},
      {"F64 x and y", [](S* s) { s->types[S::kX] = s->types[S::kY] = XLA_FFI_DataType_F64; },
       "x must be f32, f16 or bf16"},
      {"y of another dtype", [](S* s) { s->types[S::kY] = XLA_FFI_DataType_BF16; },
       "x and y must have one element type"},
      {"y of another shape", [](S* s) { s->dims[S::kY] = {2, 5, 4, 3}; },
       "y [2,5,4,3] must have x's shape [2,4,5,3]"},
      {"short offset", [](S* s) { s->dims[S::kOffset] = {2}; },
       "offset must be [3] (x's channels), got [2]"},
      {"long reserve_space_2", [](S* s) { s->dims[S::kSavedVariance] = {4}; },
       "reserve_space_2 must be [3] (x's channels), got [4]"},
      {"vectors of the last dim, channels first", [](S* s) { s->channels_last = false; },
       "scale must be [4] (x's channels), got [3]"},
      {"mean [0] in inference",
       [](S* s) {
         s->is_training = false;
         s->dims[S::kMean] = {0};
       },
       "mean must be [3] (x's channels), got [0]"},
      {"variance [2] with a factor",
       [](S* s) {
         s->factor = 0.5f;
         s->dims[S::kVariance] = {2};
       },
       "variance must be [3] (x's channels), got [2]"},
      {"f16 scale", [](S* s) { s->types[S::kScale] = XLA_FFI_DataType_F16; },
       "Wrong buffer dtype"},
      {"no exponential_avg_factor", [](S* s) { s->omit_factor = true; },
       "Wrong number of attributes"},
  };
  constexpr size_t kRegion = 4096;
  constexpr unsigned char kFill = 0xa5;
  std::vector<unsigned char> arena(kRegion * S::kSlots, kFill);
  const std::vector<unsigned char> untouched = arena;
  for (const BadCall& bad : bad_calls) {
    S spec;
    for (int i = 0; i < S::kSlots; ++i) {
      spec.types[i] = XLA_FFI_DataType_F32;
      spec.dims[i] = IsElement(i) ? std::vector<int64_t>{2, 4, 5, 3} : std::vector<int64_t>{3};
      spec.data[i] = arena.data() + i * kRegion;
    }
    bad.breaks(&spec);
    const int errors_before = LiveErrors();
    CallFrame frame(ctx);
    spec.AddTo(&frame);
    const FfiStatus status = frame.Call(handler);
    CheckRefused(status, handler_name + ", " + bad.what, bad.message,
                 arena == untouched, errors_before);
  }
}

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_XLA_FFI_FORWARD_CALL_H_
