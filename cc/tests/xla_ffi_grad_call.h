// The handlers' call (the contract in cc/xla_ffi/bn_grad_ffi.h) as the FFI tests build it: a
// 4-D or 5-D shape in either layout, one call's frame, and calls that break the contract; the
// pools a host handler runs on and what a refused call must come to (every handler's tests).
#ifndef TF_FBN_OPS_CC_TESTS_XLA_FFI_GRAD_CALL_H_
#define TF_FBN_OPS_CC_TESTS_XLA_FFI_GRAD_CALL_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/tests/test_util.h"
#include "cc/tests/xla_ffi_fake_api.h"

namespace fbn {
namespace testing {

// A tensor shape before its layout is chosen: spatial has 2 dims (4-D x) or 3 (5-D x).
struct FfiShape {
  int64_t batch;
  std::vector<int64_t> spatial;
  int64_t channels;
};

// Shapes every handler test runs, followed by its own: awkward ones (C = 1, S = 1, one
// element, 5-D) and empty ones (no batch, no spatial extent, no channels).
inline std::vector<FfiShape> WithEdgeShapes(std::vector<FfiShape> own) {
  std::vector<FfiShape> shapes = {
      {2, {3, 5}, 7},    {1, {1, 1}, 1},    {5, {7, 9}, 1},   {2, {1, 1}, 300},
      {2, {3, 4, 5}, 6}, {1, {1, 1, 1}, 1}, {0, {4, 4}, 3},   {2, {0, 5}, 3},
      {2, {3, 3}, 0},    {0, {2, 2, 2}, 3},
  };
  shapes.insert(shapes.end(), own.begin(), own.end());
  return shapes;
}

inline std::vector<int64_t> XDims(const FfiShape& s, bool channels_last) {
  std::vector<int64_t> dims{s.batch};
  if (!channels_last) dims.push_back(s.channels);
  dims.insert(dims.end(), s.spatial.begin(), s.spatial.end());
  if (channels_last) dims.push_back(s.channels);
  return dims;
}

// The core's view of the same tensor, as the handlers must derive it.
inline Shape CoreShape(const FfiShape& s, bool channels_last) {
  int64_t spatial = 1;
  for (int64_t d : s.spatial) spatial *= d;
  return Shape{s.batch, s.channels, spatial, channels_last};
}

inline std::string DimsText(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t d = 0; d < dims.size(); ++d) text += (d ? "," : "") + std::to_string(dims[d]);
  return text + "]";
}

template <typename T>
XLA_FFI_DataType FfiType();
template <>
inline XLA_FFI_DataType FfiType<float>() { return XLA_FFI_DataType_F32; }
template <>
inline XLA_FFI_DataType FfiType<Half>() { return XLA_FFI_DataType_F16; }
template <>
inline XLA_FFI_DataType FfiType<BFloat16>() { return XLA_FFI_DataType_BF16; }

// Bitwise equality and byte fills that also take empty vectors (whose data() may be null, which
// memcmp and memset must not get).
template <typename V, typename AllocatorA, typename AllocatorB>
bool SameBytes(const std::vector<V, AllocatorA>& a, const std::vector<V, AllocatorB>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(V)) == 0);
}
template <typename T>
bool SameBits(const Outputs<T>& a, const Outputs<T>& b) {
  return SameBytes(a.dx, b.dx) && SameBytes(a.dscale, b.dscale) &&
         SameBytes(a.doffset, b.doffset);
}
// The tests' inputs are finite, and so are all their gradients; the outputs start as NaN bytes,
// so a NaN left means an element nobody wrote (the core called directly included).
template <typename T>
bool AllFinite(const Outputs<T>& out) {
  const auto finite = [](auto v) { return std::isfinite(ToFloat(v)); };
  return std::all_of(out.dx.begin(), out.dx.end(), finite) &&
         std::all_of(out.dscale.begin(), out.dscale.end(), finite) &&
         std::all_of(out.doffset.begin(), out.doffset.end(), finite);
}
template <typename V, typename Allocator>
void FillBytes(std::vector<V, Allocator>* v, unsigned char byte) {
  if (!v->empty()) std::memset(v->data(), byte, v->size() * sizeof(V));
}

// Every operand and result of one call, in the frame's order, and its attributes. A test
// breaks the contract by changing one field.
struct GradCallSpec {
  enum Slot { kDy, kX, kScale, kMean, kVariance, kDx, kScaleBackprop, kOffsetBackprop };
  static constexpr int kSlots = 8;
  static constexpr int kOperands = 5;  // the slots before kDx

  XLA_FFI_DataType types[kSlots];
  std::vector<int64_t> dims[kSlots];
  void* data[kSlots];
  int operands = kOperands;  // fewer drops the last ones

