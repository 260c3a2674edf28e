"""Tests of `tensoracle compare`: every metric checked against NumPy computations of the definitions in
docs/compare.md on random inputs (f64, f32, f16, bf16 and f8 via ml_dtypes, integers, bool), adversarial
inputs (NaN and infinities on either side, zeros, identical tensors, mismatched shapes and dtypes, tensors
missing on one side), .npy inputs including damaged files, and the exit codes.

Inputs are written with NumPy and the official safetensors package; expected values are computed here
with NumPy, never taken from tensoracle. Environment: TENSORACLE_CLI, the `tensoracle` binary."""

import io
import json
import math
import os
import subprocess

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as stnp

DTYPE_NAMES = {
    np.dtype(np.float64): "f64",
    np.dtype(np.float32): "f32",
    np.dtype(np.float16): "f16",
    np.dtype(ml_dtypes.bfloat16): "bf16",
    np.dtype(ml_dtypes.float8_e4m3fn): "f8e4m3",
    np.dtype(ml_dtypes.float8_e5m2): "f8e5m2",
    np.dtype(np.int64): "i64",
    np.dtype(np.int32): "i32",
    np.dtype(np.int16): "i16",
    np.dtype(np.int8): "i8",
    np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "bool",
}
FLOAT_NAMES = {"f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2"}

# The per-dtype default limits documented in docs/compare.md (the op-conformance tolerances).
DEFAULT_LIMITS = {
    "f64": {"rel_l2": 1e-12},
    "f32": {"rel_l2": 1e-5},
    "f16": {"rel_l2": 2e-3},
    "bf16": {"rel_l2": 1.6e-2},
    "f8e4m3": {"rel_l2": 1.3e-1},
    "f8e5m2": {"rel_l2": 1.3e-1},
    **{name: {"max_abs": 0.0} for name in ("i64", "i32", "i16", "i8", "u8", "bool")},
}
LIMIT_NAMES = ("max_abs", "max_rel", "rel_l2", "min_cosine", "min_sqnr_db")
METRICS = ("max_abs_error", "max_rel_error", "mean_abs_error", "rmse", "rel_l2_error", "cosine_similarity",
           "sqnr_db", "p99_abs_error")


@pytest.fixture(scope="module")
def cli():
    path = os.environ.get("TENSORACLE_CLI")
    if not path:
        pytest.fail("TENSORACLE_CLI is not set: point it at the built `tensoracle` binary", pytrace=False)
    return path


def run(cli, *args):
    return subprocess.run([cli, *map(str, args)], capture_output=True, timeout=120)


def describe(result):
    return (f"exit {result.returncode}\nstdout: {result.stdout.decode(errors='replace')[:3000]!r}\n"
            f"stderr: {result.stderr.decode(errors='replace')[:2000]!r}")


