// The C++ graph API of tf_fbn_ops/ops.h against TensorFlow's own classes: graphs built with each
// class (defaults, every attr through an Attrs object and through the static shortcuts), run in
// a Session, compared with tensorflow::ops::FusedBatchNormGrad* on the same inputs (NHWC
// training) and with the formula (NCHW inference, which TensorFlow's CPU kernel refuses);
// output dtypes and placeholder shapes; a bad shape failing through the Scope's status with
// TensorFlow's text. Linked against the op library (see the Makefile), which registers the ops.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph_api_util.h"
#include "tensorflow/cc/ops/nn_ops.h"
#include "tf_fbn_ops/ops.h"

namespace {

using namespace graph_api_test;  // NOLINT: the shared test vocabulary

// One op's inputs, as graph constants.
struct Inputs {
  Output dy, x, scale, mean, variance, reserve_space_3;
};

Inputs MakeInputs(const Scope& scope, DataType dtype, const TensorShape& shape, int channels,
                  int seed) {
  const TensorShape per_channel({channels});
  return {::tensorflow::ops::Const(scope, Filled(dtype, shape, seed)),
          ::tensorflow::ops::Const(scope, Filled(dtype, shape, seed + 1, 0.5f, 2.0f)),
          ::tensorflow::ops::Const(scope, Filled(::tensorflow::DT_FLOAT, per_channel, seed + 2,
                                                 1.0f, 0.5f)),
          ::tensorflow::ops::Const(scope, Filled(::tensorflow::DT_FLOAT, per_channel, seed + 3,
                                                 0.5f, 0.2f)),
          ::tensorflow::ops::Const(scope, Filled(::tensorflow::DT_FLOAT, per_channel, seed + 4,
                                                 3.0f, 1.0f)),
          ::tensorflow::ops::Const(scope, Tensor(::tensorflow::DT_FLOAT, TensorShape({0})))};
}

// The outputs every class has, taken from either kind of op object.
struct GradOutputs {
  Output x_backprop, scale_backprop, offset_backprop, placeholder_a, placeholder_b;
  ::tensorflow::Operation operation;
};

template <typename Op>
GradOutputs V1V2Outputs(const Op& op) {
  return {op.x_backprop, op.scale_backprop, op.offset_backprop, op.reserve_space_3,
          op.reserve_space_4, op.operation};
}

template <typename Op>
GradOutputs V3Outputs(const Op& op) {
  return {op.x_backprop, op.scale_backprop, op.offset_backprop, op.reserve_space_4,
          op.reserve_space_5, op.operation};
}

// Runs ours and theirs and compares: same dtypes, [0] placeholders, values within tolerance.
void CompareRuns(const Scope& scope, const GradOutputs& ours, const GradOutputs& theirs,
                 DataType dtype, const std::string& what) {
  Check(scope.ok(), what + ": graph: " + scope.status().ToString());
  if (!scope.ok()) return;
  const std::vector<Tensor> a =
      Run(scope, {ours.x_backprop, ours.scale_backprop, ours.offset_backprop,
                  ours.placeholder_a, ours.placeholder_b}, what);
  const std::vector<Tensor> b =
      Run(scope, {theirs.x_backprop, theirs.scale_backprop, theirs.offset_backprop}, what);
  if (a.size() != 5 || b.size() != 3) return;
  const double tolerance = dtype == ::tensorflow::DT_FLOAT ? 1e-5 : 1e-2;
  const char* names[] = {"x_backprop", "scale_backprop", "offset_backprop"};
  for (int i = 0; i < 3; ++i) {
    Check(a[i].dtype() == b[i].dtype() && a[i].shape() == b[i].shape(),
          what + ": " + names[i] + " dtype/shape");
    Check(RelativeDifference(a[i], b[i]) <= tolerance, what + ": " + names[i] + " values");
  }
  for (int i = 3; i < 5; ++i) {
    Check(a[i].shape() == TensorShape({0}) && a[i].dtype() == ::tensorflow::DT_FLOAT,
          what + ": placeholder " + std::to_string(i) + " is float [0]");
  }
  Check(ours.operation.node()->type_string().rfind("FbnFusedBatchNormGrad", 0) == 0,
        what + ": node type");
}

// The attrs of a built node, as the graph holds them.
void CheckAttrs(const ::tensorflow::Operation& operation, float epsilon,
                const std::string& data_format, bool is_training, const std::string& what) {
  Check(operation.node() != nullptr, what + ": node built");
  CheckAttr(operation, "epsilon", epsilon, what);
  CheckAttr(operation, "data_format", data_format, what);
  CheckAttr(operation, "is_training", is_training, what);
}

void TestDefaultsAgainstTensorFlow() {
  namespace fbn = ::tf_fbn_ops::ops;
  namespace tf_ops = ::tensorflow::ops;
  const TensorShape shape({2, 4, 5, 3});
  {
    Scope scope = Scope::NewRootScope();
    Inputs in = MakeInputs(scope, ::tensorflow::DT_FLOAT, shape, 3, 10);
    fbn::FbnFusedBatchNormGrad ours(scope, in.dy, in.x, in.scale, in.mean, in.variance);
    tf_ops::FusedBatchNormGrad theirs(scope, in.dy, in.x, in.scale, in.mean, in.variance);
    CheckAttrs(ours.operation, 0.0001f, "NHWC", true, "V1 defaults");
    CompareRuns(scope, V1V2Outputs(ours), V1V2Outputs(theirs), ::tensorflow::DT_FLOAT,
                "V1 defaults");
  }
  for (DataType dtype : {::tensorflow::DT_FLOAT, ::tensorflow::DT_HALF,
                         ::tensorflow::DT_BFLOAT16}) {
    const std::string type = ::tensorflow::DataTypeString(dtype);
    Scope scope = Scope::NewRootScope();
    Inputs in = MakeInputs(scope, dtype, shape, 3, 20);
    fbn::FbnFusedBatchNormGradV2 ours2(scope, in.dy, in.x, in.scale, in.mean, in.variance);
    tf_ops::FusedBatchNormGradV2 theirs2(scope, in.dy, in.x, in.scale, in.mean, in.variance);
    fbn::FbnFusedBatchNormGradV3 ours3(scope, in.dy, in.x, in.scale, in.mean, in.variance,
                                       in.reserve_space_3);
    tf_ops::FusedBatchNormGradV3 theirs3(scope, in.dy, in.x, in.scale, in.mean, in.variance,
                                         in.reserve_space_3);
    CheckAttrs(ours3.operation, 0.0001f, "NHWC", true, "V3 defaults");
    CompareRuns(scope, V1V2Outputs(ours2), V1V2Outputs(theirs2), dtype, "V2 defaults " + type);
    CompareRuns(scope, V3Outputs(ours3), V3Outputs(theirs3), dtype, "V3 defaults " + type);
  }
}

void TestEveryAttrBothWays() {
  namespace fbn = ::tf_fbn_ops::ops;
  namespace tf_ops = ::tensorflow::ops;
  const TensorShape shape({2, 3, 4, 2, 5});  // NDHWC
  Scope scope = Scope::NewRootScope();
  Inputs in = MakeInputs(scope, ::tensorflow::DT_FLOAT, shape, 5, 30);
  // Through an Attrs object with chained setters ...
  fbn::FbnFusedBatchNormGradV3 chained(
      scope, in.dy, in.x, in.scale, in.mean, in.variance, in.reserve_space_3,
      fbn::FbnFusedBatchNormGradV3::Attrs().Epsilon(0.01f).DataFormat("NDHWC").IsTraining(true));
  // ... and through each static shortcut.
  fbn::FbnFusedBatchNormGradV3 from_epsilon(scope, in.dy, in.x, in.scale, in.mean, in.variance,
                                            in.reserve_space_3,
                                            fbn::FbnFusedBatchNormGradV3::Epsilon(0.01f)
                                                .DataFormat("NDHWC"));
  fbn::FbnFusedBatchNormGradV3 from_format(scope, in.dy, in.x, in.scale, in.mean, in.variance,
                                           in.reserve_space_3,
                                           fbn::FbnFusedBatchNormGradV3::DataFormat("NDHWC")
                                               .Epsilon(0.01f));
  fbn::FbnFusedBatchNormGradV3 from_training(scope, in.dy, in.x, in.scale, in.mean, in.variance,
                                             in.reserve_space_3,
                                             fbn::FbnFusedBatchNormGradV3::IsTraining(false)
                                                 .Epsilon(0.01f)
                                                 .DataFormat("NDHWC"));
  tf_ops::FusedBatchNormGradV3 theirs(
      scope, in.dy, in.x, in.scale, in.mean, in.variance, in.reserve_space_3,
      tf_ops::FusedBatchNormGradV3::Epsilon(0.01f).DataFormat("NDHWC"));
  tf_ops::FusedBatchNormGradV3 theirs_inference(
      scope, in.dy, in.x, in.scale, in.mean, in.variance, in.reserve_space_3,
      tf_ops::FusedBatchNormGradV3::Epsilon(0.01f).DataFormat("NDHWC").IsTraining(false));
  CheckAttrs(chained.operation, 0.01f, "NDHWC", true, "Attrs chain");
  CheckAttrs(from_epsilon.operation, 0.01f, "NDHWC", true, "Epsilon shortcut");
  CheckAttrs(from_format.operation, 0.01f, "NDHWC", true, "DataFormat shortcut");
  CheckAttrs(from_training.operation, 0.01f, "NDHWC", false, "IsTraining shortcut");
  for (const auto* op : {&chained, &from_epsilon, &from_format}) {
    CompareRuns(scope, V3Outputs(*op), V3Outputs(theirs), ::tensorflow::DT_FLOAT,
                "V3 NDHWC training, attrs");
  }
  CompareRuns(scope, V3Outputs(from_training), V3Outputs(theirs_inference),
              ::tensorflow::DT_FLOAT, "V3 NDHWC inference, attrs");
  // V1 and V2 share the Attrs type and shortcuts (4-D only); one spot check each.
  Scope scope_4d = Scope::NewRootScope();
  Inputs in_4d = MakeInputs(scope_4d, ::tensorflow::DT_FLOAT, TensorShape({2, 3, 4, 5}), 5, 35);
  fbn::FbnFusedBatchNormGrad v1(scope_4d, in_4d.dy, in_4d.x, in_4d.scale, in_4d.mean,
                                in_4d.variance,
                                fbn::FbnFusedBatchNormGrad::IsTraining(false).Epsilon(0.5f));
  fbn::FbnFusedBatchNormGradV2 v2(scope_4d, in_4d.dy, in_4d.x, in_4d.scale, in_4d.mean,
                                  in_4d.variance,
                                  fbn::FbnFusedBatchNormGradV2::Epsilon(0.25f));
  CheckAttrs(v1.operation, 0.5f, "NHWC", false, "V1 shortcut");
  Check(scope_4d.ok(), "4-D scope: " + scope_4d.status().ToString());
  CheckAttrs(v2.operation, 0.25f, "NHWC", true, "V2 shortcut");
}

// NCHW inference: TensorFlow's CPU kernel refuses it; the shim computes dx = dy * scale /
// sqrt(var + eps), dscale = sum(dy * (x - mean)) / sqrt(var + eps), doffset = sum(dy).
void TestChannelsFirstInferenceAgainstTheFormula() {
  namespace fbn = ::tf_fbn_ops::ops;
  const int n = 2, c = 3, h = 4, w = 5;
  const float epsilon = 0.001f;
  Scope scope = Scope::NewRootScope();
  Inputs in = MakeInputs(scope, ::tensorflow::DT_FLOAT, TensorShape({n, c, h, w}), c, 40);
  fbn::FbnFusedBatchNormGradV2 op(scope, in.dy, in.x, in.scale, in.mean, in.variance,
                                  fbn::FbnFusedBatchNormGradV2::DataFormat("NCHW")
                                      .IsTraining(false)
                                      .Epsilon(epsilon));
  Check(scope.ok(), "NCHW inference graph: " + scope.status().ToString());
  const std::vector<Tensor> got =
      Run(scope, {op.x_backprop, op.scale_backprop, op.offset_backprop}, "NCHW inference");
  const std::vector<Tensor> given =
      Run(scope, {in.dy, in.x, in.scale, in.mean, in.variance}, "NCHW inference inputs");
  if (got.size() != 3 || given.size() != 5) return;
  auto dy = given[0].flat<float>(), x = given[1].flat<float>();
  double worst = 0.0;
  for (int ch = 0; ch < c; ++ch) {
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(given[4].flat<float>()(ch)) +
                                           static_cast<double>(epsilon));
    const double scale = given[2].flat<float>()(ch), mean = given[3].flat<float>()(ch);
    double sum_dy = 0.0, sum_dy_xc = 0.0;
    for (int b = 0; b < n; ++b) {
      for (int i = 0; i < h * w; ++i) {
        const int k = (b * c + ch) * h * w + i;
        sum_dy += dy(k);
        sum_dy_xc += dy(k) * (x(k) - mean);
        worst = std::max(worst, std::fabs(got[0].flat<float>()(k) - dy(k) * scale * inv_std));
      }
    }
    worst = std::max(worst, std::fabs(got[1].flat<float>()(ch) - sum_dy_xc * inv_std));
    worst = std::max(worst, std::fabs(got[2].flat<float>()(ch) - sum_dy));
  }
  Check(worst <= 1e-5, "NCHW inference against the formula (worst " + std::to_string(worst) + ")");
}

