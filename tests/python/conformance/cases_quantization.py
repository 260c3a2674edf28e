"""Conformance cases of the quantization family: symmetric quantize / dequantize, i8 and f8e4m3, per
tensor and per channel. torch 1.13 has no float8 dtype, so f8e4m3 is checked through quantize ->
dequantize round trips against a Python model of e4m3fn rounding."""
import math

import torch

from .cases_elementwise import E4M3_GRID, round_to_grid
from .framework import Case, rand

FLOATS = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}
NAN, INF = math.nan, math.inf


def layer(op, inputs, output="y", **attrs):
    return {"op": op, "inputs": inputs, "outputs": [output], "attrs": attrs}


def channel_scale(scale, rank, axis):
    """A per-channel scale [C] shaped to broadcast along `axis` of a rank-`rank` tensor."""
    if scale.dim() == 0:
        return scale
    axis = axis % rank
    return scale.reshape([-1] + [1] * (rank - axis - 1))


def quantize_i8(x, scale, axis=0):
    """round half to even (torch.round) of x / scale, NaN -> 0, saturated to [-128, 127]."""
    q = torch.round(x / channel_scale(scale, x.dim(), axis))
    return torch.nan_to_num(q, nan=0.0).clamp(-128, 127).to(torch.int8)


def quantize_e4m3(x, scale, axis=0):
    """x / scale (float64) rounded to e4m3fn, saturated to ±448 (NaN stays NaN)."""
    v = (x / channel_scale(scale, x.dim(), axis)).clamp(-448.0, 448.0)
    return round_to_grid(v, E4M3_GRID, NAN)


def dequantize(q, scale, dtype, axis=0):
    return (q.to(torch.float64) * channel_scale(scale, q.dim(), axis)).to(dtype)


def scales(*shape, low=0.005, high=0.05):
    """Positive f32 scales; no shape gives a scalar (per tensor)."""
    return rand(*(shape or (1,)), low=low, high=high).reshape(shape)


def f32(v):
    """v rounded to f32: an inline scale as the network holds it, so that the float64 reference uses the same one."""
    return float(torch.tensor(v, dtype=torch.float32))


def with_specials(x, specials):
    x = x.clone()
    x.view(-1)[: len(specials)] = torch.tensor(specials, dtype=torch.float64).to(x.dtype)
    return x


# Exact ties of x / 0.25 (k + 0.5) must round to even; NaN, infinities and large values saturate.
I8_SPECIALS = [0.125, 0.375, -0.125, -0.375, 0.625, 31.875, -32.125, 100.0, -100.0, NAN, INF, -INF, -0.0]


def quantize_cases():
    cases = []
    for dname, dtype in FLOATS.items():
        x = with_specials(rand(3, 13, dtype=dtype, low=-40, high=40), I8_SPECIALS)
        cases.append(Case(f"quantize_i8_per_tensor_{dname}", [layer("quantize", ["x", "s"], to="i8")], {"x": x},
                          lambda t: {"y": quantize_i8(t["x"], t["s"])}, inline={"s": ([0.25], "f32", [])}))
        x = rand(2, 5, 7, dtype=dtype, low=-3, high=3)
        cases.append(Case(f"quantize_i8_per_channel_axis1_{dname}", [layer("quantize", ["x", "s"], to="i8", axis=1)],
                          {"x": x, "s": scales(5)}, lambda t: {"y": quantize_i8(t["x"], t["s"], 1)}))
    cases.append(Case("quantize_i8_random_scale_f32", [layer("quantize", ["x", "s"], to="i8")],
                      {"x": rand(7, 13, low=-5, high=5), "s": scales()}, lambda t: {"y": quantize_i8(t["x"], t["s"])}))
    cases.append(Case("quantize_i8_per_channel_axis0_f32", [layer("quantize", ["x", "s"], to="i8", axis=0)],
                      {"x": rand(4, 7, low=-3, high=3), "s": scales(4)}, lambda t: {"y": quantize_i8(t["x"], t["s"], 0)}))
    cases.append(Case("quantize_i8_negative_axis_dynamic_bf16", [layer("quantize", ["x", "s"], to="i8", axis=-1)],
                      {"x": rand(6, 13, dtype=torch.bfloat16, low=-2, high=2), "s": scales(13)},
                      lambda t: {"y": quantize_i8(t["x"], t["s"], -1)}, dynamic={"x": [-1, -1]}))
    cases.append(Case("quantize_i8_empty_f32", [layer("quantize", ["x", "s"], to="i8", axis=1)],
                      {"x": rand(0, 4), "s": scales(4)}, lambda t: {"y": torch.zeros(0, 4, dtype=torch.int8)}))
    cases.append(Case("quantize_i8_size1_channel_f16", [layer("quantize", ["x", "s"], to="i8", axis=1)],
                      {"x": rand(5, 1, 3, dtype=torch.float16, low=-2, high=2), "s": scales(1)},
                      lambda t: {"y": quantize_i8(t["x"], t["s"], 1)}))
    # A zero scale: x / 0 is ±inf (saturates) or NaN (0 / 0, becomes 0).
    x = with_specials(rand(3, 5), [0.0, 1.0, -1.0])
    s = torch.tensor([0.0, 0.1, 0.2])
    cases.append(Case("quantize_i8_zero_scale_f32", [layer("quantize", ["x", "s"], to="i8")], {"x": x, "s": s},
                      lambda t: {"y": quantize_i8(t["x"], t["s"], 0)}))
    return cases


def dequantize_cases():
    cases = []
    q = torch.randint(-128, 128, (3, 13), dtype=torch.int8)
    q.view(-1)[:2] = torch.tensor([-128, 127], dtype=torch.int8)
    for dname, dtype in FLOATS.items():
        cases.append(Case(f"dequantize_i8_per_tensor_to_{dname}", [layer("dequantize", ["q", "s"], to=dname)],
                          {"q": q, "s": scales()}, lambda t, dtype=dtype: {"y": dequantize(t["q"], t["s"], dtype)}))
        cases.append(Case(f"dequantize_i8_per_channel_to_{dname}", [layer("dequantize", ["q", "s"], to=dname, axis=1)],
                          {"q": torch.randint(-128, 128, (2, 7, 3), dtype=torch.int8), "s": scales(7)},
                          lambda t, dtype=dtype: {"y": dequantize(t["q"], t["s"], dtype, 1)}))
    cases.append(Case("dequantize_i8_default_to_f32", [layer("dequantize", ["q", "s"])], {"q": q, "s": scales()},
                      lambda t: {"y": dequantize(t["q"], t["s"], torch.float32)}))
    cases.append(Case("dequantize_i8_negative_axis_dynamic_f32", [layer("dequantize", ["q", "s"], axis=-2)],
                      {"q": torch.randint(-128, 128, (4, 13, 2), dtype=torch.int8), "s": scales(13)},
                      lambda t: {"y": dequantize(t["q"], t["s"], torch.float32, -2)}, dynamic={"q": [-1, 13, -1]}))
    cases.append(Case("dequantize_i8_empty_f32", [layer("dequantize", ["q", "s"], axis=0)],
                      {"q": torch.zeros(3, 0, dtype=torch.int8), "s": scales(3)},
                      lambda t: {"y": torch.zeros(3, 0)}))
    cases.append(Case("dequantize_i8_weight_per_channel_f32", [layer("dequantize", ["w", "s"], axis=0)], {"s": scales(5)},
                      lambda t: {"y": dequantize(t["w"], t["s"], torch.float32, 0)},
                      weights={"w": torch.randint(-128, 128, (5, 3), dtype=torch.int8)}))
    # i8 round trip: quantize then dequantize in one network.
    cases.append(Case("quantize_i8_round_trip_f32",
                      [layer("quantize", ["x", "s"], "q", to="i8", axis=1), layer("dequantize", ["q", "s"], to="f32", axis=1)],
                      {"x": rand(3, 4, low=-4, high=4), "s": scales(4)},
                      lambda t: {"y": dequantize(quantize_i8(t["x"], t["s"], 1), t["s"], torch.float32, 1)}))
    return cases