def strict_json(text):
    """Parses JSON, refusing the NaN/Infinity extensions Python would otherwise accept."""
    def refuse(name):
        raise ValueError(f"invalid JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def compare(cli, candidate, reference, *options, expect_exit=None):
    result = run(cli, "compare", candidate, reference, *options)
    if expect_exit is not None:
        assert result.returncode == expect_exit, describe(result)
    assert result.returncode in (0, 1), describe(result)
    report = strict_json(result.stdout)
    assert set(report) == {"tensors", "passed"}
    assert report["passed"] == (result.returncode == 0)
    assert report["passed"] == all(t["passed"] for t in report["tensors"])
    return report


def number(value):
    """A metric from the JSON: non-finite values are the strings "inf", "-inf", "nan"."""
    if isinstance(value, str):
        assert value in ("inf", "-inf", "nan"), value
        return float(value)
    return value


# ---- the definitions of docs/compare.md, in NumPy ----

def as_float64(a):
    return np.asarray(a).astype(np.float64)


def expected(candidate, reference, limits):
    """Metrics, counts, failed metric names and passed flag for two arrays of the same dtype and shape."""
    c, r = as_float64(candidate).ravel(), as_float64(reference).ravel()
    finite = np.isfinite(c) & np.isfinite(r)
    same_special = (np.isnan(c) & np.isnan(r)) | (np.isinf(c) & np.isinf(r) & (c == r))
    mismatches = int(np.sum(~finite & ~same_special))
    cf, rf = c[finite], r[finite]
    if DTYPE_NAMES[np.asarray(candidate).dtype] in FLOAT_NAMES:
        d = cf - rf
    else:  # exact integer difference, then rounded
        d = np.array([float(int(x) - int(y)) for x, y in
                      zip(np.asarray(candidate).ravel()[finite].astype(object),
                          np.asarray(reference).ravel()[finite].astype(object))], dtype=np.float64)
    n = d.size
    ad = np.abs(d)
    nonzero = rf != 0
    norm_d, norm_r, norm_c = np.linalg.norm(d), np.linalg.norm(rf), np.linalg.norm(cf)
    if norm_c == 0 and norm_r == 0:
        cosine = 1.0
    elif norm_c == 0 or norm_r == 0:
        cosine = 0.0
    else:
        cosine = float(np.clip(np.dot(cf, rf) / (norm_c * norm_r), -1, 1))
    sum_d2, sum_r2 = float(np.sum(d * d)), float(np.sum(rf * rf))
    m = {
        "max_abs_error": float(ad.max()) if n else 0.0,
        "max_rel_error": float((ad[nonzero] / np.abs(rf[nonzero])).max()) if nonzero.any() else 0.0,
        "mean_abs_error": float(ad.mean()) if n else 0.0,
        "rmse": float(np.sqrt(np.mean(d * d))) if n else 0.0,
        "rel_l2_error": 0.0 if norm_d == 0 else (math.inf if norm_r == 0 else float(norm_d / norm_r)),
        "cosine_similarity": cosine,
        "sqnr_db": math.inf if sum_d2 == 0 else (-math.inf if sum_r2 == 0 else 10 * math.log10(sum_r2 / sum_d2)),
        "p99_abs_error": float(np.percentile(ad, 99)) if n else 0.0,
    }
    failed = []
    for limit, metric, is_max in (("max_abs", "max_abs_error", True), ("max_rel", "max_rel_error", True),
                                  ("rel_l2", "rel_l2_error", True), ("min_cosine", "cosine_similarity", False),
                                  ("min_sqnr_db", "sqnr_db", False)):
        if limits.get(limit) is not None:
            ok = m[metric] <= limits[limit] if is_max else m[metric] >= limits[limit]
            if not ok:
                failed.append(metric)
    if mismatches:
        failed.append("nonfinite_mismatch_count")
    counts = {
        "compared_count": int(finite.sum()),
        "nonfinite_mismatch_count": mismatches,
        "candidate_nan": int(np.isnan(c).sum()), "candidate_inf": int(np.isinf(c).sum()),
        "reference_nan": int(np.isnan(r).sum()), "reference_inf": int(np.isinf(r).sum()),
    }
    return m, counts, failed, not failed


def close(got, want, rel=1e-9, abs_tol=1e-12):
    if math.isinf(want) or math.isnan(want):
        return got == want or (math.isnan(want) and math.isnan(got))
    return math.isclose(got, want, rel_tol=rel, abs_tol=abs_tol)


def check_entry(entry, candidate, reference, limits):
    """Checks one tensor of the report against the NumPy computation."""
    m, counts, failed, passed = expected(candidate, reference, limits)
    name = entry["name"]
    assert entry["shape_match"] and entry["dtype_match"], entry
    assert entry["element_count"] == np.asarray(reference).size
    assert entry["compared_count"] == counts["compared_count"], name
    assert entry["nonfinite_mismatch_count"] == counts["nonfinite_mismatch_count"], name
    assert entry["candidate"]["nan_count"] == counts["candidate_nan"]
    assert entry["candidate"]["inf_count"] == counts["candidate_inf"]
    assert entry["reference"]["nan_count"] == counts["reference_nan"]
    assert entry["reference"]["inf_count"] == counts["reference_inf"]
    assert entry["candidate"]["dtype"] == DTYPE_NAMES[np.asarray(candidate).dtype]
    assert entry["candidate"]["shape"] == list(np.asarray(candidate).shape)
    for metric in METRICS:
        got = number(entry[metric])
        assert isinstance(got, float) or isinstance(got, int), (name, metric, entry[metric])
        assert close(float(got), m[metric]), f"{name}: {metric} = {got!r}, NumPy gives {m[metric]!r}"
    for limit in LIMIT_NAMES:
        assert number(entry["thresholds"][limit]) == limits.get(limit), (name, limit, entry["thresholds"])
    got_failed = sorted(check.split(" ")[0] for check in entry["failed_checks"])
    assert got_failed == sorted(failed), (name, entry["failed_checks"], failed)
    assert entry["passed"] == passed, (name, entry)
    if entry["max_abs_error_at"] is not None:
        i = entry["max_abs_error_at"]["index"]
        assert close(abs(number(entry["max_abs_error_at"]["candidate"]) - number(entry["max_abs_error_at"]["reference"])),
                     m["max_abs_error"], rel=1e-6) or not np.isfinite(m["max_abs_error"])
        assert number(entry["max_abs_error_at"]["reference"]) == as_float64(reference).ravel()[i]


def save(path, tensors):
    stnp.save_file({n: np.array(t, order="C", copy=True) for n, t in tensors.items()}, str(path))  # keeps 0-d shapes


# ---- random inputs ----

def random_float_pair(rng, dtype, shape, noise):
    """A reference and a candidate near it (relative perturbation `noise`), both rounded to dtype."""
    scale = {np.dtype(ml_dtypes.float8_e4m3fn): 8.0, np.dtype(ml_dtypes.float8_e5m2): 8.0}.get(np.dtype(dtype), 3.0)
    ref64 = rng.standard_normal(shape) * scale
    cand64 = ref64 * (1 + noise * rng.standard_normal(shape))
    return cand64.astype(dtype), ref64.astype(dtype)


FLOAT_DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                ml_dtypes.float8_e5m2]
SHAPES = [(), (1,), (7,), (3, 4, 5), (0, 3), (1000,), (17, 61)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_NAMES[np.dtype(d)])
def test_float_metrics_match_numpy(cli, tmp_path, dtype):
    rng = np.random.default_rng(1234 + FLOAT_DTYPES.index(dtype))
    cands, refs = {}, {}
    for i, shape in enumerate(SHAPES):
        for noise in (0.0, 1e-14, 1e-7, 1e-4, 1e-2, 0.3):
            name = f"t{i}_{noise:g}"
            cands[name], refs[name] = random_float_pair(rng, dtype, shape, noise)
    # Sparse differences (a few large ones), a sign flip, a constant offset, zeros in the reference.
    a, b = random_float_pair(rng, dtype, (500,), 0.0)
    a = a.copy()
    a[rng.integers(0, 500, 3)] = np.asarray([1.5, -2.0, 0.25]).astype(dtype)
    cands["sparse"], refs["sparse"] = a, b
    cands["negated"], refs["negated"] = (-as_float64(b)).astype(dtype), b
    cands["offset"], refs["offset"] = (as_float64(b) + 0.5).astype(dtype), b
    z = b.copy()
    z[::3] = 0
    cands["ref_zeros"], refs["ref_zeros"] = b, z
    save(tmp_path / "c.safetensors", cands)
    save(tmp_path / "r.safetensors", refs)
    report = compare(cli, tmp_path / "c.safetensors", tmp_path / "r.safetensors")
    assert [e["name"] for e in report["tensors"]] == sorted(cands)
    limits = DEFAULT_LIMITS[DTYPE_NAMES[np.dtype(dtype)]]
    outcomes = set()
    for entry in report["tensors"]:
        check_entry(entry, cands[entry["name"]], refs[entry["name"]], limits)
        outcomes.add(entry["passed"])
    assert outcomes == {True, False}, "the inputs should both pass and fail the default limit"


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_],
                         ids=lambda d: DTYPE_NAMES[np.dtype(d)])
