// Tests of synchronized batch norm's FFI handlers (cc/xla_ffi/sync_grad_ffi*.{h,cc}), the CPU ones
// and the CUDA ones (kernels compiled against the host emulator), called as XLA calls them,
// through hand-built call frames and the fake XLA runtime (xla_ffi_fake_api.h):
//   - a batch cut along N into 1 to 3 replicas (an empty one among them): every replica's
//     sums, then from the sums added in replica order its x_backprop, and from its own its
//     share of the scale and offset gradients, each the bits of the same stage of the same core
//     called directly; with one replica, the bits of one whole gradient call (kWhole);
//   - every dtype, 4-D and 5-D tensors in both layouts, the edge and empty shapes;
//   - a count below a replica's own elements: the CPU handler refuses it, writing nothing; the
//     CUDA one, which reads it on the device, makes every output NaN;
//   - calls that break the contract: an error naming the fault, no buffer written.
// Prints one line per failure and a PASS/FAIL summary.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/gpu/bn_grad_gpu.h"
#include "cc/tests/test_util.h"
#include "cc/tests/xla_ffi_fake_api.h"
#include "cc/tests/xla_ffi_grad_call.h"
#include "cc/xla_ffi/sync_grad_ffi.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

// One operand or result of a frame.
struct Buf {
  XLA_FFI_DataType type;
  std::vector<int64_t> dims;
  void* data;
};

// A whole call: operands, results, attributes. A bad call changes one field.
struct SyncCallSpec {
  std::vector<Buf> args, rets;
  bool channels_last = true;
  bool has_epsilon = false;  // from_sums only
  float epsilon = 1e-3f;

  void AddTo(CallFrame* frame) const {
    for (const Buf& b : args) frame->Arg(b.type, b.data, b.dims);
    for (const Buf& b : rets) frame->Ret(b.type, b.data, b.dims);
    frame->Attr("channels_last", channels_last);
    if (has_epsilon) frame->Attr("epsilon", epsilon);
  }
};

// One replica's buffers: element tensors inside the global batch's, everything else its own.
template <typename T>
struct Replica {
  Shape shape;
  const T* dy;
  const T* x;
  T* dx;
  std::vector<double> sum_dy, sum_dy_xc;
  std::vector<float> dscale, doffset;

  Replica(const Shape& s, const T* dy_, const T* x_, T* dx_)
      : shape(s), dy(dy_), x(x_), dx(dx_), sum_dy(s.channels), sum_dy_xc(s.channels),
        dscale(s.channels), doffset(s.channels) {}
};

// Where the handlers run: XLA's CPU backend (a pool) or its CUDA one (a stream, emulated), and
// the same core called directly there.
struct Device {
  const char* name;
  XLA_FFI_Handler* sums;
  XLA_FFI_Handler* from_sums;
  bool cuda;
  FakeThreadPool* pool;
  cudaStream_t stream;

  void Prepare(XLA_FFI_ExecutionContext* ctx) const {
    ctx->thread_pool = pool;
    if (cuda) {
      ctx->stream = stream;
      ctx->memory = FakeMemory{[](size_t bytes) -> void* {
                                 void* p = nullptr;
                                 return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
                               },
                               [](void* p) { cudaFree(p); }};
    }
  }

  // Waits for what the handler enqueued (CUDA) or left queued on the pool (CPU).
  bool Finish() const {
    if (cuda) return cudaStreamSynchronize(stream) == cudaSuccess;
    pool->WaitIdle();
    return true;
  }

  template <typename T>
  bool RunCore(const Params& p, const Tensors<T>& t) const {
    if (!cuda) {
      BatchNormGradCpu(p, t, SerialFor());
      return true;
    }
    void* scratch = nullptr;
    const size_t bytes = GpuScratchBytes(p.shape);
    if (bytes > 0 && cudaMalloc(&scratch, bytes) != cudaSuccess) return false;
    const bool ok = BatchNormGradGpu(p, t, scratch, stream) == 0 &&
                    cudaStreamSynchronize(stream) == cudaSuccess;
    cudaFree(scratch);
    return ok;
  }
};

std::vector<int64_t> ReplicaDims(const FfiShape& s, const Shape& r) {
  FfiShape part = s;
  part.batch = r.batch;
  return XDims(part, r.channels_last);
}

