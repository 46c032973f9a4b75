// Tests of the CPU FFI handler of the forward (FbnBatchNormForwardHost, cc/xla_ffi/cpu/
// host_handlers.cc) called as XLA calls it, through hand-built call frames and the fake XLA
// runtime (xla_ffi_fake_api.h): every dtype, 4-D and 5-D tensors in both layouts, training
// (plain, with a running-average factor, saving the inverse std), inference and empty tensors
// must give the bits of the core called directly (BatchNormForwardCpu on one thread), whatever
// the pool, and in place (y over x). Calls that break the contract must return an error naming
// the fault and write nothing. Prints one line per failure and a PASS/FAIL summary.
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cc/core/bn_forward.h"
#include "cc/tests/forward_test_util.h"
#include "cc/tests/test_util.h"
#include "cc/tests/xla_ffi_fake_api.h"
#include "cc/tests/xla_ffi_forward_call.h"
#include "cc/tests/xla_ffi_grad_call.h"
#include "cc/xla_ffi/bn_forward_ffi.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

template <typename T>
void CheckCase(const FfiShape& s, const ForwardCase& k, unsigned seed, Pools* pools) {
  const std::string name = "host " + DimsText(XDims(s, k.shape.channels_last)) + " " +
                           DescribeForward(k, TypeName<T>());
  const ForwardInputs<T> in = MakeForwardInputs<T>(k, seed);
  const ForwardParams p = ParamsOf(k);
  ForwardOutputs<T> want(k.shape);
  Garbage(&want);
  BatchNormForwardCpu(p, want.Bind(in), SerialFor());

  for (const PoolVariant& v : PoolVariants(pools)) {
    XLA_FFI_ExecutionContext ctx;
    ctx.thread_pool = v.pool;
    ctx.schedule_fails = v.schedule_fails;
    ForwardOutputs<T> got(k.shape);
    Garbage(&got);
    ForwardTensors<T> t = got.Bind(in);
    if (v.in_place) {
      got.y.assign(in.x.begin(), in.x.end());
      t.x = t.y = got.y.data();
    }
    CallFrame frame(&ctx);
    ForwardSpecFor(s, p, t).AddTo(&frame);
    const FfiStatus status = frame.Call(FbnBatchNormForwardHost);
    if (v.pool != nullptr) v.pool->WaitIdle();  // late tasks must not touch the outputs
    const std::string what = name + ", " + v.what;
    Check(status.ok, what + ": succeeds" + (status.ok ? "" : ": \"" + status.message + "\""));
    Check(SameOutputs(got, want), what + ": the bits of the core called directly");
  }
}

template <typename T>
void CheckAllCases(Pools* pools) {
  unsigned seed = 1;
  std::vector<FfiShape> shapes = WithEdgeShapes({{4, {16, 16}, 33}, {8, {12, 10}, 130},
                                                 {2, {8, 16, 16}, 12}, {3, {2, 5, 70}, 2}});
  for (const FfiShape& s : shapes) {
    for (bool channels_last : {true, false}) {
      for (const ForwardCase& k : ForwardModes(CoreShape(s, channels_last))) {
        CheckCase<T>(s, k, seed++, pools);
      }
    }
  }
}

}  // namespace
}  // namespace fbn

int main() {
  using namespace fbn::testing;  // NOLINT
  CheckMetadata(FbnBatchNormForwardHost, "host forward");
  {
    FakeThreadPool pool(2);
    XLA_FFI_ExecutionContext ctx;
    ctx.thread_pool = &pool;
    CheckForwardBadCalls(FbnBatchNormForwardHost, &ctx, "host forward");
    pool.WaitIdle();
    Check(pool.scheduled() == 0, "host forward: a refused call schedules no task");
  }
  Pools pools;
  fbn::CheckAllCases<float>(&pools);
  fbn::CheckAllCases<fbn::Half>(&pools);
  fbn::CheckAllCases<fbn::BFloat16>(&pools);
  Check(pools.two.scheduled() > 0 && pools.seven.scheduled() > 0,
        "host forward: the 2- and 7-thread pools get tasks");
  Check(LiveErrors() == 0, "host forward: every FFI error created was destroyed");
  return Summary("xla_ffi_forward_test");
}