  float epsilon = 1e-3f;
  bool is_training = true;
  bool channels_last = true;
  bool saved_inv_std = false;
  bool epsilon_as_f64 = false;       // an attribute of the wrong type
  bool omit_saved_inv_std = false;   // an attribute missing

  void AddTo(CallFrame* frame) const {
    for (int i = 0; i < operands; ++i) frame->Arg(types[i], data[i], dims[i]);
    for (int i = kOperands; i < kSlots; ++i) frame->Ret(types[i], data[i], dims[i]);
    // Added out of XLA's order on purpose: the frame sorts them by name.
    if (!omit_saved_inv_std) frame->Attr("saved_inv_std", saved_inv_std);
    frame->Attr("is_training", is_training);
    if (epsilon_as_f64) {
      frame->Attr("epsilon", static_cast<double>(epsilon));
    } else {
      frame->Attr("epsilon", epsilon);
    }
    frame->Attr("channels_last", channels_last);
  }
};

// The call for one tensor of `s` in the layout params.shape names, on the buffers of `t` (host
// or device pointers, whichever the handler takes).
template <typename T>
GradCallSpec SpecFor(const FfiShape& s, const Params& params, const Tensors<T>& t) {
  GradCallSpec spec;
  const std::vector<int64_t> x_dims = XDims(s, params.shape.channels_last);
  const std::vector<int64_t> c_dims{s.channels};
  void* const data[] = {const_cast<T*>(t.y_backprop),    const_cast<T*>(t.x),
                        const_cast<float*>(t.scale),     const_cast<float*>(t.mean),
                        const_cast<float*>(t.variance),  t.x_backprop,
                        t.scale_backprop,                t.offset_backprop};
  for (int i = 0; i < GradCallSpec::kSlots; ++i) {
    const bool element = i == GradCallSpec::kDy || i == GradCallSpec::kX || i == GradCallSpec::kDx;
    spec.types[i] = element ? FfiType<T>() : XLA_FFI_DataType_F32;
    spec.dims[i] = element ? x_dims : c_dims;
    spec.data[i] = data[i];
  }
  spec.epsilon = params.epsilon;
  spec.is_training = params.is_training;
  spec.channels_last = params.shape.channels_last;
  spec.saved_inv_std = params.saved_inv_std;
  return spec;
}

// The host handlers' pools: every case runs on each.
struct Pools {
  FakeThreadPool one{1}, two{2}, seven{7};
};

// A way of running a host handler: the pool it gets, and whether it runs in place.
struct PoolVariant {
  const char* what;
  FakeThreadPool* pool;
  bool schedule_fails;
  bool in_place;
};

inline std::vector<PoolVariant> PoolVariants(Pools* pools) {
  return {{"1 thread", &pools->one, false, false},
          {"2 threads", &pools->two, false, false},
          {"7 threads", &pools->seven, false, false},
          {"no pool", nullptr, false, false},
          {"7 threads refusing tasks", &pools->seven, true, false},
          {"2 threads in place", &pools->two, false, true}};
}

// What a call that breaks a contract must come to: an InvalidArgument error containing
// `message`, no buffer written (`untouched`), every error destroyed.
inline void CheckRefused(const FfiStatus& status, const std::string& name, const char* message,
                         bool untouched, int errors_before) {
  Check(!status.ok && status.code == XLA_FFI_Error_Code_INVALID_ARGUMENT &&
            status.message.find(message) != std::string::npos,
        name + ": InvalidArgument containing \"" + message + "\"; got " +
            (status.ok ? "success" : "code " + std::to_string(status.code) + " \"" +
                                         status.message + "\""));
  Check(untouched, name + ": no buffer written");
  Check(LiveErrors() == errors_before, name + ": every error destroyed");
}

