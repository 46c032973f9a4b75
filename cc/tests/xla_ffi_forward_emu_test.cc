// Tests of the CUDA FFI handler of the forward (FbnBatchNormForwardCuda, cc/xla_ffi/gpu/
// cuda_handlers.cc) called as XLA calls it, through hand-built call frames and the fake XLA
// runtime, with the CUDA kernels compiled against the host emulator: no GPU, no nvcc, no XLA.
// Every dtype, 4-D and 5-D tensors in both layouts, training (plain, with a running-average
// factor and x about 10^4, saving the inverse std), inference and empty tensors must give the
// bits of the core called directly (BatchNormForwardGpu, emulated), also in place (y over x);
// the scratch must come from XLA's allocator (one allocation of GpuForwardScratchBytes where the
// call needs scratch, freed by the call's end); calls that break the contract must return an
// error naming the fault. Prints one line per failure and a PASS/FAIL summary.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cc/core/bn_forward.h"
#include "cc/core/gpu/bn_forward_gpu.h"
#include "cc/tests/forward_test_util.h"
#include "cc/tests/test_util.h"
#include "cc/tests/xla_ffi_cuda_memory.h"
#include "cc/tests/xla_ffi_fake_api.h"
#include "cc/tests/xla_ffi_forward_call.h"
#include "cc/tests/xla_ffi_grad_call.h"
#include "cc/xla_ffi/bn_forward_ffi.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

// Device copies of one case's buffers, outputs filled with NaN bytes. In place, y is x's
// buffer.
template <typename T>
struct ForwardDeviceBuffers {
  DeviceArray<T> x, y;
  DeviceArray<float> scale, offset, mean, variance, batch_mean, batch_variance, saved_mean,
      saved_variance;
  bool ok;
  bool in_place;

  ForwardDeviceBuffers(const ForwardInputs<T>& in, const Shape& s, bool in_place_)
      : x(s.elements()), y(s.elements()), scale(s.channels), offset(s.channels),
        mean(s.channels), variance(s.channels), batch_mean(s.channels),
        batch_variance(s.channels), saved_mean(s.channels), saved_variance(s.channels),
        in_place(in_place_) {
    ok = x.In(in.x.data()) && y.Garbage() && scale.In(in.scale.data()) &&
         offset.In(in.offset.data()) && mean.In(in.mean.data()) &&
         variance.In(in.variance.data()) && batch_mean.Garbage() && batch_variance.Garbage() &&
         saved_mean.Garbage() && saved_variance.Garbage();
  }

  ForwardTensors<T> tensors() const {
    ForwardTensors<T> t;
    t.x = x.get();
    t.scale = scale.get();
    t.offset = offset.get();
    t.mean = mean.get();
    t.variance = variance.get();
    t.y = in_place ? x.get() : y.get();
    t.batch_mean = batch_mean.get();
    t.batch_variance = batch_variance.get();
    t.saved_mean = saved_mean.get();
    t.saved_variance = saved_variance.get();
    return t;
  }

  bool Fetch(ForwardOutputs<T>* out) const {
    return cudaDeviceSynchronize() == cudaSuccess && (in_place ? x : y).Out(&out->y) &&
           batch_mean.Out(&out->batch_mean) && batch_variance.Out(&out->batch_variance) &&
           saved_mean.Out(&out->saved_mean) && saved_variance.Out(&out->saved_variance);
  }
};

template <typename T>
void CheckCase(const FfiShape& s, const ForwardCase& k, unsigned seed, cudaStream_t stream) {
  const std::string name = "cuda " + DimsText(XDims(s, k.shape.channels_last)) + " " +
                           DescribeForward(k, TypeName<T>());
  const ForwardInputs<T> in = MakeForwardInputs<T>(k, seed);
  const ForwardParams p = ParamsOf(k);
  const size_t scratch_bytes = GpuForwardScratchBytes(p);

  ForwardOutputs<T> want(k.shape);
  {
    ForwardDeviceBuffers<T> direct(in, k.shape, false);
    DeviceArray<unsigned char> scratch(scratch_bytes);
    const bool ran = direct.ok && scratch.Garbage() &&
                     BatchNormForwardGpu(p, direct.tensors(), scratch.get(), stream) == 0 &&
                     direct.Fetch(&want);
    Check(ran, name + ": the core called directly runs");
    if (!ran) return;
  }

  for (bool in_place : {false, true}) {
    const std::string what = name + (in_place ? ", in place" : "");
    ForwardDeviceBuffers<T> device(in, k.shape, in_place);
    CudaContext c(stream);
    CallFrame frame(&c.ctx);
    ForwardSpecFor(s, p, device.tensors()).AddTo(&frame);
    const FfiStatus status = frame.Call(FbnBatchNormForwardCuda);
    ForwardOutputs<T> got(k.shape);
    Check(device.ok && status.ok && device.Fetch(&got),
          what + ": succeeds" + (status.ok ? "" : ": \"" + status.message + "\""));
    Check(SameOutputs(got, want), what + ": the bits of the core called directly");
    CheckScratchThroughXla(c, scratch_bytes, what);
  }
}

template <typename T>
void CheckAllCases(cudaStream_t stream) {
  unsigned seed = 1;
  // Emulated kernels run a fiber per thread: small shapes, the kinds of the CPU test.
  for (const FfiShape& s : WithEdgeShapes({{3, {4, 4}, 33}, {4, {16, 16}, 8},
                                           {1, {2, 8, 8}, 20}})) {
    for (bool channels_last : {true, false}) {
      for (const ForwardCase& k : ForwardModes(CoreShape(s, channels_last))) {
        CheckCase<T>(s, k, seed++, stream);
      }
    }
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
  CheckMetadata(FbnBatchNormForwardCuda, "cuda forward");
  {
    CudaContext c(stream);
    CheckForwardBadCalls(FbnBatchNormForwardCuda, &c.ctx, "cuda forward");
    Check(c.ctx.allocations == c.ctx.frees && c.ctx.live.empty() && c.ctx.bad_frees == 0,
          "cuda forward: refused calls leave no scratch allocated");
  }
  fbn::CheckAllCases<float>(stream);
  fbn::CheckAllCases<fbn::Half>(stream);
  fbn::CheckAllCases<fbn::BFloat16>(stream);
  cudaStreamDestroy(stream);
  Check(LiveErrors() == 0, "cuda forward: every FFI error created was destroyed");
  return Summary("xla_ffi_forward_emu_test");
}
