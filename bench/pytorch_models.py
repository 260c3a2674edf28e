# Models of bench/pytorch_comparison.py (BERT-base/-large, ResNet-50, GPT-2 small, ViT-B/16) in PyTorch and as
# tensoracle network JSON.
"""Each model is a `ModelSpec`: `create()` gives the PyTorch module (f32, eval mode, deterministic
random weights after torch.manual_seed), `network()` the same computation as a tensoracle network
(NetworkBuilder from tests/python/models/builder.py, weights referenced by state_dict name), and
`input_shape(batch)` / `output_shape(batch)` the shapes of the single input "x" and output "output".

The modules follow the public implementations so that state_dict names match real checkpoints:
Hugging Face transformers' BertLayer (post-LN, exact GELU) and GPT2Block (pre-LN, Conv1D weights
[in, out], tanh GELU, causal attention, final ln_f), torchvision's ResNet-50 (Bottleneck v1.5, stride
on the 3x3 convolution) and ViT-B/16 (VisionTransformer: conv patch embedding, class token, learned
position embedding, pre-LN encoder blocks with nn.MultiheadAttention's packed in_proj, erf GELU MLP, final
LayerNorm, head on the class token). Attention on the PyTorch side uses F.scaled_dot_product_attention where the
installed torch has it (torch >= 2.0, the fast path HF uses by default), else the written-out
softmax(q k^T / sqrt(d)) v. Embeddings are left out of the text transformers: the input is the hidden
states [B, S, hidden] (f32 for tensoracle); ViT takes the images [B, 3, H, W].
"""
from __future__ import annotations

import math
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python" / "models"))
from builder import NetworkBuilder  # noqa: E402  (tests/python/models/builder.py)


# ---- weights ----

@torch.no_grad()
def init_weights_(module: nn.Module) -> nn.Module:
    """Random weights of a realistic scale (as tests/python/models.randomize_): matrices N(0, 1/fan_in)
    so every residual branch contributes as much as the residual; norm scales near 1; small biases and
    running means; running variances in [0.5, 2]; ViT's class token and position embedding N(0, 1), as large
    as the patch embeddings they join. Deterministic given torch.manual_seed."""
    for m in module.modules():
        for name, p in m.named_parameters(recurse=False):
            if name in ("class_token", "pos_embedding"):
                p.copy_(torch.randn_like(p))
            elif p.dim() >= 2:
                fan_in = p.shape[0] if isinstance(m, Conv1D) else p[0].numel()
                p.copy_(torch.randn_like(p) / fan_in ** 0.5)
            elif name == "weight":
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
        for name, b in m.named_buffers(recurse=False):
            if name == "running_mean":
                b.copy_(0.2 * torch.randn_like(b))
            elif name == "running_var":
                b.copy_(0.5 + 1.5 * torch.rand_like(b))
    return module.eval()


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) [+ causal mask]) v on [B, H, S, D]."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[-2]
        future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.matmul(scores.softmax(-1), v)


# ---- BERT encoder (transformers' BertLayer, no attention mask) ----

class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, _ = x.shape
        split = lambda t: t.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)  # noqa: E731
        ctx = attention(split(self.query(x)), split(self.key(x)), split(self.value(x)), causal=False)
        return ctx.permute(0, 2, 1, 3).reshape(b, s, self.heads * self.head_dim)


class BertDenseNorm(nn.Module):  # BertSelfOutput / BertOutput: LayerNorm(dense(x) + residual)
    def __init__(self, inp, hidden, eps):
        super().__init__()
        self.dense = nn.Linear(inp, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nn.Module):
    def __init__(self, hidden, heads, eps):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)
        self.output = BertDenseNorm(hidden, hidden, eps)

    def forward(self, x):
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.dense = nn.Linear(hidden, ffn)

    def forward(self, x):
        return F.gelu(self.dense(x))  # exact (erf) GELU, ACT2FN["gelu"]


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, ffn, eps):
        super().__init__()
        self.attention = BertAttention(hidden, heads, eps)
        self.intermediate = BertIntermediate(hidden, ffn)
        self.output = BertDenseNorm(ffn, hidden, eps)

    def forward(self, x):
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, layers, hidden, heads, ffn, eps):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(hidden, heads, ffn, eps) for _ in range(layers)])

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x


