"""Cross-check: every implementation must compute the same gradient as the shim.

A benchmark that times different computations is worse than none, so each implementation's
warm-up result is reduced to a few aggregates (see ``implementations.aggregates``) and compared
with the reference's. Some aggregates are near zero by construction (the sum of dx in training,
a channel's offset gradient), so each comparison is relative to a natural magnitude rather than
to the value itself: sums of dx to the sum of |dx|, a channel's gradient to the mean |gradient|
per channel (or its own size if larger), sums of channel gradients to the sum of their absolute
values. The streaming kernel computes no gradient and is exempt.
"""

from __future__ import annotations

from harness.cases import Case

EXEMPT = ("stream",)
REFERENCE_PREFERENCE = ("shim", "tf_eigen", "tf_onednn", "torch")


def tolerance(case: Case) -> float:
    """Relative tolerance: 1e-2 for float32, 5e-2 for the 2-byte dtypes."""
    return 1e-2 if case.dtype == "float32" else 5e-2


def _pairs(reference: dict) -> list[tuple[str, int | None, float]]:
    """(aggregate, index or None, the magnitude its difference is measured against)."""
    channels = max(reference["channels"], 1)
    pairs: list[tuple[str, int | None, float]] = [
        ("sum_dx", None, reference["sum_abs_dx"]),
        ("sum_abs_dx", None, reference["sum_abs_dx"]),
        ("sum_scale_backprop", None, reference["sum_abs_scale_backprop"]),
        ("sum_offset_backprop", None, reference["sum_abs_offset_backprop"]),
    ]
    for key, total in (("scale_backprop_head", "sum_abs_scale_backprop"),
                       ("offset_backprop_head", "sum_abs_offset_backprop")):
        per_channel = reference[total] / channels
        pairs += [(key, i, max(abs(v), per_channel)) for i, v in enumerate(reference[key])]
    return pairs


def compare(reference: dict, other: dict, tol: float) -> list[str]:
    """Descriptions of the aggregates on which ``other`` disagrees with ``reference``."""
    mismatches = []
    for key, index, magnitude in _pairs(reference):
        want = reference[key] if index is None else reference[key][index]
        got = other[key] if index is None else other[key][index]
        difference = abs(got - want)
        if not difference <= tol * magnitude:  # written so that a NaN fails too
            name = key if index is None else f"{key}[{index}]"
            mismatches.append(f"{name}: {got:.6g} vs {want:.6g} (|diff| {difference:.3g} > "
                              f"{tol:g} x {magnitude:.3g})")
    return mismatches


def crosscheck(case: Case, checks: dict[str, dict | None]) -> dict:
    """Compares every implementation's aggregates with the reference (the shim when it ran).

    Args:
      checks: implementation -> its aggregates, for the implementations that ran.

    Returns:
      ``{"reference", "tolerance", "ok", "results": {impl: {"ok", "mismatches"}}}``; "ok" is
      None when there was nothing to compare.
    """
    candidates = [n for n in REFERENCE_PREFERENCE if checks.get(n)]
    tol = tolerance(case)
    if not candidates:
        return {"reference": None, "tolerance": tol, "ok": None, "results": {}}
    reference_name = candidates[0]
    reference = checks[reference_name]
    results = {}
    for name, check in checks.items():
        if name == reference_name or name in EXEMPT or not check:
            continue
        mismatches = compare(reference, check, tol)
        results[name] = {"ok": not mismatches, "mismatches": mismatches}
    ok = all(r["ok"] for r in results.values()) if results else None
    return {"reference": reference_name, "tolerance": tol, "ok": ok, "results": results}
