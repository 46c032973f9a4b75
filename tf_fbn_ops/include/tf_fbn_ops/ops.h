// The library's ops for TensorFlow's C++ graph API, shaped like the classes TensorFlow generates
// for the ops they mirror (tensorflow::ops::FusedBatchNormGrad, V2, V3 and FusedBatchNorm, V2, V3
// in nn_ops.h): constructed from a Scope and Inputs, an Attrs struct with chained setters and
// the ops' defaults, static shortcuts, and the outputs as public members. Errors go to the
// Scope's status.
//
// Header-only, over NodeBuilder: it adds no ABI of its own. The op library must be in the
// process for the graph to run (see the README's C++ section: link it with --no-as-needed, or
// load it with TF_LoadLibrary before building graphs).
//
//   #include "tf_fbn_ops/ops.h"   // -I$(python -c "import tf_fbn_ops; print(tf_fbn_ops.get_include())")
//   auto grad = tf_fbn_ops::ops::FbnFusedBatchNormGradV3(
//       scope, dy, x, scale, mean, variance, reserve_space_3,
//       tf_fbn_ops::ops::FbnFusedBatchNormGradV3::DataFormat("NCHW").IsTraining(false));
//   // grad.x_backprop, grad.scale_backprop, grad.offset_backprop
//   auto bn = tf_fbn_ops::ops::FbnFusedBatchNormV3(
//       scope, x, scale, offset, mean, variance,
//       tf_fbn_ops::ops::FbnFusedBatchNormV3::ExponentialAvgFactor(0.1f));
//   // bn.y, bn.batch_mean, bn.batch_variance, bn.reserve_space_1 ... _3
#ifndef TF_FBN_OPS_OPS_H_
#define TF_FBN_OPS_OPS_H_

#include <initializer_list>
#include <vector>

#include "tensorflow/cc/framework/ops.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/core/graph/node_builder.h"

namespace tf_fbn_ops {
namespace ops {
namespace detail {

// The attrs every op has, with the ops' defaults; Self is the Attrs type the setters return, so
// that a chain keeps the type of the op's own Attrs.
template <typename Self>
struct SharedAttrs {
  TF_MUST_USE_RESULT Self Epsilon(float x) const {
    Self ret = static_cast<const Self&>(*this);
    ret.epsilon_ = x;
    return ret;
  }
  TF_MUST_USE_RESULT Self DataFormat(::tensorflow::StringPiece x) const {
    Self ret = static_cast<const Self&>(*this);
    ret.data_format_ = x;
    return ret;
  }
  TF_MUST_USE_RESULT Self IsTraining(bool x) const {
    Self ret = static_cast<const Self&>(*this);
    ret.is_training_ = x;
    return ret;
  }

  float epsilon_ = 0.0001f;
  ::tensorflow::StringPiece data_format_ = "NHWC";
  bool is_training_ = true;
};

// The gradient ops' attrs.
struct GradAttrs : SharedAttrs<GradAttrs> {};

// The forward ops' attrs: the shared ones and exponential_avg_factor.
struct ForwardAttrs : SharedAttrs<ForwardAttrs> {
  TF_MUST_USE_RESULT ForwardAttrs ExponentialAvgFactor(float x) const {
    ForwardAttrs ret = *this;
    ret.exponential_avg_factor_ = x;
    return ret;
  }

