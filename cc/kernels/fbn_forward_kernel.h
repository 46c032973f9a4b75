// The OpKernel shared by FbnFusedBatchNorm, V2 and V3 (the forward) on every device: attrs,
// validation, output allocation, then one call of a device functor that hands the buffers to
// the numeric core (cc/core/bn_forward.h).
#ifndef TF_FBN_OPS_CC_KERNELS_FBN_FORWARD_KERNEL_H_
#define TF_FBN_OPS_CC_KERNELS_FBN_FORWARD_KERNEL_H_

#include "cc/core/bn_forward.h"
#include "cc/kernels/fbn_forward_validation.h"
#include "cc/kernels/fbn_grad_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow {
namespace fbn_kernels {

// Runs the forward on Device. Specialized per device (CPU: fbn_forward_kernel_cpu.cc).
template <typename Device, typename T>
struct BatchNormForwardFunctor {
  // What this device's training saves in reserve_space_2 for the gradient on the same device:
  // TensorFlow's contract there (CPU: the variance; GPU: cuDNN's 1/sqrt(var + eps)).
  static constexpr bool kSavesInvStd = false;
  // Writes 0 into a float scalar output in this device's memory.
  static Status SetScalarZero(OpKernelContext* ctx, Tensor* t);
  Status operator()(OpKernelContext* ctx, const fbn::ForwardParams& params,
                    const fbn::ForwardTensors<typename CoreType<T>::type>& tensors);
};

template <typename Device, typename T>
class FbnFusedBatchNormOp : public OpKernel {
 public:
  explicit FbnFusedBatchNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    const Status status = ReadForwardAttrs(ctx, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
  }

  void Compute(OpKernelContext* ctx) override {
    using Core = typename CoreType<T>::type;
    using Functor = BatchNormForwardFunctor<Device, T>;
    const Tensor& x = ctx->input(0);
    const Tensor& scale = ctx->input(1);
    const Tensor& offset = ctx->input(2);
    const Tensor& mean = ctx->input(3);
    const Tensor& variance = ctx->input(4);
    fbn::Shape shape;
    const Status valid = ValidateForwardInputs(x.shape(), scale.shape(), offset.shape(),
                                               mean.shape(), variance.shape(), attrs_, &shape);
    OP_REQUIRES(ctx, valid.ok(), valid);

    // As TensorFlow's kernel: y may take x's buffer, batch_mean and batch_variance those of the
    // mean and variance inputs (the core reads each input before it writes that output).
    Tensor *y = nullptr, *batch_mean = nullptr, *batch_variance = nullptr;
    Tensor *saved_mean = nullptr, *saved_variance = nullptr;
    if (!ctx->forward_input_to_output_with_shape(0, 0, x.shape(), &y)) {
      OP_REQUIRES_OK(ctx, TensorOutputAllocation<Device>::Allocate(ctx, DataTypeToEnum<T>::value,
                                                                  x.shape(), &y));
    }
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({3}, 1, scale.shape(), &batch_mean));
    OP_REQUIRES_OK(ctx,
                   ctx->forward_input_or_allocate_output({4}, 2, scale.shape(), &batch_variance));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, scale.shape(), &saved_mean));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, scale.shape(), &saved_variance));
    // V3's reserve_space_3: a scalar 0, as TensorFlow's CPU kernel makes it. On a GPU a scalar
    // also tells TensorFlow's gradient that there is no cuDNN reserve to read.
    if (ctx->num_outputs() == 6) {
      Tensor* reserve_space_3 = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(5, TensorShape({}), &reserve_space_3));
      OP_REQUIRES_OK(ctx, Functor::SetScalarZero(ctx, reserve_space_3));
    }

    fbn::ForwardTensors<Core> t;
    t.x = CoreData<T>(x);
    t.scale = scale.flat<float>().data();
    t.offset = offset.flat<float>().data();
    // Read only where TensorFlow reads them, and then validated to hold C values.
    const bool reads = ReadsGivenStatistics(attrs_);
    t.mean = reads ? mean.flat<float>().data() : nullptr;
    t.variance = reads ? variance.flat<float>().data() : nullptr;
    t.y = reinterpret_cast<Core*>(y->flat<T>().data());
    t.batch_mean = batch_mean->flat<float>().data();
    t.batch_variance = batch_variance->flat<float>().data();
    t.saved_mean = saved_mean->flat<float>().data();
    t.saved_variance = saved_variance->flat<float>().data();
    OP_REQUIRES_OK(ctx, Functor()(ctx, ForwardParamsOf(attrs_, shape, Functor::kSavesInvStd), t));
  }

 private:
  ForwardAttrs attrs_;
};

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_FBN_FORWARD_KERNEL_H_
