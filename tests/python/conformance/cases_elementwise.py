"""Conformance cases of the elementwise family: binary arithmetic, comparisons, where, unary math,
activations and cast (including f8 through round trips, since torch 1.13 has no float8 dtypes)."""
import math

import torch
import torch.nn.functional as F

from .framework import Case, rand, randint

FLOATS = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}
INTS = {"i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8}
NAMES = {**{v: k for k, v in FLOATS.items()}, **{v: k for k, v in INTS.items()}, torch.bool: "bool"}
NAN, INF = math.nan, math.inf


def layer(op, inputs, output="y", **attrs):
    return {"op": op, "inputs": inputs, "outputs": [output], "attrs": attrs}


def with_specials(x, specials):
    """x (1-D) with its first values replaced by `specials` (rounded to x's dtype)."""
    x = x.clone()
    x[: len(specials)] = torch.tensor(specials, dtype=torch.float64).to(x.dtype)
    return x


def small_ints(*shape, dtype, low=-3, high=4):
    """Small integer values so that comparisons find equal elements."""
    return randint(*shape, low=low, high=high).to(dtype)


# ---- binary arithmetic ----

def int_div(a, b):
    """Integer division truncating toward zero; a zero divisor gives 0 (tensoracle's definition)."""
    zero = b == 0
    q = torch.div(a, torch.where(zero, torch.ones_like(b), b), rounding_mode="trunc")
    return torch.where(zero, torch.zeros_like(q), q)


FLOAT_BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "pow": torch.pow,
    "max": torch.maximum,
    "min": torch.minimum,
}
INT_BINARY = {**FLOAT_BINARY, "div": int_div}

# Shapes per dtype: broadcasting both ways, odd sizes, size-1 dims.
FLOAT_SHAPES = {
    "f32": ((2, 3, 7), (3, 1)),
    "f16": ((13,), (4, 1)),
    "bf16": ((5, 1, 7), (1, 6, 1)),
    "f64": ((3, 13), (3, 13)),
}


def float_binary_inputs(op, dtype, shape_a, shape_b):
    if op == "pow":
        # Positive bases (fractional powers of negatives are NaN, tested below).
        return rand(*shape_a, dtype=dtype, low=0.1, high=2.0), rand(*shape_b, dtype=dtype, low=-2.0, high=2.0)
    a, b = rand(*shape_a, dtype=dtype, low=-4, high=4), rand(*shape_b, dtype=dtype, low=-4, high=4)
    if op in ("max", "min", "div"):
        # NaN must propagate; x/0 is ±inf and 0/0 NaN.
        a.view(-1)[0] = NAN
        b.view(-1)[-1] = NAN if op != "div" else 0.0
        if op == "div":
            a.view(-1)[-1] = 0.0
    return a, b


