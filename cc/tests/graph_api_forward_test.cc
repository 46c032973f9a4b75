// The forward classes of tf_fbn_ops/ops.h (FbnFusedBatchNorm, V2, V3) against TensorFlow's own
// (tensorflow::ops::FusedBatchNorm, V2, V3): graphs built with each class (defaults, every attr
// through an Attrs object and through the static shortcuts, exponential_avg_factor included),
// run in a Session and compared output by output on the same inputs, in every dtype, 4-D and
// 5-D, both layouts, training and inference; the attrs the nodes hold; V3's reserve_space_3; a
// bad shape failing through the Scope's status with TensorFlow's text. Linked against the op
// library (see the Makefile), which registers the ops.
#include <string>
#include <vector>

#include "graph_api_util.h"
#include "tensorflow/cc/ops/nn_ops.h"
#include "tf_fbn_ops/ops.h"

namespace {

using namespace graph_api_test;  // NOLINT: the shared test vocabulary

// One forward op's inputs, as graph constants.
struct ForwardInputs {
  Output x, scale, offset, mean, variance;
};

ForwardInputs MakeForwardInputs(const Scope& scope, DataType dtype, const TensorShape& shape,
                                int channels, int seed) {
  const TensorShape per_channel({channels});
  const auto vector = [&](int k, float offset, float spread) {
    return ::tensorflow::ops::Const(
        scope, Filled(::tensorflow::DT_FLOAT, per_channel, seed + k, offset, spread));
  };
  return {::tensorflow::ops::Const(scope, Filled(dtype, shape, seed, 0.5f, 2.0f)),
          vector(1, 1.0f, 0.5f), vector(2, 0.0f, 1.0f), vector(3, 0.5f, 0.2f),
          vector(4, 3.0f, 1.0f)};
}

// The five outputs every forward class has, from either kind of op object.
template <typename Op>
std::vector<Output> FiveOutputs(const Op& op) {
  return {op.y, op.batch_mean, op.batch_variance, op.reserve_space_1, op.reserve_space_2};
}

// Runs ours and theirs: same dtypes and shapes, values within tolerance. In inference only y is
// TensorFlow's to compare (its grappler folds an inference node of constants into a constant of
// y alone, and its stock kernel leaves outputs 3 and 4 unwritten); ours returns the given
// statistics in outputs 1-4, bit for bit.
template <typename Ours, typename Theirs>
void CompareRuns(const Scope& scope, const Ours& ours, const Theirs& theirs,
                 const ForwardInputs& in, DataType dtype, bool is_training,
                 const std::string& what) {
  Check(scope.ok(), what + ": graph: " + scope.status().ToString());
  if (!scope.ok()) return;
  const int compared = is_training ? 5 : 1;
  const std::vector<Output> their_outputs = FiveOutputs(theirs);
  const std::vector<Tensor> a = Run(scope, FiveOutputs(ours), what);
  const std::vector<Tensor> b = Run(
      scope, std::vector<Output>(their_outputs.begin(), their_outputs.begin() + compared), what);
  if (a.size() != 5 || static_cast<int>(b.size()) != compared) return;
  const double tolerance = dtype == ::tensorflow::DT_FLOAT ? 1e-5 : 1e-2;
  const char* names[] = {"y", "batch_mean", "batch_variance", "reserve_space_1",
                         "reserve_space_2"};
  for (int i = 0; i < compared; ++i) {
    Check(a[i].dtype() == b[i].dtype() && a[i].shape() == b[i].shape(),
          what + ": " + names[i] + " dtype/shape");
    Check(RelativeDifference(a[i], b[i]) <= tolerance, what + ": " + names[i] + " values");
  }
  if (!is_training) {
    const std::vector<Tensor> given = Run(scope, {in.mean, in.variance}, what + " inputs");
    if (given.size() != 2) return;
    for (int i = 1; i < 5; ++i) {
      const Tensor& want = given[(i - 1) % 2];
      Check(a[i].tensor_data() == want.tensor_data(),
            what + ": " + names[i] + " the given statistic, bit for bit");
    }
  }
  Check(ours.operation.node()->type_string().rfind("FbnFusedBatchNorm", 0) == 0,
        what + ": node type");
}

// The attrs of a built node, as the graph holds them.
void CheckAttrs(const ::tensorflow::Operation& operation, float epsilon, float factor,
                const std::string& data_format, bool is_training, const std::string& what) {
  Check(operation.node() != nullptr, what + ": node built");
  CheckAttr(operation, "epsilon", epsilon, what);
  CheckAttr(operation, "exponential_avg_factor", factor, what);
  CheckAttr(operation, "data_format", data_format, what);
  CheckAttr(operation, "is_training", is_training, what);
}

void TestDefaultsAgainstTensorFlow() {
  namespace fbn = ::tf_fbn_ops::ops;
  namespace tf_ops = ::tensorflow::ops;
  const TensorShape shape({2, 4, 5, 3});
  {
    Scope scope = Scope::NewRootScope();
    ForwardInputs in = MakeForwardInputs(scope, ::tensorflow::DT_FLOAT, shape, 3, 10);
    fbn::FbnFusedBatchNorm ours(scope, in.x, in.scale, in.offset, in.mean, in.variance);
    tf_ops::FusedBatchNorm theirs(scope, in.x, in.scale, in.offset, in.mean, in.variance);
    CheckAttrs(ours.operation, 0.0001f, 1.0f, "NHWC", true, "V1 defaults");
    CompareRuns(scope, ours, theirs, in, ::tensorflow::DT_FLOAT, true, "V1 defaults");
  }
  for (DataType dtype : {::tensorflow::DT_FLOAT, ::tensorflow::DT_HALF,
                         ::tensorflow::DT_BFLOAT16}) {
    const std::string type = ::tensorflow::DataTypeString(dtype);
    Scope scope = Scope::NewRootScope();
    ForwardInputs in = MakeForwardInputs(scope, dtype, shape, 3, 20);
    fbn::FbnFusedBatchNormV2 ours2(scope, in.x, in.scale, in.offset, in.mean, in.variance);
    tf_ops::FusedBatchNormV2 theirs2(scope, in.x, in.scale, in.offset, in.mean, in.variance);
    fbn::FbnFusedBatchNormV3 ours3(scope, in.x, in.scale, in.offset, in.mean, in.variance);
    tf_ops::FusedBatchNormV3 theirs3(scope, in.x, in.scale, in.offset, in.mean, in.variance);
    CheckAttrs(ours3.operation, 0.0001f, 1.0f, "NHWC", true, "V3 defaults");
    CompareRuns(scope, ours2, theirs2, in, dtype, true, "V2 defaults " + type);
    CompareRuns(scope, ours3, theirs3, in, dtype, true, "V3 defaults " + type);
    const std::vector<Tensor> reserve = Run(scope, {ours3.reserve_space_3}, "V3 reserve_space_3");
    Check(reserve.size() == 1 && reserve[0].dtype() == ::tensorflow::DT_FLOAT &&
              reserve[0].NumElements() == 1 && reserve[0].flat<float>()(0) == 0.0f,
          "V3 " + type + ": reserve_space_3 a float 0, as TensorFlow's CPU kernel");
  }
}

void TestEveryAttrBothWays() {
  namespace fbn = ::tf_fbn_ops::ops;
  namespace tf_ops = ::tensorflow::ops;
  using V3 = fbn::FbnFusedBatchNormV3;
  const TensorShape shape({2, 3, 4, 2, 5});  // NDHWC
  Scope scope = Scope::NewRootScope();
  ForwardInputs in = MakeForwardInputs(scope, ::tensorflow::DT_FLOAT, shape, 5, 30);
  const auto build = [&](const V3::Attrs& attrs) {
    return V3(scope, in.x, in.scale, in.offset, in.mean, in.variance, attrs);
  };
  // Through an Attrs object with chained setters ...
  const V3 chained =
      build(V3::Attrs().Epsilon(0.01f).ExponentialAvgFactor(0.25f).DataFormat("NDHWC"));
  // ... and through each static shortcut.
  const V3 from_epsilon = build(V3::Epsilon(0.01f).ExponentialAvgFactor(0.25f).DataFormat("NDHWC"));
  const V3 from_factor = build(V3::ExponentialAvgFactor(0.25f).DataFormat("NDHWC").Epsilon(0.01f));
  const V3 from_format = build(V3::DataFormat("NDHWC").Epsilon(0.01f).ExponentialAvgFactor(0.25f));
  const V3 from_training = build(V3::IsTraining(false).Epsilon(0.01f).DataFormat("NDHWC"));
  tf_ops::FusedBatchNormV3 theirs(
      scope, in.x, in.scale, in.offset, in.mean, in.variance,
      tf_ops::FusedBatchNormV3::Epsilon(0.01f).ExponentialAvgFactor(0.25f).DataFormat("NDHWC"));
  tf_ops::FusedBatchNormV3 theirs_inference(
      scope, in.x, in.scale, in.offset, in.mean, in.variance,
      tf_ops::FusedBatchNormV3::Epsilon(0.01f).DataFormat("NDHWC").IsTraining(false));
  CheckAttrs(chained.operation, 0.01f, 0.25f, "NDHWC", true, "Attrs chain");
  CheckAttrs(from_epsilon.operation, 0.01f, 0.25f, "NDHWC", true, "Epsilon shortcut");
  CheckAttrs(from_factor.operation, 0.01f, 0.25f, "NDHWC", true, "ExponentialAvgFactor shortcut");
  CheckAttrs(from_format.operation, 0.01f, 0.25f, "NDHWC", true, "DataFormat shortcut");
  CheckAttrs(from_training.operation, 0.01f, 1.0f, "NDHWC", false, "IsTraining shortcut");
  for (const V3* op : {&chained, &from_epsilon, &from_factor, &from_format}) {
    CompareRuns(scope, *op, theirs, in, ::tensorflow::DT_FLOAT, true, "V3 NDHWC training, attrs");
  }
  CompareRuns(scope, from_training, theirs_inference, in, ::tensorflow::DT_FLOAT, false,
              "V3 NDHWC inference, attrs");
  // V1 and V2 share the Attrs type and shortcuts (4-D only), here channels first.
  Scope scope_4d = Scope::NewRootScope();
  ForwardInputs in_4d =
      MakeForwardInputs(scope_4d, ::tensorflow::DT_FLOAT, TensorShape({2, 5, 4, 3}), 5, 35);
  fbn::FbnFusedBatchNorm v1(scope_4d, in_4d.x, in_4d.scale, in_4d.offset, in_4d.mean,
                            in_4d.variance,
                            fbn::FbnFusedBatchNorm::DataFormat("NCHW").Epsilon(0.5f));
  tf_ops::FusedBatchNorm v1_theirs(scope_4d, in_4d.x, in_4d.scale, in_4d.offset, in_4d.mean,
                                   in_4d.variance,
                                   tf_ops::FusedBatchNorm::DataFormat("NCHW").Epsilon(0.5f));
  fbn::FbnFusedBatchNormV2 v2(scope_4d, in_4d.x, in_4d.scale, in_4d.offset, in_4d.mean,
                              in_4d.variance,
                              fbn::FbnFusedBatchNormV2::IsTraining(false).DataFormat("NCHW"));
  tf_ops::FusedBatchNormV2 v2_theirs(
      scope_4d, in_4d.x, in_4d.scale, in_4d.offset, in_4d.mean, in_4d.variance,
      tf_ops::FusedBatchNormV2::IsTraining(false).DataFormat("NCHW"));
  CheckAttrs(v1.operation, 0.5f, 1.0f, "NCHW", true, "V1 shortcut");
  CheckAttrs(v2.operation, 0.0001f, 1.0f, "NCHW", false, "V2 shortcut");
  CompareRuns(scope_4d, v1, v1_theirs, in_4d, ::tensorflow::DT_FLOAT, true, "V1 NCHW training");
  CompareRuns(scope_4d, v2, v2_theirs, in_4d, ::tensorflow::DT_FLOAT, false, "V2 NCHW inference");
}

// A bad shape fails in shape inference, through the Scope's status, with TensorFlow's text.
void TestBadShapeThroughScopeStatus() {
  namespace fbn = ::tf_fbn_ops::ops;
  namespace tf_ops = ::tensorflow::ops;
  auto build = [](bool ours) {
    Scope scope = Scope::NewRootScope();
    ForwardInputs in =
        MakeForwardInputs(scope, ::tensorflow::DT_FLOAT, TensorShape({2, 4, 5, 3}), 3, 50);
    auto wrong_offset =
        tf_ops::Const(scope, Filled(::tensorflow::DT_FLOAT, TensorShape({4}), 51));
    if (ours) {
      fbn::FbnFusedBatchNormV3 op(scope, in.x, in.scale, wrong_offset, in.mean, in.variance);
      Check(op.operation.node() == nullptr && op.y.node() == nullptr &&
                op.reserve_space_3.node() == nullptr,
            "no outputs set after a failed construction");
    } else {
      tf_ops::FusedBatchNormV3 op(scope, in.x, in.scale, wrong_offset, in.mean, in.variance);
    }
    return scope.status();
  };
  CheckSameProblem(build(true), build(false));
}

}  // namespace

int main() {
  TestDefaultsAgainstTensorFlow();
  TestEveryAttrBothWays();
  TestBadShapeThroughScopeStatus();
  return Summary("graph_api_forward_test");
}
