"""One BERT encoder layer (Hugging Face transformers' BertLayer, eager attention) with an additive padding
mask, and the same layer as a tensoracle network."""
from __future__ import annotations

import math

import torch
from torch import nn

from . import randomize_
from .builder import NetworkBuilder

NAME = "bert"
HIDDEN = 96
HEADS = 4
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 4 * HIDDEN
LAYER_NORM_EPS = 1e-12
PREFIX = "encoder.layer.0."
# "" writes attention as HF's eager code does (matmul, scale, mask, softmax, matmul); "attention_op"
# uses the fused attention op with the same additive mask.
VARIANTS = {"": {"attention_op": False}, "attention_op": {"attention_op": True}}


# ---- the torch module, following transformers/models/bert/modeling_bert.py ----

class BertSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_attention_heads = HEADS
        self.attention_head_size = HEAD_DIM
        self.all_head_size = HEADS * HEAD_DIM
        self.query = nn.Linear(HIDDEN, self.all_head_size)
        self.key = nn.Linear(HIDDEN, self.all_head_size)
        self.value = nn.Linear(HIDDEN, self.all_head_size)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class BertSelfOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.self = BertSelfAttention()
        self.output = BertSelfOutput()

    def forward(self, hidden_states, attention_mask):
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, INTERMEDIATE)
        self.intermediate_act_fn = nn.GELU()  # ACT2FN["gelu"]: the exact (erf) GELU

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(INTERMEDIATE, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = BertAttention()
        self.intermediate = BertIntermediate()
        self.output = BertOutput()

    def forward(self, hidden_states, attention_mask):
        attention_output = self.attention(hidden_states, attention_mask)
        intermediate_output = self.intermediate(attention_output)
        return self.output(intermediate_output, attention_output)


class BertEncoder(nn.Module):
    def __init__(self, num_layers=1):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer() for _ in range(num_layers)])

    def forward(self, hidden_states, attention_mask):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


class BertEncoderModel(nn.Module):
    """The encoder part of BertModel (embeddings and pooler left out), so that state_dict names read
    "encoder.layer.0.…" as in a BERT checkpoint. Takes the extended (additive) attention mask."""

    def __init__(self):
        super().__init__()
        self.encoder = BertEncoder()

    def forward(self, hidden_states, attention_mask):
        return self.encoder(hidden_states, attention_mask)


def extended_attention_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """ModuleUtilsMixin.get_extended_attention_mask: [B, S] of 1 (keep) / 0 (pad) -> additive [B, 1, 1, S]."""
    extended = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - extended) * torch.finfo(dtype).min


def create() -> nn.Module:
    return randomize_(BertEncoderModel())


def make_inputs(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    batch = int(torch.randint(2, 4, ()))
    seq = int(torch.randint(9, 17, ()))
    lengths = torch.randint(1, seq + 1, (batch,))
    lengths[0] = seq  # one unpadded sequence, the others padded at random
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).to(torch.int64)
    return {"hidden_states": torch.randn(batch, seq, HIDDEN, dtype=torch.float64).to(dtype),
            "attention_mask": extended_attention_mask(mask, dtype)}


# ---- the network ----

def network(dtype: str, attention_op: bool = False) -> NetworkBuilder:
    b = NetworkBuilder()
    x = b.input("hidden_states", dtype, [-1, -1, HIDDEN])
    mask = b.input("attention_mask", dtype, [-1, 1, 1, -1])

    def dense(t, module):
        name = PREFIX + module
        return b.layer("linear", [t, b.weight(name + ".weight"), b.weight(name + ".bias")], name=name)

    def layer_norm(t, module, name=None):
        w, bias = b.weight(PREFIX + module + ".weight"), b.weight(PREFIX + module + ".bias")
        return b.layer("layer_norm", [t, w, bias], {"epsilon": LAYER_NORM_EPS}, name=name or PREFIX + module)

    def transpose_for_scores(t):  # [B, S, hidden] -> [B, heads, S, head_dim]
        t = b.layer("reshape", [t], {"shape": [0, 0, HEADS, HEAD_DIM]}, name=t + ".view")
        return b.layer("transpose", [t], {"perm": [0, 2, 1, 3]}, name=t + ".permute")

    q = transpose_for_scores(dense(x, "attention.self.query"))
    k = transpose_for_scores(dense(x, "attention.self.key"))
    v = transpose_for_scores(dense(x, "attention.self.value"))
    if attention_op:
        context = b.layer("attention", [q, k, v, mask], name="attention")
    else:
        kt = b.layer("transpose", [k], {"perm": [0, 1, 3, 2]}, name="key.transpose")
        scores = b.layer("matmul", [q, kt], name="scores")
        scale = b.scalar("sqrt_head_dim", math.sqrt(HEAD_DIM), dtype)
        scores = b.layer("div", [scores, scale], name="scores.scaled")
        scores = b.layer("add", [scores, mask], name="scores.masked")
        probs = b.layer("softmax", [scores], {"axis": -1}, name="probs")
        context = b.layer("matmul", [probs, v], name="context")
    context = b.layer("transpose", [context], {"perm": [0, 2, 1, 3]}, name="context.permute")
    context = b.layer("reshape", [context], {"shape": [0, 0, HIDDEN]}, name="context.view")

    attn = dense(context, "attention.output.dense")
    attn = b.layer("add", [attn, x], name="attention.residual")
    attn = layer_norm(attn, "attention.output.LayerNorm")
    h = dense(attn, "intermediate.dense")
    h = b.layer("gelu", [h], {"approximate": "none"}, name="intermediate.gelu")
    h = dense(h, "output.dense")
    h = b.layer("add", [h, attn], name="output.residual")
    b.output(layer_norm(h, "output.LayerNorm", name="output"))
    return b


# ---- sanity: the module against torch's own nn.MultiheadAttention ----

@torch.no_grad()
def sanity() -> None:
    """BertAttention's self-attention + output dense equals nn.MultiheadAttention with the same
    projections and a key padding mask (an implementation independent of the code above)."""
    model = create().double()
    layer = model.encoder.layer[0].attention
    inputs = make_inputs(torch.float64)
    x, additive = inputs["hidden_states"], inputs["attention_mask"]
    mha = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True).double().eval()
    sa = layer.self
    mha.in_proj_weight.copy_(torch.cat([sa.query.weight, sa.key.weight, sa.value.weight]))
    mha.in_proj_bias.copy_(torch.cat([sa.query.bias, sa.key.bias, sa.value.bias]))
    mha.out_proj.weight.copy_(layer.output.dense.weight)
    mha.out_proj.bias.copy_(layer.output.dense.bias)
    key_padding_mask = additive[:, 0, 0, :] < 0
    want, _ = mha(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
    got = layer.output.dense(sa(x, additive))
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