template <typename T>
SyncCallSpec SumsSpec(const FfiShape& s, Replica<T>* r, const std::vector<float>& mean) {
  const std::vector<int64_t> x = ReplicaDims(s, r->shape), c{s.channels};
  SyncCallSpec spec;
  spec.channels_last = r->shape.channels_last;
  spec.args = {{FfiType<T>(), x, const_cast<T*>(r->dy)},
               {FfiType<T>(), x, const_cast<T*>(r->x)},
               {XLA_FFI_DataType_F32, c, const_cast<float*>(mean.data())}};
  spec.rets = {{XLA_FFI_DataType_F64, c, r->sum_dy.data()},
               {XLA_FFI_DataType_F64, c, r->sum_dy_xc.data()}};
  return spec;
}

template <typename T>
SyncCallSpec FromSumsSpec(const FfiShape& s, Replica<T>* r, const Inputs<T>& in,
                          std::vector<double>* global_dy, std::vector<double>* global_dy_xc,
                          int64_t* count) {
  const std::vector<int64_t> x = ReplicaDims(s, r->shape), c{s.channels};
  const auto vec = [&](const std::vector<float>& v) {
    return Buf{XLA_FFI_DataType_F32, c, const_cast<float*>(v.data())};
  };
  SyncCallSpec spec;
  spec.channels_last = r->shape.channels_last;
  spec.has_epsilon = true;
  spec.args = {{FfiType<T>(), x, const_cast<T*>(r->dy)},
               {FfiType<T>(), x, const_cast<T*>(r->x)},
               vec(in.scale),
               vec(in.mean),
               vec(in.variance),
               {XLA_FFI_DataType_F64, c, global_dy->data()},
               {XLA_FFI_DataType_F64, c, global_dy_xc->data()},
               {XLA_FFI_DataType_S64, {}, count},
               {XLA_FFI_DataType_F64, c, r->sum_dy.data()},
               {XLA_FFI_DataType_F64, c, r->sum_dy_xc.data()}};
  spec.rets = {{FfiType<T>(), x, r->dx},
               {XLA_FFI_DataType_F32, c, r->dscale.data()},
               {XLA_FFI_DataType_F32, c, r->doffset.data()}};
  return spec;
}

// The batch cut into replicas of `batches` items each, over the element buffers given.
template <typename T>
std::vector<Replica<T>> Cut(const Shape& whole, const std::vector<int64_t>& batches, const T* dy,
                            const T* x, T* dx) {
  std::vector<Replica<T>> replicas;
  int64_t first = 0;
  for (int64_t b : batches) {
    Shape part = whole;
    part.batch = b;
    const int64_t offset = first * whole.channels * whole.spatial;
    replicas.emplace_back(part, dy + offset, x + offset, dx + offset);
    first += b;
  }
  return replicas;
}

// Σ over replicas in replica order, as the exchange adds the rows.
template <typename T>
void AddInOrder(const std::vector<Replica<T>>& replicas, std::vector<double>* dy,
                std::vector<double>* dy_xc) {
  for (const Replica<T>& r : replicas) {
    for (size_t c = 0; c < dy->size(); ++c) {
      (*dy)[c] += r.sum_dy[c];
      (*dy_xc)[c] += r.sum_dy_xc[c];
    }
  }
}

template <typename T>
bool SameReplicaBits(const std::vector<Replica<T>>& a, const std::vector<Replica<T>>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!SameBytes(a[i].sum_dy, b[i].sum_dy) || !SameBytes(a[i].sum_dy_xc, b[i].sum_dy_xc) ||
        !SameBytes(a[i].dscale, b[i].dscale) || !SameBytes(a[i].doffset, b[i].doffset)) {
      return false;
    }
  }
  return true;
}

