// The shim's ops for TensorFlow's C++ graph API, shaped like the classes TensorFlow generates for
// the ops they mirror (tensorflow::ops::FusedBatchNormGrad, V2 and V3 in nn_ops.h): constructed
// from a Scope and Inputs, an Attrs struct with chained setters and the ops' defaults, static
// shortcuts, and the outputs as public members. Errors go to the Scope's status.
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
#ifndef TF_FBN_OPS_OPS_H_
#define TF_FBN_OPS_OPS_H_

#include <initializer_list>

#include "tensorflow/cc/framework/ops.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/core/graph/node_builder.h"

namespace tf_fbn_ops {
namespace ops {
namespace detail {

// The attrs the three ops share, with the ops' defaults.
struct GradAttrs {
  TF_MUST_USE_RESULT GradAttrs Epsilon(float x) {
    GradAttrs ret = *this;
    ret.epsilon_ = x;
    return ret;
  }
  TF_MUST_USE_RESULT GradAttrs DataFormat(::tensorflow::StringPiece x) {
    GradAttrs ret = *this;
    ret.data_format_ = x;
    return ret;
  }
  TF_MUST_USE_RESULT GradAttrs IsTraining(bool x) {
    GradAttrs ret = *this;
    ret.is_training_ = x;
    return ret;
  }

  float epsilon_ = 0.0001f;
  ::tensorflow::StringPiece data_format_ = "NHWC";
  bool is_training_ = true;
};

// Adds one node of `op_type` to the scope's graph, as TensorFlow's generated constructors do:
// inputs resolved in order, a unique name, the scope's device and control dependencies, shape
// inference. Returns null (with the error in the scope's status) on failure.
inline ::tensorflow::Node* AddGradNode(const ::tensorflow::Scope& scope, const char* op_type,
                                       std::initializer_list<::tensorflow::Input> inputs,
                                       const GradAttrs& attrs) {
  if (!scope.ok()) return nullptr;
  std::vector<::tensorflow::NodeBuilder::NodeOut> node_inputs;
  for (const ::tensorflow::Input& input : inputs) {
    node_inputs.push_back(::tensorflow::ops::AsNodeOut(scope, input));
    if (!scope.ok()) return nullptr;
  }
  ::tensorflow::NodeBuilder builder(scope.GetUniqueNameForOp(op_type), op_type);
  for (const auto& input : node_inputs) builder.Input(input);
  builder.Attr("epsilon", attrs.epsilon_)
      .Attr("data_format", attrs.data_format_)
      .Attr("is_training", attrs.is_training_);
  scope.UpdateBuilder(&builder);
  ::tensorflow::Node* node = nullptr;
  scope.UpdateStatus(builder.Finalize(scope.graph(), &node));
  if (!scope.ok()) return nullptr;
  scope.UpdateStatus(scope.DoShapeInference(node));
  return scope.ok() ? node : nullptr;
}

// What the three classes share: Attrs and the static shortcuts that start a chain of them.
struct GradOp {
  using Attrs = GradAttrs;
  static Attrs Epsilon(float x) { return Attrs().Epsilon(x); }
  static Attrs DataFormat(::tensorflow::StringPiece x) { return Attrs().DataFormat(x); }
  static Attrs IsTraining(bool x) { return Attrs().IsTraining(x); }
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
    Bind(detail::AddGradNode(scope, "FbnFusedBatchNormGrad",
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
    Bind(detail::AddGradNode(scope, "FbnFusedBatchNormGradV2",
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
    Bind(detail::AddGradNode(
             scope, "FbnFusedBatchNormGradV3",
             {y_backprop, x, scale, reserve_space_1, reserve_space_2, reserve_space_3}, attrs),
         &reserve_space_4, &reserve_space_5);
  }

  ::tensorflow::Output reserve_space_4;
  ::tensorflow::Output reserve_space_5;
};

}  // namespace ops
}  // namespace tf_fbn_ops

#endif  // TF_FBN_OPS_OPS_H_