def test_integer_metrics_match_numpy(cli, tmp_path, dtype):
    rng = np.random.default_rng(99)
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    cands, refs = {}, {}
    for i, shape in enumerate([(), (5,), (4, 6), (0,), (300,)]):
        if info is None:
            ref = rng.integers(0, 2, shape).astype(bool)
        else:
            ref = rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, shape).astype(dtype)
        cands[f"same{i}"], refs[f"same{i}"] = ref.copy(), ref
        changed = ref.copy()
        if changed.size:
            flat = changed.reshape(-1)
            flat[rng.integers(0, flat.size)] = not flat[0] if info is None else (flat[0] + 1) % 100
        cands[f"changed{i}"], refs[f"changed{i}"] = changed, ref
    if dtype is np.int64:  # differences beyond double precision still count
        cands["big"] = np.array([2**62, -(2**62), 2**63 - 1], dtype=np.int64)
        refs["big"] = np.array([2**62 + 1, -(2**62), -(2**63)], dtype=np.int64)
    save(tmp_path / "c.safetensors", cands)
    save(tmp_path / "r.safetensors", refs)
    report = compare(cli, tmp_path / "c.safetensors", tmp_path / "r.safetensors")
    for entry in report["tensors"]:
        check_entry(entry, cands[entry["name"]], refs[entry["name"]], DEFAULT_LIMITS[DTYPE_NAMES[np.dtype(dtype)]])
        same = np.array_equal(cands[entry["name"]], refs[entry["name"]])
        assert entry["passed"] == same, entry
    if dtype is np.int64:
        big = next(e for e in report["tensors"] if e["name"] == "big")
        assert big["max_abs_error"] == float(2**64 - 1)
        assert not big["passed"]


