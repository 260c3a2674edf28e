#!/usr/bin/env python3
# Writes reference tables for tests/unit/float_convert_test.cpp using numpy and ml_dtypes.
"""Reference data for tensoracle's host float conversions (src/core/float_convert.cpp).

Usage: gen_float_references.py OUTPUT_DIR
Then:  TENSORACLE_FLOAT_REFS_DIR=OUTPUT_DIR <float_convert_test binary>

The references come from numpy (float16) and ml_dtypes (bfloat16, float8_e4m3fn, float8_e5m2),
which are independent of tensoracle's code. The output is deterministic (fixed random seed).

File format: every file is a headerless array of little-endian unsigned integers holding bit
patterns; a file's element count is its size divided by the element size.

  f16_to_f32.bin        65536 x u32  entry i: f32 bits of the f16 whose bit pattern is i
  bf16_to_f32.bin       65536 x u32  same for bf16
  f8e4m3fn_to_f32.bin     256 x u32  same for float8 e4m3fn
  f8e5m2_to_f32.bin       256 x u32  same for float8 e5m2
  f32_inputs.bin            N x u32  f32 input bit patterns (unique, sorted as unsigned integers)
  f32_to_f16.bin            N x u16  entry i: f16 bits of f32_inputs[i] converted by numpy
  f32_to_bf16.bin           N x u16  same, ml_dtypes.bfloat16
  f32_to_f8e4m3fn.bin       N x u8   same, ml_dtypes.float8_e4m3fn
  f32_to_f8e5m2.bin         N x u8   same, ml_dtypes.float8_e5m2
  manifest.txt                       human-readable summary (versions, counts); not read by tests

The input set is the union of, for each target format:
  * every finite value of the format, both signs, and the f32 values 1 ulp above and below;
  * every exact midpoint between consecutive finite values (including between 0 and the smallest
    subnormal, and between the largest finite value and the next power-of-two step beyond it,
    i.e. the overflow tie), both signs, and the f32 values 1 ulp above and below;
  * the 4097 consecutive f32 patterns centred on each of: the largest finite value, the overflow
    tie, the first value beyond the range, the smallest subnormal, half of it (the
    underflow-to-zero tie), the smallest normal and the midpoint between the largest subnormal and
    the smallest normal;
  * 150,000 random f32 values (random sign, mantissa and an exponent spanning the format's range);
plus +-0, +-inf, the f32 subnormal/normal and largest-finite boundaries, NaNs with many payloads
and both signs, and 2,000,000 uniformly random f32 bit patterns. About 4.2 million inputs and
42 MB in all.

Known differences between these references and PyTorch (c10::Half, c10::BFloat16,
c10::Float8_e4m3fn, c10::Float8_e5m2), which tensoracle follows. All concern NaN encodings only,
so the C++ test uses a NaN reference only as "the result is NaN": for f32 -> small format it then
requires PyTorch's exact NaN encoding (e.g. always 0x7FC0 for bf16); for widening it requires a NaN
of the same sign, and PyTorch's exact widened NaN bits are checked by hand-written cases:
  * f32 -> f16: numpy keeps the sign and the truncated payload (0x7F800001 -> 0x7C01, which is a
    signalling NaN); c10::Half gives 0x7E00 | sign.
  * f32 -> bf16: ml_dtypes gives 0x7FC0 | sign (so -NaN -> 0xFFC0); c10::BFloat16 always 0x7FC0.
  * f32 -> e5m2: ml_dtypes gives 0x7E | sign; c10::Float8_e5m2 gives 0x7F | sign.
  * f32 -> e4m3fn: both give 0x7F | sign (NaN, infinities and |x| > 464).
  * f16 -> f32: numpy keeps the payload without quieting (0x7C01 -> 0x7F802000); PyTorch sets the
    quiet bit (0x7FC02000).
  * e4m3fn -> f32: ml_dtypes gives 0x7FC00000 | sign; PyTorch 0x7FF00000 | sign.
  * e5m2 -> f32: ml_dtypes gives 0x7FC00000 | sign; PyTorch keeps the payload and sets the quiet
    bit (0x7D -> 0x7FE00000).
  * bf16 -> f32: both shift the bits left by 16 (NaN payloads, even signalling ones, are kept).
"""