// Runs both stages for every replica, through the handlers or the core called directly, into
// `dx` (the whole batch's) and the replicas' own buffers. False when a call failed.
template <typename T>
bool RunStages(const Device& device, bool handlers, const FfiShape& s, const Case& k,
               const Inputs<T>& in, const std::vector<int64_t>& batches, std::vector<T>* dx,
               std::vector<Replica<T>>* out, std::string* failure) {
  *out = Cut(k.shape, batches, in.dy.data(), in.x.data(), dx->data());
  int64_t count = k.shape.elements() > 0 ? k.shape.rest() : 0;
  std::vector<double> global_dy(s.channels, 0.0), global_dy_xc(s.channels, 0.0);
  for (int stage = 0; stage < 2; ++stage) {
    if (stage == 1) AddInOrder(*out, &global_dy, &global_dy_xc);
    for (Replica<T>& r : *out) {
      if (!handlers) {
        Params p = ParamsOf(k);
        p.shape = r.shape;
        p.stage = stage == 0 ? Stage::kSums : Stage::kDxFromSums;
        p.global_count = count;
        Tensors<T> t;
        t.y_backprop = r.dy;
        t.x = r.x;
        t.mean = in.mean.data();
        t.sum_dy = r.sum_dy.data();
        t.sum_dy_xc = r.sum_dy_xc.data();
        if (stage == 1) {
          t.scale = in.scale.data();
          t.variance = in.variance.data();
          t.global_sum_dy = global_dy.data();
          t.global_sum_dy_xc = global_dy_xc.data();
          t.replica_sum_dy = r.sum_dy.data();
          t.replica_sum_dy_xc = r.sum_dy_xc.data();
          t.x_backprop = r.dx;
          t.scale_backprop = r.dscale.data();
          t.offset_backprop = r.doffset.data();
        }
        if (!device.RunCore(p, t)) {
          *failure = "the core called directly failed";
          return false;
        }
        continue;
      }
      XLA_FFI_ExecutionContext ctx;
      device.Prepare(&ctx);
      CallFrame frame(&ctx);
      const SyncCallSpec spec = stage == 0 ? SumsSpec(s, &r, in.mean)
                                           : FromSumsSpec(s, &r, in, &global_dy, &global_dy_xc,
                                                          &count);
      spec.AddTo(&frame);
      const FfiStatus status = frame.Call(stage == 0 ? device.sums : device.from_sums);
      if (!device.Finish() || !status.ok) {
        *failure = "a handler failed: \"" + status.message + "\"";
        return false;
      }
      if (ctx.allocations != ctx.frees || !ctx.live.empty() || ctx.bad_frees != 0) {
        *failure = "scratch left allocated";
        return false;
      }
    }
  }
  return true;
}

template <typename T>
void CheckCase(const Device& device, const FfiShape& s, const Case& k,
               const std::vector<int64_t>& batches, uint32_t seed) {
  std::string name = std::string(device.name) + " " + DimsText(XDims(s, k.shape.channels_last)) +
                     " " + TypeName<T>() + " replicas";
  for (int64_t b : batches) name += " " + std::to_string(b);
  const Inputs<T> in(k, seed);
  std::vector<T> want_dx(in.dy.size()), got_dx(in.dy.size());
  FillBytes(&want_dx, 0xff);
  FillBytes(&got_dx, 0xff);
  std::vector<Replica<T>> want, got;
  std::string failure;
  if (!RunStages(device, false, s, k, in, batches, &want_dx, &want, &failure) ||
      !RunStages(device, true, s, k, in, batches, &got_dx, &got, &failure)) {
    Check(false, name + ": " + failure);
    return;
  }
  Check(SameBytes(got_dx, want_dx) && SameReplicaBits(got, want),
        name + ": the bits of the core's stages called directly");
  const bool finite = std::all_of(got_dx.begin(), got_dx.end(),
                                  [](T v) { return std::isfinite(ToFloat(v)); });
  Check(finite, name + ": every x_backprop element written, finite");
  if (batches.size() != 1) return;
  Outputs<T> whole(k.shape);
  Tensors<T> t = whole.Bind(in);
  Check(device.RunCore(ParamsOf(k), t) && SameBytes(whole.dx, got_dx) &&
            SameBytes(whole.dscale, got[0].dscale) && SameBytes(whole.doffset, got[0].doffset),
        name + ": one replica gives the bits of one whole gradient call");
}

template <typename T>
void CheckAllCases(const Device& device) {
  uint32_t seed = 1;
  const std::vector<FfiShape> shapes =
      WithEdgeShapes({{4, {16, 16}, 33}, {3, {5, 7}, 16}, {3, {2, 5, 7}, 4}});
  for (const FfiShape& s : shapes) {
    std::vector<std::vector<int64_t>> cuts = {{s.batch}, {0, s.batch}};
    if (s.batch >= 2) cuts.push_back({1, 0, s.batch - 1});
    for (bool channels_last : {true, false}) {
      const Case k{CoreShape(s, channels_last), true, seed % 3 == 0 ? 50.0f : 0.0f};
      for (const auto& cut : cuts) CheckCase<T>(device, s, k, cut, seed++);
    }
  }
}

