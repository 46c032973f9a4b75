// The OpKernels of synchronized batch norm's two backward ops (cc/ops/fbn_sync_ops.cc) on every
// device: attrs, validation, outputs, then one call of the core in a Stage (bn_grad.h) through
// the device's BatchNormGradFunctor, the one the gradient ops call.
#ifndef TF_FBN_OPS_CC_KERNELS_SYNC_GRAD_KERNEL_H_
#define TF_FBN_OPS_CC_KERNELS_SYNC_GRAD_KERNEL_H_

#include "cc/core/bn_grad.h"
#include "cc/kernels/fbn_grad_kernel.h"
#include "cc/kernels/sync_grad_validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow {
namespace fbn_kernels {

// FbnSyncBatchNormGradSums: this replica's Σ dy and Σ dy·(x − mean) per channel.
template <typename Device, typename T>
class SyncGradSumsOp : public OpKernel {
 public:
  explicit SyncGradSumsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    const Status status = ReadSyncAttrs(ctx, /*has_epsilon=*/false, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& y_backprop = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& mean = ctx->input(2);
    fbn::Params params;
    params.stage = fbn::Stage::kSums;
    const Status valid = ValidateSyncInputs(y_backprop.shape(), x.shape(),
                                            {{"mean", &mean.shape()}}, attrs_, &params.shape);
    OP_REQUIRES(ctx, valid.ok(), valid);
    Tensor* sum_dy = nullptr;
    Tensor* sum_dy_xc = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, mean.shape(), &sum_dy));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, mean.shape(), &sum_dy_xc));
    fbn::Tensors<typename CoreType<T>::type> t;
    t.y_backprop = CoreData<T>(y_backprop);
    t.x = CoreData<T>(x);
    t.mean = mean.flat<float>().data();
    t.sum_dy = sum_dy->flat<double>().data();
    t.sum_dy_xc = sum_dy_xc->flat<double>().data();
    OP_REQUIRES_OK(ctx, (BatchNormGradFunctor<Device, T>()(ctx, params, t)));
  }

 private:
  SyncAttrs attrs_;
};

// FbnSyncBatchNormGradFromSums: x_backprop of this replica's batch, from the global sums and
// count, and the replica's share of the scale and offset gradients, from its own sums.
template <typename Device, typename T>
class SyncGradFromSumsOp : public OpKernel {
 public:
  explicit SyncGradFromSumsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    const Status status = ReadSyncAttrs(ctx, /*has_epsilon=*/true, &attrs_);
    OP_REQUIRES(ctx, status.ok(), status);
  }

  void Compute(OpKernelContext* ctx) override {
    using Core = typename CoreType<T>::type;
    const Tensor& y_backprop = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& scale = ctx->input(2);
    const Tensor& mean = ctx->input(3);
    const Tensor& variance = ctx->input(4);
    const Tensor& sum_dy = ctx->input(5);
    const Tensor& sum_dy_xc = ctx->input(6);
    const Tensor& replica_sum_dy = ctx->input(8);
    const Tensor& replica_sum_dy_xc = ctx->input(9);
    fbn::Params params;
    params.stage = fbn::Stage::kDxFromSums;
    params.epsilon = attrs_.epsilon;
    Status valid = ValidateSyncInputs(
        y_backprop.shape(), x.shape(),
        {{"scale", &scale.shape()}, {"mean", &mean.shape()}, {"variance", &variance.shape()},
         {"sum_dy", &sum_dy.shape()}, {"sum_dy_xc", &sum_dy_xc.shape()},
         {"replica_sum_dy", &replica_sum_dy.shape()},
         {"replica_sum_dy_xc", &replica_sum_dy_xc.shape()}},
        attrs_, &params.shape);
    if (valid.ok()) valid = ValidateGlobalCount(ctx->input(7), params.shape, &params.global_count);
    OP_REQUIRES(ctx, valid.ok(), valid);

    GradOutputs outputs;
    OP_REQUIRES_OK(ctx, AllocateGradOutputs<Device>(ctx, DataTypeToEnum<T>::value, x.shape(),
                                                    scale.shape(), &outputs));
    fbn::Tensors<Core> t;
    t.y_backprop = CoreData<T>(y_backprop);
    t.x = CoreData<T>(x);
    t.scale = scale.flat<float>().data();
    t.mean = mean.flat<float>().data();
    t.variance = variance.flat<float>().data();
    t.global_sum_dy = sum_dy.flat<double>().data();
    t.global_sum_dy_xc = sum_dy_xc.flat<double>().data();
    t.replica_sum_dy = replica_sum_dy.flat<double>().data();
    t.replica_sum_dy_xc = replica_sum_dy_xc.flat<double>().data();
    SetGradOutputs<T>(outputs, &t);
    OP_REQUIRES_OK(ctx, (BatchNormGradFunctor<Device, T>()(ctx, params, t)));
  }

 private:
  SyncAttrs attrs_;
};

#define FBN_REGISTER_SYNC_KERNELS_FOR(DEVICE_NAME, DeviceType, T)                          \
  REGISTER_KERNEL_BUILDER(Name("FbnSyncBatchNormGradSums")                                 \
                              .Device(DEVICE_NAME)                                         \
                              .TypeConstraint<T>("T")                                      \
                              .TypeConstraint<float>("U"),                                 \
                          SyncGradSumsOp<DeviceType, T>);                                  \
  REGISTER_KERNEL_BUILDER(Name("FbnSyncBatchNormGradFromSums")                             \
                              .Device(DEVICE_NAME)                                         \
                              .TypeConstraint<T>("T")                                      \
                              .TypeConstraint<float>("U")                                  \
                              .HostMemory("count"),                                        \
                          SyncGradFromSumsOp<DeviceType, T>)

// Both ops for float, half and bfloat16 on one device.
#define FBN_REGISTER_SYNC_KERNELS(DEVICE_NAME, DeviceType)                                 \
  FBN_REGISTER_SYNC_KERNELS_FOR(DEVICE_NAME, DeviceType, float);                           \
  FBN_REGISTER_SYNC_KERNELS_FOR(DEVICE_NAME, DeviceType, Eigen::half);                     \
  FBN_REGISTER_SYNC_KERNELS_FOR(DEVICE_NAME, DeviceType, Eigen::bfloat16)

}  // namespace fbn_kernels
}  // namespace tensorflow

#endif  // TF_FBN_OPS_CC_KERNELS_SYNC_GRAD_KERNEL_H_
