// Test of the CUDA core without TensorFlow or Python: the GPU kernels against the
// double-precision reference on the CPU test's random and awkward shapes, for every layout,
// dtype and mode, with and without the inverse-std contract; edge cases (more blocks wanted
// than the scratch allows, C >= 65536, infinities and NaNs, var + eps == 0, saved inverse std of
// inf or 0, empty tensors); two runs must give the same bits; unaligned buffers take the scalar
// path; every output and the scratch hold garbage before each run.
//
// The same source runs on a GPU (make gpu-test) and on the host emulator (make gpu-emu-test,
// cc/tests/gpu_emulator). On a GPU it also checks that the kernels run on the caller's stream:
// a non-blocking stream driven from another thread while the legacy default stream is busy.
// FBN_GPU_TEST_LARGE=1 adds float16 tensors of more than 2^31 elements (about 13 GB of GPU
// memory, a minute; make gpu-test-large).
//
// Prints PASS/FAIL counts and exits non-zero on any failure. Without a GPU (no device, or no
// NVIDIA driver at all) it prints SKIP and exits 0, or 1 when FBN_REQUIRE_GPU=1; a driver too
// old for this CUDA runtime, or any other CUDA error, is a failure.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/bn_forward.h"
#include "cc/core/gpu/bn_grad_gpu.h"
#include "cc/tests/gpu_device_case.h"
#include "cc/tests/gpu_forward_case.h"
#include "cc/tests/gpu_presence.h"
#include "cc/tests/test_util.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

// The outputs that miss the reference: x_backprop by more than one rounding of T, the sums by
// more than two float units; non-finite values must match exactly (NormwiseError).
template <typename T>
std::string Mismatches(const Outputs<T>& got, const Outputs<T>& ref) {
  std::string bad;
  if (!(NormwiseError(got.dx, ref.dx) <= DxTolerance<T>())) bad += " x_backprop";
  if (!(NormwiseError(got.dscale, ref.dscale) <= kSumTolerance)) bad += " scale_backprop";
  if (!(NormwiseError(got.doffset, ref.doffset) <= kSumTolerance)) bad += " offset_backprop";
  return bad;
}

template <typename T>
void CheckAgainstReference(const std::string& name, const Outputs<T>& got,
                           const Outputs<T>& ref) {
  const std::string bad = Mismatches(got, ref);
  Check(bad.empty(), name + ": matches the reference" + (bad.empty() ? "" : "; off:" + bad));
}

// The comparison must reject what a stub kernel that writes only NaN would leave.
template <typename T>
void CheckNanStubFails() {
  const Case k{{2, 3, 5, true}, true, 0.0f};
  Inputs<T> in(k, 1);
  Outputs<T> ref(k.shape), stub(k.shape);
  BatchNormGradReference(ParamsOf(k), ref.Bind(in));
  std::fill(stub.dx.begin(), stub.dx.end(), FromFloat<T>(NAN));
  std::fill(stub.dscale.begin(), stub.dscale.end(), NAN);
  std::fill(stub.doffset.begin(), stub.doffset.end(), NAN);
  Check(Mismatches(stub, ref) == " x_backprop scale_backprop offset_backprop",
        std::string(TypeName<T>()) + ": a NaN-writing stub fails all three outputs");
}

// The kernel plans other than the default (GpuVariant) must give the default's bits, each alone
// and all together: where one row block holds every row, the separate launches against the
// one-kernel default; 16-bit channels-last rows of 256 channels and more, 16-byte vectors.
template <typename T>
void CheckVariantsGiveTheSameBits(const std::string& name, DeviceCase<T>& device,
                                  const Params& p, const Outputs<T>& expected) {
  for (unsigned variants : {unsigned{kSeparateLaunches}, unsigned{kWideRows},
                            unsigned{kSeparateLaunches | kWideRows}}) {
    Outputs<T> got(p.shape);
    SetGpuVariants(variants);
    const bool ran = device.Run(p, &got);
    SetGpuVariants(0);
    Check(ran && got.BitEqual(expected),
          name + ": variants " + std::to_string(variants) + " give the same bits");
  }
}

