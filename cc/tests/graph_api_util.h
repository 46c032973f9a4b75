// What the graph-API tests share (graph_api_test.cc, graph_api_forward_test.cc): checks and
// their count, deterministic input tensors, running a Scope's graph, comparing two tensors.
#ifndef TF_FBN_OPS_CC_TESTS_GRAPH_API_UTIL_H_
#define TF_FBN_OPS_CC_TESTS_GRAPH_API_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/math_ops.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/public/session.h"

namespace graph_api_test {

using ::tensorflow::DataType;
using ::tensorflow::Output;
using ::tensorflow::Scope;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

inline int failures = 0;
inline int checks = 0;

inline void Check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

// Deterministic values in [-1, 1), different per seed.
inline Tensor Filled(DataType dtype, const TensorShape& shape, int seed, float offset = 0.0f,
              float spread = 1.0f) {
  Tensor f(::tensorflow::DT_FLOAT, shape);
  auto flat = f.flat<float>();
  unsigned state = 2654435761u * static_cast<unsigned>(seed + 1);
  for (int64_t i = 0; i < flat.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    flat(i) = offset + spread * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
  }
  if (dtype == ::tensorflow::DT_FLOAT) return f;
  // Through the graph's own Cast, so 16-bit values are rounded exactly as TensorFlow rounds.
  Scope scope = Scope::NewRootScope();
  auto cast = ::tensorflow::ops::Cast(scope, ::tensorflow::ops::Const(scope, f), dtype);
  std::unique_ptr<::tensorflow::Session> session(
      ::tensorflow::NewSession(::tensorflow::SessionOptions()));
  ::tensorflow::GraphDef graph;
  TF_CHECK_OK(scope.ToGraphDef(&graph));
  TF_CHECK_OK(session->Create(graph));
  std::vector<Tensor> out;
  TF_CHECK_OK(session->Run({}, {cast.node()->name()}, {}, &out));
  return out[0];
}

// Runs the scope's graph and fetches `outputs`; a failed run is a failed check.
inline std::vector<Tensor> Run(const Scope& scope, const std::vector<Output>& outputs,
                        const std::string& what) {
  ::tensorflow::GraphDef graph;
  std::vector<Tensor> values;
  ::tensorflow::Status status = scope.ToGraphDef(&graph);
  std::unique_ptr<::tensorflow::Session> session(
      ::tensorflow::NewSession(::tensorflow::SessionOptions()));
  if (status.ok()) status = session->Create(graph);
  std::vector<std::string> names;
  for (const Output& o : outputs) names.push_back(o.name());
  if (status.ok()) status = session->Run({}, names, {}, &values);
  Check(status.ok(), what + ": run: " + status.ToString());
  return values;
}

inline double AsDouble(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case ::tensorflow::DT_HALF:
      return static_cast<float>(t.flat<Eigen::half>()(i));
    case ::tensorflow::DT_BFLOAT16:
      return static_cast<float>(t.flat<Eigen::bfloat16>()(i));
    default:
      return t.flat<float>()(i);
  }
}

// Largest |a - b| relative to the largest |b|.
inline double RelativeDifference(const Tensor& a, const Tensor& b) {
  double diff = 0.0, scale = 1e-30;
  for (int64_t i = 0; i < b.NumElements(); ++i) {
    diff = std::max(diff, std::fabs(AsDouble(a, i) - AsDouble(b, i)));
    scale = std::max(scale, std::fabs(AsDouble(b, i)));
  }
  return diff / scale;
}

// The attr `name` of a built node holds `want`, as the graph holds it.
template <typename V>
void CheckAttr(const ::tensorflow::Operation& operation, const char* name, const V& want,
               const std::string& what) {
  V got{};
  Check(operation.node() != nullptr &&
            ::tensorflow::GetNodeAttr(operation.node()->attrs(), name, &got).ok() && got == want,
        what + ": " + name);
}

// A bad shape rejected by both classes' constructions, through their Scopes' statuses, with the
// same words: the messages name the ops' nodes, what is wrong reads the same.
inline void CheckSameProblem(const ::tensorflow::Status& ours,
                             const ::tensorflow::Status& theirs) {
  Check(!ours.ok() && !theirs.ok(), "bad shape rejected");
  auto problem = [](const ::tensorflow::Status& s) {
    std::string m(s.message());
    return m.substr(0, m.find(" for '"));
  };
  Check(problem(ours) == problem(theirs),
        "same text as TensorFlow's class: \"" + problem(ours) + "\" vs \"" + problem(theirs) +
            "\"");
}

// The summary line and the exit status.
inline int Summary(const char* program) {
  std::printf("%s: %d checks, %d failed\n", program, checks, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace graph_api_test

#endif  // TF_FBN_OPS_CC_TESTS_GRAPH_API_UTIL_H_
