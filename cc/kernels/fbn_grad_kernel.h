// The OpKernel shared by FbnFusedBatchNormGrad, V2 and V3 on every device: attrs, validation,
// output allocation, then one call of a device functor. The kernel never touches tensor data
// itself; the functor hands the buffers to the numeric core (cc/core/).
#ifndef TF_FBN_OPS_CC_KERNELS_FBN_GRAD_KERNEL_H_
#define TF_FBN_OPS_CC_KERNELS_FBN_GRAD_KERNEL_H_

#include "cc/core/bn_grad.h"
#include "cc/kernels/fbn_grad_registration.h"
#include "cc/kernels/fbn_grad_validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow {
namespace fbn_kernels {

// The core's storage type for a TensorFlow element type (same size and bits).
template <typename T>
struct CoreType;
template <>
struct CoreType<float> {
  using type = float;
};
template <>
struct CoreType<Eigen::half> {
  using type = fbn::Half;
};
template <>
struct CoreType<Eigen::bfloat16> {
  using type = fbn::BFloat16;
};

// An input's data as the core's storage type.
template <typename T>
const typename CoreType<T>::type* CoreData(const Tensor& t) {
  return reinterpret_cast<const typename CoreType<T>::type*>(t.flat<T>().data());
}

// Computes the three gradients on Device. Specialized per device (CPU: fbn_grad_functor_cpu.h).
template <typename Device, typename T>
struct BatchNormGradFunctor {
  Status operator()(OpKernelContext* ctx, const fbn::Params& params,
                          const fbn::Tensors<typename CoreType<T>::type>& tensors);
};

// Where output 0, the tensor of x's size (x_backprop, the forward's y), comes from when no
// input's buffer can be reused: TensorFlow's allocator unless a device has a reason to differ
// (CPU: fbn_grad_functor_cpu.h).
template <typename Device>
struct TensorOutputAllocation {
  static Status Allocate(OpKernelContext* ctx, DataType dtype, const TensorShape& shape,
                         Tensor** output) {
    return ctx->allocate_output(0, shape, output);
  }
};

// The three outputs every gradient-shaped op has (the gradient ops, synchronized batch norm's
// from-sums stage), as outputs 0-2.
struct GradOutputs {
  Tensor* x_backprop = nullptr;
  Tensor* scale_backprop = nullptr;
  Tensor* offset_backprop = nullptr;
};

// Allocates GradOutputs. x_backprop always gets x's shape (TF returns a 4-D one for an empty
// 5-D x: a bug). It takes over y_backprop's buffer (input 0) when nothing else reads it (in
// training graphs dy usually dies here): no allocation, no fresh pages, less peak memory. The
// cores read each element of y_backprop before writing that element of x_backprop
// (fbn::Tensors), so the bits are the same in place.
template <typename Device>
Status AllocateGradOutputs(OpKernelContext* ctx, DataType dtype, const TensorShape& x_shape,
                           const TensorShape& channels_shape, GradOutputs* outputs) {
  if (!ctx->forward_input_to_output_with_shape(0, 0, x_shape, &outputs->x_backprop)) {
    TF_RETURN_IF_ERROR(
        TensorOutputAllocation<Device>::Allocate(ctx, dtype, x_shape, &outputs->x_backprop));
  }
  TF_RETURN_IF_ERROR(ctx->allocate_output(1, channels_shape, &outputs->scale_backprop));
  return ctx->allocate_output(2, channels_shape, &outputs->offset_backprop);
}

// Points the core's output pointers at GradOutputs.
template <typename T>
void SetGradOutputs(const GradOutputs& outputs, fbn::Tensors<typename CoreType<T>::type>* t) {
  t->x_backprop = reinterpret_cast<typename CoreType<T>::type*>(
      outputs.x_backprop->flat<T>().data());
  t->scale_backprop = outputs.scale_backprop->flat<float>().data();
  t->offset_backprop = outputs.offset_backprop->flat<float>().data();
}

template <typename Device, typename T>
class FbnFusedBatchNormGradOp : public OpKernel {
 public:
  // Invalid attributes and inputs fail through OP_REQUIRES, not OP_REQUIRES_OK: TensorFlow's
  // kernel does the same, and so logs no "OP_REQUIRES failed" warning for a bad call.
  explicit FbnFusedBatchNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    const Status status = ReadGradAttrs(ctx, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
  }

  void Compute(OpKernelContext* ctx) override {
    using Core = typename CoreType<T>::type;
    static_assert(sizeof(Core) == sizeof(T), "core storage type must match TensorFlow's");
    const Tensor& y_backprop = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& scale = ctx->input(2);
    const Tensor& reserve_space_1 = ctx->input(3);
    const Tensor& reserve_space_2 = ctx->input(4);

    fbn::Params params;
    params.epsilon = attrs_.epsilon;
    params.is_training = attrs_.is_training;
    const Status valid =
        ValidateGradInputs(y_backprop.shape(), x.shape(), scale.shape(), reserve_space_1.shape(),
                           reserve_space_2.shape(), attrs_, &params.shape);
    OP_REQUIRES(ctx, valid.ok(), valid);

    GradOutputs outputs;
    OP_REQUIRES_OK(ctx, AllocateGradOutputs<Device>(ctx, DataTypeToEnum<T>::value, x.shape(),
                                                    scale.shape(), &outputs));
    // Outputs 3 and 4 exist for compatibility only; TF's stock kernel makes them empty [0].
    Tensor* unused = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({0}), &unused));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({0}), &unused));

    fbn::Tensors<Core> t;
    t.y_backprop = CoreData<T>(y_backprop);
    t.x = CoreData<T>(x);
    t.scale = scale.flat<float>().data();
    t.mean = reserve_space_1.flat<float>().data();
    t.variance = reserve_space_2.flat<float>().data();
    SetGradOutputs<T>(outputs, &t);
    OP_REQUIRES_OK(ctx, BatchNormGradFunctor<Device, T>()(ctx, params, t));
  }

 private:
  GradAttrs attrs_;
};

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_FBN_GRAD_KERNEL_H_