def binary_cases():
    cases = []
    for op, fn in FLOAT_BINARY.items():
        for dname, dtype in FLOATS.items():
            shape_a, shape_b = FLOAT_SHAPES[dname]
            a, b = float_binary_inputs(op, dtype, shape_a, shape_b)
            cases.append(Case(f"{op}_broadcast_{dname}", [layer(op, ["a", "b"])], {"a": a, "b": b},
                              lambda t, fn=fn, dtype=dtype: {"y": fn(t["a"], t["b"]).to(dtype)}))
        for dname, dtype in INTS.items():
            low, high = (0, 200) if dtype == torch.uint8 else (-100, 100)
            a = randint(4, 7, low=low, high=high).to(dtype)
            b = randint(7, low=low, high=high).to(dtype)
            if op == "pow":
                a = randint(4, 7, low=0 if dtype == torch.uint8 else -4, high=5).to(dtype)
                b = randint(7, low=0 if dtype == torch.uint8 else -3, high=12).to(dtype)
            if op == "div":
                b[0] = 0
            if dtype == torch.int8 and op in ("sub", "mul", "div"):
                a[0, :] = -128  # overflow wraps (-128 / -1 too)
                b[1] = -1
            cases.append(Case(f"{op}_broadcast_{dname}", [layer(op, ["a", "b"])], {"a": a, "b": b},
                              lambda t, fn=INT_BINARY[op]: {"y": fn(t["a"], t["b"])}))
    # i64 beyond 2^53 must be exact and wrap at 2^64 (a double path would round).
    big = torch.tensor([2**62 + 1, -(2**62) - 3, 2**53 + 1, 9, -(2**63)], dtype=torch.int64)
    for op in ("add", "sub", "mul", "max", "min", "div"):
        cases.append(Case(f"{op}_large_i64", [layer(op, ["a", "b"])], {"a": big, "b": big.flip(0)[:, None]},
                          lambda t, fn=INT_BINARY[op]: {"y": fn(t["a"], t["b"])}))
    # Fractional powers of negative bases are NaN; integral ones are not; 0^-1 is inf.
    a = with_specials(rand(11, low=-3, high=3), [-2.0, -2.0, 0.0, -0.0, INF, NAN, 1.0])
    b = with_specials(rand(11, low=-3, high=3), [0.5, 3.0, -1.0, -1.0, -1.0, 0.0, NAN])
    cases.append(Case("pow_special_values_f32", [layer("pow", ["a", "b"])], {"a": a, "b": b},
                      lambda t: {"y": torch.pow(t["a"], t["b"]).to(torch.float32)}))
    # Empty and size-1 dims, scalars, dynamic dims, a weight operand.
    cases.append(Case("add_empty_f32", [layer("add", ["a", "b"])], {"a": rand(0, 3), "b": rand(5, 1, 1)},
                      lambda t: {"y": t["a"] + t["b"]}))
    cases.append(Case("mul_scalar_f32", [layer("mul", ["a", "b"])], {"a": rand(3, 1, 5), "b": rand(1).reshape(())},
                      lambda t: {"y": t["a"] * t["b"]}))
    cases.append(Case("sub_dynamic_f32", [layer("sub", ["a", "b"])], {"a": rand(6, 7), "b": rand(6, 1)},
                      lambda t: {"y": t["a"] - t["b"]}, dynamic={"a": [-1, -1], "b": [-1, 1]}))
    cases.append(Case("add_weight_dynamic_f16", [layer("add", ["a", "w"])], {"a": rand(5, 4, dtype=torch.float16)},
                      lambda t: {"y": (t["a"] + t["w"]).to(torch.float16)},
                      weights={"w": rand(4, dtype=torch.float16)}, dynamic={"a": [-1, 4]}))
    cases.append(Case("div_inline_scalar_bf16", [layer("div", ["a", "c"])], {"a": rand(2, 9, dtype=torch.bfloat16)},
                      lambda t: {"y": (t["a"] / t["c"]).to(torch.bfloat16)}, inline={"c": ([3.0], "bf16", [])}))
    return cases


# ---- comparisons and where ----

def comparison_cases():
    cases = []
    ops = {"equal": torch.eq, "less": torch.lt, "greater": torch.gt}
    dtypes = {**FLOATS, **INTS}
    for op, fn in ops.items():
        for dname, dtype in dtypes.items():
            a = small_ints(3, 1, 7, dtype=dtype, low=0 if dtype == torch.uint8 else -3)
            b = small_ints(5, 1, dtype=dtype, low=0 if dtype == torch.uint8 else -3)
            if dtype in FLOATS.values():
                a.view(-1)[0] = NAN  # comparisons with NaN are false
                b.view(-1)[1] = NAN
            cases.append(Case(f"{op}_broadcast_{dname}", [layer(op, ["a", "b"])], {"a": a, "b": b},
                              lambda t, fn=fn: {"y": fn(t["a"], t["b"])}))
    cases.append(Case("equal_broadcast_bool", [layer("equal", ["a", "b"])],
                      {"a": torch.rand(4, 1) < 0.5, "b": torch.rand(6) < 0.5}, lambda t: {"y": t["a"] == t["b"]}))
    big = torch.tensor([2**53, 2**53 + 1, -5], dtype=torch.int64)
    cases.append(Case("less_large_i64", [layer("less", ["a", "b"])], {"a": big, "b": big[[1, 0, 2]]},
                      lambda t: {"y": t["a"] < t["b"]}))
    cases.append(Case("greater_empty_dynamic_f32", [layer("greater", ["a", "b"])], {"a": rand(0, 4), "b": rand(4)},
                      lambda t: {"y": t["a"] > t["b"]}, dynamic={"a": [-1, 4]}))

    where_types = {**FLOATS, **INTS, "bool": torch.bool}
    for dname, dtype in where_types.items():
        if dtype == torch.bool:
            a, b = torch.rand(2, 1, 7) < 0.5, torch.rand(3, 1) < 0.5
        elif dtype in FLOATS.values():
            a, b = rand(2, 1, 7, dtype=dtype), rand(3, 1, dtype=dtype)
            a.view(-1)[0] = NAN
        else:
            a, b = randint(2, 1, 7).to(dtype), randint(3, 1).to(dtype)
        cond = torch.rand(3, 7) < 0.5
        cases.append(Case(f"where_broadcast_{dname}", [layer("where", ["c", "a", "b"])], {"c": cond, "a": a, "b": b},
                          lambda t: {"y": torch.where(t["c"], t["a"], t["b"])}))
    cases.append(Case("where_dynamic_f32", [layer("where", ["c", "a", "b"])],
                      {"c": torch.rand(5, 1) < 0.5, "a": rand(5, 13), "b": rand(1)},
                      lambda t: {"y": torch.where(t["c"], t["a"], t["b"])}, dynamic={"c": [-1, 1], "a": [-1, -1]}))
    cases.append(Case("where_empty_f16", [layer("where", ["c", "a", "b"])],
                      {"c": torch.rand(0, 3) < 0.5, "a": rand(3, dtype=torch.float16), "b": rand(1, 1, dtype=torch.float16)},
                      lambda t: {"y": torch.where(t["c"], t["a"], t["b"]).to(torch.float16)}))
    return cases