  float exponential_avg_factor_ = 1.0f;
};

inline void SetAttrs(::tensorflow::NodeBuilder* builder, const GradAttrs& attrs) {
  builder->Attr("epsilon", attrs.epsilon_)
      .Attr("data_format", attrs.data_format_)
      .Attr("is_training", attrs.is_training_);
}

inline void SetAttrs(::tensorflow::NodeBuilder* builder, const ForwardAttrs& attrs) {
  builder->Attr("epsilon", attrs.epsilon_)
      .Attr("exponential_avg_factor", attrs.exponential_avg_factor_)
      .Attr("data_format", attrs.data_format_)
      .Attr("is_training", attrs.is_training_);
}

// Adds one node of `op_type` to the scope's graph, as TensorFlow's generated constructors do:
// inputs resolved in order, a unique name, the scope's device and control dependencies, shape
// inference. Returns null (with the error in the scope's status) on failure.
template <typename Attrs>
::tensorflow::Node* AddNode(const ::tensorflow::Scope& scope, const char* op_type,
                            std::initializer_list<::tensorflow::Input> inputs,
                            const Attrs& attrs) {
  if (!scope.ok()) return nullptr;
  std::vector<::tensorflow::NodeBuilder::NodeOut> node_inputs;
  for (const ::tensorflow::Input& input : inputs) {
    node_inputs.push_back(::tensorflow::ops::AsNodeOut(scope, input));
    if (!scope.ok()) return nullptr;
  }
  ::tensorflow::NodeBuilder builder(scope.GetUniqueNameForOp(op_type), op_type);
  for (const auto& input : node_inputs) builder.Input(input);
  SetAttrs(&builder, attrs);
  scope.UpdateBuilder(&builder);
  ::tensorflow::Node* node = nullptr;
  scope.UpdateStatus(builder.Finalize(scope.graph(), &node));
  if (!scope.ok()) return nullptr;
  scope.UpdateStatus(scope.DoShapeInference(node));
  return scope.ok() ? node : nullptr;
}

// What the gradient classes share: Attrs and the static shortcuts that start a chain of them.
struct GradOp {
  using Attrs = GradAttrs;
  static Attrs Epsilon(float x) { return Attrs().Epsilon(x); }
  static Attrs DataFormat(::tensorflow::StringPiece x) { return Attrs().DataFormat(x); }
  static Attrs IsTraining(bool x) { return Attrs().IsTraining(x); }
};

// The same for the forward classes.
struct ForwardOp {
  using Attrs = ForwardAttrs;
  static Attrs Epsilon(float x) { return Attrs().Epsilon(x); }
  static Attrs ExponentialAvgFactor(float x) { return Attrs().ExponentialAvgFactor(x); }
  static Attrs DataFormat(::tensorflow::StringPiece x) { return Attrs().DataFormat(x); }
  static Attrs IsTraining(bool x) { return Attrs().IsTraining(x); }
};

// The outputs every forward op has, in TensorFlow's order (V3 adds reserve_space_3).
struct ForwardOutputs {
  ::tensorflow::Operation operation;
  ::tensorflow::Output y;
  ::tensorflow::Output batch_mean;
  ::tensorflow::Output batch_variance;
  ::tensorflow::Output reserve_space_1;
  ::tensorflow::Output reserve_space_2;

 protected:
  void Bind(::tensorflow::Node* node) {
    if (node == nullptr) return;  // the error is in the scope's status
    operation = ::tensorflow::Operation(node);
    y = ::tensorflow::Output(node, 0);
    batch_mean = ::tensorflow::Output(node, 1);
    batch_variance = ::tensorflow::Output(node, 2);
    reserve_space_1 = ::tensorflow::Output(node, 3);
    reserve_space_2 = ::tensorflow::Output(node, 4);
  }
};

// The outputs every op has, in TensorFlow's order; the two unused placeholders (outputs 3 and
// 4) are named per op, so each class declares its own and hands them to Bind.
struct GradOutputs {
  ::tensorflow::Operation operation;
  ::tensorflow::Output x_backprop;
  ::tensorflow::Output scale_backprop;
  ::tensorflow::Output offset_backprop;