// A count below the replica's own elements per channel.
void CheckLowCount(const Device& device) {
  const FfiShape s{2, {3, 5}, 7};
  const Case k{CoreShape(s, true), true, 0.0f};
  const Inputs<float> in(k, 5);
  std::vector<float> dx(in.dy.size());
  FillBytes(&dx, 0x5a);
  const std::vector<float> untouched = dx;
  std::vector<Replica<float>> replicas = Cut(k.shape, {2}, in.dy.data(), in.x.data(), dx.data());
  Replica<float>& r = replicas[0];
  std::vector<double> sums(s.channels, 1.0);
  int64_t count = k.shape.rest() - 1;
  XLA_FFI_ExecutionContext ctx;
  device.Prepare(&ctx);
  CallFrame frame(&ctx);
  FromSumsSpec(s, &r, in, &sums, &sums, &count).AddTo(&frame);
  const FfiStatus status = frame.Call(device.from_sums);
  const std::string name = std::string(device.name) + ", a count of " + std::to_string(count) +
                           " for a replica of " + std::to_string(k.shape.rest());
  const bool finished = device.Finish();
  if (!device.cuda) {
    const std::string message = "count (29) must be at least this replica's 30 elements per "
                                "channel: it counts every replica's";
    Check(!status.ok && status.code == XLA_FFI_Error_Code_INVALID_ARGUMENT &&
              status.message == message,
          name + ": InvalidArgument \"" + message + "\"; got \"" + status.message + "\"");
    Check(SameBytes(dx, untouched), name + ": no x_backprop written");
    return;
  }
  const auto all_nan = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float e) { return std::isnan(e); });
  };
  Check(status.ok && finished && all_nan(dx) && all_nan(r.dscale) && all_nan(r.doffset),
        name + ": every output NaN (no error can come back from the device)");
}

