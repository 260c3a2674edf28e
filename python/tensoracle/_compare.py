"""tensoracle.compare: the C++ compare_tensors on NumPy arrays or dicts of them (docs/compare.md)."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Union

from . import _tensoracle

_LIMITS = ("max_abs", "max_rel", "rel_l2", "min_cosine", "min_sqnr_db")


def _compare_one(name: str, candidate: Any, reference: Any, limits: Dict[str, float]) -> Dict[str, Any]:
    import numpy as np

    c = np.ascontiguousarray(candidate)
    r = np.ascontiguousarray(reference)
    c = c.astype(c.dtype.newbyteorder("<"), copy=False)
    r = r.astype(r.dtype.newbyteorder("<"), copy=False)
    text = _tensoracle.compare_tensors(
        name, str(c.dtype), list(c.shape), c.tobytes(), str(r.dtype), list(r.shape), r.tobytes(), limits
    )
    return json.loads(text)["tensors"][0]


def compare(
    candidate: Union[Any, Mapping[str, Any]], reference: Union[Any, Mapping[str, Any]], **limits: float
) -> Dict[str, Any]:
    """Compares a candidate with a reference, as `tensoracle compare` does.

    With two arrays: returns the tensor's entry (metrics, thresholds, passed, failed_checks). With two dicts of
    arrays: returns {"tensors": [entries sorted by name], "passed": bool}; a name on one side only is a failed entry.
    Limits (max_abs, max_rel, rel_l2, min_cosine, min_sqnr_db) override the reference dtype's defaults.
    """
    unknown = sorted(set(limits) - set(_LIMITS))
    if unknown:
        raise _tensoracle.InvalidArgumentError(f"unknown comparison limits {unknown}: use {', '.join(_LIMITS)}")
    values = {k: float(v) for k, v in limits.items()}
    if isinstance(candidate, Mapping) != isinstance(reference, Mapping):
        raise _tensoracle.InvalidArgumentError("compare takes two arrays or two dicts of arrays")
    if not isinstance(candidate, Mapping):
        return _compare_one("tensor", candidate, reference, values)
    entries = []
    for name in sorted(set(candidate) | set(reference)):
        if name in candidate and name in reference:
            entries.append(_compare_one(name, candidate[name], reference[name], values))
        else:
            side = "candidate" if name not in candidate else "reference"
            entries.append({"name": name, "passed": False, "failed_checks": [f"missing in {side}"]})
    return {"tensors": entries, "passed": all(e["passed"] for e in entries)}