# ---- unary math ----

SPECIALS = [0.0, -0.0, -1.0, INF, -INF, NAN, 0.5, -2.5, 2.5]
UNARY = {
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal,
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "erf": torch.erf,
    "floor": torch.floor,
    "ceil": torch.ceil,
}
UNARY_RANGE = {"exp": (-12, 12), "log": (0.01, 50), "sqrt": (0, 50), "rsqrt": (0.01, 50), "reciprocal": (-5, 5),
               "sin": (-10, 10), "cos": (-10, 10), "tanh": (-5, 5), "erf": (-3, 3), "floor": (-50, 50), "ceil": (-50, 50)}


def unary_cases():
    cases = []
    shapes = {"f32": (7, 13), "f16": (3, 5, 7), "bf16": (31,), "f64": (2, 13)}
    for op, fn in UNARY.items():
        low, high = UNARY_RANGE[op]
        for dname, dtype in FLOATS.items():
            x = rand(*shapes[dname], dtype=dtype, low=low, high=high)
            x = with_specials(x.reshape(-1), SPECIALS).reshape(x.shape)
            cases.append(Case(f"{op}_specials_{dname}", [layer(op, ["x"])], {"x": x},
                              lambda t, fn=fn, dtype=dtype: {"y": fn(t["x"]).to(dtype)}))
    cases.append(Case("exp_empty_dynamic_f32", [layer("exp", ["x"])], {"x": rand(0, 5)},
                      lambda t: {"y": torch.exp(t["x"])}, dynamic={"x": [-1, 5]}))
    cases.append(Case("sqrt_scalar_f32", [layer("sqrt", ["x"])], {"x": rand(1, low=0, high=9).reshape(())},
                      lambda t: {"y": torch.sqrt(t["x"])}))

    for op, fn in (("abs", torch.abs), ("neg", torch.neg)):
        for dname, dtype in FLOATS.items():
            x = with_specials(rand(13, dtype=dtype, low=-9, high=9), [-0.0, INF, -INF, NAN])
            cases.append(Case(f"{op}_specials_{dname}", [layer(op, ["x"])], {"x": x}, lambda t, fn=fn: {"y": fn(t["x"])}))
        for dname, dtype in INTS.items():
            x = randint(3, 7, low=0 if dtype == torch.uint8 else -100, high=100).to(dtype)
            if dtype in (torch.int8, torch.int64):
                x[0, 0] = torch.iinfo(dtype).min  # wraps to itself
            cases.append(Case(f"{op}_wrap_{dname}", [layer(op, ["x"])], {"x": x}, lambda t, fn=fn: {"y": fn(t["x"])}))
    cases.append(Case("abs_dynamic_i32", [layer("abs", ["x"])], {"x": randint(4, 6, dtype=torch.int32)},
                      lambda t: {"y": torch.abs(t["x"])}, dynamic={"x": [-1, -1]}))
    cases.append(Case("not_broadcast_bool", [layer("not", ["x"])], {"x": torch.rand(3, 1, 7) < 0.5},
                      lambda t: {"y": torch.logical_not(t["x"])}))
    cases.append(Case("not_empty_dynamic_bool", [layer("not", ["x"])], {"x": torch.rand(0, 2) < 0.5},
                      lambda t: {"y": torch.logical_not(t["x"])}, dynamic={"x": [-1, 2]}))
    return cases