# e4m3 midpoints (ties to even), subnormals (2^-9 steps), the 448 limit and beyond, NaN, infinities.
def e4m3_specials():
    mids = (E4M3_GRID[1:-1] + E4M3_GRID[:-2]) / 2
    extra = torch.tensor([448.0, 449.0, 464.0, 480.0, 1e6, -1e6, INF, -INF, NAN, 2.0**-10, -(2.0**-10), 3 * 2.0**-11,
                          2.0**-12, 0.0, -0.0], dtype=torch.float64)
    return torch.cat([mids[::5], -mids[2::9], extra])


def f8_cases():
    cases = []
    for dname, dtype in FLOATS.items():
        # Scale 0.5 keeps x / scale exact, so the midpoints stay exact ties.
        x = torch.cat([(e4m3_specials() * 0.5).to(dtype), rand(40, dtype=dtype, low=-300, high=300)])
        cases.append(Case(f"quantize_f8e4m3_round_trip_{dname}",
                          [layer("quantize", ["x", "s"], "q", to="f8e4m3"), layer("dequantize", ["q", "s"], to=dname)],
                          {"x": x}, lambda t, dtype=dtype: {"y": dequantize(quantize_e4m3(t["x"], t["s"]), t["s"], dtype)},
                          inline={"s": ([0.5], "f32", [])}))
    cases.append(Case("quantize_f8e4m3_random_scale_f32",
                      [layer("quantize", ["x", "s"], "q", to="f8e4m3"), layer("dequantize", ["q", "s"])],
                      {"x": rand(5, 13, low=-10, high=10), "s": scales()},
                      lambda t: {"y": dequantize(quantize_e4m3(t["x"], t["s"]), t["s"], torch.float32)}))
    cases.append(Case("quantize_f8e4m3_per_channel_dynamic_f16",
                      [layer("quantize", ["x", "s"], "q", to="f8e4m3", axis=1),
                       layer("dequantize", ["q", "s"], to="f16", axis=1)],
                      {"x": rand(4, 3, 7, dtype=torch.float16, low=-20, high=20), "s": scales(3, low=0.01, high=0.1)},
                      lambda t: {"y": dequantize(quantize_e4m3(t["x"], t["s"], 1), t["s"], torch.float16, 1)},
                      dynamic={"x": [-1, 3, -1]}))
    cases.append(Case("quantize_f8e4m3_empty_bf16",
                      [layer("quantize", ["x", "s"], "q", to="f8e4m3"), layer("dequantize", ["q", "s"], to="bf16")],
                      {"x": rand(2, 0, dtype=torch.bfloat16), "s": scales()},
                      lambda t: {"y": torch.zeros(2, 0, dtype=torch.bfloat16)}))
    # The f8 values themselves, cast to f32 (a cast of f8 is exact).
    cases.append(Case("quantize_f8e4m3_then_cast_f32",
                      [layer("quantize", ["x", "s"], "q", to="f8e4m3"), layer("cast", ["q"], to="f32")],
                      {"x": torch.cat([e4m3_specials(), rand(20, dtype=torch.float64, low=-500, high=500)]).to(torch.float32)},
                      lambda t: {"y": quantize_e4m3(t["x"], t["s"]).to(torch.float32)}, inline={"s": ([1.0], "f32", [])}))
    return cases


ACTIVATIONS = {
    "none": lambda v: v,
    "relu": torch.relu,
    "gelu_erf": lambda v: torch.nn.functional.gelu(v),
    "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"),
}


def quantized_product(xq, wq, scale, bias=None, residual=None, activation="none"):
    """activation(scale[n] * (xq · wqᵀ) + bias + residual), all float64: the quantized product's math."""
    y = xq.to(torch.float64) @ wq.to(torch.float64).T * scale.to(torch.float64)
    if bias is not None:
        y = y + bias
    if residual is not None:
        y = y + residual
    return ACTIVATIONS[activation](y)


def add_epilogue_inputs(names, weights, inputs, m, n, dtype, bias, residual):
    """quantized_linear's optional bias (input 3, a weight) and residual (input 4, a network input), when asked for."""
    if bias:
        weights["b"] = rand(n, dtype=dtype)
        names.append("b")
    if residual:
        inputs["r"] = rand(*m, n, dtype=dtype)
        names += [None] * (4 - len(names)) + ["r"]


def quantized_linear_cases():
    """quantized_linear itself (the op the builder lowers a linear between dequantizes to): i8 operands as network
    inputs and weights; f8e4m3 ones quantized inside the network (torch 1.13 has no float8 tensors), the weight's
    quantize folded into a constant at build time. Sizes with K a multiple of 16 and N of 8 and an f16 result are
    what the sm_90 CUTLASS products take; the others run the tiled kernel."""
    cases = []

    def i8_case(name, m, k, n, out, activation="none", bias=True, residual=False, dynamic=None):
        dtype = FLOATS[out]
        inputs = {"xq": torch.randint(-128, 128, (*m, k), dtype=torch.int8)}
        weights = {"w": torch.randint(-127, 128, (n, k), dtype=torch.int8), "s": scales(n, low=1e-4, high=1e-3)}
        names = ["xq", "w", "s"]
        add_epilogue_inputs(names, weights, inputs, m, n, dtype, bias, residual)
        ref = lambda t: {"y": quantized_product(t["xq"], t["w"], t["s"], t.get("b"), t.get("r"), activation)}
        cases.append(Case(name, [layer("quantized_linear", names, to=out, activation=activation)], inputs, ref,
                          weights=weights, dynamic=dynamic or {}))

    i8_case("quantized_linear_i8_bias_f32", (6,), 48, 24, "f32")
    i8_case("quantized_linear_i8_no_bias_relu_f32", (2, 5), 20, 7, "f32", activation="relu", bias=False)
    i8_case("quantized_linear_i8_gelu_tanh_bf16", (9,), 32, 16, "bf16", activation="gelu_tanh")
    i8_case("quantized_linear_i8_bias_f16", (40,), 64, 32, "f16")
    i8_case("quantized_linear_i8_gelu_erf_residual_f16", (3, 50), 128, 48, "f16", activation="gelu_erf", residual=True)
    i8_case("quantized_linear_i8_residual_no_bias_f16", (130,), 256, 136, "f16", bias=False, residual=True)
    i8_case("quantized_linear_i8_unaligned_k_f16", (17,), 40, 24, "f16")  # k not a multiple of 16: tiled only
    i8_case("quantized_linear_i8_dynamic_f16", (7,), 64, 16, "f16", dynamic={"xq": [-1, 64]})
    i8_case("quantized_linear_i8_empty_rows_f16", (0,), 32, 16, "f16")

    def f8_case(name, m, k, n, out, activation="none", residual=False):
        dtype = FLOATS[out]
        inputs = {"x": rand(*m, k, dtype=dtype, low=-6, high=6)}
        weights = {"wf": rand(n, k, low=-1, high=1), "sw": scales(n, low=1 / 448, high=2 / 448),
                   "s": scales(n, low=1e-3, high=1e-2), "b": rand(n, dtype=dtype)}
        layers = [layer("quantize", ["x", "sx"], "xq", to="f8e4m3"),
                  layer("quantize", ["wf", "sw"], "w", to="f8e4m3", axis=0)]
        names = ["xq", "w", "s", "b"]
        if residual:
            inputs["r"] = rand(*m, n, dtype=dtype)
            names.append("r")
        layers.append(layer("quantized_linear", names, to=out, activation=activation))

        def ref(t):
            xq = quantize_e4m3(t["x"], t["sx"])
            wq = quantize_e4m3(t["wf"], t["sw"], 0)
            return {"y": quantized_product(xq, wq, t["s"], t["b"], t.get("r"), activation)}

        cases.append(Case(name, layers, inputs, ref, weights=weights, outputs=["y"], inline={"sx": ([0.05], "f32", [])}))

    f8_case("quantized_linear_f8e4m3_bias_f16", (33,), 64, 48, "f16")
    f8_case("quantized_linear_f8e4m3_gelu_erf_residual_f16", (2, 70), 192, 64, "f16", "gelu_erf", residual=True)
    f8_case("quantized_linear_f8e4m3_relu_bf16", (12,), 32, 8, "bf16", "relu")
    f8_case("quantized_linear_f8e4m3_bias_f32", (5,), 24, 10, "f32")
    return cases