 protected:
  void Bind(::tensorflow::Node* node, ::tensorflow::Output* placeholder_3,
            ::tensorflow::Output* placeholder_4) {
    if (node == nullptr) return;  // the error is in the scope's status
    operation = ::tensorflow::Operation(node);
    x_backprop = ::tensorflow::Output(node, 0);
    scale_backprop = ::tensorflow::Output(node, 1);
    offset_backprop = ::tensorflow::Output(node, 2);
    *placeholder_3 = ::tensorflow::Output(node, 3);
    *placeholder_4 = ::tensorflow::Output(node, 4);
  }
};

}  // namespace detail

// FbnFusedBatchNormGrad: FusedBatchNormGrad's inputs, attrs and outputs (T float).
class FbnFusedBatchNormGrad : public detail::GradOp, public detail::GradOutputs {
 public:
  FbnFusedBatchNormGrad(const ::tensorflow::Scope& scope, ::tensorflow::Input y_backprop,
                        ::tensorflow::Input x, ::tensorflow::Input scale,
                        ::tensorflow::Input reserve_space_1, ::tensorflow::Input reserve_space_2)
      : FbnFusedBatchNormGrad(scope, y_backprop, x, scale, reserve_space_1, reserve_space_2,
                              Attrs()) {}
  FbnFusedBatchNormGrad(const ::tensorflow::Scope& scope, ::tensorflow::Input y_backprop,
                        ::tensorflow::Input x, ::tensorflow::Input scale,
                        ::tensorflow::Input reserve_space_1, ::tensorflow::Input reserve_space_2,
                        const Attrs& attrs) {
    Bind(detail::AddNode(scope, "FbnFusedBatchNormGrad",
                             {y_backprop, x, scale, reserve_space_1, reserve_space_2}, attrs),
         &reserve_space_3, &reserve_space_4);
  }

  ::tensorflow::Output reserve_space_3;
  ::tensorflow::Output reserve_space_4;
};

// FbnFusedBatchNormGradV2: FusedBatchNormGradV2's (T half, bfloat16 or float; U float).
class FbnFusedBatchNormGradV2 : public detail::GradOp, public detail::GradOutputs {
 public:
  FbnFusedBatchNormGradV2(const ::tensorflow::Scope& scope, ::tensorflow::Input y_backprop,
                          ::tensorflow::Input x, ::tensorflow::Input scale,
                          ::tensorflow::Input reserve_space_1,
                          ::tensorflow::Input reserve_space_2)
      : FbnFusedBatchNormGradV2(scope, y_backprop, x, scale, reserve_space_1, reserve_space_2,
                                Attrs()) {}
  FbnFusedBatchNormGradV2(const ::tensorflow::Scope& scope, ::tensorflow::Input y_backprop,
                          ::tensorflow::Input x, ::tensorflow::Input scale,
                          ::tensorflow::Input reserve_space_1,
                          ::tensorflow::Input reserve_space_2, const Attrs& attrs) {
    Bind(detail::AddNode(scope, "FbnFusedBatchNormGradV2",
                             {y_backprop, x, scale, reserve_space_1, reserve_space_2}, attrs),
         &reserve_space_3, &reserve_space_4);
  }

  ::tensorflow::Output reserve_space_3;
  ::tensorflow::Output reserve_space_4;
};

// FbnFusedBatchNormGradV3: FusedBatchNormGradV3's (V2 plus reserve_space_3 and 5-D formats).
class FbnFusedBatchNormGradV3 : public detail::GradOp, public detail::GradOutputs {
 public:
  FbnFusedBatchNormGradV3(const ::tensorflow::Scope& scope, ::tensorflow::Input y_backprop,
                          ::tensorflow::Input x, ::tensorflow::Input scale,
                          ::tensorflow::Input reserve_space_1,
                          ::tensorflow::Input reserve_space_2,
                          ::tensorflow::Input reserve_space_3)
      : FbnFusedBatchNormGradV3(scope, y_backprop, x, scale, reserve_space_1, reserve_space_2,
                                reserve_space_3, Attrs()) {}
  FbnFusedBatchNormGradV3(const ::tensorflow::Scope& scope, ::tensorflow::Input y_backprop,
                          ::tensorflow::Input x, ::tensorflow::Input scale,
                          ::tensorflow::Input reserve_space_1,
                          ::tensorflow::Input reserve_space_2,
                          ::tensorflow::Input reserve_space_3, const Attrs& attrs) {
    Bind(detail::AddNode(
             scope, "FbnFusedBatchNormGradV3",
             {y_backprop, x, scale, reserve_space_1, reserve_space_2, reserve_space_3}, attrs),
         &reserve_space_4, &reserve_space_5);
  }