# ---- activations ----

def torch_softplus(beta, threshold):
    return lambda x: F.softplus(x, beta=beta, threshold=threshold)


def clamp(lo, hi):
    return lambda x: torch.clamp(x, min=lo, max=hi)


ACTIVATIONS = [
    # (case label, op, attrs, reference)
    ("relu", "relu", {}, F.relu),
    ("leaky_relu_default", "leaky_relu", {}, lambda x: F.leaky_relu(x, 0.01)),
    ("leaky_relu_alpha", "leaky_relu", {"alpha": 0.2}, lambda x: F.leaky_relu(x, 0.2)),
    ("gelu_default", "gelu", {}, F.gelu),
    ("gelu_none", "gelu", {"approximate": "none"}, F.gelu),
    ("gelu_tanh", "gelu", {"approximate": "tanh"}, lambda x: F.gelu(x, approximate="tanh")),
    ("silu", "silu", {}, F.silu),
    ("sigmoid", "sigmoid", {}, torch.sigmoid),
    ("hard_sigmoid", "hard_sigmoid", {}, F.hardsigmoid),
    ("hard_swish", "hard_swish", {}, F.hardswish),
    ("softplus_default", "softplus", {}, torch_softplus(1.0, 20.0)),
    ("softplus_beta_threshold", "softplus", {"beta": 2.0, "threshold": 5.0}, torch_softplus(2.0, 5.0)),
    ("softplus_negative_beta", "softplus", {"beta": -0.5, "threshold": 3}, torch_softplus(-0.5, 3.0)),
    ("clip_min_max", "clip", {"min": -0.5, "max": 1.25}, clamp(-0.5, 1.25)),
    ("clip_min_only", "clip", {"min": 0.1}, clamp(0.1, None)),
    ("clip_max_only", "clip", {"max": -1}, clamp(None, -1.0)),
    ("clip_no_bounds", "clip", {}, lambda x: x.clone()),
    ("clip_min_above_max", "clip", {"min": 2.0, "max": 1.0}, clamp(2.0, 1.0)),
]


def activation_cases():
    cases = []
    shapes = {"f32": (4, 13), "f16": (7, 3, 3), "bf16": (29,), "f64": (5, 7)}
    for label, op, attrs, fn in ACTIVATIONS:
        for dname, dtype in FLOATS.items():
            x = rand(*shapes[dname], dtype=dtype, low=-7, high=7)
            # Exact breakpoints (0, ±3, softplus's threshold), NaN and infinities.
            x = with_specials(x.reshape(-1), [0.0, -3.0, 3.0, 2.5, 20.0, 21.0, NAN, INF, -INF]).reshape(x.shape)
            if op in ("silu", "gelu"):
                x.view(-1)[8] = -6.0  # x * (something -> 0) at -inf is NaN in both; keep it finite
            cases.append(Case(f"{label}_{dname}", [layer(op, ["x"], **attrs)], {"x": x},
                              lambda t, fn=fn, dtype=dtype: {"y": fn(t["x"]).to(dtype)}))
    cases.append(Case("gelu_tanh_empty_dynamic_f32", [layer("gelu", ["x"], approximate="tanh")], {"x": rand(2, 0, 3)},
                      lambda t: {"y": F.gelu(t["x"], approximate="tanh")}, dynamic={"x": [-1, -1, 3]}))
    cases.append(Case("sigmoid_dynamic_bf16", [layer("sigmoid", ["x"])], {"x": rand(6, 11, dtype=torch.bfloat16, low=-8, high=8)},
                      lambda t: {"y": torch.sigmoid(t["x"]).to(torch.bfloat16)}, dynamic={"x": [-1, 11]}))
    return cases


