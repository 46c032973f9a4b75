// The CPU specializations every CPU op shell uses (the gradient ops and synchronized batch norm's
// halves alike; the forward ops its allocation): BatchNormGradFunctor runs the core's CPU kernels
// on the intra-op pool, whatever the Stage of the call; an x_backprop or y that cannot reuse an
// input's buffer comes from memory kept mapped between calls.
#ifndef TF_FBN_OPS_CC_KERNELS_CPU_FBN_GRAD_FUNCTOR_CPU_H_
#define TF_FBN_OPS_CC_KERNELS_CPU_FBN_GRAD_FUNCTOR_CPU_H_

#include "cc/runtime/cpu_parallel_for.h"
#include "cc/kernels/fbn_grad_kernel.h"
#include "cc/runtime/retained_cpu_allocator.h"

namespace tensorflow {
namespace fbn_kernels {

using CPUDevice = Eigen::ThreadPoolDevice;

template <typename T>
struct BatchNormGradFunctor<CPUDevice, T> {
  Status operator()(OpKernelContext* ctx, const fbn::Params& params,
                    const fbn::Tensors<typename CoreType<T>::type>& tensors) {
    fbn::BatchNormGradCpu(params, tensors, IntraOpParallelFor(ctx));
    return OkStatus();
  }
};

// Fresh pages would cost more than the arithmetic (retained_cpu_allocator.h).
template <>
struct TensorOutputAllocation<CPUDevice> {
  static Status Allocate(OpKernelContext* ctx, DataType dtype, const TensorShape& shape,
                         Tensor** output) {
    return AllocateRetainedOutput(ctx, 0, dtype, shape, output);
  }
};

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_CPU_FBN_GRAD_FUNCTOR_CPU_H_