  ::tensorflow::Output reserve_space_4;
  ::tensorflow::Output reserve_space_5;
};

// FbnFusedBatchNorm: FusedBatchNorm's inputs, attrs and outputs (T float), the library's forward.
class FbnFusedBatchNorm : public detail::ForwardOp, public detail::ForwardOutputs {
 public:
  FbnFusedBatchNorm(const ::tensorflow::Scope& scope, ::tensorflow::Input x,
                    ::tensorflow::Input scale, ::tensorflow::Input offset,
                    ::tensorflow::Input mean, ::tensorflow::Input variance)
      : FbnFusedBatchNorm(scope, x, scale, offset, mean, variance, Attrs()) {}
  FbnFusedBatchNorm(const ::tensorflow::Scope& scope, ::tensorflow::Input x,
                    ::tensorflow::Input scale, ::tensorflow::Input offset,
                    ::tensorflow::Input mean, ::tensorflow::Input variance, const Attrs& attrs) {
    Bind(detail::AddNode(scope, "FbnFusedBatchNorm", {x, scale, offset, mean, variance}, attrs));
  }
};

// FbnFusedBatchNormV2: FusedBatchNormV2's (T half, bfloat16 or float; U float).
class FbnFusedBatchNormV2 : public detail::ForwardOp, public detail::ForwardOutputs {
 public:
  FbnFusedBatchNormV2(const ::tensorflow::Scope& scope, ::tensorflow::Input x,
                      ::tensorflow::Input scale, ::tensorflow::Input offset,
                      ::tensorflow::Input mean, ::tensorflow::Input variance)
      : FbnFusedBatchNormV2(scope, x, scale, offset, mean, variance, Attrs()) {}
  FbnFusedBatchNormV2(const ::tensorflow::Scope& scope, ::tensorflow::Input x,
                      ::tensorflow::Input scale, ::tensorflow::Input offset,
                      ::tensorflow::Input mean, ::tensorflow::Input variance,
                      const Attrs& attrs) {
    Bind(detail::AddNode(scope, "FbnFusedBatchNormV2", {x, scale, offset, mean, variance},
                         attrs));
  }
};

// FbnFusedBatchNormV3: FusedBatchNormV3's (V2 plus reserve_space_3 and 5-D formats).
class FbnFusedBatchNormV3 : public detail::ForwardOp, public detail::ForwardOutputs {
 public:
  FbnFusedBatchNormV3(const ::tensorflow::Scope& scope, ::tensorflow::Input x,
                      ::tensorflow::Input scale, ::tensorflow::Input offset,
                      ::tensorflow::Input mean, ::tensorflow::Input variance)
      : FbnFusedBatchNormV3(scope, x, scale, offset, mean, variance, Attrs()) {}
  FbnFusedBatchNormV3(const ::tensorflow::Scope& scope, ::tensorflow::Input x,
                      ::tensorflow::Input scale, ::tensorflow::Input offset,
                      ::tensorflow::Input mean, ::tensorflow::Input variance,
                      const Attrs& attrs) {
    ::tensorflow::Node* node = detail::AddNode(scope, "FbnFusedBatchNormV3",
                                               {x, scale, offset, mean, variance}, attrs);
    Bind(node);
    if (node != nullptr) reserve_space_3 = ::tensorflow::Output(node, 5);
  }

  ::tensorflow::Output reserve_space_3;
};

}  // namespace ops
}  // namespace tf_fbn_ops

#endif  // TF_FBN_OPS_OPS_H_
