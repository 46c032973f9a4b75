"""Swapping Keras' BatchNormalization for the shim's in a model that already exists."""

from __future__ import annotations

import keras

from tf_fbn_ops.keras.layer import BatchNormalization


def replace_batch_norm(model: keras.Model) -> keras.Model:
    """A copy of ``model`` whose ``keras.layers.BatchNormalization`` layers are the shim's.

    ``model`` must be a built Functional or Sequential model; models nested in it are copied
    the same way. Every other layer is copied as ``keras.models.clone_model`` copies it, and all
    weights (moving statistics included) are copied over, so the copy predicts exactly what the
    original does. Subclasses of Keras' layer are kept as they are: their ``call`` may differ.
    The copy is not compiled; call ``compile`` on it before ``fit``.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"replace_batch_norm() expects a keras.Model, got {type(model).__name__}")
    if not model.built:
        raise ValueError("replace_batch_norm() needs a built model (call it on data or give it "
                         "an input shape first): unbuilt models have no weights to copy.")
    if not isinstance(model, (keras.Sequential, keras.src.models.Functional)):
        raise ValueError(
            f"replace_batch_norm() copies Functional and Sequential models; "
            f"{type(model).__name__} is a subclassed model, whose layers are created in its own "
            "code: use tf_fbn_ops.keras.BatchNormalization there instead.")

    def clone(layer: keras.layers.Layer) -> keras.layers.Layer:
        layer_class = (BatchNormalization if type(layer) is keras.layers.BatchNormalization
                       else layer.__class__)
        return layer_class.from_config(layer.get_config())

    copy = keras.models.clone_model(model, clone_function=clone, recursive=True)
    copy.set_weights(model.get_weights())
    return copy
