// CPU registration of the three ops: the functor runs the core's CPU kernels on the intra-op pool;
// x_backprop that cannot reuse y_backprop's buffer comes from memory kept mapped between calls.
#include "cc/kernels/fbn_grad_functor_cpu.h"
#include "cc/kernels/fbn_grad_kernel.h"
#include "cc/kernels/retained_cpu_allocator.h"

namespace tensorflow {
namespace fbn_kernels {

// Fresh pages would cost more than the arithmetic (retained_cpu_allocator.h).
template <>
struct XBackpropAllocation<CPUDevice> {
  static Status Allocate(OpKernelContext* ctx, DataType dtype, const TensorShape& shape,
                         Tensor** x_backprop) {
    return AllocateRetainedOutput(ctx, 0, dtype, shape, x_backprop);
  }
};

template <typename T>
using CpuGradOp = FbnFusedBatchNormGradOp<CPUDevice, T>;

FBN_REGISTER_GRAD_KERNELS(DEVICE_CPU, CpuGradOp);

}  // namespace fbn_kernels
}  // namespace tensorflow