def quantized_output_cases():
    """quantized_linear with `quantize_to`: the epilogue value divided by output_scale and quantized once (what
    fuse_quantized_outputs makes of a quantize after the product). The reference quantizes the float64 value. i8 results
    may be one step off where a GPU's f32 epilogue lands across a rounding boundary (max_abs 1); f8e4m3 results are
    compared dequantized (one e4m3 step is 1/8 to 1/16 of a value: tolerance 5e-3). k a multiple of 16, n of 16, `to`
    f16 are what the sm_90 CUTLASS products take; the others run the tiled kernel."""
    cases = []

    def case(name, q, m, k, n, to, activation="none", residual=False):
        dtype = FLOATS[to]
        inputs = {"x": rand(*m, k, dtype=dtype, low=-3, high=3)}
        weights = {"wf": rand(n, k, low=-1, high=1), "b": rand(n, dtype=dtype, low=-2, high=2)}
        if q == "i8":
            weights["sw"] = scales(n, low=1 / 127, high=1.2 / 127)
            weights["s"] = scales(n, low=1e-4, high=2e-4)
        else:
            weights["sw"] = scales(n, low=1 / 448, high=1.2 / 448)
            weights["s"] = scales(n, low=5e-6, high=1e-5)
        layers = [layer("quantize", ["x", "sx"], "xq", to=q), layer("quantize", ["wf", "sw"], "w", to=q, axis=0)]
        names = ["xq", "w", "s", "b", "r" if residual else None, "so"]
        if residual:
            inputs["r"] = rand(*m, n, dtype=dtype)
        out = "y" if q == "i8" else "yq"
        layers.append(layer("quantized_linear", names, out, to=to, activation=activation, quantize_to=q))
        if q != "i8":
            layers.append(layer("dequantize", ["yq", "so"], "y", to="f32"))
        quant = quantize_i8 if q == "i8" else quantize_e4m3

        def ref(t):
            xq, wq = quant(t["x"], t["sx"]), quant(t["wf"], t["sw"], 0)
            yq = quant(quantized_product(xq, wq, t["s"], t["b"], t.get("r"), activation), t["so"])
            return {"y": yq if q == "i8" else dequantize(yq, t["so"], torch.float32)}

        so = 1 / 16 if q == "i8" else 1 / 64  # powers of two: the same in f32 and float64
        cases.append(Case(name, layers, inputs, ref, weights=weights, outputs=["y"],
                          inline={"sx": ([1 / 16 if q == "i8" else 1 / 128], "f32", []), "so": ([so], "f32", [])},
                          max_abs=1 if q == "i8" else None, tolerance=None if q == "i8" else 5e-3))

    case("quantized_linear_i8_to_i8_f16", "i8", (40,), 64, 32, "f16")
    case("quantized_linear_i8_to_i8_gelu_erf_residual_f16", "i8", (3, 50), 128, 48, "f16", "gelu_erf", residual=True)
    case("quantized_linear_i8_to_i8_relu_f32", "i8", (9,), 40, 24, "f32", "relu")  # the tiled kernel
    case("quantized_linear_f8e4m3_to_f8e4m3_gelu_erf_f16", "f8e4m3", (2, 70), 192, 64, "f16", "gelu_erf")
    case("quantized_linear_f8e4m3_to_f8e4m3_bf16", "f8e4m3", (12,), 32, 16, "bf16")  # the tiled kernel
    return cases


def qdq_linear_cases():
    """The explicit-quantization pattern (what tensoracle calibrate writes): quantize -> dequantize on the activation
    and a dequantize of a quantized weight, both feeding a linear. The builder lowers it to quantized_linear; the
    reference is the pattern's own math."""
    cases = []
    for q in ("i8", "f8e4m3"):
        for dname in ("f32", "f16"):
            dtype = FLOATS[dname]
            k, n = 64, 32
            if q == "i8":
                wq = torch.randint(-127, 128, (n, k), dtype=torch.int8)
                weights = {"wq": wq}
                weight_layers = []
                wname = "wq"
            else:
                weights = {"wf": rand(n, k, low=-1, high=1)}
                weight_layers = [layer("quantize", ["wf", "sw8"], "wq8", to="f8e4m3", axis=0)]
                wname = "wq8"
            weights["sw"] = scales(n, low=1e-3, high=4e-3)
            if q != "i8":
                weights["sw8"] = scales(n, low=1 / 448, high=2 / 448)
            weights["b"] = rand(n, dtype=dtype)
            x = rand(4, 9, k, dtype=dtype, low=-3, high=3)
            layers = weight_layers + [
                layer("quantize", ["x", "sx"], "xq", to=q),
                layer("dequantize", ["xq", "sx"], "xd", to=dname),
                layer("dequantize", [wname, "sw"], "wd", to=dname, axis=0),
                layer("linear", ["xd", "wd", "b"], "h"),
                layer("gelu", ["h"], "y"),
            ]

            def ref(t, q=q):
                quant = quantize_i8 if q == "i8" else quantize_e4m3
                xq = quant(t["x"], t["sx"])
                wq = t["wq"] if q == "i8" else quantize_e4m3(t["wf"], t["sw8"], 0)
                return {"y": quantized_product(xq, wq, t["sx"] * t["sw"], t["b"], None, "gelu_erf")}

            cases.append(Case(f"qdq_linear_{q}_per_channel_gelu_{dname}", layers, {"x": x}, ref, weights=weights,
                              outputs=["y"], inline={"sx": ([0.025], "f32", [])}))
    return cases


def weight_only_linear_cases():
    """quantized_linear's weight-only form: a float x (of the result's type) times an i8 or f8e4m3 weight scaled per
    output feature, as the builder lowers a linear whose weight alone is dequantized. On CUDA the dequantized cuBLASLt
    product and the rows kernel (K a multiple of 8) are timed against each other: one row, a few (a decoding step)
    and many. The reference is the same math in float64 on the float x."""
    cases = []

    def case(name, q, m, k, n, to, activation="none", bias=True, residual=False, dynamic=None):
        dtype = FLOATS[to]
        inputs = {"x": rand(*m, k, dtype=dtype, low=-2, high=2)}
        weights = {"s": scales(n, low=1e-3, high=1e-2)}
        layers = []
        if q == "i8":
            weights["w"] = torch.randint(-127, 128, (n, k), dtype=torch.int8)
        else:  # quantized inside the network (folded into a constant when the engine is built)
            weights["wf"] = rand(n, k, low=-1, high=1)
            weights["sw"] = scales(n, low=1 / 448, high=2 / 448)
            layers.append(layer("quantize", ["wf", "sw"], "w", to="f8e4m3", axis=0))
        names = ["x", "w", "s"]
        add_epilogue_inputs(names, weights, inputs, m, n, dtype, bias, residual)
        layers.append(layer("quantized_linear", names, to=to, activation=activation))

        def ref(t):
            wq = t["w"] if q == "i8" else quantize_e4m3(t["wf"], t["sw"], 0)
            return {"y": quantized_product(t["x"], wq, t["s"], t.get("b"), t.get("r"), activation)}

        cases.append(Case(name, layers, inputs, ref, weights=weights, outputs=["y"], dynamic=dynamic or {}))

    case("weight_only_linear_i8_one_row_f16", "i8", (1,), 256, 96, "f16")
    case("weight_only_linear_i8_rows_gelu_erf_residual_f16", "i8", (3,), 128, 64, "f16", "gelu_erf", residual=True)
    case("weight_only_linear_i8_many_rows_relu_f16", "i8", (2, 70), 96, 48, "f16", "relu")
    case("weight_only_linear_i8_unaligned_k_bf16", "i8", (5,), 36, 24, "bf16", bias=False)  # dequantized only
    case("weight_only_linear_i8_f32", "i8", (4,), 64, 16, "f32", "gelu_tanh")
    case("weight_only_linear_i8_dynamic_f16", "i8", (6,), 64, 32, "f16", dynamic={"x": [-1, 64]})
    case("weight_only_linear_i8_empty_rows_f16", "i8", (0,), 32, 16, "f16")
    case("weight_only_linear_f8e4m3_one_row_bf16", "f8e4m3", (1,), 128, 40, "bf16", "gelu_erf")
    case("weight_only_linear_f8e4m3_rows_residual_f16", "f8e4m3", (4,), 64, 32, "f16", residual=True)
    case("weight_only_linear_f8e4m3_many_rows_f32", "f8e4m3", (33,), 48, 24, "f32")
    return cases