def test_limits_given_on_the_command_line_replace_the_defaults(cli, tmp_path):
    rng = np.random.default_rng(7)
    c32, r32 = random_float_pair(rng, np.float32, (200,), 1e-3)
    ci = np.arange(10, dtype=np.int32)
    ri = ci.copy()
    ri[3] += 4
    save(tmp_path / "c.safetensors", {"f": c32, "i": ci})
    save(tmp_path / "r.safetensors", {"f": r32, "i": ri})
    m, _, _, _ = expected(c32, r32, {})
    c_path, r_path = tmp_path / "c.safetensors", tmp_path / "r.safetensors"

    # Default: f32 fails rel_l2 1e-5, i32 fails max_abs 0.
    report = compare(cli, c_path, r_path, expect_exit=1)
    assert [e["passed"] for e in report["tensors"]] == [False, False]

    # Limits just above and just below each metric's NumPy value decide the outcome.
    for option, limit, metric, is_max in (("--max-abs", "max_abs", "max_abs_error", True),
                                          ("--max-rel", "max_rel", "max_rel_error", True),
                                          ("--rel-l2", "rel_l2", "rel_l2_error", True),
                                          ("--min-cosine", "min_cosine", "cosine_similarity", False),
                                          ("--min-sqnr-db", "min_sqnr_db", "sqnr_db", False)):
        value = m[metric]
        loose, tight = (value * 1.001, value * 0.999) if is_max else (value - 1e-6 * abs(value) - 1e-9, value * 1.0001)
        extra = [] if limit == "rel_l2" else ["--rel-l2", "1"]  # lift the f32 default to test this metric alone
        for bound, should_pass in ((loose, True), (tight, False)):
            report = compare(cli, c_path, r_path, option, repr(bound), *extra)
            f = next(e for e in report["tensors"] if e["name"] == "f")
            limits = {"rel_l2": 1e-5, **({"rel_l2": 1.0} if extra else {}), limit: bound}
            check_entry(f, c32, r32, limits)
            assert f["passed"] == should_pass, (option, bound, f)

    # --max-abs replaces the integer default too; the f32 tensor keeps its rel_l2 default.
    report = compare(cli, c_path, r_path, "--max-abs", "4", expect_exit=1)
    f, i = report["tensors"]
    assert i["passed"] and i["thresholds"]["max_abs"] == 4.0
    assert not f["passed"] and f["thresholds"]["rel_l2"] == 1e-5 and f["thresholds"]["max_abs"] == 4.0
    # A limit applies to every tensor: --rel-l2 now also checks the integer tensor (rel L2 error 4/sqrt(325)).
    report = compare(cli, c_path, r_path, "--max-abs", "4", "--rel-l2", "0.2", expect_exit=1)
    assert report["tensors"][0]["passed"] and report["tensors"][1]["failed_checks"][0].startswith("rel_l2_error")
    report = compare(cli, c_path, r_path, "--max-abs", "4", "--rel-l2", "0.25", expect_exit=0)
    assert report["tensors"][1]["thresholds"] == {"max_abs": 4.0, "max_rel": None, "rel_l2": 0.25,
                                                  "min_cosine": None, "min_sqnr_db": None}


# ---- adversarial inputs ----

NAN, INF = math.nan, math.inf
SPECIAL_CASES = {
    # name: (candidate specials, reference specials, passes with no finite error)
    "nan_both": ([NAN, NAN], [NAN, -NAN], True),
    "inf_both": ([INF, -INF], [INF, -INF], True),
    "nan_candidate_only": ([NAN], [1.0], False),
    "nan_reference_only": ([2.0], [NAN], False),
    "inf_candidate_only": ([INF], [3.0], False),
    "inf_reference_only": ([-1.0], [-INF], False),
    "inf_signs_differ": ([INF], [-INF], False),
    "inf_against_nan": ([INF], [NAN], False),
    "nan_against_inf": ([NAN], [-INF], False),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2],
                         ids=lambda d: DTYPE_NAMES[np.dtype(d)])
