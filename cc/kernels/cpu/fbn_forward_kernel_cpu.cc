// CPU registration of the three forward ops: the core's CPU kernels on the intra-op pool, y from
// the CPU's retained memory where it cannot take x's buffer (fbn_grad_functor_cpu.h).
#include "cc/kernels/cpu/fbn_grad_functor_cpu.h"
#include "cc/kernels/fbn_forward_kernel.h"
#include "cc/kernels/fbn_grad_registration.h"
#include "cc/runtime/cpu_parallel_for.h"

namespace tensorflow {
namespace fbn_kernels {

template <typename T>
struct BatchNormForwardFunctor<CPUDevice, T> {
  static constexpr bool kSavesInvStd = false;  // TensorFlow's CPU gradient reads the variance
  static Status SetScalarZero(OpKernelContext*, Tensor* t) {
    t->scalar<float>()() = 0.0f;
    return OkStatus();
  }
  Status operator()(OpKernelContext* ctx, const fbn::ForwardParams& params,
                    const fbn::ForwardTensors<typename CoreType<T>::type>& tensors) {
    fbn::BatchNormForwardCpu(params, tensors, IntraOpParallelFor(ctx));
    return OkStatus();
  }
};

template <typename T>
using CpuForwardOp = FbnFusedBatchNormOp<CPUDevice, T>;

FBN_REGISTER_VERSIONS("FbnFusedBatchNorm", DEVICE_CPU, CpuForwardOp);

}  // namespace fbn_kernels
}  // namespace tensorflow
