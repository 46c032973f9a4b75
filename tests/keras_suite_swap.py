"""A pytest plugin (-p keras_suite_swap) that puts tf_fbn_ops.keras.BatchNormalization where
Keras' own tests take ``layers.BatchNormalization``; with SWAP_SYNCHRONIZED=1, a subclass whose
``synchronized`` defaults to True, so the same tests run the synchronized path."""

import os

import keras
from keras.src import layers

import tf_fbn_ops.keras as fbn_keras

Swapped = fbn_keras.BatchNormalization
if os.environ.get("SWAP_SYNCHRONIZED") == "1":
    @keras.saving.register_keras_serializable(package="keras_suite_swap")
    class Swapped(fbn_keras.BatchNormalization):  # noqa: F811 - the synchronized variant
        def __init__(self, *args, synchronized=True, **kwargs):
            super().__init__(*args, synchronized=synchronized, **kwargs)

layers.BatchNormalization = Swapped
keras.layers.BatchNormalization = Swapped
