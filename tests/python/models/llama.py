"""One Llama decoder layer (Hugging Face transformers' LlamaDecoderLayer, eager attention): RMSNorm,
grouped-query attention (8 query heads, 2 key/value heads) with rotary embedding (rotate_half
convention), causal mask, SiLU-gated MLP; and the same layer as a tensoracle network."""
from __future__ import annotations

import math

import torch
from torch import nn

from . import randomize_
from .builder import NetworkBuilder

NAME = "llama"
HIDDEN = 128
HEADS = 8
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 344
RMS_NORM_EPS = 1e-6
ROPE_THETA = 10000.0
PREFIX = "model.layers.0."
# "" gives the attention op the 2 key/value heads (grouped-query attention in the op); "repeat_kv"
# repeats them to 8 heads with layout ops first, as HF's repeat_kv does.
VARIANTS = {"": {"repeat_kv": False}, "repeat_kv": {"repeat_kv": True}}


# ---- the torch module, following transformers/models/llama/modeling_llama.py ----

class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        # HF upcasts to float32 here; "at least float32" keeps the float64 reference in float64.
        hidden_states = hidden_states.to(torch.promote_types(input_dtype, torch.float32))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.dim = dim
        self.base = base

    @torch.no_grad()
    def forward(self, x, position_ids):
        # HF keeps inv_freq as a float32 buffer; computing it in float64 keeps the reference exact.
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float64) / self.dim))
        freqs = position_ids[:, :, None].to(torch.float64) * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden_size = HIDDEN
        self.num_heads = HEADS
        self.head_dim = HEAD_DIM
        self.num_key_value_heads = KV_HEADS
        self.num_key_value_groups = HEADS // KV_HEADS
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim, base=ROPE_THETA)

    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states)
        key_states = self.k_proj(hidden_states)
        value_states = self.v_proj(hidden_states)
        query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = key_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary_emb(value_states, position_ids)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        # HF: softmax in float32; "at least float32" again for the float64 reference.
        softmax_dtype = torch.promote_types(query_states.dtype, torch.float32)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=softmax_dtype).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


class LlamaMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = LlamaAttention()
        self.mlp = LlamaMLP()
        self.input_layernorm = LlamaRMSNorm(HIDDEN, eps=RMS_NORM_EPS)
        self.post_attention_layernorm = LlamaRMSNorm(HIDDEN, eps=RMS_NORM_EPS)

    def forward(self, hidden_states, attention_mask, position_ids):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, attention_mask, position_ids)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class LlamaLayers(nn.Module):
    def __init__(self, num_layers=1):
        super().__init__()
        self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(num_layers)])


class LlamaDecoder(nn.Module):
    """LlamaForCausalLM's decoder layers (embeddings, final norm and head left out): state_dict names
    read "model.layers.0.…". Builds the causal mask and position ids as LlamaModel does."""

    def __init__(self):
        super().__init__()
        self.model = LlamaLayers()

    def forward(self, hidden_states):
        bsz, seq, _ = hidden_states.shape
        position_ids = torch.arange(seq)[None, :].expand(bsz, seq)
        causal_mask = torch.full((seq, seq), torch.finfo(hidden_states.dtype).min, dtype=hidden_states.dtype).triu(1)
        causal_mask = causal_mask[None, None, :, :].expand(bsz, 1, seq, seq)
        for layer in self.model.layers:
            hidden_states = layer(hidden_states, causal_mask, position_ids)
        return hidden_states


def create() -> nn.Module:
    return randomize_(LlamaDecoder())


