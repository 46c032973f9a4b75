"""tf-fbn-ops: TensorFlow's batch-norm gradient ops, faster, deterministic and exact.

``import tf_fbn_ops`` is cheap: the op library is loaded into TensorFlow on first use (or by
``load_library()``). ``library_path()`` gives the file for ``tf.load_op_library``.
"""

from tf_fbn_ops._loader import LibraryVersionError, library_path, load_library
from tf_fbn_ops.ops import (
    fused_batch_norm_grad,
    fused_batch_norm_grad_v2,
    fused_batch_norm_grad_v3,
)

__all__ = [
    "LibraryVersionError",
    "fused_batch_norm_grad",
    "fused_batch_norm_grad_v2",
    "fused_batch_norm_grad_v3",
    "library_path",
    "load_library",
]
__version__ = "0.1.0"