// Calls that break the contract, each of which the handler must refuse with an InvalidArgument
// error naming the fault, writing nothing: `handler` runs in `ctx` (which the caller sets up
// for it: a pool, a stream). The buffers are host memory, which the emulated GPU shares.
inline void CheckBadCalls(XLA_FFI_Handler* handler, XLA_FFI_ExecutionContext* ctx,
                          const std::string& handler_name) {
  struct BadCall {
    const char* what;
    std::function<void(GradCallSpec*)> breaks;
    const char* message;  // what the error must contain
  };
  using S = GradCallSpec;
  const auto all_elements = [](S* s, XLA_FFI_DataType type) {
    s->types[S::kDy] = s->types[S::kX] = s->types[S::kDx] = type;
  };
  const auto all_element_dims = [](S* s, std::vector<int64_t> dims) {
    s->dims[S::kDy] = s->dims[S::kX] = s->dims[S::kDx] = dims;
  };
  const std::vector<BadCall> bad_calls = {
      {"3-D x", [&](S* s) { all_element_dims(s, {2, 4, 3}); },
       "x must be 4- or 5-dimensional, got [2,4,3]"},
      {"6-D x", [&](S* s) { all_element_dims(s, {2, 1, 2, 1, 5, 3}); },
       "x must be 4- or 5-dimensional, got [2,1,2,1,5,3]"},
      {"short scale", [](S* s) { s->dims[S::kScale] = {2}; },
       "scale must be [3] (x's channels), got [2]"},
      {"long offset_backprop", [](S* s) { s->dims[S::kOffsetBackprop] = {4}; },
       "offset_backprop must be [3] (x's channels), got [4]"},
      {"2-D reserve_space_2", [](S* s) { s->dims[S::kVariance] = {3, 1}; },
       "reserve_space_2 must be [3] (x's channels), got [3,1]"},
      {"vectors of the last dim, channels first", [](S* s) { s->channels_last = false; },
       "scale must be [4] (x's channels), got [3]"},
      {"y_backprop of another shape", [](S* s) { s->dims[S::kDy] = {2, 4, 5, 4}; },
       "must have x's shape [2,4,5,3]"},
      {"x_backprop of another shape", [](S* s) { s->dims[S::kDx] = {2, 5, 4, 3}; },
       "x_backprop [2,5,4,3] must have x's shape [2,4,5,3]"},
      {"x_backprop of another dtype", [](S* s) { s->types[S::kDx] = XLA_FFI_DataType_F16; },
       "y_backprop, x and x_backprop must have one element type"},
      {"y_backprop of another dtype", [](S* s) { s->types[S::kDy] = XLA_FFI_DataType_BF16; },
       "y_backprop, x and x_backprop must have one element type"},
      {"F64 tensors", [&](S* s) { all_elements(s, XLA_FFI_DataType_F64); },
       "x must be f32, f16 or bf16"},
      {"S32 tensors", [&](S* s) { all_elements(s, XLA_FFI_DataType_S32); },
       "x must be f32, f16 or bf16"},
      // The binding's own checks, before the handler's code runs (XLA's messages).
      {"f16 scale", [](S* s) { s->types[S::kScale] = XLA_FFI_DataType_F16; },
       "Wrong buffer dtype"},
      {"4 operands", [](S* s) { s->operands = 4; }, "Wrong number of arguments"},
      {"no saved_inv_std", [](S* s) { s->omit_saved_inv_std = true; },
       "Wrong number of attributes"},
      {"f64 epsilon", [](S* s) { s->epsilon_as_f64 = true; }, "Wrong scalar data type"},
  };

  // Each buffer its own region of one arena, which must come back unchanged.
  constexpr size_t kRegion = 4096;
  constexpr unsigned char kFill = 0xa5;
  std::vector<unsigned char> arena(kRegion * GradCallSpec::kSlots, kFill);
  const std::vector<unsigned char> untouched = arena;
  for (const BadCall& bad : bad_calls) {
    GradCallSpec spec;
    for (int i = 0; i < GradCallSpec::kSlots; ++i) {
      const bool element = i == S::kDy || i == S::kX || i == S::kDx;
      spec.types[i] = XLA_FFI_DataType_F32;
      spec.dims[i] = element ? std::vector<int64_t>{2, 4, 5, 3} : std::vector<int64_t>{3};
      spec.data[i] = arena.data() + i * kRegion;
    }
    bad.breaks(&spec);
    const int errors_before = LiveErrors();
    CallFrame frame(ctx);
    spec.AddTo(&frame);
    const FfiStatus status = frame.Call(handler);
    CheckRefused(status, handler_name + ", " + bad.what, bad.message, arena == untouched,
                 errors_before);
  }
}

// What XLA reads from a handler when it registers it: the FFI version it was built against.
inline void CheckMetadata(XLA_FFI_Handler* handler, const std::string& handler_name) {
  XLA_FFI_ExecutionContext ctx;
  CallFrame frame(&ctx);
  XLA_FFI_Metadata metadata;
  const FfiStatus status = frame.QueryMetadata(handler, &metadata);
  Check(status.ok && metadata.api_version.major_version == XLA_FFI_API_MAJOR &&
            metadata.api_version.minor_version == XLA_FFI_API_MINOR && metadata.traits == 0,
        handler_name + ": metadata names FFI API " + std::to_string(XLA_FFI_API_MAJOR) + "." +
            std::to_string(XLA_FFI_API_MINOR) + " and no traits" +
            (status.ok ? "" : "; got \"" + status.message + "\""));
}

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_XLA_FFI_GRAD_CALL_H_
