"""tf-fbn-ops: TensorFlow's batch-norm ops, forward and gradient, faster, deterministic and
exact.

``import tf_fbn_ops`` alone does not import TensorFlow. The op library is loaded into TensorFlow
as soon as both are imported (in either order), or on first use, or by ``load_library()``.
``library_path()`` gives the file for ``tf.load_op_library``; ``get_include()`` the folder of
``tf_fbn_ops/ops.h``, the C++ graph API.
"""

from tf_fbn_ops._loader import (
    LibraryVersionError,
    LibraryVersionWarning,
    gpu_kernel_status,
    library_path,
    load_library,
    load_when_tensorflow_is_imported,
)
from tf_fbn_ops.cc_flags import get_include
from tf_fbn_ops.ops import (
    fused_batch_norm_forward,
    fused_batch_norm_forward_v2,
    fused_batch_norm_forward_v3,
    fused_batch_norm_grad,
    fused_batch_norm_grad_v2,
    fused_batch_norm_grad_v3,
)

# Integration APIs that need TensorFlow, imported on first access so that `import tf_fbn_ops`
# stays free of it.
_LAZY = {
    "fused_batch_norm": "tf_fbn_ops.batch_norm",
    "shim_gradients": "tf_fbn_ops.builtin_override",
    "enable_shim_gradients": "tf_fbn_ops.builtin_override",
    "disable_shim_gradients": "tf_fbn_ops.builtin_override",
    "shim_gradients_enabled": "tf_fbn_ops.builtin_override",
    "rewrite_graph_def": "tf_fbn_ops.graph_rewrite",
    "batch_norm_training_backprop": "tf_fbn_ops.onednn_graph",
}

__all__ = [
    "LibraryVersionError",
    "LibraryVersionWarning",
    "fused_batch_norm_forward",
    "fused_batch_norm_forward_v2",
    "fused_batch_norm_forward_v3",
    "fused_batch_norm_grad",
    "fused_batch_norm_grad_v2",
    "fused_batch_norm_grad_v3",
    "get_include",
    "gpu_kernel_status",
    "library_path",
    "load_library",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib  # noqa: PLC0415

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tf_fbn_ops' has no attribute {name!r}")
__version__ = "0.2.0"

load_when_tensorflow_is_imported()