def test_nan_and_infinities_on_either_side(cli, tmp_path, dtype):
    rng = np.random.default_rng(5)
    cands, refs = {}, {}
    for name, (c_special, r_special, ok) in SPECIAL_CASES.items():
        ref = (rng.standard_normal(40) * 2).astype(dtype)
        cand = ref.copy()
        positions = rng.choice(40, len(c_special), replace=False)
        cand[positions] = np.asarray(c_special).astype(dtype)
        ref[positions] = np.asarray(r_special).astype(dtype)
        cands[name], refs[name] = cand, ref
    save(tmp_path / "c.safetensors", cands)
    save(tmp_path / "r.safetensors", refs)
    report = compare(cli, tmp_path / "c.safetensors", tmp_path / "r.safetensors", expect_exit=1)
    for entry in report["tensors"]:
        check_entry(entry, cands[entry["name"]], refs[entry["name"]], DEFAULT_LIMITS[DTYPE_NAMES[np.dtype(dtype)]])
        assert entry["passed"] == SPECIAL_CASES[entry["name"]][2], entry


def test_f8e4m3_nan_has_no_infinity(cli, tmp_path):
    nan = np.array([0x7F, 0x38], dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)  # NaN, 1.0
    one = np.array([0x38, 0x38], dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    save(tmp_path / "c.safetensors", {"x": nan, "same": nan})
    save(tmp_path / "r.safetensors", {"x": one, "same": nan.copy()})
    report = compare(cli, tmp_path / "c.safetensors", tmp_path / "r.safetensors", expect_exit=1)
    same, x = report["tensors"]
    assert same["passed"] and same["candidate"]["nan_count"] == 1 and same["compared_count"] == 1
    assert not x["passed"] and x["nonfinite_mismatch_count"] == 1


def test_zeros_and_identical_tensors(cli, tmp_path):
    rng = np.random.default_rng(3)
    ident = rng.standard_normal((6, 7)).astype(np.float32)
    tensors_c = {"zeros": np.zeros(9, np.float32), "ref_zero": np.array([0, 1e-30, 0], np.float32),
                 "cand_zero": np.zeros(3, np.float64), "identical": ident, "empty": np.zeros((0, 4), np.float16)}
    tensors_r = {"zeros": np.zeros(9, np.float32), "ref_zero": np.zeros(3, np.float32),
                 "cand_zero": np.array([1.0, -2.0, 2.0]), "identical": ident.copy(), "empty": np.zeros((0, 4), np.float16)}
    save(tmp_path / "c.safetensors", tensors_c)
    save(tmp_path / "r.safetensors", tensors_r)
    report = compare(cli, tmp_path / "c.safetensors", tmp_path / "r.safetensors", expect_exit=1)
    by_name = {e["name"]: e for e in report["tensors"]}
    for name, entry in by_name.items():
        check_entry(entry, tensors_c[name], tensors_r[name], DEFAULT_LIMITS[entry["reference"]["dtype"]])
    for name in ("zeros", "identical", "empty"):
        e = by_name[name]
        assert e["passed"], e
        assert e["max_abs_error"] == 0 and e["rel_l2_error"] == 0 and e["sqnr_db"] == "inf"
        assert e["cosine_similarity"] == 1
    assert by_name["ref_zero"]["rel_l2_error"] == "inf" and by_name["ref_zero"]["sqnr_db"] == "-inf"
    assert not by_name["ref_zero"]["passed"]
    assert by_name["cand_zero"]["rel_l2_error"] == 1 and by_name["cand_zero"]["cosine_similarity"] == 0
    assert by_name["empty"]["element_count"] == 0


def test_mismatched_shapes_dtypes_and_missing_tensors(cli, tmp_path):
    save(tmp_path / "c.safetensors", {"shape": np.zeros((2, 3), np.float32), "dtype": np.zeros(4, np.float16),
                                      "only_candidate": np.ones(2, np.int8), "ok": np.arange(3, dtype=np.int64)})
    save(tmp_path / "r.safetensors", {"shape": np.zeros((3, 2), np.float32), "dtype": np.zeros(4, np.float32),
                                      "only_reference": np.ones(1, np.uint8), "ok": np.arange(3, dtype=np.int64)})
    report = compare(cli, tmp_path / "c.safetensors", tmp_path / "r.safetensors", expect_exit=1)
    by_name = {e["name"]: e for e in report["tensors"]}
    assert sorted(by_name) == ["dtype", "ok", "only_candidate", "only_reference", "shape"]
    assert by_name["ok"]["passed"]
    shape = by_name["shape"]
    assert not shape["passed"] and not shape["shape_match"] and shape["dtype_match"]
    assert shape["candidate"]["shape"] == [2, 3] and shape["reference"]["shape"] == [3, 2]
    dtype = by_name["dtype"]
    assert not dtype["passed"] and dtype["shape_match"] and not dtype["dtype_match"]
    assert dtype["candidate"]["dtype"] == "f16" and dtype["reference"]["dtype"] == "f32"
    for entry in (shape, dtype, by_name["only_candidate"], by_name["only_reference"]):
        assert entry["failed_checks"], entry
        for metric in METRICS + ("element_count", "compared_count", "max_abs_error_at"):
            assert entry[metric] is None, (entry["name"], metric)
    assert by_name["only_candidate"]["reference"] is None
    assert by_name["only_candidate"]["failed_checks"] == ["missing in reference"]
    assert by_name["only_reference"]["candidate"] is None
    assert by_name["only_reference"]["failed_checks"] == ["missing in candidate"]


# ---- .npy inputs ----

def npy_bytes(array, version=None):
    buffer = io.BytesIO()
    if version is None:
        np.save(buffer, array)
    else:
        np.lib.format.write_array(buffer, array, version=version)
    return buffer.getvalue()


@pytest.mark.parametrize("version", [None, (1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int8, np.int16, np.int32, np.int64,
                                   np.uint8, np.bool_], ids=lambda d: np.dtype(d).str)
def test_npy_pair(cli, tmp_path, dtype, version):
    rng = np.random.default_rng(11)
    if np.dtype(dtype).kind == "f":
        c, r = random_float_pair(rng, dtype, (4, 5), 1e-3)
    elif dtype is np.bool_:
        r = rng.integers(0, 2, (4, 5)).astype(bool)
        c = r.copy()
        c[1, 2] = not c[1, 2]
    else:
        r = rng.integers(0, 100, (4, 5)).astype(dtype)
        c = r.copy()
        c[2, 3] += 1
    (tmp_path / "logits.npy").write_bytes(npy_bytes(c, version))
    (tmp_path / "reference.npy").write_bytes(npy_bytes(r, version))
    report = compare(cli, tmp_path / "logits.npy", tmp_path / "reference.npy")
    assert len(report["tensors"]) == 1
    entry = report["tensors"][0]
    assert entry["name"] == "logits"
    check_entry(entry, c, r, DEFAULT_LIMITS[DTYPE_NAMES[np.dtype(dtype)]])
    identical = compare(cli, tmp_path / "reference.npy", tmp_path / "reference.npy", expect_exit=0)
    assert identical["tensors"][0]["name"] == "reference"


def good_npy():
    return npy_bytes(np.arange(6, dtype=np.float32).reshape(2, 3))


def damaged_npy_files():
    good = good_npy()
    header_len = int.from_bytes(good[8:10], "little")
    files = {
        "truncated_data": good[:-1],
        "trailing_byte": good + b"\0",
        "truncated_header": good[:20],
        "empty": b"",
        "bad_magic": b"\x93NUMPX" + good[6:],
        "version_9": good[:6] + b"\x09\x00" + good[8:],
        "header_length_too_large": good[:8] + (header_len + 500).to_bytes(2, "little") + good[10:],
        "fortran_order": npy_bytes(np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))),
        "big_endian": npy_bytes(np.arange(3, dtype=">f4")),
        "complex": npy_bytes(np.zeros(2, np.complex64)),
        "unsigned_16": npy_bytes(np.zeros(2, np.uint16)),
        "object": npy_bytes(np.array([1, "a"], dtype=object)),
        "structured": npy_bytes(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])),
        "shape_not_a_tuple": good.replace(b"(2, 3)", b"[2, 3]"),
        "negative_dim": good.replace(b"(2, 3)", b"(-2,3)"),
        "wrong_shape": good.replace(b"(2, 3)", b"(3, 3)"),
        "huge_shape": good.replace(b"(2, 3), }", b"(2**62,),}"),
        "garbage_header": good[:10] + b"x" * header_len + good[10 + header_len:],
    }
    for n in (0, 1, 7, 9, 11, 30, len(good) - 24, len(good) - 5):
        files[f"cut_at_{n}"] = good[:n]
    return files