template <typename T>
void RunCase(const Case& k, const Inputs<T>& in) {
  const std::string name = Describe(k, TypeName<T>());
  const Params p = ParamsOf(k);
  Outputs<T> ref(k.shape), first(k.shape), second(k.shape), unaligned(k.shape);
  BatchNormGradReference(p, ref.Bind(in));

  // The second run is in place (x_backprop over y_backprop, as when TensorFlow forwards dy's
  // buffer), on garbage-filled scratch: its bits must be the first run's, which checks both
  // run-to-run determinism and in-place correctness with one run more, not two.
  DeviceCase<T> aligned_case(in, k.shape, 0);
  const bool ran = aligned_case.Run(p, &first) && aligned_case.Run(p, &second, /*in_place=*/true);
  Check(ran, name + ": runs");
  if (!ran) return;
  CheckAgainstReference(name, first, ref);
  Check(first.BitEqual(second), name + ": a second run, in place, gives the same bits");
  CheckVariantsGiveTheSameBits(name, aligned_case, p, first);

  DeviceCase<T> shifted_case(in, k.shape, 1);
  Check(shifted_case.Run(p, &unaligned), name + " unaligned: runs");
  CheckAgainstReference(name + " unaligned", unaligned, ref);
  CheckVariantsGiveTheSameBits(name + " unaligned", shifted_case, p, unaligned);
}

template <typename T>
void RunCase(const Case& k, uint32_t seed) {
  RunCase<T>(k, Inputs<T>(k, seed));
}

template <typename T>
void RunRandomAndAwkwardShapes() {
  uint32_t seed = 1;
  for (Case k : TestCases()) {
    RunCase<T>(k, seed);
    k.saved_inv_std = !k.saved_inv_std;  // both reserve_space_2 contracts
    RunCase<T>(k, seed++);
  }
  for (const Shape& s : EmptyShapes()) {
    CheckEmptyInput<T>(s, [&s](const Params& p, const Inputs<T>& in, Outputs<T>* out) {
      DeviceCase<T> device(in, s, 0);
      return device.Run(p, out);
    });
  }
}

// Infinities and NaNs (with payloads) in dy and x of a few channels; the other channels stay
// finite. Non-finite outputs must match the reference's exactly (NormwiseError).
template <typename T>
void RunSpecialValues() {
  const float specials[] = {INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 1e-8f};
  for (const Shape& s : {Shape{3, 5, 40, true}, Shape{3, 5, 40, false}}) {
    for (bool training : {true, false}) {
      const Case k{s, training, 0.5f};
      Inputs<T> in(k, 11);
      for (int i = 0; i < 6; ++i) {
        const int64_t at = (i * 7919 + 13) % s.elements();
        (i % 2 ? in.dy : in.x)[at] = FromFloat<T>(specials[i]);
      }
      RunCase<T>(k, in);
    }
  }
}

// Per-channel statistics that make the inverse std infinite or zero: var + eps == 0 with the
// variance given (the serial branch of Finalize), and a saved inverse std of inf or 0.
template <typename T>
void RunDegenerateStatistics() {
  const Shape s{4, 3, 33, true};
  for (bool channels_last : {true, false}) {
    Shape shape = s;
    shape.channels_last = channels_last;
    const Case given{shape, true, 0.0f, false};
    Inputs<T> in(given, 5);
    in.variance[1] = -ParamsOf(given).epsilon;  // var + eps == 0 exactly, in double
    RunCase<T>(given, in);

    const Case saved{shape, true, 0.0f, true};
    Inputs<T> in_saved(saved, 6);
    in_saved.variance[0] = INFINITY;
    in_saved.variance[2] = 0.0f;
    RunCase<T>(saved, in_saved);
  }
}

// C >= 65536: a channels-first grid wider than 65535 blocks, Finalize's grid, wide rows.
template <typename T>
void RunManyChannels() {
  for (const Shape& s : {Shape{2, 65537, 1, true}, Shape{1, 66000, 3, false},
                         Shape{3, 70000, 2, true}}) {
    for (bool training : {true, false}) RunCase<T>(Case{s, training, 0.0f}, 3);
  }
}

// Channels last with at least kWarpSize vectors of eight channels, where the wide_rows variant
// applies: several row blocks, a block of the grid with fewer lanes than the others (264
// channels: 33 vectors), and one holding every row (the one-kernel plan).
template <typename T>
void RunWideRows() {
  for (const Shape& s : {Shape{3, 264, 150, true}, Shape{1, 256, 40, true}}) {
    for (bool training : {true, false}) RunCase<T>(Case{s, training, 0.0f}, 21);
  }
}

