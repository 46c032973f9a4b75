// A C++ program that builds a graph with the shim's FbnFusedBatchNormGradV3 through TensorFlow's
// C++ API and runs it in a Session. Build (with the Python environment that has TensorFlow and
// tf_fbn_ops installed):
//
//   g++ -std=c++17 $(python -m tf_fbn_ops cc-flags --cflags) graph_api_example.cc
//       -o graph_api_example $(python -m tf_fbn_ops cc-flags --libs)
//
// (one command line).
//
// The link flags keep the op library even though nothing calls into it: loading it is what
// registers the ops.
#include <cstdio>
#include <memory>
#include <vector>

#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/core/public/session.h"
#include "tf_fbn_ops/ops.h"

int main() {
  using tensorflow::Tensor;
  using tensorflow::TensorShape;
  tensorflow::Scope scope = tensorflow::Scope::NewRootScope();

  // An NCHW batch of 2 images with 3 channels of 2x2, in inference mode (which TensorFlow's own
  // CPU kernel refuses for NCHW).
  Tensor x(tensorflow::DT_FLOAT, TensorShape({2, 3, 2, 2}));
  Tensor dy(tensorflow::DT_FLOAT, TensorShape({2, 3, 2, 2}));
  for (int i = 0; i < 24; ++i) {
    x.flat<float>()(i) = 0.1f * i;
    dy.flat<float>()(i) = (i % 5) - 2.0f;
  }
  auto scale = tensorflow::ops::Const(scope, {1.0f, 2.0f, 0.5f});
  auto mean = tensorflow::ops::Const(scope, {1.0f, 1.2f, 1.4f});
  auto variance = tensorflow::ops::Const(scope, {0.5f, 0.7f, 0.9f});
  auto unused = tensorflow::ops::Const(scope, Tensor(tensorflow::DT_FLOAT, TensorShape({0})));

  using tf_fbn_ops::ops::FbnFusedBatchNormGradV3;
  FbnFusedBatchNormGradV3 grad(scope, tensorflow::ops::Const(scope, dy),
                               tensorflow::ops::Const(scope, x), scale, mean, variance, unused,
                               FbnFusedBatchNormGradV3::DataFormat("NCHW").IsTraining(false));
  if (!scope.ok()) {  // errors in building the graph land in the scope's status
    std::fprintf(stderr, "%s\n", scope.status().ToString().c_str());
    return 1;
  }

  tensorflow::GraphDef graph;
  TF_CHECK_OK(scope.ToGraphDef(&graph));
  std::unique_ptr<tensorflow::Session> session(
      tensorflow::NewSession(tensorflow::SessionOptions()));
  TF_CHECK_OK(session->Create(graph));
  std::vector<Tensor> out;
  TF_CHECK_OK(session->Run({}, {grad.scale_backprop.name(), grad.offset_backprop.name()}, {},
                           &out));
  for (int c = 0; c < 3; ++c) {
    std::printf("channel %d: scale_backprop %.6f offset_backprop %.6f\n", c,
                out[0].flat<float>()(c), out[1].flat<float>()(c));
  }
  return 0;
}