@pytest.mark.parametrize("name", sorted(damaged_npy_files()))
def test_damaged_npy_is_an_error_naming_the_file(cli, tmp_path, name):
    data, good = damaged_npy_files()[name], good_npy()
    assert np.load(io.BytesIO(good)).shape == (2, 3) and data != good
    bad = tmp_path / f"{name}.npy"
    bad.write_bytes(data)
    (tmp_path / "good.npy").write_bytes(good)
    for args in ((bad, tmp_path / "good.npy"), (tmp_path / "good.npy", bad)):
        result = run(cli, "compare", *args)
        assert result.returncode == 1, describe(result)
        assert result.stdout == b"", describe(result)
        message = result.stderr.decode()
        assert str(bad) in message, message
        assert "Traceback" not in message and len(message.splitlines()) == 1, message


def test_npy_and_safetensors_cannot_be_mixed(cli, tmp_path):
    (tmp_path / "a.npy").write_bytes(npy_bytes(np.zeros(2, np.float32)))
    save(tmp_path / "a.safetensors", {"a": np.zeros(2, np.float32)})
    result = run(cli, "compare", tmp_path / "a.npy", tmp_path / "a.safetensors")
    assert result.returncode == 1 and result.stdout == b"", describe(result)
    assert "a.npy" in result.stderr.decode()


