"""Conformance cases of the transformer ops: attention and rotary_embedding. torch 1.13 has no
scaled_dot_product_attention, so the reference composes it from matmul and softmax (its math path);
the rotary references are Hugging Face's Llama (rotate_half) and GPT-J (rotate_every_two)."""
import math

import torch

from .framework import Case, rand, randn

FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64"}


# ---- attention ----

def attention_ref(q, k, v, mask=None, causal=False, scale=None):
    """softmax(q·kᵀ·scale + mask)·v, with kv heads repeated for grouped/multi-query attention."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    if causal:
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()  # top-left aligned, as torch's is_causal
        scores = scores.masked_fill(~keep, -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def attention_layer(inputs, names, mask=None, causal=False, scale=None, **attrs):
    """The attention layer of a case reading `names` (and the mask, which joins `inputs`), output "y"."""
    names = list(names)
    if mask is not None:
        inputs["mask"] = mask
        names.append("mask")
    if causal:
        attrs["causal"] = 1
    if scale is not None:
        attrs["scale"] = scale
    return [{"op": "attention", "inputs": names, "outputs": ["y"], "attrs": attrs}]


def attention_case(name, b, hq, hkv, sq, skv, d, dv=None, dtype=torch.float32, mask=None, causal=False, scale=None,
                   dynamic=None):
    dv = d if dv is None else dv
    inputs = {"q": randn(b, hq, sq, d, dtype=dtype), "k": randn(b, hkv, skv, d, dtype=dtype),
              "v": randn(b, hkv, skv, dv, dtype=dtype)}
    return Case(name, attention_layer(inputs, ["q", "k", "v"], mask, causal, scale), inputs,
                lambda t: {"y": attention_ref(t["q"], t["k"], t["v"], t.get("mask"), causal, scale)},
                dynamic=dynamic or {})


def padding_mask(b, skv):
    """[B, 1, 1, Skv] bool: each batch attends to a random non-empty prefix."""
    lengths = torch.randint(1, skv + 1, (b,))
    return (torch.arange(skv)[None, :] < lengths[:, None]).reshape(b, 1, 1, skv)


def additive_mask(*shape, dtype):
    """Random additive mask with some -inf entries, keeping column 0 finite so no row is fully masked."""
    m = randn(*shape, dtype=torch.float64)
    m[torch.rand(*shape) < 0.3] = -math.inf
    m[..., 0] = 0.0
    return m.to(dtype)


def attention_cases():
    cases = []
    for dt in FLOATS:
        n = NAMES[dt]
        cases += [
            attention_case(f"attention_basic_{n}", 2, 3, 3, 5, 7, 8, dtype=dt),
            attention_case(f"attention_gqa_causal_{n}", 1, 8, 2, 6, 6, 16, dtype=dt, causal=True),
            attention_case(f"attention_padding_mask_{n}", 2, 4, 2, 3, 9, 8, dtype=dt, mask=padding_mask(2, 9)),
            attention_case(f"attention_additive_mask_{n}", 2, 2, 2, 5, 7, 4, dtype=dt, mask=additive_mask(1, 2, 5, 7, dtype=dt)),
        ]
    cases += [
        attention_case("attention_gqa_f32", 2, 8, 2, 5, 11, 8),
        attention_case("attention_mqa_f16", 2, 6, 1, 4, 9, 8, dtype=torch.float16),
        attention_case("attention_mqa_decode_bf16", 3, 4, 1, 1, 13, 16, dtype=torch.bfloat16),
        attention_case("attention_causal_f32", 2, 3, 3, 7, 7, 5, causal=True),
        attention_case("attention_causal_rectangular_f64", 1, 2, 2, 4, 7, 6, dtype=torch.float64, causal=True),
        attention_case("attention_causal_more_queries_f64", 1, 2, 1, 6, 3, 4, dtype=torch.float64, causal=True),
        attention_case("attention_causal_and_padding_mask_f32", 2, 4, 2, 6, 6, 8, mask=padding_mask(2, 6), causal=True),
        attention_case("attention_causal_and_additive_mask_f16", 1, 2, 1, 5, 5, 8, dtype=torch.float16,
                       mask=additive_mask(5, 5, dtype=torch.float16), causal=True),
        attention_case("attention_bool_mask_full_f32", 2, 2, 1, 4, 6, 8,
                       mask=torch.cat([torch.ones(2, 2, 4, 1, dtype=torch.bool), torch.rand(2, 2, 4, 5) < 0.6], -1)),
        attention_case("attention_bool_mask_per_head_f32", 1, 3, 3, 4, 5, 8,
                       mask=torch.cat([torch.ones(3, 4, 1, dtype=torch.bool), torch.rand(3, 4, 4) < 0.5], -1)),
        attention_case("attention_additive_mask_heads_bf16", 1, 4, 2, 3, 6, 8, dtype=torch.bfloat16,
                       mask=additive_mask(1, 4, 1, 6, dtype=torch.bfloat16)),
        attention_case("attention_scalar_additive_mask_f32", 1, 2, 2, 3, 4, 8, mask=torch.randn(())),
        attention_case("attention_scale_f32", 2, 2, 2, 3, 5, 8, scale=0.3),
        attention_case("attention_scale_f64", 1, 2, 1, 3, 5, 4, dtype=torch.float64, scale=2.0),
        attention_case("attention_odd_head_dim_f32", 2, 3, 1, 5, 7, 7, dv=5),
        attention_case("attention_odd_head_dim_f16", 1, 2, 2, 3, 4, 13, dv=3, dtype=torch.float16),
        attention_case("attention_head_dim_1_f32", 1, 1, 1, 3, 4, 1),
        attention_case("attention_empty_kv_f32", 1, 2, 2, 3, 0, 4),
        attention_case("attention_empty_queries_f32", 1, 2, 2, 0, 5, 4, causal=True),
        attention_case("attention_empty_batch_f32", 0, 2, 1, 3, 5, 4),
        attention_case("attention_fully_masked_row_f32", 1, 2, 1, 3, 4, 8,
                       mask=torch.tensor([[True, False, True, False], [False] * 4, [True] * 4]).reshape(1, 1, 3, 4)),
        attention_case("attention_fully_masked_causal_f32", 1, 1, 1, 2, 3, 4,
                       mask=torch.tensor([False, True, True]).reshape(1, 1, 1, 3), causal=True),
        attention_case("attention_dynamic_seq_f32", 2, 4, 2, 5, 9, 8, mask=padding_mask(2, 9), causal=True,
                       dynamic={"q": [-1, 4, -1, 8], "k": [-1, 2, -1, 8], "v": [-1, 2, -1, 8], "mask": [-1, 1, 1, -1]}),
        attention_case("attention_dynamic_decode_f16", 1, 4, 4, 1, 12, 8, dtype=torch.float16,
                       dynamic={"q": [1, 4, -1, 8], "k": [1, 4, -1, 8], "v": [1, 4, -1, 8]}),
        attention_case("attention_large_scores_f32", 1, 2, 2, 4, 6, 8, scale=30.0),
    ]
    return cases


def attention_bshd_case(name, b, hq, hkv, sq, skv, d, dtype=torch.float32, causal=False, mask=None):
    """layout bshd: q, k, v and the output [B, S, H, D]."""
    inputs = {"q": randn(b, sq, hq, d, dtype=dtype), "k": randn(b, skv, hkv, d, dtype=dtype),
              "v": randn(b, skv, hkv, d, dtype=dtype)}
    heads = lambda t: t.transpose(1, 2)  # noqa: E731
    return Case(name, attention_layer(inputs, ["q", "k", "v"], mask, causal, layout="bshd"), inputs,
                lambda t: {"y": heads(attention_ref(heads(t["q"]), heads(t["k"]), heads(t["v"]), t.get("mask"),
                                                    causal))})


def unpack_qkv(qkv, hq, hkv):
    """[B, S, (hq + 2 hkv)·D] -> q, k, v as [B, H, S, D]."""
    b, s, width = qkv.shape
    d = width // (hq + 2 * hkv)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=2)
    return [t.reshape(b, s, -1, d).transpose(1, 2) for t in (q, k, v)]


def attention_packed_case(name, b, hq, hkv, s, d, dtype=torch.float32, causal=False, mask=None):
    """layout packed: one [B, S, (heads + 2 kv_heads)·D] input, output [B, S, H, D]."""
    inputs = {"qkv": randn(b, s, (hq + 2 * hkv) * d, dtype=dtype)}
    layer = attention_layer(inputs, ["qkv"] * 3, mask, causal, layout="packed", heads=hq, kv_heads=hkv)
    return Case(name, layer, inputs,
                lambda t: {"y": attention_ref(*unpack_qkv(t["qkv"], hq, hkv), t.get("mask"), causal).transpose(1, 2)})


def attention_split_heads_case(name, b, heads, s, d, dtype=torch.float32, causal=True):
    """GPT-2's attention block as layers: split of a QKV product, head reshapes and transposes, attention, the
    merge transpose and reshape. The CUDA builder rewrites it to one packed attention; the CPU runs it as written."""
    e = heads * d
    layers = [{"op": "split", "inputs": ["qkv"], "outputs": ["q", "k", "v"], "attrs": {"sizes": [e, e, e], "axis": 2}}]
    for t in ("q", "k", "v"):
        layers += [{"op": "reshape", "inputs": [t], "outputs": [t + "4"], "attrs": {"shape": [0, 0, heads, d]}},
                   {"op": "transpose", "inputs": [t + "4"], "outputs": [t + "h"], "attrs": {"perm": [0, 2, 1, 3]}}]
    layers += [{"op": "attention", "inputs": ["qh", "kh", "vh"], "outputs": ["a"], "attrs": {"causal": int(causal)}},
               {"op": "transpose", "inputs": ["a"], "outputs": ["at"], "attrs": {"perm": [0, 2, 1, 3]}},
               {"op": "reshape", "inputs": ["at"], "outputs": ["y"], "attrs": {"shape": [0, 0, e]}}]
    return Case(name, layers, {"qkv": randn(b, s, 3 * e, dtype=dtype)},
                lambda t: {"y": attention_ref(*unpack_qkv(t["qkv"], heads, heads), None, causal)
                           .transpose(1, 2).reshape(b, s, e)},
                dynamic={"qkv": [-1, -1, 3 * e]})


def attention_heads_case(name, b, heads, s, d, dtype=torch.float32):
    """BERT's attention block: separate q, k, v [B, S, E] reshaped and transposed to heads, the output merged back
    (the CUDA builder drops the transposes: layout bshd)."""
    e = heads * d
    layers = []
    for t in ("q", "k", "v"):
        layers += [{"op": "reshape", "inputs": [t], "outputs": [t + "4"], "attrs": {"shape": [0, 0, heads, d]}},
                   {"op": "transpose", "inputs": [t + "4"], "outputs": [t + "h"], "attrs": {"perm": [0, 2, 1, 3]}}]
    layers += [{"op": "attention", "inputs": ["qh", "kh", "vh"], "outputs": ["a"], "attrs": {}},
               {"op": "transpose", "inputs": ["a"], "outputs": ["at"], "attrs": {"perm": [0, 2, 1, 3]}},
               {"op": "reshape", "inputs": ["at"], "outputs": ["y"], "attrs": {"shape": [0, 0, e]}}]
    split = lambda x: x.reshape(b, s, heads, d).transpose(1, 2)  # noqa: E731
    return Case(name, layers, {t: randn(b, s, e, dtype=dtype) for t in ("q", "k", "v")},
                lambda t: {"y": attention_ref(split(t["q"]), split(t["k"]), split(t["v"])).transpose(1, 2)
                           .reshape(b, s, e)})


def attention_layout_cases():
    cases = []
    for dt in FLOATS:
        n = NAMES[dt]
        cases += [
            attention_bshd_case(f"attention_bshd_causal_{n}", 2, 4, 2, 70, 70, 16, dtype=dt, causal=True),
            attention_packed_case(f"attention_packed_causal_{n}", 2, 4, 4, 70, 16, dtype=dt, causal=True),
            attention_split_heads_case(f"attention_split_heads_{n}", 2, 3, 67, 16, dtype=dt),
        ]
    cases += [
        attention_bshd_case("attention_bshd_padding_mask_f16", 2, 2, 1, 5, 9, 8, dtype=torch.float16,
                            mask=padding_mask(2, 9)),
        attention_bshd_case("attention_bshd_odd_head_dim_f32", 1, 2, 2, 4, 6, 7),
        attention_packed_case("attention_packed_gqa_f16", 1, 8, 2, 33, 64, dtype=torch.float16),
        attention_packed_case("attention_packed_head_dim_128_bf16", 1, 2, 1, 40, 128, dtype=torch.bfloat16,
                              causal=True),
        attention_packed_case("attention_packed_odd_head_dim_f32", 2, 2, 1, 5, 6, mask=padding_mask(2, 5)),
        attention_split_heads_case("attention_split_heads_d64_f16", 1, 2, 130, 64, dtype=torch.float16),
        attention_heads_case("attention_heads_bert_f16", 2, 4, 37, 16, dtype=torch.float16),
        attention_heads_case("attention_heads_bert_f32", 1, 2, 9, 8),
    ]
    return cases


# ---- rotary embedding ----

def inv_freq(base, rotary_dim):
    return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))


def rotate_half(x):
    """Hugging Face Llama: [-x2, x1] over the two halves."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    """Hugging Face GPT-J: [-x[1], x[0], -x[3], x[2], ...]."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rope_ref(x, base=10000.0, rotary_dim=0, interleaved=False, offset=0):
    rotary_dim = rotary_dim or x.shape[-1]
    positions = torch.arange(offset, offset + x.shape[2], dtype=torch.float64)
    freqs = torch.outer(positions, inv_freq(base, rotary_dim))  # [S, rotary_dim/2]
    if interleaved:
        sin = torch.repeat_interleave(freqs.sin(), 2, dim=-1)
        cos = torch.repeat_interleave(freqs.cos(), 2, dim=-1)
        rotate = rotate_every_two
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
        sin, cos, rotate = emb.sin(), emb.cos(), rotate_half
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((x_rot * cos + rotate(x_rot) * sin, x_pass), dim=-1)


