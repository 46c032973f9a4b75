// Tests of the CPU FFI handler (FbnBatchNormGradHost, cc/xla_ffi/cpu/host_handlers.cc) called as
// XLA calls it, through hand-built call frames and a fake XLA runtime (xla_ffi_fake_api.h),
// without XLA: every dtype, 4-D and 5-D tensors in both layouts, training and inference, both
// reserve_space_2 contracts and empty tensors must give the bits of the core called directly
// (BatchNormGradCpu on one thread), whatever the pool: 1, 2 or 7 threads, none, one that refuses
// its tasks, and in place (x_backprop over y_backprop). Calls that break the contract must
// return an error naming the fault. Prints one line per failure and a PASS/FAIL summary.
#include <string>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/tests/test_util.h"
#include "cc/tests/xla_ffi_fake_api.h"
#include "cc/tests/xla_ffi_grad_call.h"
#include "cc/xla_ffi/bn_grad_ffi.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

// The edge shapes, shapes of several of the core's units (2^15 elements each) so that the
// pools get work, and one more empty 5-D shape.
std::vector<FfiShape> Shapes() {
  return WithEdgeShapes({{4, {16, 16}, 33},
                         {3, {40, 30}, 16},
                         {8, {12, 10}, 130},
                         {2, {8, 16, 16}, 12},
                         {3, {2, 5, 70}, 2},
                         {2, {2, 0, 2}, 3}});
}

// Fills every output with 0xff bytes (NaN in each type), so an element the handler leaves
// unwritten cannot match the core's.
template <typename T>
void Garbage(Outputs<T>* out) {
  FillBytes(&out->dx, 0xff);
  FillBytes(&out->dscale, 0xff);
  FillBytes(&out->doffset, 0xff);
}

template <typename T>
void CheckCase(const FfiShape& s, const Case& k, uint32_t seed, Pools* pools) {
  const std::string name = "host " + DimsText(XDims(s, k.shape.channels_last)) + " " +
                           Describe(k, TypeName<T>());
  const Inputs<T> in(k, seed);
  const Params p = ParamsOf(k);
  Outputs<T> want(k.shape);
  Garbage(&want);
  BatchNormGradCpu(p, want.Bind(in), SerialFor());
  Check(AllFinite(want), name + ": the core called directly writes every output");

  for (const PoolVariant& v : PoolVariants(pools)) {
    XLA_FFI_ExecutionContext ctx;
    ctx.thread_pool = v.pool;
    ctx.schedule_fails = v.schedule_fails;
    Outputs<T> got(k.shape);
    Garbage(&got);
    const Tensors<T> t = v.in_place ? got.BindInPlace(in) : got.Bind(in);
    CallFrame frame(&ctx);
    SpecFor(s, p, t).AddTo(&frame);
    const FfiStatus status = frame.Call(FbnBatchNormGradHost);
    // Late tasks of the call may still be queued: none may touch the outputs after it returns,
    // so wait for them before reading (ASan would see a late write to a freed buffer).
    if (v.pool != nullptr) v.pool->WaitIdle();
    const std::string what = name + ", " + v.what;
    Check(status.ok, what + ": succeeds" + (status.ok ? "" : ": \"" + status.message + "\""));
    Check(SameBits(got, want), what + ": the bits of the core called directly");
  }
}

template <typename T>
void CheckAllCases(Pools* pools) {
  uint32_t seed = 1;
  for (const FfiShape& s : Shapes()) {
    for (bool channels_last : {true, false}) {
      for (bool training : {true, false}) {
        for (bool saved_inv_std : {false, true}) {
          const Case k{CoreShape(s, channels_last), training, seed % 4 == 0 ? 100.0f : 0.0f,
                       saved_inv_std};
          CheckCase<T>(s, k, seed++, pools);
        }
      }
    }
  }
}

}  // namespace
}  // namespace fbn

int main() {
  using namespace fbn::testing;  // NOLINT
  CheckMetadata(FbnBatchNormGradHost, "host");
  {
    FakeThreadPool pool(2);
    XLA_FFI_ExecutionContext ctx;
    ctx.thread_pool = &pool;
    CheckBadCalls(FbnBatchNormGradHost, &ctx, "host");
    pool.WaitIdle();
    Check(pool.scheduled() == 0, "host: a refused call schedules no task");
  }
  Pools pools;
  fbn::CheckAllCases<float>(&pools);
  fbn::CheckAllCases<fbn::Half>(&pools);
  fbn::CheckAllCases<fbn::BFloat16>(&pools);
  Check(pools.one.scheduled() == 0, "host: a 1-thread pool gets no task (the caller works)");
  Check(pools.two.scheduled() > 0 && pools.seven.scheduled() > 0,
        "host: the 2- and 7-thread pools get tasks (" + std::to_string(pools.two.scheduled()) +
            " and " + std::to_string(pools.seven.scheduled()) + ")");
  Check(LiveErrors() == 0, "host: every FFI error created was destroyed");
  return Summary("xla_ffi_test");
}
