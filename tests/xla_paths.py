"""The two ways the shim's ops compile under XLA (cc/xla/xla_grad_lowerings.h): custom calls
of our FFI handlers, with the non-jit kernels' bits, and the HLO lowerings
(TF_FBN_OPS_XLA_LOWERING=hlo). A test module that imports `xla_path` runs each test taking it
once per path."""

from __future__ import annotations

import pytest

from tf_fbn_ops import _loader

NO_CUSTOM_CALLS = _loader.xla_ffi_missing_reason()


@pytest.fixture(params=["custom_call", "hlo"])
def xla_path(request, monkeypatch) -> str:
    """The variable is read at every compilation."""
    monkeypatch.delenv(_loader.XLA_LOWERING_VARIABLE, raising=False)
    if request.param == "custom_call" and NO_CUSTOM_CALLS is not None:
        pytest.skip(f"this build compiles to the HLO lowering only: {NO_CUSTOM_CALLS}")
    if request.param == "hlo":
        monkeypatch.setenv(_loader.XLA_LOWERING_VARIABLE, "hlo")
    return request.param


CUSTOM_CALL_TARGET = 'custom_call_target="tf_fbn_ops_batch_norm_grad"'


def assert_compiled_by(path: str, hlo: str) -> None:
    """The HLO of a compiled shim op is a call of our target, or the lowering's double sums."""
    if path == "custom_call":
        assert CUSTOM_CALL_TARGET in hlo and "f64" not in hlo
    else:
        assert CUSTOM_CALL_TARGET not in hlo and "f64" in hlo
