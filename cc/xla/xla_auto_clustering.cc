// The library's batch-norm ops (forward and gradients) and XLA's auto-clustering
// (tf.config.optimizer.set_jit, --tf_xla_auto_jit). Where XLA compiles the ops to custom calls
// of our kernels, a cluster around one of them runs the same kernel and saves a cluster launch,
// so the ops join clusters like any other. Where it would compile them to the HLO lowering
// (slower than the kernels on CPU), this pass marks them _XlaCompile=False before the
// clustering pass runs, so that they stay with the kernels. Every node of the ops is covered,
// however it was made (the Python wrappers, tf.load_op_library's module, rewrite_graph_def, a
// C++ graph). jit_compile=True ignores the mark.
#include <string>

#include "cc/xla/xla_path.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/common_runtime/optimization_registry.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow {
namespace fbn_kernels {
namespace {

constexpr char kXlaCompileAttr[] = "_XlaCompile";
// The forward ops and the gradients (FbnFusedBatchNorm*, FbnFusedBatchNormGrad*).
constexpr char kOpPrefix[] = "FbnFusedBatchNorm";
constexpr char kGradPrefix[] = "FbnFusedBatchNormGrad";

class LeaveHloLoweredOpsToKernels : public GraphOptimizationPass {
 public:
  Status Run(const GraphOptimizationPassOptions& options) override {
    if (options.graph == nullptr || *options.graph == nullptr) return OkStatus();
    for (Node* node : (*options.graph)->op_nodes()) {
      if (node->type_string().rfind(kOpPrefix, 0) != 0) continue;
      if (node->attrs().Find(kXlaCompileAttr) != nullptr) continue;  // the graph's own choice
      const bool gpu = node->requested_device().find("GPU") != std::string::npos;
      const DeviceType device(gpu ? DEVICE_GPU_XLA_JIT : DEVICE_CPU_XLA_JIT);
      const bool gradient = node->type_string().rfind(kGradPrefix, 0) == 0;
      std::string why;
      const XlaGradPath path =
          gradient ? ChooseXlaGradPath(device, &why) : ChooseXlaForwardPath(device, &why);
      if (path == XlaGradPath::kHlo) {
        node->AddAttr(kXlaCompileAttr, false);
      }
    }
    return OkStatus();
  }
};

// Before placement: the clustering pass comes after rewriting for execution.
REGISTER_OPTIMIZATION(OptimizationPassRegistry::PRE_PLACEMENT, 0, LeaveHloLoweredOpsToKernels);

}  // namespace
}  // namespace fbn_kernels
}  // namespace tensorflow