// More row blocks wanted than the scratch holds (the Plan's clamp), in both layouts: a block
// then covers more than its usual share, and the partial sums still cover every element once.
void RunRowBlockClamp() {
  for (const Shape& s : {Shape{1, 1, (int64_t{1} << 24) + 4096, false},
                         Shape{1, 8, (int64_t{1} << 21) + 64, true}}) {
    for (bool training : {true, false}) RunCase<float>(Case{s, training, 0.0f}, 9);
  }
}

// Synchronized batch norm's stages (Stage, bn_grad.h): kSums then kDxFromSums with those sums
// as the global and the replica's ones give the bits of one whole call, aligned and not, in place
// too; a replica with an empty batch adds zeros, its share of the scale and offset gradients is
// zeros, and it finishes the sums it is given.
template <typename T>
void RunStages() {
  uint32_t seed = 300;
  for (Case k : TestCases()) {
    if (!k.is_training || k.shape.elements() == 0) continue;
    k.saved_inv_std = false;  // the stages take the variance, on every device
    const Inputs<T> in(k, seed++);
    const std::string name = Describe(k, TypeName<T>()) + ": stages";
    Params whole = ParamsOf(k), sums = whole, from_sums = whole;
    sums.stage = Stage::kSums;
    from_sums.stage = Stage::kDxFromSums;
    from_sums.global_count = k.shape.rest();
    for (int shift : {0, 1}) {
      for (bool in_place : {false, true}) {
        DeviceCase<T> device(in, k.shape, shift);
        Outputs<T> one(k.shape), staged(k.shape), unused(k.shape);
        std::vector<double> sum_dy, sum_dy_xc;
        const bool ran = device.Run(whole, &one) && device.Run(sums, &unused) &&
                         device.FetchSums(&sum_dy, &sum_dy_xc) &&
                         device.SetGivenSums(sum_dy, sum_dy_xc, sum_dy, sum_dy_xc) &&
                         device.Run(from_sums, &staged, in_place);
        Check(ran, name + ": runs");
        Check(ran && staged.BitEqual(one),
              name + (shift ? " unaligned" : "") + (in_place ? " in place" : "") +
                  ": the two stages give the bits of one call");
      }
    }
  }
  const Shape empty{0, 5, 7, true};
  const Case k{empty, true, 0.0f};
  const Inputs<T> in(k, 9);
  Params sums = ParamsOf(k), from_sums = ParamsOf(k);
  sums.stage = Stage::kSums;
  from_sums.stage = Stage::kDxFromSums;
  from_sums.global_count = 40;
  DeviceCase<T> device(in, empty, 0);
  Outputs<T> out(empty);
  std::vector<double> sum_dy, sum_dy_xc;
  const std::vector<double> global = {1.0, -2.0, 3.0, 0.5, 0.0};
  bool ok = device.Run(sums, &out) && device.FetchSums(&sum_dy, &sum_dy_xc) &&
            sum_dy == std::vector<double>(5, 0.0) && sum_dy_xc == std::vector<double>(5, 0.0);
  ok = ok && device.SetGivenSums(global, global, sum_dy, sum_dy_xc) &&
       device.Run(from_sums, &out) && out.dscale == std::vector<float>(5, 0.0f) &&
       out.doffset == std::vector<float>(5, 0.0f);
  ok = ok && device.SetGivenSums(global, global, global, global) && device.Run(from_sums, &out);
  for (int c = 0; ok && c < 5; ++c) {
    ok = out.doffset[c] == static_cast<float>(global[c]) &&
         out.dscale[c] == static_cast<float>(global[c] * from_sums.InvStd(in.variance[c]));
  }
  Check(ok, std::string(TypeName<T>()) +
                ": stages of an empty batch: zero sums, a zero share, the given sums finished");
}

template <typename T>
void RunAll() {
  CheckNanStubFails<T>();
  RunStages<T>();
  RunRandomAndAwkwardShapes<T>();
  RunSpecialValues<T>();
  RunDegenerateStatistics<T>();
  RunManyChannels<T>();
  RunWideRows<T>();
}