# ---- cast ----

def f8_grid(exp_bits, man_bits, finite_codes, overflow_value):
    """Magnitudes of the codes 0..finite_codes-1 of a small float format, plus the next step (the
    first code past the largest finite value)."""
    bias = (1 << (exp_bits - 1)) - 1
    values = []
    for code in range(finite_codes):
        e, m = code >> man_bits, code & ((1 << man_bits) - 1)
        if e == 0:
            values.append(m * 2.0 ** (1 - bias - man_bits))
        else:
            values.append((1 + m / 2**man_bits) * 2.0 ** (e - bias))
    values.append(overflow_value)
    return torch.tensor(values, dtype=torch.float64)


# e4m3fn: codes 0..126 are finite (max 448); code 127 (the virtual 480) is NaN. e5m2: codes
# 0..123 finite (max 57344); code 124 (the virtual 65536) is infinity.
E4M3_GRID = f8_grid(4, 3, 127, 480.0)
E5M2_GRID = f8_grid(5, 2, 124, 65536.0)


def round_to_grid(v, grid, overflow):
    """Rounds float64 `v` to the nearest grid magnitude, ties to the even code (codes grow with the
    magnitude, so the even code has the even mantissa). Past the last finite code: `overflow`."""
    mag = v.abs()
    hi = torch.searchsorted(grid, torch.nan_to_num(mag, nan=0.0)).clamp(max=len(grid) - 1)
    lo = (hi - 1).clamp(min=0)
    dhi, dlo = grid[hi] - mag, mag - grid[lo]
    idx = torch.where((dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0)), hi, lo)
    out = torch.where(idx == len(grid) - 1, torch.tensor(overflow, dtype=torch.float64), grid[idx])
    out = torch.copysign(out, v)
    return torch.where(torch.isnan(v), v, out)


def to_f8e4m3(v):
    """float64 -> e4m3fn value as a cast does (through f32; beyond 464 and infinities give NaN)."""
    return round_to_grid(v.to(torch.float32).to(torch.float64), E4M3_GRID, NAN)


def to_f8e5m2(v):
    return round_to_grid(v.to(torch.float32).to(torch.float64), E5M2_GRID, INF)


def float_to_int(v, dtype):
    """Truncates toward zero, NaN -> 0, saturating at the dtype's range."""
    info = torch.iinfo(dtype)
    v = torch.trunc(torch.nan_to_num(v, nan=0.0, posinf=math.inf, neginf=-math.inf))
    out = v.clamp(-(2.0**62), 2.0**62).to(torch.int64)  # in range of int64 for the clamp below
    out = torch.where(v >= info.max, torch.tensor(info.max), out)
    out = torch.where(v <= info.min, torch.tensor(info.min), out)
    return out.clamp(info.min, info.max).to(dtype)


def cast_reference(x, src, dst):
    """x holds the source values (floats upcast to float64)."""
    if dst == torch.bool:
        return x != 0
    if src.is_floating_point and not dst.is_floating_point:
        return float_to_int(x, dst)
    return x.to(dst)  # floats round (via f32 into f16/bf16, as c10); integers wrap; bool is 0/1


CAST_TYPES = {**FLOATS, **INTS, "bool": torch.bool}


def cast_source(dtype):
    if dtype == torch.bool:
        return torch.rand(3, 13) < 0.5
    if dtype in INTS.values():
        info = torch.iinfo(dtype)
        x = torch.randint(max(info.min, -(2**40)), min(info.max, 2**40), (3, 13), dtype=torch.int64)
        x[0, :6] = torch.tensor([0, 1, -1, 127, 255, 300])
        x[1, :4] = torch.tensor([info.min, info.max, 2**24 + 1, 65519])
        return x.to(dtype)
    x = torch.empty(3, 13, dtype=torch.float64)
    x[0] = torch.tensor([0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.5, -1.5, 127.9, -128.9, 255.5, 256.0, -1.0])
    x[1] = torch.tensor([NAN, INF, -INF, 1e10, -1e10, 3e9, -3e9, 65504.0, 70000.0, 1e-8, 2**31 - 64.0, 1e30, -1e300])
    x[2] = (torch.rand(13, dtype=torch.float64) - 0.5) * 1000
    return x.to(dtype)