// A bad shape fails in shape inference, through the Scope's status, with TensorFlow's text.
void TestBadShapeThroughScopeStatus() {
  namespace fbn = ::tf_fbn_ops::ops;
  namespace tf_ops = ::tensorflow::ops;
  auto build = [](bool shim) {
    Scope scope = Scope::NewRootScope();
    Inputs in = MakeInputs(scope, ::tensorflow::DT_FLOAT, TensorShape({2, 4, 5, 3}), 3, 50);
    auto wrong_x = tf_ops::Const(scope, Filled(::tensorflow::DT_FLOAT,
                                               TensorShape({2, 4, 5, 4}), 51));
    if (shim) {
      fbn::FbnFusedBatchNormGradV3 op(scope, in.dy, wrong_x, in.scale, in.mean, in.variance,
                                      in.reserve_space_3);
      Check(op.operation.node() == nullptr && op.x_backprop.node() == nullptr,
            "no outputs set after a failed construction");
    } else {
      tf_ops::FusedBatchNormGradV3 op(scope, in.dy, wrong_x, in.scale, in.mean, in.variance,
                                      in.reserve_space_3);
    }
    return scope.status();
  };
  CheckSameProblem(build(true), build(false));
}

}  // namespace

int main() {
  TestDefaultsAgainstTensorFlow();
  TestEveryAttrBothWays();
  TestChannelsFirstInferenceAgainstTheFormula();
  TestBadShapeThroughScopeStatus();
  return Summary("graph_api_test");
}
