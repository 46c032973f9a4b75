"""Keras 3 (``keras``, TensorFlow's ``tf.keras`` since 2.16) with the shim's batch-norm backward.

Keras 3's BatchNormalization has no fused op for `tf_fbn_ops.shim_gradients()` to reach, so the
shim comes to it as a layer: `BatchNormalization` is Keras' layer with a fused forward and the
shim's backward, and `replace_batch_norm` swaps it into a built model. Importing this module
registers the layer for ``keras.models.load_model``. Keras 2 (``tf_keras``) users keep
``shim_gradients()``.
"""

from tf_fbn_ops.keras.layer import BatchNormalization
from tf_fbn_ops.keras.replace import replace_batch_norm

__all__ = ["BatchNormalization", "replace_batch_norm"]