def cast_cases():
    cases = []
    for sname, src in CAST_TYPES.items():
        x = cast_source(src)
        layers = [layer("cast", ["x"], f"y_{dname}", to=dname) for dname in CAST_TYPES]
        outputs = [f"y_{dname}" for dname in CAST_TYPES]
        cases.append(Case(f"cast_to_every_dtype_{sname}", layers, {"x": x},
                          lambda t, src=src: {f"y_{d}": cast_reference(t["x"], src, dst) for d, dst in CAST_TYPES.items()},
                          outputs=outputs))
    # Chains through every pair (f32 -> f16 -> bf16 -> f64 -> i64 -> i32 -> i8 -> u8 -> bool -> f32).
    chain = ["f32", "f16", "bf16", "f64", "i64", "i32", "i8", "u8", "bool", "f32"]
    x = rand(5, 7, low=-300, high=300)
    layers = [layer("cast", ["x" if i == 0 else f"t{i}"], f"t{i + 1}", to=d) for i, d in enumerate(chain[1:])]

    def chain_ref(t):
        v, src = t["x"], torch.float32
        for d in chain[1:]:
            v, src = cast_reference(v, src, CAST_TYPES[d]), CAST_TYPES[d]
            if src.is_floating_point:
                v = v.to(torch.float64)  # as the framework hands float values over
        return {f"t{len(chain) - 1}": v}
    cases.append(Case("cast_chain_dynamic_f32", layers, {"x": x}, chain_ref, dynamic={"x": [-1, 7]}))
    cases.append(Case("cast_empty_f16", [layer("cast", ["x"], to="i32")], {"x": rand(0, 3, dtype=torch.float16)},
                      lambda t: {"y": torch.zeros(0, 3, dtype=torch.int32)}))

    # f8: cast there and back to a dtype torch 1.13 has. Values cover ties, subnormals, overflow.
    grid_mid = (E4M3_GRID[1:] + E4M3_GRID[:-1]) / 2
    specials = torch.cat([grid_mid[::7], -grid_mid[3::11], torch.tensor([448.0, 464.0, 465.0, 470.0, 500.0, -1e6, INF,
                                                                         -INF, NAN, 2.0**-10, 2.0**-11, 57344.0, 61440.0,
                                                                         61439.0, 2.0**-17, 1.5 * 2.0**-16])])
    for f8, ref in (("f8e4m3", to_f8e4m3), ("f8e5m2", to_f8e5m2)):
        for dname, dtype in FLOATS.items():
            x = torch.cat([specials.to(dtype), rand(40, dtype=dtype, low=-600, high=600), rand(20, dtype=dtype, low=-0.05, high=0.05)])
            cases.append(Case(f"cast_{f8}_round_trip_{dname}",
                              [layer("cast", ["x"], "q", to=f8), layer("cast", ["q"], "y", to=dname)], {"x": x},
                              lambda t, ref=ref, dtype=dtype: {"y": ref(t["x"]).to(dtype)}))
        x = torch.cat([specials, rand(30, dtype=torch.float64, low=-300, high=300)]).to(torch.float32)
        targets = ["i64", "i32", "i8", "u8", "bool", "f16"]
        layers = [layer("cast", ["x"], "q", to=f8)] + [layer("cast", ["q"], f"y_{d}", to=d) for d in targets]
        cases.append(Case(f"cast_{f8}_to_others_f32", layers, {"x": x},
                          lambda t, ref=ref: {f"y_{d}": cast_reference(ref(t["x"]), torch.float32, CAST_TYPES[d])
                                              for d in targets},
                          outputs=[f"y_{d}" for d in targets]))
        xi = torch.tensor([0, 1, -1, 7, 17, 100, 300, 447, 449, 460, 470, -5000, 60000, 2**31 - 1], dtype=torch.int32)
        cases.append(Case(f"cast_{f8}_from_int_i32",
                          [layer("cast", ["x"], "q", to=f8), layer("cast", ["q"], "y", to="f32")], {"x": xi},
                          lambda t, ref=ref: {"y": ref(t["x"].to(torch.float64)).to(torch.float32)}))
    return cases


def cases():
    return binary_cases() + comparison_cases() + unary_cases() + activation_cases() + cast_cases()