// Calls that break the contract: each refused with an error naming the fault, nothing written.
void CheckBadCalls(const Device& device) {
  constexpr size_t kRegion = 4096;
  constexpr int kRegions = 13;
  struct BadCall {
    const char* what;
    bool from_sums;
    std::function<void(SyncCallSpec*)> breaks;
    const char* message;
  };
  const auto dims = [](std::vector<int64_t> d) { return d; };
  const std::vector<BadCall> bad_calls = {
      {"sums: 3-D x", false,
       [&](SyncCallSpec* c) { c->args[0].dims = c->args[1].dims = dims({2, 4, 3}); },
       "x must be 4- or 5-dimensional, got [2,4,3]"},
      {"sums: bf16 y_backprop", false,
       [](SyncCallSpec* c) { c->args[0].type = XLA_FFI_DataType_BF16; },
       "y_backprop and x must have one element type"},
      {"sums: y_backprop of another shape", false,
       [&](SyncCallSpec* c) { c->args[0].dims = dims({2, 4, 5, 4}); },
       "y_backprop [2,4,5,4] must have x's shape [2,4,5,3]"},
      {"sums: short sum_dy_xc", false, [&](SyncCallSpec* c) { c->rets[1].dims = dims({2}); },
       "sum_dy_xc must be [3] (x's channels), got [2]"},
      {"sums: f32 sum_dy", false, [](SyncCallSpec* c) { c->rets[0].type = XLA_FFI_DataType_F32; },
       "Wrong buffer dtype"},
      {"sums: s32 tensors", false,
       [](SyncCallSpec* c) { c->args[0].type = c->args[1].type = XLA_FFI_DataType_S32; },
       "x must be f32, f16 or bf16"},
      {"from_sums: x_backprop of another shape", true,
       [&](SyncCallSpec* c) { c->rets[0].dims = dims({2, 5, 4, 3}); },
       "y_backprop [2,4,5,3] and x_backprop [2,5,4,3] must have x's shape [2,4,5,3]"},
      {"from_sums: f16 x_backprop", true,
       [](SyncCallSpec* c) { c->rets[0].type = XLA_FFI_DataType_F16; },
       "y_backprop, x and x_backprop must have one element type"},
      {"from_sums: long variance", true, [&](SyncCallSpec* c) { c->args[4].dims = dims({4}); },
       "variance must be [3] (x's channels), got [4]"},
      {"from_sums: vectors of the last dim, channels first", true,
       [](SyncCallSpec* c) { c->channels_last = false; },
       "scale must be [4] (x's channels), got [3]"},
      {"from_sums: f32 sum_dy", true,
       [](SyncCallSpec* c) { c->args[5].type = XLA_FFI_DataType_F32; }, "Wrong buffer dtype"},
      {"from_sums: a count of rank 1", true,
       [&](SyncCallSpec* c) { c->args[7].dims = dims({1}); }, "Wrong buffer rank"},
      {"from_sums: an s32 count", true,
       [](SyncCallSpec* c) { c->args[7].type = XLA_FFI_DataType_S32; }, "Wrong buffer dtype"},
      {"from_sums: short replica_sum_dy_xc", true,
       [&](SyncCallSpec* c) { c->args[9].dims = dims({2}); },
       "replica_sum_dy_xc must be [3] (x's channels), got [2]"},
      {"from_sums: no replica sums", true, [](SyncCallSpec* c) { c->args.resize(8); },
       "Wrong number of arguments"},
      {"from_sums: no epsilon", true, [](SyncCallSpec* c) { c->has_epsilon = false; },
       "Wrong number of attributes"},
  };
  std::vector<unsigned char> arena(kRegion * kRegions, 0xa5);
  const std::vector<unsigned char> untouched = arena;
  const auto region = [&](int i) { return static_cast<void*>(arena.data() + i * kRegion); };
  for (const BadCall& bad : bad_calls) {
    const std::vector<int64_t> x{2, 4, 5, 3}, c{3};
    SyncCallSpec spec;
    if (bad.from_sums) {
      spec.has_epsilon = true;
      spec.args = {{XLA_FFI_DataType_F32, x, region(0)},  {XLA_FFI_DataType_F32, x, region(1)},
                   {XLA_FFI_DataType_F32, c, region(2)},  {XLA_FFI_DataType_F32, c, region(3)},
                   {XLA_FFI_DataType_F32, c, region(4)},  {XLA_FFI_DataType_F64, c, region(5)},
                   {XLA_FFI_DataType_F64, c, region(6)},  {XLA_FFI_DataType_S64, {}, region(7)},
                   {XLA_FFI_DataType_F64, c, region(8)},  {XLA_FFI_DataType_F64, c, region(9)}};
      spec.rets = {{XLA_FFI_DataType_F32, x, region(10)}, {XLA_FFI_DataType_F32, c, region(11)},
                   {XLA_FFI_DataType_F32, c, region(12)}};
    } else {
      spec.args = {{XLA_FFI_DataType_F32, x, region(0)}, {XLA_FFI_DataType_F32, x, region(1)},
                   {XLA_FFI_DataType_F32, c, region(2)}};
      spec.rets = {{XLA_FFI_DataType_F64, c, region(3)}, {XLA_FFI_DataType_F64, c, region(4)}};
    }
    bad.breaks(&spec);
    const int errors_before = LiveErrors();
    XLA_FFI_ExecutionContext ctx;
    device.Prepare(&ctx);
    CallFrame frame(&ctx);
    spec.AddTo(&frame);
    const FfiStatus status = frame.Call(bad.from_sums ? device.from_sums : device.sums);
    device.Finish();
    const std::string name = std::string(device.name) + ", " + bad.what;
    Check(!status.ok && status.code == XLA_FFI_Error_Code_INVALID_ARGUMENT &&
              status.message.find(bad.message) != std::string::npos,
          name + ": InvalidArgument containing \"" + bad.message + "\"; got " +
              (status.ok ? "success" : "\"" + status.message + "\""));
    Check(arena == untouched, name + ": no buffer written");
    Check(LiveErrors() == errors_before && ctx.allocations == 0,
          name + ": every error destroyed, no scratch taken");
  }
}

void CheckDevice(const Device& device) {
  CheckMetadata(device.sums, std::string(device.name) + " sums");
  CheckMetadata(device.from_sums, std::string(device.name) + " from_sums");
  CheckBadCalls(device);
  CheckLowCount(device);
  CheckAllCases<float>(device);
  CheckAllCases<Half>(device);
  CheckAllCases<BFloat16>(device);
}

}  // namespace
}  // namespace fbn

int main() {
  using namespace fbn::testing;  // NOLINT
  FakeThreadPool pool(2);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    std::printf("FAIL cudaStreamCreateWithFlags\n");
    return 1;
  }
  fbn::CheckDevice({"host", FbnSyncGradSumsHost, FbnSyncGradFromSumsHost, false, &pool, nullptr});
  Check(pool.scheduled() > 0, "host: the pool got tasks (" + std::to_string(pool.scheduled()) + ")");
  fbn::CheckDevice({"cuda", FbnSyncGradSumsCuda, FbnSyncGradFromSumsCuda, true, nullptr, stream});
  cudaStreamDestroy(stream);
  Check(LiveErrors() == 0, "every FFI error created was destroyed");
  return Summary("xla_ffi_sync_test");
}