def rope_case(name, shape, dtype=torch.float32, base=None, rotary_dim=None, interleaved=False, offset=None, dynamic=None):
    attrs = {}
    if base is not None:
        attrs["base"] = base
    if rotary_dim is not None:
        attrs["rotary_dim"] = rotary_dim
    if interleaved:
        attrs["interleaved"] = 1
    if offset is not None:
        attrs["position_offset"] = offset
    return Case(name, [{"op": "rotary_embedding", "inputs": ["x"], "outputs": ["y"], "attrs": attrs}],
                {"x": rand(*shape, dtype=dtype)},
                lambda t: {"y": rope_ref(t["x"], 10000.0 if base is None else base, rotary_dim or 0, interleaved, offset or 0)},
                dynamic=dynamic or {})


def rope_cases():
    cases = []
    for dt in FLOATS:
        n = NAMES[dt]
        cases += [
            rope_case(f"rotary_embedding_halves_{n}", (2, 3, 5, 8), dtype=dt),
            rope_case(f"rotary_embedding_interleaved_{n}", (2, 3, 5, 8), dtype=dt, interleaved=True),
            rope_case(f"rotary_embedding_partial_offset_{n}", (1, 2, 7, 10), dtype=dt, rotary_dim=4, offset=37),
        ]
    cases += [
        rope_case("rotary_embedding_odd_head_dim_f32", (1, 3, 4, 7), rotary_dim=6),
        rope_case("rotary_embedding_odd_head_dim_interleaved_f16", (2, 1, 3, 13), dtype=torch.float16, rotary_dim=8, interleaved=True),
        rope_case("rotary_embedding_rotary_dim_equals_head_dim_f32", (1, 2, 3, 6), rotary_dim=6, interleaved=True),
        rope_case("rotary_embedding_llama3_base_f32", (1, 2, 6, 16), base=500000.0),
        rope_case("rotary_embedding_small_base_f64", (1, 1, 9, 4), dtype=torch.float64, base=2.5),
        rope_case("rotary_embedding_decode_position_f32", (2, 4, 1, 16), offset=4095),
        rope_case("rotary_embedding_large_offset_bf16", (1, 2, 3, 8), dtype=torch.bfloat16, offset=100000, interleaved=True),
        rope_case("rotary_embedding_head_dim_2_f32", (1, 1, 5, 2)),
        rope_case("rotary_embedding_empty_seq_f32", (2, 3, 0, 8)),
        rope_case("rotary_embedding_dynamic_seq_f32", (2, 3, 11, 8), dynamic={"x": [-1, 3, -1, 8]}),
        rope_case("rotary_embedding_dynamic_seq_interleaved_f16", (1, 2, 9, 12), dtype=torch.float16, interleaved=True, rotary_dim=8,
                  offset=5, dynamic={"x": [1, -1, -1, 12]}),
    ]
    return cases


def cases():
    return attention_cases() + attention_layout_cases() + rope_cases()