class BertModelEncoder(nn.Module):
    """state_dict names "encoder.layer.N.…" as in a BERT checkpoint."""

    def __init__(self, layers, hidden, heads, ffn, eps=1e-12):
        super().__init__()
        self.encoder = BertEncoder(layers, hidden, heads, ffn, eps)

    def forward(self, x):
        return self.encoder(x)


def bert_network(layers, hidden, heads, ffn, eps=1e-12) -> NetworkBuilder:
    b = NetworkBuilder()
    head_dim = hidden // heads
    x = b.input("x", "f32", [-1, -1, hidden])
    for i in range(layers):
        p = f"encoder.layer.{i}."

        def dense(t, module):
            n = p + module
            return b.layer("linear", [t, b.weight(n + ".weight"), b.weight(n + ".bias")], name=n)

        def layer_norm(t, module, name=None):
            n = p + module
            return b.layer("layer_norm", [t, b.weight(n + ".weight"), b.weight(n + ".bias")], {"epsilon": eps},
                           name=name or n)

        def heads_of(t):  # [B, S, hidden] -> [B, heads, S, head_dim]
            t = b.layer("reshape", [t], {"shape": [0, 0, heads, head_dim]}, name=t + ".view")
            return b.layer("transpose", [t], {"perm": [0, 2, 1, 3]}, name=t + ".permute")

        q = heads_of(dense(x, "attention.self.query"))
        k = heads_of(dense(x, "attention.self.key"))
        v = heads_of(dense(x, "attention.self.value"))
        ctx = b.layer("attention", [q, k, v], name=p + "attention.self.attn")
        ctx = b.layer("transpose", [ctx], {"perm": [0, 2, 1, 3]}, name=ctx + ".permute")
        ctx = b.layer("reshape", [ctx], {"shape": [0, 0, hidden]}, name=ctx + ".view")
        a = b.layer("add", [dense(ctx, "attention.output.dense"), x], name=p + "attention.residual")
        a = layer_norm(a, "attention.output.LayerNorm")
        h = b.layer("gelu", [dense(a, "intermediate.dense")], {"approximate": "none"}, name=p + "intermediate.gelu")
        h = b.layer("add", [dense(h, "output.dense"), a], name=p + "output.residual")
        x = layer_norm(h, "output.LayerNorm", name="output" if i == layers - 1 else None)
    b.output(x)
    return b


# ---- ResNet-50 (torchvision.models.resnet50, written out) ----