# ---- exit codes and help ----

def test_exit_codes(cli, tmp_path):
    save(tmp_path / "a.safetensors", {"x": np.ones(3, np.float32)})
    save(tmp_path / "b.safetensors", {"x": np.array([1, 1, 2], np.float32)})
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    assert run(cli, "compare", a, a).returncode == 0
    assert run(cli, "compare", a, b).returncode == 1
    assert run(cli, "compare", a, b, "--rel-l2", "0.6").returncode == 0
    missing = run(cli, "compare", a, tmp_path / "missing.safetensors")
    assert missing.returncode == 1 and "missing.safetensors" in missing.stderr.decode(), describe(missing)
    (tmp_path / "broken.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + b"x")
    broken = run(cli, "compare", tmp_path / "broken.safetensors", a)
    assert broken.returncode == 1 and "broken.safetensors" in broken.stderr.decode(), describe(broken)
    assert broken.stdout == b""
    for args in ([], [a], [a, b, a], [a, b, "--rel-l2"], [a, b, "--rel-l2", "abc"], [a, b, "--rel-l2", "-1"],
                 [a, b, "--max-abs", "nan"], [a, b, "--min-cosine", "nan"], [a, b, "--unknown"]):
        result = run(cli, "compare", *args)
        assert result.returncode == 2, f"{args}: {describe(result)}"
        assert result.stdout == b""


def test_negative_limits_are_allowed_for_the_minima(cli, tmp_path):
    save(tmp_path / "a.safetensors", {"x": np.array([1, 0], np.float32)})
    save(tmp_path / "b.safetensors", {"x": np.array([-1, 0], np.float32)})
    report = compare(cli, tmp_path / "a.safetensors", tmp_path / "b.safetensors", "--rel-l2", "inf",
                     "--min-cosine", "-1", "--min-sqnr-db", "-10", expect_exit=0)
    entry = report["tensors"][0]
    assert entry["cosine_similarity"] == -1 and close(entry["sqnr_db"], 10 * math.log10(1 / 4))
    assert entry["thresholds"]["rel_l2"] == "inf"


def test_help_explains_metrics_defaults_and_exit_codes(cli):
    result = run(cli, "compare", "--help")
    assert result.returncode == 0, describe(result)
    text = result.stdout.decode()
    for word in ("--max-abs", "--max-rel", "--rel-l2", "--min-cosine", "--min-sqnr-db", "max_abs_error",
                 "max_rel_error", "mean_abs_error", "rmse", "rel_l2_error", "cosine_similarity", "sqnr_db",
                 "p99_abs_error", "1e-5", "2e-3", "1.6e-2", "1e-12", "Exit status", "NaN"):
        assert word in text, word
    assert "compare" in run(cli, "--help").stdout.decode()
