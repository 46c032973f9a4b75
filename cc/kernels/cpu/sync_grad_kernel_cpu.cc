// CPU registration of synchronized batch norm's two backward ops (the device's pieces:
// fbn_grad_functor_cpu.h).
#include "cc/kernels/cpu/fbn_grad_functor_cpu.h"
#include "cc/kernels/sync_grad_kernel.h"

namespace tensorflow {
namespace fbn_kernels {

FBN_REGISTER_SYNC_KERNELS(DEVICE_CPU, CPUDevice);

}  // namespace fbn_kernels
}  // namespace tensorflow