// The forward kernels against the reference on the CPU test's forward cases (the largest left
// out under the emulator, for time): every output with garbage before the run, a second run the
// same bits, in place the same bits; the empty shapes.
template <typename T>
void RunForward() {
  unsigned seed = 500;
  for (const ForwardCase& k : ForwardCases()) {
#ifdef FBN_GPU_EMULATOR
    if (k.shape.elements() > 100000) continue;
#endif
    const std::string name = "GPU " + DescribeForward(k, TypeName<T>());
    ForwardParams p = ParamsOf(k);
    const ForwardInputs<T> in = MakeForwardInputs<T>(k, seed++);
    ForwardOutputs<T> ref(k.shape), got(k.shape), again(k.shape), in_place(k.shape);
    BatchNormForwardReference(p, ref.Bind(in));
    ForwardDeviceCase<T> device(in, p);
    const bool ran = device.Run(p, &got) && device.Run(p, &again) &&
                     device.Run(p, &in_place, /*in_place=*/true);
    Check(ran, name + ": runs");
    if (!ran) continue;
    Check(NormwiseError(got.y, ref.y) <= DxTolerance<T>(), name + ": y vs reference");
    Check(ChannelsClose(got.batch_mean, ref.batch_mean) &&
              ChannelsClose(got.batch_variance, ref.batch_variance) &&
              ChannelsClose(got.saved_mean, ref.saved_mean) &&
              ChannelsClose(got.saved_variance, ref.saved_variance),
          name + ": statistics vs reference");
    Check(again.SameBits(got) && in_place.SameBits(got),
          name + ": a second run, and one in place, give the same bits");
  }
  for (const Shape& s : EmptyShapes()) {
    const ForwardCase k{s, true, 0.0f, 0.5f};
    ForwardInputs<T> in;
    in.scale = in.offset = in.mean = in.variance = std::vector<float>(s.channels, 1.0f);
    ForwardOutputs<T> got(s);
    ForwardDeviceCase<T> device(in, ParamsOf(k));
    bool ok = device.Run(ParamsOf(k), &got);
    for (int64_t c = 0; c < s.channels; ++c) {
      ok = ok && std::isnan(got.batch_mean[c]) && std::isnan(got.batch_variance[c]) &&
           got.saved_mean[c] == 0.0f && got.saved_variance[c] == 0.0f;
    }
    Check(ok, "GPU " + DescribeForward(k, TypeName<T>()) + ": empty x");
  }
}

#ifndef FBN_GPU_EMULATOR
// Spins until *release is set, or for at most max_cycles.
__global__ void SpinUntilReleased(const volatile int* release, long long max_cycles) {
  const long long start = clock64();
  while (*release == 0 && clock64() - start < max_cycles) {
  }
}

// TensorFlow hands the kernels its own CUstream, created non-blocking on the primary context,
// and calls them from its own threads. Here: such a stream, driven from a second thread, while
// a kernel holds the legacy default stream. If the core used the default stream, or waited on
// it, the call could not finish while that kernel spins.
void RunOnNonBlockingStream() {
  const Case k{{8, 64, 1000, true}, true, 0.0f};
  Inputs<float> in(k, 21);
  Outputs<float> ref(k.shape), got(k.shape);
  BatchNormGradReference(ParamsOf(k), ref.Bind(in));
  DeviceCase<float> device(in, k.shape, 0);
  cudaStream_t stream = nullptr;
  int* release = nullptr;
  int* release_on_device = nullptr;
  bool ok = device.ok() && CudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                  "cudaStreamCreateWithFlags") &&
            CudaOk(cudaHostAlloc(reinterpret_cast<void**>(&release), sizeof(int),
                                 cudaHostAllocMapped),
                   "cudaHostAlloc") &&
            CudaOk(cudaHostGetDevicePointer(reinterpret_cast<void**>(&release_on_device),
                                            release, 0),
                   "cudaHostGetDevicePointer");
  if (!ok) {
    Check(false, "non-blocking stream: set-up");
    return;
  }
  *release = 0;
  // compute-sanitizer runs kernels one at a time, so there the spinning kernel would hold ours
  // back by design: its runs (FBN_KERNELS_SERIALIZED=1) check the call on the stream alone.
  const bool serialized = std::getenv("FBN_KERNELS_SERIALIZED") != nullptr;
  constexpr long long kSpinCycles = 20'000'000'000LL;  // seconds at any clock: a safety net
  if (!serialized) {
    SpinUntilReleased<<<1, 1, 0, cudaStreamLegacy>>>(release_on_device, kSpinCycles);
  }
  ok = CudaOk(cudaGetLastError(), "spin kernel");
  bool finished_while_default_stream_busy = false;
  std::thread caller([&] {
    ok = ok && CudaOk(cudaSetDevice(0), "cudaSetDevice") &&
         device.Launch(ParamsOf(k), stream) && CudaOk(cudaStreamSynchronize(stream), "stream");
    finished_while_default_stream_busy =
        cudaStreamQuery(cudaStreamLegacy) == cudaErrorNotReady;
  });
  caller.join();
  *release = 1;
  ok = CudaOk(cudaDeviceSynchronize(), "release") && ok && device.Fetch(&got);
  Check(ok, "non-blocking stream: runs");
  if (serialized) {
    std::printf("non-blocking stream: not checked against a busy default stream (kernels run "
                "one at a time here)\n");
  } else {
    Check(finished_while_default_stream_busy,
          "non-blocking stream: finishes while the legacy default stream is busy");
  }
  if (ok) CheckAgainstReference("non-blocking stream", got, ref);
  cudaStreamDestroy(stream);
  cudaFreeHost(release);
}

