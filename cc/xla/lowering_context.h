// What a lowering reads and sets of the op being compiled: the few calls of TensorFlow's
// XlaOpKernelContext it makes. The lowerings see only this and XLA's builder; the header that
// defines XlaOpKernelContext (tf2xla/xla_op_kernel.h) takes several times longer to compile than
// everything else a lowering reads, so only the kernels (xla_op_kernels.cc) include it, through
// kernel_lowering_context.h.
#ifndef TF_FBN_OPS_CC_XLA_LOWERING_CONTEXT_H_
#define TF_FBN_OPS_CC_XLA_LOWERING_CONTEXT_H_

#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/status.h"

// XLA's builder moved twice: under tensorflow/compiler/ up to TF 2.13 or so, then xla/client,
// then xla/hlo/builder (setup.py checks that one of them is there).
#if __has_include("xla/hlo/builder/xla_builder.h")
#include "xla/hlo/builder/xla_builder.h"
#elif __has_include("xla/client/xla_builder.h")
#include "xla/client/xla_builder.h"
#else
#include "tensorflow/compiler/xla/client/xla_builder.h"
#endif

namespace tensorflow {
namespace fbn_kernels {

// Each call means what XlaOpKernelContext's of the same name means.
class LoweringContext {
 public:
  virtual ~LoweringContext() = default;
  virtual xla::XlaBuilder* builder() const = 0;
  virtual xla::XlaOp Input(int index) = 0;
  virtual TensorShape InputShape(int index) = 0;
  virtual xla::PrimitiveType input_xla_type(int index) = 0;
  virtual void SetOutput(int index, xla::XlaOp value) = 0;
  virtual void SetStatus(const Status& status) = 0;
  // The computation that adds two scalars of `type`, as reductions take it.
  virtual const xla::XlaComputation* GetOrCreateAdd(DataType type) = 0;
};

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_XLA_LOWERING_CONTEXT_H_
