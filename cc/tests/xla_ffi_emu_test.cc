// Tests of the CUDA FFI handler (FbnBatchNormGradCuda, cc/xla_ffi/gpu/cuda_handlers.cc) called as
// XLA calls it, through hand-built call frames and a fake XLA runtime (xla_ffi_fake_api.h),
// with the CUDA kernels compiled against the host emulator (cc/tests/gpu_emulator): no GPU, no
// nvcc, no XLA. Every dtype, 4-D and 5-D tensors in both layouts, training and inference, both
// reserve_space_2 contracts and empty tensors must give the bits of the core called directly
// (BatchNormGradGpu, emulated), also in place; the scratch must come from XLA's allocator (the
// fake's: one allocation of GpuScratchBytes when the shape needs scratch, freed by the call's
// end); no stream, a failing stream query or a failing allocation must return an error, as must
// calls that break the contract. Prints one line per failure and a PASS/FAIL summary.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/gpu/bn_grad_gpu.h"
#include "cc/tests/test_util.h"
#include "cc/tests/xla_ffi_cuda_memory.h"
#include "cc/tests/xla_ffi_fake_api.h"
#include "cc/tests/xla_ffi_grad_call.h"
#include "cc/xla_ffi/bn_grad_ffi.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

// Emulated kernels run a fiber per thread: smaller shapes than the CPU test's, the same kinds.
std::vector<FfiShape> Shapes() {
  return WithEdgeShapes({{3, {4, 4}, 33}, {4, {16, 16}, 8}, {1, {2, 8, 8}, 20}});
}

// Device copies of one case's buffers, outputs filled with NaN bytes.
template <typename T>
struct DeviceBuffers {
  DeviceArray<T> dy, x, dx;
  DeviceArray<float> scale, mean, variance, dscale, doffset;
  bool ok;

  DeviceBuffers(const Inputs<T>& in, const Shape& s, bool in_place)
      : dy(s.elements()), x(s.elements()), dx(s.elements()), scale(s.channels),
        mean(s.channels), variance(s.channels), dscale(s.channels), doffset(s.channels) {
    ok = dy.In(in.dy.data()) && x.In(in.x.data()) && scale.In(in.scale.data()) &&
         mean.In(in.mean.data()) && variance.In(in.variance.data()) &&
         (in_place ? dx.In(in.dy.data()) : dx.Garbage()) && dscale.Garbage() &&
         doffset.Garbage();
    in_place_ = in_place;
  }

  Tensors<T> tensors() const {
    Tensors<T> t;
    t.y_backprop = in_place_ ? dx.get() : dy.get();
    t.x = x.get();
    t.scale = scale.get();
    t.mean = mean.get();
    t.variance = variance.get();
    t.x_backprop = dx.get();
    t.scale_backprop = dscale.get();
    t.offset_backprop = doffset.get();
    return t;
  }

  bool Fetch(Outputs<T>* out) const {
    return cudaDeviceSynchronize() == cudaSuccess && dx.Out(&out->dx) &&
           dscale.Out(&out->dscale) && doffset.Out(&out->doffset);
  }

 private:
  bool in_place_ = false;
};

template <typename T>
void CheckCase(const FfiShape& s, const Case& k, uint32_t seed, cudaStream_t stream) {
  const std::string name = "cuda " + DimsText(XDims(s, k.shape.channels_last)) + " " +
                           Describe(k, TypeName<T>());
  const Inputs<T> in(k, seed);
  const Params p = ParamsOf(k);
  const size_t scratch_bytes = GpuScratchBytes(k.shape);

  Outputs<T> want(k.shape);
  {
    DeviceBuffers<T> direct(in, k.shape, false);
    DeviceArray<unsigned char> scratch(scratch_bytes);
    const bool ran = direct.ok && scratch.Garbage() &&
                     BatchNormGradGpu(p, direct.tensors(), scratch.get(), stream) == 0 &&
                     direct.Fetch(&want);
    Check(ran && AllFinite(want), name + ": the core called directly writes every output");
    if (!ran) return;
  }

  for (bool in_place : {false, true}) {
    const std::string what = name + (in_place ? ", in place" : "");
    DeviceBuffers<T> device(in, k.shape, in_place);
    CudaContext c(stream);
    CallFrame frame(&c.ctx);
    SpecFor(s, p, device.tensors()).AddTo(&frame);
    const FfiStatus status = frame.Call(FbnBatchNormGradCuda);
    Outputs<T> got(k.shape);
    Check(device.ok && status.ok && device.Fetch(&got),
          what + ": succeeds" + (status.ok ? "" : ": \"" + status.message + "\""));
    Check(SameBits(got, want), what + ": the bits of the core called directly");
    CheckScratchThroughXla(c, scratch_bytes, what);
  }
}