def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = conv1x1(inplanes, planes), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv3x3(planes, planes, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = conv1x1(planes, planes * 4), nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, blocks=(3, 4, 6, 3), width=64, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        inplanes = width
        for i, n in enumerate(blocks):
            planes, stride = width * 2 ** i, 1 if i == 0 else 2
            downsample = None
            if stride != 1 or inplanes != planes * 4:
                downsample = nn.Sequential(conv1x1(inplanes, planes * 4, stride), nn.BatchNorm2d(planes * 4))
            layers = [Bottleneck(inplanes, planes, stride, downsample)]
            inplanes = planes * 4
            layers += [Bottleneck(inplanes, planes) for _ in range(1, n)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet_network(blocks=(3, 4, 6, 3), width=64, num_classes=1000, image=224, bn_eps=1e-5) -> NetworkBuilder:
    b = NetworkBuilder()

    def conv(t, name, kernel, stride=1):
        pad = kernel // 2
        attrs = {"stride": [stride, stride], "padding": [pad, pad], "dilation": [1, 1], "groups": 1}
        return b.layer("conv", [t, b.weight(name + ".weight"), None], attrs, name=name)

    def bn(t, name):  # inputs x, mean, var, weight, bias
        params = [b.weight(f"{name}.{p}") for p in ("running_mean", "running_var", "weight", "bias")]
        return b.layer("batch_norm", [t, *params], {"epsilon": bn_eps}, name=name)

    x = b.input("x", "f32", [-1, 3, image, image])
    h = b.layer("relu", [bn(conv(x, "conv1", 7, 2), "bn1")], name="relu")
    h = b.layer("max_pool2d", [h], {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]}, name="maxpool")
    inplanes = width
    for i, n in enumerate(blocks):
        planes = width * 2 ** i
        for j in range(n):
            stride = 2 if (i > 0 and j == 0) else 1
            p = f"layer{i + 1}.{j}."
            out = b.layer("relu", [bn(conv(h, p + "conv1", 1), p + "bn1")], name=p + "relu1")
            out = b.layer("relu", [bn(conv(out, p + "conv2", 3, stride), p + "bn2")], name=p + "relu2")
            out = bn(conv(out, p + "conv3", 1), p + "bn3")
            identity = h
            if j == 0 and (stride != 1 or inplanes != planes * 4):
                identity = bn(conv(h, p + "downsample.0", 1, stride), p + "downsample.1")
            h = b.layer("relu", [b.layer("add", [out, identity], name=p + "add")], name=p + "relu3")
            inplanes = planes * 4
    h = b.layer("global_avg_pool", [h], name="avgpool")
    h = b.layer("reshape", [h], {"shape": [0, inplanes]}, name="flatten")
    b.output(b.layer("linear", [h, b.weight("fc.weight"), b.weight("fc.bias")], name="output"))
    return b


# ---- GPT-2 (transformers' GPT2Block stack + ln_f, embeddings left out) ----

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
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, embed, heads):
        super().__init__()
        self.embed, self.heads, self.head_dim = embed, heads, embed // heads
        self.c_attn = Conv1D(3 * embed, embed)
        self.c_proj = Conv1D(embed, embed)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).split(self.embed, dim=2)
        split = lambda t: t.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)  # noqa: E731
        a = attention(split(q), split(k), split(v), causal=True)
        return self.c_proj(a.permute(0, 2, 1, 3).reshape(b, s, self.embed))


class GPT2MLP(nn.Module):
    def __init__(self, embed, inner):
        super().__init__()
        self.c_fc = Conv1D(inner, embed)
        self.c_proj = Conv1D(embed, inner)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # ACT2FN["gelu_new"]


class GPT2Block(nn.Module):
    def __init__(self, embed, heads, inner, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embed, eps=eps)
        self.attn = GPT2Attention(embed, heads)
        self.ln_2 = nn.LayerNorm(embed, eps=eps)
        self.mlp = GPT2MLP(embed, inner)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Stack(nn.Module):
    """GPT2Model without embeddings: state_dict names "h.N.…" and "ln_f.…"."""

    def __init__(self, layers, embed, heads, inner, eps=1e-5):
        super().__init__()
        self.h = nn.ModuleList([GPT2Block(embed, heads, inner, eps) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embed, eps=eps)

    def forward(self, x):
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


def gpt2_network(layers, embed, heads, inner, eps=1e-5) -> NetworkBuilder:
    b = NetworkBuilder()
    head_dim = embed // heads
    x = b.input("x", "f32", [-1, -1, embed])

    def layer_norm(t, n, name=None):
        return b.layer("layer_norm", [t, b.weight(n + ".weight"), b.weight(n + ".bias")], {"epsilon": eps},
                       name=name or n)

    for i in range(layers):
        p = f"h.{i}."

        def conv1d(t, module):  # x @ weight[in, out] + bias
            n = p + module
            y = b.layer("matmul", [t, b.weight(n + ".weight")], name=n + ".matmul")
            return b.layer("add", [y, b.weight(n + ".bias")], name=n)

        def heads_of(t):
            t = b.layer("reshape", [t], {"shape": [0, 0, heads, head_dim]}, name=t + ".view")
            return b.layer("transpose", [t], {"perm": [0, 2, 1, 3]}, name=t + ".permute")

        qkv = conv1d(layer_norm(x, p + "ln_1"), "attn.c_attn")
        q, k, v = b.layer("split", [qkv], {"sizes": [embed] * 3, "axis": 2}, name=p + "attn.qkv", num_outputs=3)
        a = b.layer("attention", [heads_of(q), heads_of(k), heads_of(v)], {"causal": 1}, name=p + "attn.attn")
        a = b.layer("transpose", [a], {"perm": [0, 2, 1, 3]}, name=a + ".merge.permute")
        a = b.layer("reshape", [a], {"shape": [0, 0, embed]}, name=a + ".view")
        h = b.layer("add", [x, conv1d(a, "attn.c_proj")], name=p + "attn.residual")
        m = conv1d(layer_norm(h, p + "ln_2"), "mlp.c_fc")
        m = b.layer("gelu", [m], {"approximate": "tanh"}, name=p + "mlp.act")
        x = b.layer("add", [h, conv1d(m, "mlp.c_proj")], name=p + "mlp.residual")
    b.output(layer_norm(x, "ln_f", name="output"))
    return b


# ---- ViT-B/16 (torchvision.models.vit_b_16's VisionTransformer, written out) ----

class ViTSelfAttention(nn.Module):
    """nn.MultiheadAttention(E, heads, batch_first=True) without masks or dropout: state_dict names in_proj_weight
    [3E, E] (q's rows, then k's, then v's), in_proj_bias, out_proj.weight, out_proj.bias."""

    def __init__(self, embed, heads):
        super().__init__()
        self.embed, self.heads, self.head_dim = embed, heads, embed // heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed, embed))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed))
        self.out_proj = nn.Linear(embed, embed)
        nn.init.xavier_uniform_(self.in_proj_weight)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).split(self.embed, dim=2)
        split = lambda t: t.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)  # noqa: E731
        a = attention(split(q), split(k), split(v), causal=False)
        return self.out_proj(a.permute(0, 2, 1, 3).reshape(b, s, self.embed))


