"""Conformance cases of the linear_algebra family: matmul and linear.

The CPU reference multiplies f32, f16 and bf16 operands with sgemm (fp32 accumulation) and f64 with
dgemm. With K terms the fp32 accumulation error grows about like sqrt(K) * 2^-24 relative, so the
f32 default tolerance (1e-5) holds for every K used here, up to the 1024 of matmul_long_k_f32.
"""
import torch

from .framework import Case, rand

F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64


def matmul(name, a, b, transpose_a=False, transpose_b=False, b_is_weight=False, dynamic=None, tolerance=None):
    attrs = {}
    if transpose_a:
        attrs["transpose_a"] = 1
    if transpose_b:
        attrs["transpose_b"] = 1

    def reference(t):
        x, y = t["a"], t["b"]
        if transpose_a:
            x = x.transpose(-1, -2)
        if transpose_b:
            y = y.transpose(-1, -2)
        return {"y": torch.matmul(x, y)}

    inputs = {"a": a} if b_is_weight else {"a": a, "b": b}
    weights = {"b": b} if b_is_weight else {}
    return Case(name, [{"op": "matmul", "inputs": ["a", "b"], "outputs": ["y"], "attrs": attrs}], inputs, reference,
                weights=weights, dynamic=dynamic or {}, tolerance=tolerance)


def linear(name, x, weight, bias=None, dynamic=None):
    def reference(t):
        y = torch.matmul(t["x"], t["w"].transpose(0, 1))
        return {"y": y + t["b"] if bias is not None else y}

    weights = {"w": weight}
    if bias is not None:
        weights["b"] = bias
    layer_inputs = ["x", "w", "b"] if bias is not None else ["x", "w", None]
    return Case(name, [{"op": "linear", "inputs": layer_inputs, "outputs": ["y"]}], {"x": x}, reference,
                weights=weights, dynamic=dynamic or {})


def linear_gelu(name, x, weight, bias=None, residual=None, fused_attr=False, tolerance=None):
    """linear (+ residual) then erf GELU. As a network of layers (fused_attr False) the CUDA builder fuses the GELU and
    the residual into the product's epilogue (CUTLASS on sm_90, else cuBLASLt then a GELU kernel); with fused_attr the
    case is the fused layer itself (linear's "activation": "gelu_erf", the residual as input 3)."""
    def reference(t):
        y = torch.matmul(t["x"], t["w"].transpose(0, 1))
        if bias is not None:
            y = y + t["b"]
        if residual is not None:
            y = y + t["r"]
        return {"y": torch.nn.functional.gelu(y)}

    weights = {"w": weight}
    if bias is not None:
        weights["b"] = bias
    inputs = {"x": x}
    if residual is not None:
        inputs["r"] = residual
    linear_inputs = ["x", "w", "b" if bias is not None else None]
    if fused_attr:
        if residual is not None:
            linear_inputs.append("r")
        layers = [{"op": "linear", "inputs": linear_inputs, "outputs": ["y"], "attrs": {"activation": "gelu_erf"}}]
    else:
        layers = [{"op": "linear", "inputs": linear_inputs, "outputs": ["h"]}]
        if residual is not None:
            layers.append({"op": "add", "inputs": ["h", "r"], "outputs": ["hr"]})
        layers.append({"op": "gelu", "inputs": ["hr" if residual is not None else "h"], "outputs": ["y"]})
    return Case(name, layers, inputs, reference, weights=weights, outputs=["y"], tolerance=tolerance)


