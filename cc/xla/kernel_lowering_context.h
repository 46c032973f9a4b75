// The lowerings' view of an op (lowering_context.h) over TensorFlow's XlaOpKernelContext: what
// an XLA kernel's Compile hands its lowering.
#ifndef TF_FBN_OPS_CC_XLA_KERNEL_LOWERING_CONTEXT_H_
#define TF_FBN_OPS_CC_XLA_KERNEL_LOWERING_CONTEXT_H_

#include "cc/xla/lowering_context.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"

namespace tensorflow {
namespace fbn_kernels {

class KernelLoweringContext final : public LoweringContext {
 public:
  explicit KernelLoweringContext(XlaOpKernelContext* ctx) : ctx_(ctx) {}

  xla::XlaBuilder* builder() const override { return ctx_->builder(); }
  xla::XlaOp Input(int index) override { return ctx_->Input(index); }
  TensorShape InputShape(int index) override { return ctx_->InputShape(index); }
  xla::PrimitiveType input_xla_type(int index) override { return ctx_->input_xla_type(index); }
  void SetOutput(int index, xla::XlaOp value) override { ctx_->SetOutput(index, value); }
  void SetStatus(const Status& status) override { ctx_->SetStatus(status); }
  const xla::XlaComputation* GetOrCreateAdd(DataType type) override {
    return ctx_->GetOrCreateAdd(type);
  }

 private:
  XlaOpKernelContext* ctx_;
};

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_XLA_KERNEL_LOWERING_CONTEXT_H_
