// CPU registration of the three ops: the functor runs the core's CPU kernels on the intra-op pool.
#include "cc/kernels/cpu_parallel_for.h"
#include "cc/kernels/fbn_grad_kernel.h"

namespace tensorflow {
namespace fbn_kernels {

using CPUDevice = Eigen::ThreadPoolDevice;

template <typename T>
struct BatchNormGradFunctor<CPUDevice, T> {
  absl::Status operator()(OpKernelContext* ctx, const fbn::Params& params,
                          const fbn::Tensors<typename CoreType<T>::type>& tensors) {
    fbn::BatchNormGradCpu(params, tensors, IntraOpParallelFor(ctx));
    return absl::OkStatus();
  }
};

#define FBN_REGISTER_CPU(OP, T)                                                            \
  REGISTER_KERNEL_BUILDER(                                                                 \
      Name(OP).Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<float>("U"),       \
      FbnFusedBatchNormGradOp<CPUDevice, T>)

REGISTER_KERNEL_BUILDER(Name("FbnFusedBatchNormGrad").Device(DEVICE_CPU).TypeConstraint<float>("T"),
                        FbnFusedBatchNormGradOp<CPUDevice, float>);
FBN_REGISTER_CPU("FbnFusedBatchNormGradV2", float);
FBN_REGISTER_CPU("FbnFusedBatchNormGradV2", Eigen::half);
FBN_REGISTER_CPU("FbnFusedBatchNormGradV2", Eigen::bfloat16);
FBN_REGISTER_CPU("FbnFusedBatchNormGradV3", float);
FBN_REGISTER_CPU("FbnFusedBatchNormGradV3", Eigen::half);
FBN_REGISTER_CPU("FbnFusedBatchNormGradV3", Eigen::bfloat16);

#undef FBN_REGISTER_CPU

}  // namespace fbn_kernels
}  // namespace tensorflow
