"""One GPT-2 block (Hugging Face transformers' GPT2Block, eager attention) and the same block as a
tensoracle network: Conv1D projections (weights [in, out], so matmul + bias), causal attention through
the attention op, tanh-approximated GELU."""
from __future__ import annotations

import math

import torch
from torch import nn

from . import randomize_
from .builder import NetworkBuilder

NAME = "gpt2"
EMBED = 64
HEADS = 4
HEAD_DIM = EMBED // HEADS
INNER = 4 * EMBED
N_POSITIONS = 64
LAYER_NORM_EPS = 1e-5
PREFIX = "h.0."
VARIANTS = {"": {}}


# ---- the torch module, following transformers/models/gpt2/modeling_gpt2.py ----

class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer with its weight stored [in, out]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    """ACT2FN["gelu_new"]: the tanh approximation of GELU, written out as in transformers."""

    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        max_positions = N_POSITIONS
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
            1, 1, max_positions, max_positions), persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.embed_dim = EMBED
        self.num_heads = HEADS
        self.head_dim = HEAD_DIM
        self.split_size = self.embed_dim
        self.scale_attn_weights = True
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _attn(self, query, key, value):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        if self.scale_attn_weights:
            attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        attn_output = self._attn(query, key, value)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.c_proj(attn_output)
        return self.resid_dropout(attn_output)


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size):
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, EMBED)
        self.c_proj = Conv1D(EMBED, intermediate_size)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states):
        hidden_states = self.act(self.c_fc(hidden_states))
        return self.dropout(self.c_proj(hidden_states))


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBED, eps=LAYER_NORM_EPS)
        self.attn = GPT2Attention()
        self.ln_2 = nn.LayerNorm(EMBED, eps=LAYER_NORM_EPS)
        self.mlp = GPT2MLP(INNER)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output = self.attn(hidden_states)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        return residual + feed_forward_hidden_states


class GPT2Blocks(nn.Module):
    """GPT2Model's stack of blocks (embeddings and ln_f left out): state_dict names read "h.0.…"."""

    def __init__(self, num_layers=1):
        super().__init__()
        self.h = nn.ModuleList([GPT2Block() for _ in range(num_layers)])

    def forward(self, hidden_states):
        for block in self.h:
            hidden_states = block(hidden_states)
        return hidden_states


def create() -> nn.Module:
    return randomize_(GPT2Blocks())


def make_inputs(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    batch = int(torch.randint(1, 4, ()))
    seq = int(torch.randint(9, 17, ()))
    return {"hidden_states": torch.randn(batch, seq, EMBED, dtype=torch.float64).to(dtype)}


# ---- the network ----

def network(dtype: str) -> NetworkBuilder:
    b = NetworkBuilder()
    x = b.input("hidden_states", dtype, [-1, -1, EMBED])

    def conv1d(t, module):  # x @ weight[in, out] + bias
        name = PREFIX + module
        y = b.layer("matmul", [t, b.weight(name + ".weight")], name=name + ".matmul")
        return b.layer("add", [y, b.weight(name + ".bias")], name=name)

    def layer_norm(t, module):
        name = PREFIX + module
        return b.layer("layer_norm", [t, b.weight(name + ".weight"), b.weight(name + ".bias")],
                       {"epsilon": LAYER_NORM_EPS}, name=name)

    def split_heads(t):  # [B, S, embed] -> [B, heads, S, head_dim]
        t = b.layer("reshape", [t], {"shape": [0, 0, HEADS, HEAD_DIM]}, name=t + ".view")
        return b.layer("transpose", [t], {"perm": [0, 2, 1, 3]}, name=t + ".permute")

    h = layer_norm(x, "ln_1")
    qkv = conv1d(h, "attn.c_attn")
    q, k, v = b.layer("split", [qkv], {"sizes": [EMBED] * 3, "axis": 2}, name="qkv", num_outputs=3)
    a = b.layer("attention", [split_heads(q), split_heads(k), split_heads(v)], {"causal": 1}, name="attn")
    a = b.layer("transpose", [a], {"perm": [0, 2, 1, 3]}, name="attn.merge.permute")
    a = b.layer("reshape", [a], {"shape": [0, 0, EMBED]}, name="attn.merge.view")
    a = conv1d(a, "attn.c_proj")
    h = b.layer("add", [a, x], name="attn.residual")
    m = conv1d(layer_norm(h, "ln_2"), "mlp.c_fc")
    m = b.layer("gelu", [m], {"approximate": "tanh"}, name="mlp.act")
    m = conv1d(m, "mlp.c_proj")
    b.output(b.layer("add", [h, m], name="output"))
    return b


# ---- sanity: the block's attention and GELU against direct formulas ----

@torch.no_grad()
def sanity() -> None:
    model = create().double()
    block = model.h[0]
    x = make_inputs(torch.float64)["hidden_states"]
    # GELU: the written-out tanh formula equals torch's own.
    torch.testing.assert_close(block.mlp.act(x), nn.functional.gelu(x, approximate="tanh"), rtol=1e-12, atol=1e-12)
    # Attention: per head, softmax(q k^T / sqrt(d) with future keys at -inf) v, from the fused c_attn weights.
    attn = block.attn
    qkv = x @ attn.c_attn.weight + attn.c_attn.bias
    seq = x.shape[1]
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    heads = []
    for i in range(HEADS):
        q, k, v = (qkv[..., j * EMBED + i * HEAD_DIM: j * EMBED + (i + 1) * HEAD_DIM] for j in range(3))
        scores = (q @ k.transpose(1, 2) / math.sqrt(HEAD_DIM)).masked_fill(future, float("-inf"))
        heads.append(scores.softmax(-1) @ v)
    want = torch.cat(heads, dim=-1) @ attn.c_proj.weight + attn.c_proj.bias
    torch.testing.assert_close(attn(x), want, rtol=1e-10, atol=1e-10)
