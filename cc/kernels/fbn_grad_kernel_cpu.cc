// CPU registration of the three ops: the functor runs the core's CPU kernels on the intra-op pool.
#include "cc/kernels/cpu_parallel_for.h"
#include "cc/kernels/fbn_grad_kernel.h"

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

template <typename T>
using CpuGradOp = FbnFusedBatchNormGradOp<CPUDevice, T>;

FBN_REGISTER_GRAD_KERNELS(DEVICE_CPU, CpuGradOp);

}  // namespace fbn_kernels
}  // namespace tensorflow