import sys
from pathlib import Path

import ml_dtypes
import numpy as np

SEED = 20240601
NUM_UNIFORM_RANDOM = 2_000_000
NUM_RANGE_RANDOM = 150_000
BOUNDARY_HALF_WIDTH = 2048

SIGN_BIT = np.uint32(0x80000000)


class Format:
    """A small float format: 1 sign bit, exp_bits exponent bits, man_bits mantissa bits."""

    def __init__(self, name, dtype, exp_bits, man_bits, has_inf):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.exp_bits = exp_bits
        self.man_bits = man_bits
        self.has_inf = has_inf
        self.bias = (1 << (exp_bits - 1)) - 1
        self.storage = np.uint16 if self.dtype.itemsize == 2 else np.uint8
        magnitude_mask = (1 << (exp_bits + man_bits)) - 1
        # Largest finite magnitude pattern (IEEE-like: below infinity; "fn": below all-ones NaN).
        inf_pattern = magnitude_mask & ~((1 << man_bits) - 1)
        self.max_finite = inf_pattern - 1 if has_inf else magnitude_mask - 1

    def extended_values(self, patterns):
        """Value of non-negative patterns as float64, reading every pattern as a finite number
        (so max_finite + 1 is the value one step beyond the range)."""
        patterns = np.asarray(patterns, dtype=np.int64)
        exp_field = patterns >> self.man_bits
        mantissa = patterns & ((1 << self.man_bits) - 1)
        significand = np.where(exp_field > 0, mantissa + (1 << self.man_bits), mantissa)
        exponent = np.maximum(exp_field, 1) - self.bias - self.man_bits
        return np.ldexp(significand.astype(np.float64), exponent.astype(np.int32))


FORMATS = [
    Format("f16", np.float16, 5, 10, True),
    Format("bf16", ml_dtypes.bfloat16, 8, 7, True),
    Format("f8e4m3fn", ml_dtypes.float8_e4m3fn, 4, 3, False),
    Format("f8e5m2", ml_dtypes.float8_e5m2, 5, 2, True),
]


def f32_bits_exact(values):
    """f32 bit patterns of float64 values that must be exactly representable in f32."""
    values = np.asarray(values, dtype=np.float64)
    as_f32 = values.astype(np.float32)
    assert np.array_equal(as_f32.astype(np.float64), values), "value not exact in f32"
    return as_f32.view(np.uint32)


def with_neighbours(bits):
    """Non-negative f32 patterns `bits` and the patterns 1 ulp above and below (staying >= 0)."""
    bits = np.asarray(bits, dtype=np.int64)
    out = np.concatenate([bits, bits + 1, np.maximum(bits - 1, 0)])
    return out[out <= 0x7F800000].astype(np.uint32)


def around(bits, half_width=BOUNDARY_HALF_WIDTH):
    """Consecutive non-negative f32 patterns within half_width of `bits` (up to +inf)."""
    lo = max(int(bits) - half_width, 0)
    hi = min(int(bits) + half_width, 0x7F800000)
    return np.arange(lo, hi + 1, dtype=np.uint32)


