"""Whether the imported TensorFlow really runs its oneDNN kernels (TF_ENABLE_ONEDNN_OPTS is only
a request: TF ignores it on CPUs and builds where oneDNN is off)."""

from __future__ import annotations


def onednn_enabled() -> bool | None:
    """True or False as TensorFlow reports it; None where this TensorFlow cannot tell (the query
    is a private API, hence the guard)."""
    try:
        from tensorflow.python.util import _pywrap_util_port  # noqa: PLC0415
    except ImportError:
        return None
    return bool(_pywrap_util_port.IsMklEnabled())