def make_inputs(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    batch = int(torch.randint(1, 4, ()))
    seq = int(torch.randint(9, 17, ()))
    return {"hidden_states": torch.randn(batch, seq, HIDDEN, dtype=torch.float64).to(dtype)}


# ---- the network ----

def network(dtype: str, repeat_kv: bool = False) -> NetworkBuilder:
    b = NetworkBuilder()
    x = b.input("hidden_states", dtype, [-1, -1, HIDDEN])
    groups = HEADS // KV_HEADS

    def proj(t, module):
        name = PREFIX + module
        return b.layer("linear", [t, b.weight(name + ".weight"), None], name=name)

    def rms_norm(t, module):
        name = PREFIX + module
        return b.layer("rms_norm", [t, b.weight(name + ".weight")], {"epsilon": RMS_NORM_EPS}, name=name)

    def heads(t, n):  # [B, S, n * head_dim] -> [B, n, S, head_dim]
        t = b.layer("reshape", [t], {"shape": [0, 0, n, HEAD_DIM]}, name=t + ".view")
        return b.layer("transpose", [t], {"perm": [0, 2, 1, 3]}, name=t + ".transpose")

    def rotary(t):
        return b.layer("rotary_embedding", [t], {"base": ROPE_THETA, "interleaved": 0}, name=t + ".rotary")

    def repeat(t):  # [B, kv_heads, S, D] -> [B, heads, S, D], each kv head repeated `groups` times in a row
        t = b.layer("unsqueeze", [t], {"axes": [2]}, name=t + ".unsqueeze")
        t = b.layer("expand", [t], {"shape": [-1, -1, groups, -1, -1]}, name=t + ".expand")
        return b.layer("reshape", [t], {"shape": [0, HEADS, -1, HEAD_DIM]}, name=t + ".reshape")

    h = rms_norm(x, "input_layernorm")
    q = rotary(heads(proj(h, "self_attn.q_proj"), HEADS))
    k = rotary(heads(proj(h, "self_attn.k_proj"), KV_HEADS))
    v = heads(proj(h, "self_attn.v_proj"), KV_HEADS)
    if repeat_kv:
        k, v = repeat(k), repeat(v)
    a = b.layer("attention", [q, k, v], {"causal": 1}, name="attn")
    a = b.layer("transpose", [a], {"perm": [0, 2, 1, 3]}, name="attn.transpose")
    a = b.layer("reshape", [a], {"shape": [0, 0, HEADS * HEAD_DIM]}, name="attn.reshape")
    h = b.layer("add", [x, proj(a, "self_attn.o_proj")], name="attn.residual")
    m = rms_norm(h, "post_attention_layernorm")
    gate = b.layer("silu", [proj(m, "mlp.gate_proj")], name="mlp.act")
    m = b.layer("mul", [gate, proj(m, "mlp.up_proj")], name="mlp.gated")
    b.output(b.layer("add", [h, proj(m, "mlp.down_proj")], name="output"))
    return b


# ---- sanity: rotary embedding and grouped-query attention against direct formulas ----

@torch.no_grad()
def sanity() -> None:
    # rotate_half rotation == rotating each pair (x[i], x[i + D/2]) by p * base^(-2i/D), as a complex product.
    x = torch.randn(2, 3, 7, HEAD_DIM, dtype=torch.float64)
    positions = torch.arange(7)[None, :].expand(2, 7)
    cos, sin = LlamaRotaryEmbedding(HEAD_DIM, ROPE_THETA)(x, positions)
    got, _ = apply_rotary_pos_emb(x, x, cos, sin)
    half = HEAD_DIM // 2
    theta = torch.arange(7, dtype=torch.float64)[:, None] * ROPE_THETA ** (-2 * torch.arange(half, dtype=torch.float64) / HEAD_DIM)
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones_like(theta), theta)
    torch.testing.assert_close(got, torch.cat([z.real, z.imag], dim=-1), rtol=1e-12, atol=1e-12)

    # The layer's attention == per query head h, causal softmax attention over kv head h // groups.
    model = create().double()
    attn = model.model.layers[0].self_attn
    hidden = make_inputs(torch.float64)["hidden_states"]
    bsz, seq, _ = hidden.shape
    positions = torch.arange(seq)[None, :].expand(bsz, seq)
    mask = torch.full((seq, seq), float("-inf"), dtype=torch.float64).triu(1)
    cos, sin = attn.rotary_emb(hidden, positions)
    q = (hidden @ attn.q_proj.weight.T).view(bsz, seq, HEADS, HEAD_DIM).transpose(1, 2)
    k = (hidden @ attn.k_proj.weight.T).view(bsz, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
    v = (hidden @ attn.v_proj.weight.T).view(bsz, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    outs = []
    for h in range(HEADS):
        kv = h // (HEADS // KV_HEADS)
        p = (q[:, h] @ k[:, kv].transpose(1, 2) / math.sqrt(HEAD_DIM) + mask).softmax(-1)
        outs.append(p @ v[:, kv])
    want = torch.cat(outs, dim=-1) @ attn.o_proj.weight.T
    causal = torch.full((seq, seq), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)[None, None]
    torch.testing.assert_close(attn(hidden, causal, positions), want, rtol=1e-10, atol=1e-10)
