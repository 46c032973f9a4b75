// Adapts TensorFlow's intra-op thread pool to the core's ParallelFor.
#ifndef TF_FBN_OPS_CC_RUNTIME_CPU_PARALLEL_FOR_H_
#define TF_FBN_OPS_CC_RUNTIME_CPU_PARALLEL_FOR_H_

#include "cc/core/bn_grad.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tensorflow {
namespace fbn_kernels {

// Runs the core's work units on the op's intra-op pool (the one
// tf.config.threading.set_intra_op_parallelism_threads sizes).
fbn::ParallelFor IntraOpParallelFor(OpKernelContext* ctx);

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_RUNTIME_CPU_PARALLEL_FOR_H_