def format_inputs(fmt, rng):
    """Non-negative f32 inputs that probe `fmt`; the caller adds the negated copies."""
    patterns = np.arange(0, fmt.max_finite + 2)  # every finite pattern plus one step beyond
    values = fmt.extended_values(patterns)
    # The extended decoding must agree with the library for every finite pattern.
    library = patterns[:-1].astype(fmt.storage).view(fmt.dtype).astype(np.float64)
    assert np.array_equal(library, values[:-1]), fmt.name

    representable = f32_bits_exact(values[:-1])
    midpoints_f64 = (values[:-1] + values[1:]) / 2
    midpoints = f32_bits_exact(midpoints_f64)

    min_sub = values[1]
    min_normal = values[1 << fmt.man_bits]
    max_sub = values[(1 << fmt.man_bits) - 1]
    max_finite = values[-2]
    beyond = values[-1]
    boundary_points = [max_finite, (max_finite + beyond) / 2, min_sub, min_sub / 2, min_normal,
                       (max_sub + min_normal) / 2]
    if beyond < 2.0**128:
        boundary_points.append(beyond)
    boundaries = [around(b) for b in f32_bits_exact(boundary_points)]

    # Random values across the format's exponent range (and a little beyond on both sides).
    lo_exp = max(1, int(np.floor(np.log2(min_sub))) + 127 - 2)
    hi_exp = min(254, int(np.floor(np.log2(beyond))) + 127 + 1)
    exps = rng.integers(lo_exp, hi_exp + 1, NUM_RANGE_RANDOM, dtype=np.uint32)
    mants = rng.integers(0, 1 << 23, NUM_RANGE_RANDOM, dtype=np.uint32)
    in_range = (exps << np.uint32(23)) | mants

    return np.concatenate([with_neighbours(representable), with_neighbours(midpoints), *boundaries,
                           in_range])


def special_inputs(rng):
    """Zeros, infinities, NaNs and f32's own boundaries (non-negative; negated copies are added
    by the caller, and NaNs get both signs here too)."""
    nan_payloads = np.array([0x7F800001, 0x7F800002, 0x7F802000, 0x7F80FFFF, 0x7F8FFFFF, 0x7F9FFFFF,
                             0x7FA00000, 0x7FBFFFFF, 0x7FC00000, 0x7FC00001, 0x7FC02000, 0x7FD55555,
                             0x7FE00000, 0x7FF00000, 0x7FFFE000, 0x7FFFFFFF], dtype=np.uint32)
    random_nans = (np.uint32(0x7F800000)
                   | rng.integers(1, 1 << 23, 4000, dtype=np.uint32))  # mantissa != 0
    return np.concatenate([
        np.array([0x00000000, 0x7F800000], dtype=np.uint32),
        around(0, 4096),            # f32 subnormals near zero
        around(0x00800000, 4096),   # f32 subnormal/normal boundary
        around(0x7F7FFFFF, 4096),   # f32 largest finite values up to +inf
        nan_payloads, random_nans,
    ])


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUTPUT_DIR", file=sys.stderr)
        return 2
    out_dir = Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)

    # (a) every bit pattern of each format -> f32.
    for fmt in FORMATS:
        count = 1 << (1 + fmt.exp_bits + fmt.man_bits)
        patterns = np.arange(count, dtype=np.int64).astype(fmt.storage)
        with np.errstate(all="ignore"):
            widened = patterns.view(fmt.dtype).astype(np.float32)
        widened.view(np.uint32).astype("<u4").tofile(out_dir / f"{fmt.name}_to_f32.bin")

    # (b) f32 inputs -> each format.
    positive = [special_inputs(rng)] + [format_inputs(fmt, rng) for fmt in FORMATS]
    positive = np.concatenate(positive)
    uniform = rng.integers(0, 1 << 32, NUM_UNIFORM_RANDOM, dtype=np.uint64).astype(np.uint32)
    inputs = np.unique(np.concatenate([positive, positive | SIGN_BIT, uniform]))
    inputs.astype("<u4").tofile(out_dir / "f32_inputs.bin")

    as_f32 = inputs.view(np.float32)
    for fmt in FORMATS:
        with np.errstate(all="ignore"):  # overflow and invalid warnings are expected
            narrowed = as_f32.astype(fmt.dtype)
        little_endian = "<u2" if fmt.storage == np.uint16 else "u1"
        narrowed.view(fmt.storage).astype(little_endian).tofile(out_dir / f"f32_to_{fmt.name}.bin")

    total = sum(p.stat().st_size for p in out_dir.glob("*.bin"))
    (out_dir / "manifest.txt").write_text(
        "tensoracle float conversion references (see tests/python/gen_float_references.py)\n"
        f"numpy {np.__version__}\nml_dtypes {ml_dtypes.__version__}\nseed {SEED}\n"
        f"f32 inputs {inputs.size}\nbytes {total}\n")
    print(f"wrote {inputs.size} f32 inputs and the tables to {out_dir} ({total / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
