"""Computes TensorFlow's outputs for parity cases in a process of their own.

TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, at import, so the oneDNN comparison needs a second
process. Usage: python tf_reference_worker.py OUT.npz < case-ids.json
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from cases import parity_cases  # noqa: E402
from tf_calls import tf_outputs_for  # noqa: E402

if __name__ == "__main__":
    wanted = set(json.load(sys.stdin))
    np.savez(sys.argv[1], **tf_outputs_for([c for c in parity_cases() if c.id in wanted]))