class ViTEncoderBlock(nn.Module):  # torchvision.models.vision_transformer.EncoderBlock
    def __init__(self, embed, heads, mlp, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embed, eps=eps)
        self.self_attention = ViTSelfAttention(embed, heads)
        self.ln_2 = nn.LayerNorm(embed, eps=eps)
        # MLPBlock: Linear, GELU, Dropout, Linear, Dropout (state_dict names mlp.0 and mlp.3)
        self.mlp = nn.Sequential(nn.Linear(embed, mlp), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp, embed),
                                 nn.Dropout(0.0))

    def forward(self, x):
        x = x + self.self_attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ViTEncoder(nn.Module):
    def __init__(self, seq, layers, embed, heads, mlp, eps):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq, embed).normal_(std=0.02))
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", ViTEncoderBlock(embed, heads, mlp, eps)) for i in range(layers)))
        self.ln = nn.LayerNorm(embed, eps=eps)

    def forward(self, x):
        return self.ln(self.layers(x + self.pos_embedding))


class VisionTransformer(nn.Module):
    """state_dict names as torchvision's: conv_proj.*, class_token, encoder.pos_embedding,
    encoder.layers.encoder_layer_N.{ln_1, self_attention, ln_2, mlp.0, mlp.3}.*, encoder.ln.*, heads.head.*."""

    def __init__(self, image=224, patch=16, layers=12, embed=768, heads=12, mlp=3072, num_classes=1000, eps=1e-6):
        super().__init__()
        self.embed = embed
        self.conv_proj = nn.Conv2d(3, embed, kernel_size=patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, embed))
        self.encoder = ViTEncoder((image // patch) ** 2 + 1, layers, embed, heads, mlp, eps)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(embed, num_classes)))

    def forward(self, x):
        n = x.shape[0]
        x = self.conv_proj(x).reshape(n, self.embed, -1).permute(0, 2, 1)  # [N, patches, E]
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


def vit_network(image=224, patch=16, layers=12, embed=768, heads=12, mlp=3072, num_classes=1000,
                eps=1e-6) -> NetworkBuilder:
    b = NetworkBuilder()
    head_dim, patches = embed // heads, (image // patch) ** 2
    x = b.input("x", "f32", [-1, 3, image, image])

    def linear(t, n, name=None):
        return b.layer("linear", [t, b.weight(n + ".weight"), b.weight(n + ".bias")], name=name or n)

    def layer_norm(t, n):
        return b.layer("layer_norm", [t, b.weight(n + ".weight"), b.weight(n + ".bias")], {"epsilon": eps}, name=n)

    def heads_of(t):  # [B, S, E] -> [B, heads, S, head_dim]
        t = b.layer("reshape", [t], {"shape": [0, 0, heads, head_dim]}, name=t + ".view")
        return b.layer("transpose", [t], {"perm": [0, 2, 1, 3]}, name=t + ".permute")

    attrs = {"stride": [patch, patch], "padding": [0, 0], "dilation": [1, 1], "groups": 1}
    h = b.layer("conv", [x, b.weight("conv_proj.weight"), b.weight("conv_proj.bias")], attrs, name="conv_proj")
    h = b.layer("reshape", [h], {"shape": [0, embed, patches]}, name="conv_proj.flatten")
    h = b.layer("transpose", [h], {"perm": [0, 2, 1]}, name="conv_proj.permute")  # [B, patches, E]
    # cat([class_token.expand(B, -1, -1), h], 1) + pos_embedding, written as pad(h) + (pad(class_token) +
    # pos_embedding): `expand` takes a static shape and the batch is dynamic. A zero row goes in front of the
    # patches, the class token into row 0 of the [1, 1 + patches, E] constant, which the builder folds: the same
    # sums, bit for bit (row 0: 0 + (class_token + pos[0]); row i: patch + (0 + pos[i])).
    h = b.layer("pad", [h], {"pads": [0, 1, 0, 0, 0, 0]}, name="class_token.row")
    tok = b.layer("pad", [b.weight("class_token")], {"pads": [0, 0, 0, 0, patches, 0]}, name="class_token.pad")
    tok = b.layer("add", [tok, b.weight("encoder.pos_embedding")], name="encoder.tokens")
    h = b.layer("add", [h, tok], name="encoder.input")
    for i in range(layers):
        p = f"encoder.layers.encoder_layer_{i}."
        n = p + "self_attention.in_proj"  # one packed product x·in_proj_weightᵀ + in_proj_bias: [B, S, 3E]
        qkv = b.layer("linear", [layer_norm(h, p + "ln_1"), b.weight(n + "_weight"), b.weight(n + "_bias")], name=n)
        q, k, v = b.layer("split", [qkv], {"sizes": [embed] * 3, "axis": 2}, name=p + "self_attention.qkv",
                          num_outputs=3)
        a = b.layer("attention", [heads_of(q), heads_of(k), heads_of(v)], name=p + "self_attention.attn")
        a = b.layer("transpose", [a], {"perm": [0, 2, 1, 3]}, name=a + ".merge.permute")
        a = b.layer("reshape", [a], {"shape": [0, 0, embed]}, name=a + ".view")
        h = b.layer("add", [h, linear(a, p + "self_attention.out_proj")], name=p + "self_attention.residual")
        m = linear(layer_norm(h, p + "ln_2"), p + "mlp.0")
        m = b.layer("gelu", [m], {"approximate": "none"}, name=p + "mlp.1")
        h = b.layer("add", [h, linear(m, p + "mlp.3")], name=p + "mlp.residual")
    h = layer_norm(h, "encoder.ln")
    h = b.layer("slice", [h], {"starts": [0], "ends": [1], "axes": [1]}, name="class_token.take")  # [B, 1, E]
    h = b.layer("reshape", [h], {"shape": [0, embed]}, name="class_token.flatten")
    b.output(linear(h, "heads.head", name="output"))
    return b


# ---- the table of models ----

@dataclass
class ModelSpec:
    key: str                     # short id: bert, bert_large, resnet50, gpt2, vit_b16
    title: str                   # as printed in the results
    batches: tuple[int, ...]     # rows of the table, smallest first
    create: Callable[[], nn.Module]
    network: Callable[[], NetworkBuilder]
    input_shape: Callable[[int], list[int]]
    output_shape: Callable[[int], list[int]]


def write_model_files(spec: ModelSpec, folder: Path, seed: int = 0) -> nn.Module:
    """Creates the model after torch.manual_seed(seed) and writes what a tensoracle build reads into `folder`: its
    floating-point weights as f32 weights.safetensors and the network as net.json (which refers to the weights file
    by that name, relative to itself). Returns the model."""
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model = spec.create()
    save_file({k: v.detach().float().contiguous() for k, v in model.state_dict().items() if v.is_floating_point()},
              str(Path(folder) / "weights.safetensors"))
    spec.network().write(Path(folder) / "net.json")
    return model


def model_specs(tiny: bool = False) -> list[ModelSpec]:
    """The benchmark table: BERT-base (batch 1, 32; seq 128), BERT-large (L24 H1024, 16 heads, FFN 4096; batch
    32; seq 384), ResNet-50 (batch 1, 256; 224x224), GPT-2 small prefill (batch 1, 8, 16; seq 512), ViT-B/16
    (batch 1, 128; 224x224). `tiny`: the transformers 2 layers, hidden 64, 4 heads, FFN 256, seq 16, batch 1
    and 2 (BERT-large as BERT-base); ResNet [1,1,1,1] blocks, width 8, 32x32 images, 16 classes; ViT 32x32
    images in 8x8 patches (seq 17), 16 classes."""
    if tiny:
        L, H, NH, FF, S, GS = 2, 64, 4, 256, 16, 16
        LL, LH, LNH, LFF, LS = L, H, NH, FF, S
        blocks, width, classes, image = (1, 1, 1, 1), 8, 16, 32
        VL, VH, VNH, VFF, patch = L, H, NH, FF, 8
        bb, lb, rb, gb, vb = (1, 2), (1, 2), (1, 2), (1, 2), (1, 2)
    else:
        L, H, NH, FF, S, GS = 12, 768, 12, 3072, 128, 512
        LL, LH, LNH, LFF, LS = 24, 1024, 16, 4096, 384
        blocks, width, classes, image = (3, 4, 6, 3), 64, 1000, 224
        VL, VH, VNH, VFF, patch = 12, 768, 12, 3072, 16
        bb, lb, rb, gb, vb = (1, 32), (32,), (1, 256), (1, 8, 16), (1, 128)
    size = "tiny " if tiny else ""
    vit_title = (f"ViT-B/16 tiny ({image}x{image}, patch {patch}, L{VL} H{VH}, torchvision layout)" if tiny
                 else f"ViT-B/16 ({image}x{image}, torchvision layout)")
    return [
        ModelSpec("bert", f"BERT-base encoder {size}(L{L} H{H}, seq {S})", bb,
                  lambda: init_weights_(BertModelEncoder(L, H, NH, FF)),
                  lambda: bert_network(L, H, NH, FF),
                  lambda n: [n, S, H], lambda n: [n, S, H]),
        ModelSpec("bert_large", f"BERT-large encoder {size}(L{LL} H{LH}, seq {LS})", lb,
                  lambda: init_weights_(BertModelEncoder(LL, LH, LNH, LFF)),
                  lambda: bert_network(LL, LH, LNH, LFF),
                  lambda n: [n, LS, LH], lambda n: [n, LS, LH]),
        ModelSpec("resnet50", f"ResNet-50 {size}({image}x{image})", rb,
                  lambda: init_weights_(ResNet(blocks, width, classes)),
                  lambda: resnet_network(blocks, width, classes, image),
                  lambda n: [n, 3, image, image], lambda n: [n, classes]),
        ModelSpec("gpt2", f"GPT-2 small prefill {size}(L{L} H{H}, seq {GS})", gb,
                  lambda: init_weights_(GPT2Stack(L, H, NH, FF)),
                  lambda: gpt2_network(L, H, NH, FF),
                  lambda n: [n, GS, H], lambda n: [n, GS, H]),
        ModelSpec("vit_b16", vit_title, vb,
                  lambda: init_weights_(VisionTransformer(image, patch, VL, VH, VNH, VFF, classes)),
                  lambda: vit_network(image, patch, VL, VH, VNH, VFF, classes),
                  lambda n: [n, 3, image, image], lambda n: [n, classes]),
    ]
