"""Test-session set-up: TensorFlow's stock CPU kernels unless the caller chose otherwise.

The error-text and parity tests compare against TensorFlow's stock ("Eigen") kernels, which run
only with oneDNN off; TF_ENABLE_ONEDNN_OPTS is read once, at import, so it is set here before
anything imports TensorFlow. The oneDNN comparison runs in a worker process (see
tests/tf_reference_worker.py).
"""

import os
import sys

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