// Inputs for the large test, cheap to make: multiples of 1/512 in [-4, 4), exact in float16.
Half LargeValue(uint64_t i, uint64_t salt) {
  const uint64_t h = (i + salt) * 0x9E3779B97F4A7C15ull;
  return FromFloat<Half>((static_cast<float>(h >> 52) - 2048.0f) / 512.0f);
}

// float16 tensors of more than 2^31 elements: 64-bit offsets in every kernel, the row-block
// clamp, vectorized (channels last) and channels-first paths.
void RunLargeTensors() {
  const Shape shapes[] = {{1, 8, (int64_t{1} << 28) + 8, true},
                          {1, 2, (int64_t{1} << 30) + 16, false}};
  for (const Shape& s : shapes) {
    const Case k{s, true, 0.0f};
    const std::string name = Describe(k, "half") + " (large)";
    const size_t n = static_cast<size_t>(s.elements());
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    if (free_bytes < 3 * n * sizeof(Half) + (size_t{1} << 30)) {
      Check(false, name + ": not enough GPU memory");
      continue;
    }
    Inputs<Half> per_channel(Case{{1, s.channels, 1, true}, true, 0.0f}, 4);
    std::vector<Half> dy(n), x(n);
    std::vector<std::thread> fillers;
    const size_t parts = std::max(1u, std::thread::hardware_concurrency());
    for (size_t part = 0; part < parts; ++part) {
      fillers.emplace_back([&, part] {
        for (size_t i = n * part / parts; i < n * (part + 1) / parts; ++i) {
          dy[i] = LargeValue(i, 1);
          x[i] = LargeValue(i, 2);
        }
      });
    }
    for (std::thread& t : fillers) t.join();
    Outputs<Half> got(s), ref(s);
    {
      DeviceCase<Half> device(dy.data(), x.data(), per_channel, s, 0);
      Check(device.Run(ParamsOf(k), &got), name + ": runs");
    }
    BatchNormGradReference(ParamsOf(k), ref.Bind(dy.data(), x.data(), per_channel));
    CheckAgainstReference(name, got, ref);
    std::printf("%s: %zu elements checked\n", name.c_str(), n);
  }
}
#endif  // FBN_GPU_EMULATOR

}  // namespace
}  // namespace fbn

int main() {
  switch (fbn::ProbeGpu("gpu_core_test")) {
    case fbn::GpuPresence::kSkip: return 0;
    case fbn::GpuPresence::kFail: return 1;
    case fbn::GpuPresence::kRun: break;
  }
  fbn::testing::CheckErrorMeasureCatchesSpecials();
  fbn::SetGpuVariants(0);  // the default kernels, whatever TF_FBN_OPS_GPU_VARIANTS says
  fbn::RunAll<float>();
  fbn::RunAll<fbn::Half>();
  fbn::RunAll<fbn::BFloat16>();
  fbn::RunForward<float>();
  fbn::RunForward<fbn::Half>();
  fbn::RunForward<fbn::BFloat16>();
  fbn::RunRowBlockClamp();
#ifdef FBN_GPU_EMULATOR
  std::printf("gpu_core_test: emulated; the stream and large-tensor checks need a GPU\n");
#else
  fbn::RunOnNonBlockingStream();
  if (fbn::EnvironmentSays("FBN_GPU_TEST_LARGE", "1")) fbn::RunLargeTensors();
#endif
  return fbn::testing::Summary("gpu_core_test");
}