def qdq_weight_only_cases():
    """A linear whose weight alone is a dequantize (what tensoracle calibrate --weight-only writes): the builder makes
    it a weight-only quantized_linear; the reference is the pattern's own math (the float x times the dequantized
    weight)."""
    cases = []
    for dname in ("f32", "f16"):
        for m in ((1,), (4, 9)):
            dtype = FLOATS[dname]
            k, n = 64, 48
            weights = {"wq": torch.randint(-127, 128, (n, k), dtype=torch.int8), "sw": scales(n, low=1e-3, high=4e-3),
                       "b": rand(n, dtype=dtype)}
            layers = [layer("dequantize", ["wq", "sw"], "wd", to=dname, axis=0), layer("linear", ["x", "wd", "b"], "h"),
                      layer("gelu", ["h"], "y")]
            ref = lambda t: {"y": quantized_product(t["x"], t["wq"], t["sw"], t["b"], None, "gelu_erf")}
            rows = "x".join(str(d) for d in m)
            cases.append(Case(f"qdq_weight_only_linear_{rows}_rows_gelu_{dname}", layers,
                              {"x": rand(*m, k, dtype=dtype, low=-3, high=3)}, ref, weights=weights, outputs=["y"]))
    return cases


def qdq_mlp_cases():
    """Two quantized linears in a row with an erf GELU between (a transformer's MLP, as tensoracle calibrate writes it):
    on CUDA fc1's result stays quantized for fc2 (fuse_quantized_outputs). The reference quantizes fc1's float64
    result; an engine that rounds it to f16 first (the CPU target's unfused steps) may put a few values one step
    away, so the tolerance is 1e-2."""
    cases = []
    for q in ("i8", "f8e4m3"):
        quant = quantize_i8 if q == "i8" else quantize_e4m3
        k, hidden, n = 64, 128, 32
        weights = {"w1": rand(hidden, k, low=-1, high=1), "w2": rand(n, hidden, low=-1, high=1),
                   "b1": rand(hidden, dtype=torch.float16), "b2": rand(n, dtype=torch.float16)}
        top = 127 if q == "i8" else 448
        weights["sw1"] = scales(hidden, low=1 / top, high=1.2 / top)
        weights["sw2"] = scales(n, low=1 / top, high=1.2 / top)
        sx, sh = (f32(1 / 127), f32(8 / 127)) if q == "i8" else (f32(1 / 448), f32(8 / 448))
        layers = [
            layer("quantize", ["w1", "sw1"], "w1q", to=q, axis=0),
            layer("quantize", ["w2", "sw2"], "w2q", to=q, axis=0),
            layer("quantize", ["x", "sx"], "xq", to=q),
            layer("dequantize", ["xq", "sx"], "xd", to="f16"),
            layer("dequantize", ["w1q", "sw1"], "w1d", to="f16", axis=0),
            layer("linear", ["xd", "w1d", "b1"], "h"),
            layer("gelu", ["h"], "g"),
            layer("quantize", ["g", "sh"], "gq", to=q),
            layer("dequantize", ["gq", "sh"], "gd", to="f16"),
            layer("dequantize", ["w2q", "sw2"], "w2d", to="f16", axis=0),
            layer("linear", ["gd", "w2d", "b2"], "y"),
        ]

        def ref(t, quant=quant):
            w1q, w2q = quant(t["w1"], t["sw1"], 0), quant(t["w2"], t["sw2"], 0)
            g = quantized_product(quant(t["x"], t["sx"]), w1q, t["sx"] * t["sw1"], t["b1"], None, "gelu_erf")
            return {"y": quantized_product(quant(g, t["sh"]), w2q, t["sh"] * t["sw2"], t["b2"])}

        x = rand(4, 9, k, dtype=torch.float16, low=-1, high=1)
        cases.append(Case(f"qdq_mlp_{q}_f16", layers, {"x": x}, ref, weights=weights, outputs=["y"],
                          inline={"sx": ([sx], "f32", []), "sh": ([sh], "f32", [])}, tolerance=1e-2))
    return cases


def qdq_layer_norm_cases():
    """A layer norm (or RMS norm) whose result a quantized linear reads and a residual add reads too (BERT's block
    boundary; a LLaMA block's RMS norm before its projections): on CUDA the norm writes its result quantized as a
    second output (fuse_quantized_outputs). The reference quantizes the float64 norm; an engine that rounds it to f16
    first may put a few values one step away (tolerance 1e-2)."""
    cases = []
    # k 64: the norm's 16-byte vector path; 60: one element at a time.
    for norm, q, k in (("layer_norm", "i8", 64), ("layer_norm", "f8e4m3", 64), ("layer_norm", "i8", 60),
                       ("rms_norm", "i8", 64), ("rms_norm", "f8e4m3", 64), ("rms_norm", "i8", 60)):
        quant = quantize_i8 if q == "i8" else quantize_e4m3
        top = 127 if q == "i8" else 448
        weights = {"g": rand(k, dtype=torch.float16, low=0.5, high=1.5), "w": rand(k, k, low=-1, high=1),
                   "b": rand(k, dtype=torch.float16), "sw": scales(k, low=1 / top, high=1.2 / top)}
        if norm == "layer_norm":
            weights["beta"] = rand(k, dtype=torch.float16)
        sx = f32(4 / top)
        norm_layer = layer("layer_norm", ["x", "g", "beta"], "n") if norm == "layer_norm" else \
            layer("rms_norm", ["x", "g"], "n", epsilon=1e-6)
        layers = [
            norm_layer,
            layer("quantize", ["w", "sw"], "wq", to=q, axis=0),
            layer("quantize", ["n", "sx"], "nq", to=q),
            layer("dequantize", ["nq", "sx"], "nd", to="f16"),
            layer("dequantize", ["wq", "sw"], "wd", to="f16", axis=0),
            layer("linear", ["nd", "wd", "b"], "h"),
            layer("add", ["h", "n"], "y"),
        ]

        def ref(t, quant=quant, norm=norm):
            x = t["x"]
            if norm == "layer_norm":
                mean = x.mean(-1, keepdim=True)
                var = ((x - mean) ** 2).mean(-1, keepdim=True)
                n = (x - mean) / torch.sqrt(var + 1e-5) * t["g"] + t["beta"]
            else:
                n = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * t["g"]
            h = quantized_product(quant(n, t["sx"]), quant(t["w"], t["sw"], 0), t["sx"] * t["sw"], t["b"])
            return {"y": h + n.to(torch.float16).to(torch.float64)}

        x = rand(3, 11, k, dtype=torch.float16, low=-2, high=2)
        name = "qdq_layer_norm" if norm == "layer_norm" else "qdq_rms_norm"
        cases.append(Case(f"{name}_{q}_{k}_f16", layers, {"x": x}, ref, weights=weights, outputs=["y"],
                          inline={"sx": ([sx], "f32", [])}, tolerance=1e-2))
    # rms_norm's own quantize_to (as fuse_quantized_outputs writes it): both results, the quantized one compared as the
    # i8 values of the float64 norm quantized (one step off at most where the GPU's f32 lands across a boundary).
    for q in ("i8",):
        k = 64
        x = rand(5, k, dtype=torch.float16, low=-2, high=2)
        weights = {"g": rand(k, dtype=torch.float16, low=0.5, high=1.5)}
        so = 1 / 32

        def ref(t):
            n = t["x"] / torch.sqrt((t["x"] * t["x"]).mean(-1, keepdim=True) + 1e-6) * t["g"]
            return {"n": n.to(torch.float16), "nq": quantize_i8(n, t["so"])}

        cases.append(Case("rms_norm_quantize_to_i8_f16", [
            {"op": "rms_norm", "inputs": ["x", "g", "so"], "outputs": ["n", "nq"],
             "attrs": {"epsilon": 1e-6, "quantize_to": q}}], {"x": x}, ref, weights=weights, outputs=["n", "nq"],
            inline={"so": ([so], "f32", [])}, max_abs=1))
    return cases