def cases():
    return [
        # ---- matmul ----
        matmul("matmul_basic_f32", rand(7, 13), rand(13, 5)),
        matmul("matmul_basic_f16", rand(7, 13, dtype=F16), rand(13, 5, dtype=F16)),
        matmul("matmul_basic_bf16", rand(7, 13, dtype=BF16), rand(13, 5, dtype=BF16)),
        matmul("matmul_basic_f64", rand(7, 13, dtype=F64), rand(13, 5, dtype=F64)),
        matmul("matmul_broadcast_batch_f32", rand(2, 1, 3, 4), rand(5, 4, 6)),
        matmul("matmul_broadcast_batch_f16", rand(2, 1, 3, 4, dtype=F16), rand(5, 4, 6, dtype=F16)),
        matmul("matmul_broadcast_matrix_f64", rand(3, 2, 7, 5, dtype=F64), rand(5, 4, dtype=F64)),
        matmul("matmul_size1_batch_bf16", rand(1, 3, 4, dtype=BF16), rand(2, 4, 5, dtype=BF16)),
        matmul("matmul_transpose_a_f32", rand(3, 13, 7), rand(3, 13, 5), transpose_a=True),
        matmul("matmul_transpose_b_f16", rand(2, 7, 13, dtype=F16), rand(2, 5, 13, dtype=F16), transpose_b=True),
        matmul("matmul_transpose_both_bf16", rand(2, 13, 7, dtype=BF16), rand(5, 13, dtype=BF16),
               transpose_a=True, transpose_b=True),
        matmul("matmul_transpose_both_f64", rand(13, 7, dtype=F64), rand(2, 5, 13, dtype=F64),
               transpose_a=True, transpose_b=True),
        matmul("matmul_k1_f32", rand(4, 1), rand(1, 6)),
        matmul("matmul_m1_n1_f32", rand(3, 1, 9), rand(3, 9, 1)),
        matmul("matmul_empty_m_f32", rand(0, 5), rand(5, 3)),
        matmul("matmul_empty_n_f64", rand(2, 4, 5, dtype=F64), rand(5, 0, dtype=F64)),
        matmul("matmul_empty_k_f32", rand(3, 0), rand(0, 4)),
        matmul("matmul_empty_batch_f16", rand(0, 3, 4, dtype=F16), rand(4, 2, dtype=F16)),
        matmul("matmul_long_k_f32", rand(4, 1024), rand(1024, 6)),
        matmul("matmul_weight_dynamic_f32", rand(3, 7, 16), rand(16, 9), b_is_weight=True,
               dynamic={"a": [-1, -1, 16]}),
        matmul("matmul_dynamic_batch_broadcast_f32", rand(2, 1, 3, 4), rand(5, 4, 6),
               dynamic={"a": [-1, -1, 3, 4], "b": [-1, 4, -1]}),
        matmul("matmul_dynamic_k_transposed_f16", rand(6, 11, dtype=F16), rand(3, 11, dtype=F16), transpose_b=True,
               dynamic={"a": [-1, -1], "b": [-1, -1]}),
        # ---- linear ----
        linear("linear_bias_f32", rand(7, 13), rand(5, 13), rand(5)),
        linear("linear_bias_f16", rand(2, 3, 13, dtype=F16), rand(5, 13, dtype=F16), rand(5, dtype=F16)),
        linear("linear_nobias_bf16", rand(2, 3, 13, dtype=BF16), rand(5, 13, dtype=BF16)),
        linear("linear_bias_f64", rand(4, 2, 13, dtype=F64), rand(7, 13, dtype=F64), rand(7, dtype=F64)),
        linear("linear_vector_x_f32", rand(13), rand(5, 13), rand(5)),
        linear("linear_out1_f32", rand(6, 8), rand(1, 8), rand(1)),
        linear("linear_dynamic_f32", rand(3, 5, 16), rand(10, 16), rand(10), dynamic={"x": [-1, -1, 16]}),
        linear("linear_empty_rows_f32", rand(0, 8), rand(4, 8), rand(4)),
        linear("linear_empty_in_f32", rand(3, 0), rand(4, 0), rand(4)),
        linear("linear_empty_out_f16", rand(3, 8, dtype=F16), rand(0, 8, dtype=F16)),
        # ---- linear with an erf-GELU epilogue (n and k multiples of 8 for the sm_90 products, partial tiles) ----
        linear_gelu("linear_gelu_erf_attr_f32", rand(5, 12), rand(7, 12), rand(7), rand(5, 7), fused_attr=True),
        linear_gelu("linear_gelu_erf_attr_f16", rand(3, 16, dtype=F16), rand(24, 16, dtype=F16), rand(24, dtype=F16),
                    fused_attr=True),
        linear_gelu("linear_then_gelu_f16", rand(2, 150, 64, dtype=F16), rand(136, 64, dtype=F16) * 0.2,
                    rand(136, dtype=F16)),
        linear_gelu("linear_then_gelu_nobias_bf16", rand(300, 72, dtype=BF16), rand(264, 72, dtype=BF16) * 0.2),
        linear_gelu("linear_residual_then_gelu_f16", rand(4, 33, 48, dtype=F16), rand(40, 48, dtype=F16) * 0.2,
                    rand(40, dtype=F16), rand(4, 33, 40, dtype=F16)),
        linear_gelu("linear_then_gelu_odd_k_f16", rand(9, 13, dtype=F16), rand(16, 13, dtype=F16), rand(16, dtype=F16)),
        linear_gelu("linear_then_gelu_f32", rand(6, 32), rand(24, 32), rand(24)),
    ]
