// The CPU specialization of BatchNormGradFunctor: the core's CPU kernels on the intra-op pool,
// whatever the Stage of the call (the gradient ops and synchronized batch norm's halves alike).
#ifndef TF_FBN_OPS_CC_KERNELS_FBN_GRAD_FUNCTOR_CPU_H_
#define TF_FBN_OPS_CC_KERNELS_FBN_GRAD_FUNCTOR_CPU_H_

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

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_FBN_GRAD_FUNCTOR_CPU_H_
