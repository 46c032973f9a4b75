// CPU registration of the three gradient ops (the device's pieces: fbn_grad_functor_cpu.h).
#include "cc/kernels/cpu/fbn_grad_functor_cpu.h"
#include "cc/kernels/fbn_grad_kernel.h"

namespace tensorflow {
namespace fbn_kernels {

template <typename T>
using CpuGradOp = FbnFusedBatchNormGradOp<CPUDevice, T>;

FBN_REGISTER_GRAD_KERNELS(DEVICE_CPU, CpuGradOp);

}  // namespace fbn_kernels
}  // namespace tensorflow