template <typename T>
void CheckAllCases(cudaStream_t stream) {
  uint32_t seed = 1;
  for (const FfiShape& s : Shapes()) {
    for (bool channels_last : {true, false}) {
      for (bool training : {true, false}) {
        for (bool saved_inv_std : {false, true}) {
          const Case k{CoreShape(s, channels_last), training, seed % 4 == 0 ? 100.0f : 0.0f,
                       saved_inv_std};
          CheckCase<T>(s, k, seed++, stream);
        }
      }
    }
  }
}

// What the runtime may fail to give: a stream, or the scratch. Each must come back as an error
// of its own kind, with nothing leaked.
void CheckRuntimeFailures(cudaStream_t stream) {
  const FfiShape s{2, {3, 5}, 7};
  const Case k{CoreShape(s, true), true, 0.0f};
  const Inputs<float> in(k, 3);
  const Params p = ParamsOf(k);

  struct Failure {
    const char* what;
    bool no_stream, stream_fails, allocation_fails;
    XLA_FFI_Error_Code code;
    const char* message;
  };
  const Failure failures[] = {
      {"no stream", true, false, false, XLA_FFI_Error_Code_INTERNAL, "XLA passed no CUDA stream"},
      {"a failing stream query", false, true, false, XLA_FFI_Error_Code_INVALID_ARGUMENT,
       "Failed to get platform stream"},
      {"a failing scratch allocation", false, false, true, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
       "bytes of GPU scratch"},
  };
  for (const Failure& f : failures) {
    const std::string name = std::string("cuda, ") + f.what;
    DeviceBuffers<float> device(in, k.shape, false);
    CudaContext c(f.no_stream ? nullptr : stream);
    c.ctx.stream_fails = f.stream_fails;
    c.ctx.allocation_fails = f.allocation_fails;
    const int errors_before = LiveErrors();
    CallFrame frame(&c.ctx);
    SpecFor(s, p, device.tensors()).AddTo(&frame);
    const FfiStatus status = frame.Call(FbnBatchNormGradCuda);
    Check(!status.ok && status.code == f.code &&
              status.message.find(f.message) != std::string::npos,
          name + ": error " + std::to_string(f.code) + " containing \"" + f.message + "\"; got " +
              (status.ok ? "success" : std::to_string(status.code) + " \"" + status.message +
                                           "\""));
    Check(c.ctx.allocations == c.ctx.frees && c.ctx.live.empty() && c.ctx.bad_frees == 0,
          name + ": no scratch left allocated");
    Check(LiveErrors() == errors_before, name + ": every error destroyed");
  }
}

}  // namespace
}  // namespace fbn

int main() {
  using namespace fbn::testing;  // NOLINT
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    std::printf("FAIL cudaStreamCreateWithFlags\n");
    return 1;
  }
  CheckMetadata(FbnBatchNormGradCuda, "cuda");
  {
    CudaContext c(stream);
    CheckBadCalls(FbnBatchNormGradCuda, &c.ctx, "cuda");
    Check(c.ctx.allocations == c.ctx.frees && c.ctx.live.empty() && c.ctx.bad_frees == 0,
          "cuda: refused calls leave no scratch allocated");
  }
  fbn::CheckRuntimeFailures(stream);
  fbn::CheckAllCases<float>(stream);
  fbn::CheckAllCases<fbn::Half>(stream);
  fbn::CheckAllCases<fbn::BFloat16>(stream);
  cudaStreamDestroy(stream);
  Check(LiveErrors() == 0, "cuda: every FFI error created was destroyed");
  return Summary("xla_ffi_emu_test");
}