def quantized_convolution(xq, wq, scale, bias=None, residual=None, relu=False, stride=1, padding=0, groups=1):
    """relu(scale[o] * conv2d(xq, wq) + bias + residual), all float64: the quantized convolution's math."""
    y = torch.nn.functional.conv2d(xq.to(torch.float64), wq.to(torch.float64), stride=stride, padding=padding,
                                   groups=groups)
    y = y * scale.to(torch.float64).reshape(1, -1, 1, 1)
    if bias is not None:
        y = y + bias.to(torch.float64).reshape(1, -1, 1, 1)
    if residual is not None:
        y = y + residual.to(torch.float64)
    return torch.relu(y) if relu else y


def quantized_conv_cases():
    """quantized_conv itself (the op the builder lowers a conv between dequantizes to), channels first as written; the
    CUDA target runs it channels last (the i8 input transposed there). i8 operands as network inputs and weights;
    f8e4m3 ones quantized inside the network. Channels that are multiples of 16 with an f16 result are what cuDNN's
    plans take; grouped and odd-channel problems may run the direct kernel."""
    cases = []

    def i8_case(name, n, c, hw, o, k, out, stride=1, padding=0, groups=1, bias=True, residual=False, relu=False):
        dtype = FLOATS[out]
        oh = (hw + 2 * padding - k) // stride + 1
        inputs = {"xq": torch.randint(-128, 128, (n, c, hw, hw), dtype=torch.int8)}
        weights = {"w": torch.randint(-127, 128, (o, c // groups, k, k), dtype=torch.int8),
                   "s": scales(o, low=1e-4, high=1e-3)}
        names = ["xq", "w", "s", "b" if bias else None]
        if bias:
            weights["b"] = rand(o, dtype=dtype)
        if residual:
            inputs["r"] = rand(n, o, oh, oh, dtype=dtype)
            names.append("r")
        while names[-1] is None:
            names.pop()
        attrs = {"to": out, "stride": [stride, stride], "padding": [padding, padding], "groups": groups}
        if relu:
            attrs["activation"] = "relu"

        def ref(t):
            return {"y": quantized_convolution(t["xq"], t["w"], t["s"], t.get("b"), t.get("r"), relu, stride, padding,
                                               groups)}

        cases.append(Case(name, [layer("quantized_conv", names, **attrs)], inputs, ref, weights=weights))

    i8_case("quantized_conv_i8_3x3_relu_f16", 2, 32, 9, 32, 3, "f16", padding=1, relu=True)
    i8_case("quantized_conv_i8_1x1_stride2_no_bias_f32", 2, 16, 8, 48, 1, "f32", stride=2, bias=False)
    i8_case("quantized_conv_i8_residual_relu_bf16", 1, 64, 7, 32, 3, "bf16", padding=1, residual=True, relu=True)
    i8_case("quantized_conv_i8_residual_relu_f16", 3, 16, 6, 64, 1, "f16", residual=True, relu=True)
    i8_case("quantized_conv_i8_grouped_f16", 2, 8, 7, 12, 3, "f16", padding=1, groups=2)
    i8_case("quantized_conv_i8_three_channels_stride2_f16", 2, 3, 15, 16, 7, "f16", stride=2, padding=3, relu=True)
    i8_case("quantized_conv_i8_empty_batch_f16", 0, 16, 5, 16, 3, "f16", padding=1)

    def f8_case(name, n, c, hw, o, k, out, padding=0, relu=False):
        dtype = FLOATS[out]
        inputs = {"x": rand(n, c, hw, hw, dtype=dtype, low=-6, high=6)}
        weights = {"wf": rand(o, c, k, k, low=-1, high=1), "sw": scales(o, low=1 / 448, high=2 / 448),
                   "s": scales(o, low=1e-3, high=1e-2), "b": rand(o, dtype=dtype)}
        attrs = {"to": out, "padding": [padding, padding]}
        if relu:
            attrs["activation"] = "relu"
        layers = [layer("quantize", ["x", "sx"], "xq", to="f8e4m3"),
                  layer("quantize", ["wf", "sw"], "w", to="f8e4m3", axis=0),
                  layer("quantized_conv", ["xq", "w", "s", "b"], **attrs)]

        def ref(t):
            xq = quantize_e4m3(t["x"], t["sx"])
            wq = quantize_e4m3(t["wf"], t["sw"], 0)
            return {"y": quantized_convolution(xq, wq, t["s"], t["b"], None, relu, 1, padding)}

        cases.append(Case(name, layers, inputs, ref, weights=weights, outputs=["y"], inline={"sx": ([0.05], "f32", [])}))

    f8_case("quantized_conv_f8e4m3_3x3_relu_f16", 2, 32, 8, 32, 3, "f16", padding=1, relu=True)
    f8_case("quantized_conv_f8e4m3_1x1_f32", 2, 16, 5, 24, 1, "f32")

    # Results quantized again (`quantize_to`, what fuse_quantized_outputs makes of a quantize after the convolution):
    # the float64 value divided by output_scale and quantized once; i8 one step off at most (max_abs 1), f8e4m3
    # compared dequantized.
    def quantized_output_case(name, q, to, relu):
        dtype = FLOATS[to]
        c, o = 32, 48
        top = 127 if q == "i8" else 448
        inputs = {"x": rand(2, c, 7, 7, dtype=dtype, low=-3, high=3)}
        weights = {"wf": rand(o, c, 3, 3, low=-1, high=1), "b": rand(o, dtype=dtype, low=-2, high=2),
                   "sw": scales(o, low=1 / top, high=1.2 / top),
                   "s": scales(o, low=5e-5, high=1e-4) if q == "i8" else scales(o, low=5e-6, high=1e-5)}
        out = "y" if q == "i8" else "yq"
        attrs = {"to": to, "padding": [1, 1], "quantize_to": q}
        if relu:
            attrs["activation"] = "relu"
        layers = [layer("quantize", ["x", "sx"], "xq", to=q), layer("quantize", ["wf", "sw"], "w", to=q, axis=0),
                  layer("quantized_conv", ["xq", "w", "s", "b", None, "so"], out, **attrs)]
        if q != "i8":
            layers.append(layer("dequantize", ["yq", "so"], "y", to="f32"))
        quant = quantize_i8 if q == "i8" else quantize_e4m3

        def ref(t):
            xq, wq = quant(t["x"], t["sx"]), quant(t["wf"], t["sw"], 0)
            yq = quant(quantized_convolution(xq, wq, t["s"], t["b"], None, relu, 1, 1), t["so"])
            return {"y": yq if q == "i8" else dequantize(yq, t["so"], torch.float32)}

        so = 1 / 16 if q == "i8" else 1 / 64  # powers of two: the same in f32 and float64
        cases.append(Case(name, layers, inputs, ref, weights=weights, outputs=["y"],
                          inline={"sx": ([1 / 16 if q == "i8" else 1 / 128], "f32", []), "so": ([so], "f32", [])},
                          max_abs=1 if q == "i8" else None, tolerance=None if q == "i8" else 5e-3))

    quantized_output_case("quantized_conv_i8_to_i8_relu_f16", "i8", "f16", True)
    quantized_output_case("quantized_conv_i8_to_i8_f32", "i8", "f32", False)
    quantized_output_case("quantized_conv_f8e4m3_to_f8e4m3_relu_f16", "f8e4m3", "f16", True)
    return cases


def qdq_conv_cases():
    """The explicit-quantization pattern around convolutions, as tensoracle calibrate writes a CNN: quantize ->
    dequantize on each conv's input, a dequantize of the per-channel quantized weight, and a ResNet block's shape (conv
    -> relu -> conv, + the block's input, relu). The builder lowers each conv to quantized_conv; on CUDA the relu and
    the residual join the second conv's epilogue and the quantize between the convs runs channels last. The reference
    is the pattern's own math in float64; an engine that rounds the first conv's result to f16 before quantizing it may
    put a few values one step away (tolerance 1e-2)."""
    cases = []
    for q in ("i8", "f8e4m3"):
        quant = quantize_i8 if q == "i8" else quantize_e4m3
        top = 127 if q == "i8" else 448
        c = 32
        weights = {"w1": rand(c, c, 3, 3, low=-1, high=1), "w2": rand(c, c, 3, 3, low=-1, high=1),
                   "b1": rand(c, dtype=torch.float16), "b2": rand(c, dtype=torch.float16),
                   "sw1": scales(c, low=1 / top, high=1.2 / top), "sw2": scales(c, low=1 / top, high=1.2 / top)}
        sx, sh = f32(2 / top), f32(16 / top)
        pad = {"padding": [1, 1]}
        layers = [
            layer("quantize", ["w1", "sw1"], "w1q", to=q, axis=0),
            layer("quantize", ["w2", "sw2"], "w2q", to=q, axis=0),
            layer("quantize", ["x", "sx"], "xq", to=q),
            layer("dequantize", ["xq", "sx"], "xd", to="f16"),
            layer("dequantize", ["w1q", "sw1"], "w1d", to="f16", axis=0),
            layer("conv", ["xd", "w1d", "b1"], "h", **pad),
            layer("relu", ["h"], "hr"),
            layer("quantize", ["hr", "sh"], "hq", to=q),
            layer("dequantize", ["hq", "sh"], "hd", to="f16"),
            layer("dequantize", ["w2q", "sw2"], "w2d", to="f16", axis=0),
            layer("conv", ["hd", "w2d", "b2"], "h2", **pad),
            layer("add", ["h2", "x"], "s"),
            layer("relu", ["s"], "y"),
        ]

        def ref(t, quant=quant):
            w1q, w2q = quant(t["w1"], t["sw1"], 0), quant(t["w2"], t["sw2"], 0)
            h = quantized_convolution(quant(t["x"], t["sx"]), w1q, t["sx"] * t["sw1"], t["b1"], None, True, 1, 1)
            return {"y": quantized_convolution(quant(h, t["sh"]), w2q, t["sh"] * t["sw2"], t["b2"], t["x"], True, 1, 1)}

        x = rand(2, c, 10, 10, dtype=torch.float16, low=-2, high=2)
        cases.append(Case(f"qdq_conv_block_{q}_f16", layers, {"x": x}, ref, weights=weights, outputs=["y"],
                          inline={"sx": ([sx], "f32", []), "sh": ([sh], "f32", [])}, tolerance=1e-2))
    return cases + qdq_residual_conv_cases()


def qdq_residual_conv_cases():
    """Two ResNet blocks as `tensoracle calibrate --quantize-residuals` writes them: each block's input is quantized
    once, and both the first conv and the residual add read its dequantize. The builder lowers the convs and, on CUDA,
    the second conv reads the residual quantized (times its scale) and, in the first block, writes its result quantized
    for the next block: no quantize step is left but the input's. Reference: the pattern's math in float64 (the
    residual's dequantize exact; an engine rounds it and the first block's result to f16: tolerance 1e-2, 3e-2 for
    e4m3). The 3x3 blocks, and 1x1 ones (what the CUTLASS product of an i8 1x1 convolution with a quantized residual
    takes on sm_90)."""
    cases = []
    for q, k in (("i8", 3), ("f8e4m3", 3), ("i8", 1), ("f8e4m3", 1)):
        quant = quantize_i8 if q == "i8" else quantize_e4m3
        top = 127 if q == "i8" else 448
        c = 32
        weights, layers, inline = {}, [], {}
        pad = {"padding": [k // 2, k // 2]}
        # Block 1 reads x in [-2, 2] (its h reaches about 40, clipped at 16; its result about 250); block 2 has weights
        # a sixteenth as large and clips its input at 256 and its h at 128.
        for b, (source, out) in enumerate((("x", "y1"), ("y1", "y"))):
            p = f"b{b}_"
            w_range = 1.0 if b == 0 else 1 / 16
            for i in (1, 2):
                weights[f"{p}w{i}"] = rand(c, c, k, k, low=-w_range, high=w_range)
                weights[f"{p}b{i}"] = rand(c, dtype=torch.float16)
                weights[f"{p}sw{i}"] = scales(c, low=w_range / top, high=1.2 * w_range / top)
                layers.append(layer("quantize", [f"{p}w{i}", f"{p}sw{i}"], f"{p}w{i}q", to=q, axis=0))
                layers.append(layer("dequantize", [f"{p}w{i}q", f"{p}sw{i}"], f"{p}w{i}d", to="f16", axis=0))
            # Where each block clips its input and its h: a 1x1 block sums a ninth of the terms, so smaller values.
            clip_x, clip_h = ((2, 16), (256, 128))[b] if k == 3 else ((2, 8), (32, 16))[b]
            inline[f"{p}sx"] = ([f32(clip_x / top)], "f32", [])
            inline[f"{p}sh"] = ([f32(clip_h / top)], "f32", [])
            layers += [
                layer("quantize", [source, f"{p}sx"], f"{p}xq", to=q),
                layer("dequantize", [f"{p}xq", f"{p}sx"], f"{p}xd", to="f16"),  # conv1's x and the residual
                layer("conv", [f"{p}xd", f"{p}w1d", f"{p}b1"], f"{p}h", **pad),
                layer("relu", [f"{p}h"], f"{p}hr"),
                layer("quantize", [f"{p}hr", f"{p}sh"], f"{p}hq", to=q),
                layer("dequantize", [f"{p}hq", f"{p}sh"], f"{p}hd", to="f16"),
                layer("conv", [f"{p}hd", f"{p}w2d", f"{p}b2"], f"{p}h2", **pad),
                layer("add", [f"{p}h2", f"{p}xd"], f"{p}s"),
                layer("relu", [f"{p}s"], out),
            ]

        def ref(t, quant=quant, k=k):
            y = t["x"]
            for b in range(2):
                p = f"b{b}_"
                sx, sh = t[f"{p}sx"], t[f"{p}sh"]
                xq = quant(y, sx)
                w1q, w2q = quant(t[f"{p}w1"], t[f"{p}sw1"], 0), quant(t[f"{p}w2"], t[f"{p}sw2"], 0)
                h = quantized_convolution(xq, w1q, sx * t[f"{p}sw1"], t[f"{p}b1"], None, True, 1, k // 2)
                residual = xq.to(torch.float64) * sx.to(torch.float64)
                y = quantized_convolution(quant(h, sh), w2q, sh * t[f"{p}sw2"], t[f"{p}b2"], residual, True, 1,
                                          k // 2)
            return {"y": y}

        x = rand(2, c, 10, 10, dtype=torch.float16, low=-2, high=2)
        # e4m3's steps are an eighth to a sixteenth of the value: a value of block 2's h that f16 rounding moves across
        # a rounding midpoint changes by that much, hence 3e-2 there.
        name = f"qdq_conv_residual_blocks_{q}_f16" if k == 3 else f"qdq_conv_residual_blocks_1x1_{q}_f16"
        cases.append(Case(name, layers, {"x": x}, ref, weights=weights, outputs=["y"],
                          inline=inline, tolerance=1e-2 if q == "i8" else 3e-2))
    return cases


def quantized_max_pool_cases():
    """max_pool2d with `quantize_to` (what fuse_quantized_outputs makes of a quantize after a max pool: a CNN's stem
    before its first quantized block): the maximum quantized by the output scale, as quantize rounds it. Channels last
    with whole 16-byte words of channels (a CUDA thread per word), with odd channels, and channels first; ties, NaN and
    infinities among the values."""
    import torch.nn.functional as F

    cases = []
    pool = {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]}
    for q, name, dtype, shape, layout in (
            ("i8", "nhwc_words_f16", torch.float16, (2, 9, 11, 16), "nhwc"),
            ("f8e4m3", "nhwc_words_f16", torch.float16, (2, 9, 11, 16), "nhwc"),
            ("i8", "nhwc_odd_channels_bf16", torch.bfloat16, (2, 7, 6, 5), "nhwc"),
            ("f8e4m3", "nhwc_words_f32", torch.float32, (1, 8, 8, 8), "nhwc"),
            ("i8", "nchw_f32", torch.float32, (2, 3, 9, 7), "nchw"),
            ("f8e4m3", "nhwc_words_f64", torch.float64, (1, 5, 6, 4), "nhwc")):
        quant = quantize_i8 if q == "i8" else quantize_e4m3
        specials = I8_SPECIALS if q == "i8" else [0.3, -0.3, NAN, INF, -INF, 500.0, -0.0]
        x = with_specials(rand(*shape, dtype=dtype, low=-30, high=30), specials)
        scale = f32(0.25)

        def ref(t, quant=quant, layout=layout, q=q):
            v = t["x"].permute(0, 3, 1, 2) if layout == "nhwc" else t["x"]
            y = F.max_pool2d(v.to(torch.float64), [3, 3], stride=[2, 2], padding=[1, 1])
            y = quant(y, torch.tensor(scale, dtype=torch.float64))
            y = y if q == "i8" else y.to(torch.float32)  # the e4m3 values, cast to f32 (exact)
            return {"y": y.permute(0, 2, 3, 1).contiguous() if layout == "nhwc" else y}

        layers = [layer("max_pool2d", ["x", "s"], "y" if q == "i8" else "p", layout=layout, quantize_to=q, **pool)]
        if q != "i8":
            layers.append(layer("cast", ["p"], to="f32"))
        cases.append(Case(f"max_pool2d_quantized_{name}_to_{q}", layers, {"x": x}, ref,
                          inline={"s": ([scale], "f32", [])}, dynamic={"x": [-1, *shape[1:]]}))
    # Channels last in 2x2 cells (input_block_size 2, a blocked stem's result): x [N, H, W, 4·C] holds [N, 2H, 2W, C].
    for q, name, dtype, shape in (("i8", "words_f16", torch.float16, (2, 5, 4, 4 * 16)),
                                  ("f8e4m3", "odd_channels_f32", torch.float32, (1, 3, 4, 4 * 3))):
        quant = quantize_i8 if q == "i8" else quantize_e4m3
        x = rand(*shape, dtype=dtype, low=-30, high=30)
        scale = f32(0.25)

        def ref(t, quant=quant, q=q):
            n, h, w, cc = t["x"].shape
            v = t["x"].reshape(n, h, w, 2, 2, cc // 4).permute(0, 5, 1, 3, 2, 4).reshape(n, cc // 4, 2 * h, 2 * w)
            y = quant(F.max_pool2d(v.to(torch.float64), [3, 3], stride=[2, 2], padding=[1, 1]),
                      torch.tensor(scale, dtype=torch.float64))
            y = y if q == "i8" else y.to(torch.float32)
            return {"y": y.permute(0, 2, 3, 1).contiguous()}

        layers = [layer("max_pool2d", ["x", "s"], "y" if q == "i8" else "p", layout="nhwc", quantize_to=q,
                        input_block_size=2, **pool)]
        if q != "i8":
            layers.append(layer("cast", ["p"], to="f32"))
        cases.append(Case(f"max_pool2d_quantized_nhwc_blocks_{name}_to_{q}", layers, {"x": x}, ref,
                          inline={"s": ([scale], "f32", [])}))
    return cases


def qdq_stem_pool_cases():
    """A CNN's stem as tensoracle calibrate writes it (the stem conv left in float, --skip conv1): conv -> relu ->
    max pool -> quantize -> dequantize -> the first quantized conv. On CUDA the quantize joins the max pool, which
    runs channels last and writes i8/e4m3. The reference is the pattern's math in float64; the engine rounds the
    stem's result to f16 (tolerance 1e-2, 3e-2 for e4m3)."""
    import torch.nn.functional as F

    cases = []
    for q in ("i8", "f8e4m3"):
        quant = quantize_i8 if q == "i8" else quantize_e4m3
        top = 127 if q == "i8" else 448
        weights = {"w0": rand(16, 3, 7, 7, dtype=torch.float16, low=-0.3, high=0.3),
                   "b0": rand(16, dtype=torch.float16), "w1": rand(32, 16, 1, 1, low=-1, high=1),
                   "b1": rand(32, dtype=torch.float16), "sw1": scales(32, low=1 / top, high=1.2 / top)}
        sp = f32(4 / top)
        layers = [
            layer("conv", ["x", "w0", "b0"], "h", stride=[2, 2], padding=[3, 3]),
            layer("relu", ["h"], "hr"),
            layer("max_pool2d", ["hr"], "p", kernel=[3, 3], stride=[2, 2], padding=[1, 1]),
            layer("quantize", ["p", "sp"], "pq", to=q),
            layer("dequantize", ["pq", "sp"], "pd", to="f16"),
            layer("quantize", ["w1", "sw1"], "w1q", to=q, axis=0),
            layer("dequantize", ["w1q", "sw1"], "w1d", to="f16", axis=0),
            layer("conv", ["pd", "w1d", "b1"], "y"),
        ]

        def ref(t, quant=quant):
            h = F.conv2d(t["x"].to(torch.float64), t["w0"].to(torch.float64), t["b0"].to(torch.float64), stride=2,
                         padding=3).relu()
            p = F.max_pool2d(h.to(torch.float16).to(torch.float64), 3, stride=2, padding=1)
            w1q = quant(t["w1"], t["sw1"], 0)
            return {"y": quantized_convolution(quant(p, t["sp"]), w1q, t["sp"] * t["sw1"], t["b1"])}

        # Results 16 x 15: the stem in its 2x2 form on CUDA; 16 x 14: in its blocked form, the max pool reading its
        # 2x2 cells.
        for suffix, width in (("", 30), ("_blocks", 28)):
            x = rand(2, 3, 32, width, dtype=torch.float16, low=-1, high=1)
            cases.append(Case(f"qdq_stem_pool{suffix}_{q}_f16", layers, {"x": x}, ref, weights=weights, outputs=["y"],
                              inline={"sp": ([sp], "f32", [])}, tolerance=1e-2 if q == "i8" else 3e-2))
    return cases


def i8_max_pool_cases():
    """max_pool2d of an i8 x (the maximum of integers; what a quantized stem's max pool reads once
    fuse_quantized_outputs moves the quantize after the pool into the stem's epilogue): channels first, channels last
    with whole 16-byte words of channels (a CUDA thread per word, bytewise maxima) and with odd channels, in 2x2 cells
    (input_block_size 2), and a 2x2 stride-2 window without padding. -128 and 127 among the values."""
    import torch.nn.functional as F

    cases = []
    for name, shape, layout, block, kernel, stride, padding in (
            ("nchw", (2, 3, 9, 7), "nchw", 1, 3, 2, 1),
            ("nhwc_words", (2, 9, 11, 32), "nhwc", 1, 3, 2, 1),
            ("nhwc_odd_channels", (2, 7, 6, 5), "nhwc", 1, 3, 2, 1),
            ("nhwc_words_2x2", (1, 8, 6, 16), "nhwc", 1, 2, 2, 0),
            ("nhwc_blocks_words", (2, 5, 4, 4 * 16), "nhwc", 2, 3, 2, 1),
            ("nhwc_blocks_odd_channels", (1, 3, 4, 4 * 3), "nhwc", 2, 3, 2, 1)):
        x = torch.randint(-128, 128, shape, dtype=torch.int8)
        x.view(-1)[:4] = torch.tensor([-128, 127, -128, 127], dtype=torch.int8)

        def ref(t, layout=layout, block=block, kernel=kernel, stride=stride, padding=padding):
            v = t["x"].to(torch.float64)
            if block > 1:
                n, h, w, cc = v.shape
                v = v.reshape(n, h, w, block, block, cc // block**2).permute(0, 5, 1, 3, 2, 4)
                v = v.reshape(n, cc // block**2, block * h, block * w)
            elif layout == "nhwc":
                v = v.permute(0, 3, 1, 2)
            y = F.max_pool2d(v, kernel, stride=stride, padding=padding).to(torch.int8)
            return {"y": y.permute(0, 2, 3, 1).contiguous() if layout == "nhwc" else y}

        attrs = {"input_block_size": block} if block > 1 else {}
        layers = [layer("max_pool2d", ["x"], "y", layout=layout, kernel=[kernel, kernel], stride=[stride, stride],
                        padding=[padding, padding], **attrs)]
        cases.append(Case(f"max_pool2d_i8_{name}", layers, {"x": x}, ref))
    return cases


def qdq_quantized_stem_pool_cases():
    """An i8 stem as tensoracle calibrate writes it when the stem is quantized too (no --skip conv1): x -> quantize ->
    dequantize -> conv 7x7 stride 2 (a dequantized i8 weight) -> relu -> max pool -> quantize -> dequantize -> the
    first quantized conv. The stem becomes an i8 quantized_conv (on CUDA its blocked form: a 3x3 convolution of the 4x4
    space-to-depth input writing 2x2 cells of results), the pool's quantize moves into the stem's epilogue and the pool
    reads i8. The reference is the pattern's math in float64 (max pool, then quantize); the engine's quantized results
    may differ from it by a step where a value is at a rounding midpoint (tolerance 1e-2)."""
    import torch.nn.functional as F

    top = 127
    weights = {"w0": rand(16, 3, 7, 7, low=-1, high=1), "s0": scales(16, low=1 / top, high=1.2 / top),
               "b0": rand(16, dtype=torch.float16), "w1": rand(32, 16, 1, 1, low=-1, high=1),
               "b1": rand(32, dtype=torch.float16), "sw1": scales(32, low=1 / top, high=1.2 / top)}
    sx, sp = f32(2 / top), f32(24 / top)
    layers = [
        layer("quantize", ["x", "sx"], "xq", to="i8"),
        layer("dequantize", ["xq", "sx"], "xd", to="f16"),
        layer("quantize", ["w0", "s0"], "w0q", to="i8", axis=0),
        layer("dequantize", ["w0q", "s0"], "w0d", to="f16", axis=0),
        layer("conv", ["xd", "w0d", "b0"], "h", stride=[2, 2], padding=[3, 3]),
        layer("relu", ["h"], "hr"),
        layer("max_pool2d", ["hr"], "p", kernel=[3, 3], stride=[2, 2], padding=[1, 1]),
        layer("quantize", ["p", "sp"], "pq", to="i8"),
        layer("dequantize", ["pq", "sp"], "pd", to="f16"),
        layer("quantize", ["w1", "sw1"], "w1q", to="i8", axis=0),
        layer("dequantize", ["w1q", "sw1"], "w1d", to="f16", axis=0),
        layer("conv", ["pd", "w1d", "b1"], "y"),
    ]

    def ref(t):
        xq = quantize_i8(t["x"], t["sx"])
        w0q = quantize_i8(t["w0"], t["s0"], 0)
        h = quantized_convolution(xq, w0q, t["sx"] * t["s0"], t["b0"], None, True, 2, 3)
        p = F.max_pool2d(h, 3, stride=2, padding=1)
        w1q = quantize_i8(t["w1"], t["sw1"], 0)
        return {"y": quantized_convolution(quantize_i8(p, t["sp"]), w1q, t["sp"] * t["sw1"], t["b1"])}

    cases = []
    for n, hw in ((2, (32, 28)), (1, (20, 24))):
        x = rand(n, 3, *hw, dtype=torch.float16, low=-2, high=2)
        cases.append(Case(f"qdq_quantized_stem_pool_blocks_i8_f16_{hw[0]}x{hw[1]}", layers, {"x": x}, ref,
                          weights=weights, outputs=["y"], inline={"sx": ([sx], "f32", []), "sp": ([sp], "f32", [])},
                          tolerance=1e-2))
    return cases


def quantized_space_to_depth_cases():
    """space_to_depth with `quantize_to` (a quantized stem's input: the float image padded, moved into cells and
    quantized in one step): the moved values quantized as quantize rounds them, padding and appended channels zero.
    Channels last in whole 16-byte words of the i8 result (a CUDA thread per word) and channels first; ties, NaN and
    infinities among the values."""
    from .cases_data_movement import space_to_depth_ref

    cases = []
    for q, name, dtype, shape, block, pads, layout, channels in (
            ("i8", "stem_nhwc_f32", torch.float32, (2, 3, 20, 24), 4, (3, 3, 5, 5), "nhwc", 64),
            ("f8e4m3", "nhwc_f16", torch.float16, (1, 3, 10, 12), 2, (3, 3, 3, 3), "nhwc", 16),
            ("i8", "nchw_bf16", torch.bfloat16, (2, 3, 5, 6), 2, (1, 0, 0, 0), "nchw", None),
            ("i8", "nhwc_f64", torch.float64, (1, 2, 4, 4), 2, (0, 0, 0, 0), "nhwc", 8)):
        quant = quantize_i8 if q == "i8" else quantize_e4m3
        specials = I8_SPECIALS if q == "i8" else [0.3, -0.3, NAN, INF, -INF, 500.0, -0.0]
        x = with_specials(rand(*shape, dtype=dtype, low=-30, high=30), specials)
        scale = f32(0.25)
        filled = shape[1] * block * block

        def ref(t, quant=quant, q=q, block=block, pads=pads, layout=layout, channels=channels or filled):
            y = space_to_depth_ref(t["x"].to(torch.float64), block, pads, layout, channels)
            y = quant(y, torch.tensor(scale, dtype=torch.float64))
            return {"y": y if q == "i8" else y.to(torch.float32)}  # e4m3 values cast to f32 (exact)

        attrs = {"block_size": block, "pads": list(pads), "output_layout": layout, "quantize_to": q}
        if channels is not None:
            attrs["channels"] = channels
        layers = [layer("space_to_depth", ["x", "s"], "y" if q == "i8" else "p", **attrs)]
        if q != "i8":
            layers.append(layer("cast", ["p"], to="f32"))
        cases.append(Case(f"space_to_depth_quantized_{name}_to_{q}", layers, {"x": x}, ref,
                          inline={"s": ([scale], "f32", [])}))
    return cases


def cases():
    return (quantize_cases() + dequantize_cases() + f8_cases() + quantized_linear_cases() + quantized_output_cases() +
            weight_only_linear_cases() + qdq_linear_cases() + qdq_weight_only_cases() + qdq_mlp_cases() + qdq_layer_norm_cases() + quantized_conv_cases() + qdq_conv_cases() +
            quantized_max_pool_cases() + qdq_stem_pool_cases() + i8_max_pool_cases() + qdq_quantized_stem_pool_cases() +
            quantized_space_to_depth_cases())
