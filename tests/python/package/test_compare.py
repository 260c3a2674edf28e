"""tensoracle.compare against NumPy formulas (docs/compare.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensoracle


def test_metrics_match_numpy():
    rng = np.random.default_rng(0)
    r = rng.standard_normal((4, 33)).astype(np.float32)
    c = (r + rng.standard_normal(r.shape).astype(np.float32) * 1e-3).astype(np.float32)
    result = tensoracle.compare(c, r)
    d = c.astype(np.float64) - r.astype(np.float64)
    assert result["max_abs_error"] == pytest.approx(np.abs(d).max(), rel=1e-12)
    assert result["mean_abs_error"] == pytest.approx(np.abs(d).mean(), rel=1e-9)
    assert result["rmse"] == pytest.approx(math.sqrt((d**2).mean()), rel=1e-9)
    rel_l2 = np.linalg.norm(d) / np.linalg.norm(r.astype(np.float64))
    assert result["rel_l2_error"] == pytest.approx(rel_l2, rel=1e-9)
    cos = (c.astype(np.float64) * r).sum() / (np.linalg.norm(c.astype(np.float64)) * np.linalg.norm(r.astype(np.float64)))
    assert result["cosine_similarity"] == pytest.approx(cos, rel=1e-12)
    assert result["sqnr_db"] == pytest.approx(10 * math.log10((r.astype(np.float64) ** 2).sum() / (d**2).sum()), rel=1e-9)
    assert result["p99_abs_error"] == pytest.approx(np.percentile(np.abs(d), 99), rel=1e-9)
    assert result["max_rel_error"] == pytest.approx((np.abs(d) / np.abs(r)).max(), rel=1e-9)
    # f32 default: rel_l2 <= 1e-5, which this noise exceeds.
    assert result["passed"] is False and result["failed_checks"]
    assert tensoracle.compare(c, r, rel_l2=1e-2)["passed"] is True


def test_dicts_shapes_dtypes_and_nonfinite():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = tensoracle.compare({"a": a, "b": a, "only_c": a}, {"a": a, "b": a.astype(np.float64), "only_r": a})
    by_name = {t["name"]: t for t in result["tensors"]}
    assert [t["name"] for t in result["tensors"]] == ["a", "b", "only_c", "only_r"]
    assert by_name["a"]["passed"] and by_name["a"]["max_abs_error"] == 0.0
    assert not by_name["b"]["passed"] and by_name["b"]["dtype_match"] is False
    assert by_name["only_c"]["failed_checks"] == ["missing in reference"]
    assert result["passed"] is False
    nan = np.array([1.0, np.nan], np.float32)
    assert tensoracle.compare(nan, nan)["passed"] is True
    assert tensoracle.compare(nan, np.array([1.0, 2.0], np.float32))["passed"] is False
    ints = np.array([1, 2, 3], np.int32)
    assert tensoracle.compare(ints + 1, ints)["passed"] is False
    assert tensoracle.compare(ints + 1, ints, max_abs=1)["passed"] is True
    with pytest.raises(tensoracle.InvalidArgumentError, match="unknown comparison limits"):
        tensoracle.compare(ints, ints, tolerance=1)
