// Op definitions of synchronized batch norm's backward, in two halves around one exchange of
// per-channel sums between replicas (tf_fbn_ops/sync_batch_norm.py does the exchange):
//
//   FbnSyncBatchNormGradSums      this replica's Σ dy and Σ dy·(x − mean), per channel, in
//                                 float64 (the core's exact double accumulation, unrounded)
//   FbnSyncBatchNormGradFromSums  x_backprop of this replica's batch, from the sums over every
//                                 replica and their element count per channel, and this
//                                 replica's share of the scale and offset gradients, from its
//                                 own sums (the shares add up to the whole batch's)
//
// The mean and variance are the global batch statistics of the forward (the biased variance,
// not the inverse standard deviation, on every device). With one replica the pair gives the
// bits of FbnFusedBatchNormGradV3 in training mode.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/tensor_format.h"

namespace tensorflow {
namespace {

using shape_inference::DimensionHandle;
using shape_inference::InferenceContext;
using shape_inference::ShapeHandle;

// x (input 1) has the rank its data_format names and the same shape as y_backprop (input 0);
// the channel dimension goes to *channels.
Status ElementShapes(InferenceContext* c, ShapeHandle* x, DimensionHandle* channels) {
  std::string data_format;
  TF_RETURN_IF_ERROR(c->GetAttr("data_format", &data_format));
  TensorFormat format;
  if (!FormatFromString(data_format, &format)) {
    return errors::InvalidArgument("Invalid data format ", data_format);
  }
  const int rank = static_cast<int>(data_format.size());
  ShapeHandle y_backprop;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), rank, &y_backprop));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), rank, x));
  TF_RETURN_IF_ERROR(c->Merge(y_backprop, *x, x));
  *channels = c->Dim(*x, GetTensorFeatureDimIndex(rank, format));
  return OkStatus();
}

// Inputs [first, last] are vectors of the channels' length.
Status ChannelVectors(InferenceContext* c, int first, int last, DimensionHandle* channels) {
  for (int i = first; i <= last; ++i) {
    ShapeHandle vector;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 1, &vector));
    TF_RETURN_IF_ERROR(c->Merge(*channels, c->Dim(vector, 0), channels));
  }
  return OkStatus();
}

Status SumsShape(InferenceContext* c) {
  ShapeHandle x;
  DimensionHandle channels;
  TF_RETURN_IF_ERROR(ElementShapes(c, &x, &channels));
  TF_RETURN_IF_ERROR(ChannelVectors(c, 2, 2, &channels));
  c->set_output(0, c->Vector(channels));
  c->set_output(1, c->Vector(channels));
  return OkStatus();
}

Status FromSumsShape(InferenceContext* c) {
  ShapeHandle x;
  DimensionHandle channels;
  TF_RETURN_IF_ERROR(ElementShapes(c, &x, &channels));
  TF_RETURN_IF_ERROR(ChannelVectors(c, 2, 6, &channels));
  ShapeHandle count;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(7), 0, &count));
  TF_RETURN_IF_ERROR(ChannelVectors(c, 8, 9, &channels));
  c->set_output(0, x);
  c->set_output(1, c->Vector(channels));
  c->set_output(2, c->Vector(channels));
  return OkStatus();
}

}  // namespace

REGISTER_OP("FbnSyncBatchNormGradSums")
    .Input("y_backprop: T")
    .Input("x: T")
    .Input("mean: U")
    .Output("sum_dy: double")
    .Output("sum_dy_xc: double")
    .Attr("T: {half, bfloat16, float}")
    .Attr("U: {float}")
    .Attr("data_format: {'NHWC', 'NCHW', 'NDHWC', 'NCDHW'} = 'NHWC'")
    .SetShapeFn(SumsShape);

REGISTER_OP("FbnSyncBatchNormGradFromSums")
    .Input("y_backprop: T")
    .Input("x: T")
    .Input("scale: U")
    .Input("mean: U")
    .Input("variance: U")
    .Input("sum_dy: double")
    .Input("sum_dy_xc: double")
    .Input("count: int64")
    .Input("replica_sum_dy: double")
    .Input("replica_sum_dy_xc: double")
    .Output("x_backprop: T")
    .Output("scale_backprop: U")
    .Output("offset_backprop: U")
    .Attr("T: {half, bfloat16, float}")
    .Attr("U: {float}")
    .Attr("epsilon: float = 0.0001")
    .Attr("data_format: {'NHWC', 'NCHW', 'NDHWC', 'NCDHW'} = 'NHWC'")
    .SetShapeFn(FromSumsShape);

}  // namespace tensorflow
