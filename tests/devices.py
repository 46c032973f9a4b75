"""The devices TensorFlow has here, for tests that must hold on each: the CPU always, the first
GPU where TensorFlow sees one (tools/tf_cuda_bundle/gpu_checks.sh runs them there)."""

from __future__ import annotations

import tensorflow as tf

DEVICES = ["CPU"] + (["GPU"] if tf.config.list_physical_devices("GPU") else [])
