"""Conformance cases of the normalization family: softmax, log_softmax, layer_norm, rms_norm, batch_norm,
group_norm, instance_norm (references in float64; rms_norm and instance_norm composed from primitives)."""
import torch
import torch.nn.functional as F

from .framework import Case, rand, randn

FLOATS = [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"), (torch.float64, "f64")]
INF = float("inf")
NAN = float("nan")


def layer(op, inputs, outputs=("y",), **attrs):
    return [{"op": op, "inputs": list(inputs), "outputs": list(outputs), "attrs": attrs}]


# ---- softmax / log_softmax ----

def softmax_cases():
    out = []
    for op, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        def case(what, x, axis, dtype_name, dynamic=None, fn=fn, op=op):
            return Case(f"{op}_{what}_{dtype_name}", layer(op, ["x"], axis=axis), {"x": x},
                        lambda t: {"y": fn(t["x"], axis)}, dynamic={"x": dynamic} if dynamic else {})

        for dtype, name in FLOATS:
            # attention scores [B, H, S, S] (BERT, GPT-2), softmax over the keys
            out.append(case("attention_scores", randn(2, 3, 9, 9, dtype=dtype, std=3.0), -1, name))
        out.append(case("axis1_odd", randn(3, 13, 7), 1, "f32"))
        out.append(case("axis0", randn(7, 5), 0, "f32"))
        out.append(case("negative_axis", randn(2, 5, 3), -2, "f32"))
        out.append(case("large_values", randn(4, 11, std=1000.0), -1, "f32"))
        out.append(case("dynamic", randn(2, 4, 5, 5), -1, "f32", dynamic=[-1, 4, -1, -1]))
        out.append(case("dynamic_axis", randn(3, 6, dtype=torch.float16), 0, "f16", dynamic=[-1, -1]))
        out.append(case("size1_axis", randn(4, 1), -1, "f32"))
        out.append(case("empty_axis", randn(3, 0), -1, "f32"))
        out.append(case("empty_batch", randn(0, 5), -1, "f32"))
        out.append(case("scalar", torch.tensor(0.7), -1, "f32"))
        special = torch.tensor([[-INF, -INF, -INF], [1.0, -INF, 2.0], [NAN, 1.0, 2.0], [INF, 1.0, 0.0], [3.0, 3.0, 3.0]])
        out.append(case("special_values", special, -1, "f32"))
    return out


# ---- layer_norm / rms_norm ----

def layer_norm_ref(x, w, b, rank, eps):
    return F.layer_norm(x, x.shape[len(x.shape) - rank:], w, b, eps)


def rms_norm_ref(x, w, rank, eps):
    dims = tuple(range(x.dim() - rank, x.dim()))
    y = x / torch.sqrt(torch.mean(x * x, dim=dims, keepdim=True) + eps)
    return y * w if w is not None else y


def layer_norm_cases():
    out = []

    def case(what, x, dtype_name, rank=1, weight=True, bias=True, eps=None, dynamic=None):
        dtype = x.dtype
        shape = list(x.shape[x.dim() - rank:])
        weights = {}
        if weight:
            weights["w"] = rand(*shape, dtype=dtype, low=0.5, high=1.5)
        if bias:
            weights["b"] = rand(*shape, dtype=dtype)
        attrs = {"normalized_rank": rank}
        if eps is not None:
            attrs["epsilon"] = eps
        e = 1e-5 if eps is None else eps
        return Case(f"layer_norm_{what}_{dtype_name}",
                    layer("layer_norm", ["x", "w" if weight else None, "b" if bias else None], **attrs), {"x": x},
                    lambda t: {"y": layer_norm_ref(t["x"], t.get("w"), t.get("b"), rank, e)}, weights=weights,
                    dynamic={"x": dynamic} if dynamic else {})

    for dtype, name in FLOATS:
        # BERT: hidden 768
        out.append(case("bert", randn(2, 5, 768, dtype=dtype), name))
    out.append(case("no_affine", randn(3, 13), "f32", weight=False, bias=False))
    out.append(case("weight_only", randn(3, 13), "f32", bias=False))
    out.append(case("bias_only", randn(3, 13), "f32", weight=False))
    out.append(case("rank2", randn(2, 3, 5, 7), "f32", rank=2))
    out.append(case("rank_all", randn(4, 7), "f32", rank=2))
    out.append(case("dynamic", randn(3, 7, 64), "f32", dynamic=[-1, -1, 64]))
    out.append(case("epsilon", randn(4, 9, std=0.05), "f32", eps=0.01))
    out.append(case("offset", randn(3, 33) + 1000.0, "f64"))
    out.append(case("size1", randn(4, 1), "f32"))
    out.append(case("empty_batch", randn(0, 16), "f32"))
    out.append(case("empty_row", randn(3, 0), "f32"))
    # The CUDA kernel's row paths: 8 lanes, a warp, a block (rows in registers), and longer rows; 16-byte vectors where
    # the row length allows them, one element at a time where it doesn't; row counts that leave a block part-full.
    for dtype, name in FLOATS:
        out.append(case("rows100", randn(41, 100, dtype=dtype), name))
        out.append(case("rows1000", randn(37, 1000, dtype=dtype), name))
        out.append(case("rows1001", randn(5, 1001, dtype=dtype), name))
        out.append(case("rows4096", randn(3, 4096, dtype=dtype), name))
        out.append(case("rows20000", randn(2, 20000, dtype=dtype), name))
    out.append(case("rows768_no_affine", randn(9, 768, dtype=torch.float16), "f16", weight=False, bias=False))
    out.append(case("rows768_offset", randn(5, 768) + 1000.0, "f32"))

    # A weight and bias that are not engine constants, which the CUDA row kernel reads only after its programmatic
    # wait (constants it prefetches before): the weight made by the step just before (abs of an input), the bias a
    # network input; in the row paths of 8 lanes, a warp and a block per row, 16-byte vectors.
    def computed_affine(what, x, name):
        n = x.shape[-1]
        negative_weight = rand(n, dtype=x.dtype, low=-1.5, high=-0.5)
        layers = layer("abs", ["negative_weight"], outputs=("w",)) + layer("layer_norm", ["x", "w", "b"])
        return Case(f"layer_norm_computed_affine_{what}_{name}", layers,
                    {"x": x, "negative_weight": negative_weight, "b": rand(n, dtype=x.dtype)},
                    lambda t: {"y": layer_norm_ref(t["x"], t["negative_weight"].abs(), t["b"], 1, 1e-5)})

    for dtype, name in FLOATS[1:3]:
        out.append(computed_affine("rows64", randn(37, 64, dtype=dtype), name))
        out.append(computed_affine("rows768", randn(41, 768, dtype=dtype), name))
        out.append(computed_affine("rows4096", randn(3, 4096, dtype=dtype), name))
    return out


def rms_norm_cases():
    out = []

    def case(what, x, dtype_name, rank=1, weight=True, eps=None, dynamic=None):
        shape = list(x.shape[x.dim() - rank:])
        weights = {"w": rand(*shape, dtype=x.dtype, low=0.5, high=1.5)} if weight else {}
        attrs = {"normalized_rank": rank}
        if eps is not None:
            attrs["epsilon"] = eps
        e = 1e-6 if eps is None else eps
        return Case(f"rms_norm_{what}_{dtype_name}", layer("rms_norm", ["x", "w" if weight else None], **attrs),
                    {"x": x}, lambda t: {"y": rms_norm_ref(t["x"], t.get("w"), rank, e)}, weights=weights,
                    dynamic={"x": dynamic} if dynamic else {})

    for dtype, name in FLOATS:
        out.append(case("hidden", randn(2, 7, 512, dtype=dtype), name))
    # Llama-7B: hidden 4096
    out.append(case("llama", randn(1, 3, 4096), "f32"))
    out.append(case("no_weight", randn(3, 13), "f32", weight=False))
    out.append(case("rank2", randn(2, 3, 5, 7), "f32", rank=2))
    out.append(case("dynamic", randn(2, 5, 32), "f32", dynamic=[-1, -1, 32]))
    out.append(case("epsilon", randn(4, 9, std=0.05), "f32", eps=0.01))
    out.append(case("zeros", torch.zeros(2, 8), "f32"))
    out.append(case("size1", randn(4, 1), "f32"))
    out.append(case("empty_batch", randn(0, 16), "f32"))
    for dtype, name in FLOATS:
        out.append(case("rows100", randn(41, 100, dtype=dtype), name))
        out.append(case("rows1000", randn(37, 1000, dtype=dtype), name))
        out.append(case("rows1001", randn(5, 1001, dtype=dtype), name))
        out.append(case("rows20000", randn(2, 20000, dtype=dtype), name))
    out.append(case("rows768_no_weight", randn(9, 768, dtype=torch.float16), "f16", weight=False))
    return out


# ---- batch_norm / group_norm / instance_norm ----

def batch_norm_cases():
    out = []

    def case(what, x, dtype_name, weight=True, bias=True, eps=None, dynamic=None):
        c = x.shape[1]
        weights = {"mean": randn(c, dtype=x.dtype), "var": rand(c, dtype=x.dtype, low=0.2, high=2.0)}
        if weight:
            weights["w"] = rand(c, dtype=x.dtype, low=0.5, high=1.5)
        if bias:
            weights["b"] = rand(c, dtype=x.dtype)
        inputs = ["x", "mean", "var", "w" if weight else None, "b" if bias else None]
        while inputs[-1] is None:
            inputs.pop()
        attrs = {} if eps is None else {"epsilon": eps}
        e = 1e-5 if eps is None else eps
        return Case(f"batch_norm_{what}_{dtype_name}", layer("batch_norm", inputs, **attrs), {"x": x},
                    lambda t: {"y": F.batch_norm(t["x"], t["mean"], t["var"], t.get("w"), t.get("b"), False, 0.0, e)},
                    weights=weights, dynamic={"x": dynamic} if dynamic else {})

    for dtype, name in FLOATS:
        # ResNet: NCHW
        out.append(case("nchw", randn(2, 16, 7, 7, dtype=dtype), name))
    out.append(case("rank2", randn(5, 13), "f32"))
    out.append(case("rank3", randn(2, 4, 9), "f32"))
    out.append(case("rank5", randn(1, 3, 2, 3, 4), "f32"))
    out.append(case("no_affine", randn(2, 3, 4, 5), "f32", weight=False, bias=False))
    out.append(case("weight_only", randn(2, 3, 4, 5), "f32", bias=False))
    out.append(case("bias_only", randn(2, 3, 4, 5), "f32", weight=False))
    out.append(case("epsilon", randn(2, 3, 5), "f32", eps=0.1))
    out.append(case("dynamic", randn(3, 8, 5, 6), "f32", dynamic=[-1, 8, -1, -1]))
    out.append(case("empty_batch", randn(0, 4, 3, 3), "f32"))
    out.append(case("empty_spatial", randn(2, 4, 0), "f32"))
    return out


def instance_norm_ref(x, w, b, eps):
    dims = tuple(range(2, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps)
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y


def group_norm_cases():
    out = []

    def case(what, x, groups, dtype_name, weight=True, bias=True, eps=None, dynamic=None):
        c = x.shape[1]
        weights = {}
        if weight:
            weights["w"] = rand(c, dtype=x.dtype, low=0.5, high=1.5)
        if bias:
            weights["b"] = rand(c, dtype=x.dtype)
        attrs = {"num_groups": groups}
        if eps is not None:
            attrs["epsilon"] = eps
        e = 1e-5 if eps is None else eps
        return Case(f"group_norm_{what}_{dtype_name}",
                    layer("group_norm", ["x", "w" if weight else None, "b" if bias else None], **attrs), {"x": x},
                    lambda t: {"y": F.group_norm(t["x"], groups, t.get("w"), t.get("b"), e)}, weights=weights,
                    dynamic={"x": dynamic} if dynamic else {})

    for dtype, name in FLOATS:
        # 32 groups, as Stable Diffusion's UNet and VAE use
        out.append(case("32groups", randn(2, 64, 5, 5, dtype=dtype), 32, name))
    out.append(case("rank2", randn(3, 12), 4, "f32"))
    out.append(case("rank3_odd", randn(2, 6, 13), 3, "f32"))
    out.append(case("one_group", randn(2, 6, 3, 3), 1, "f32"))
    out.append(case("group_per_channel", randn(2, 6, 3, 3), 6, "f32"))
    out.append(case("no_affine", randn(2, 8, 3, 3), 2, "f32", weight=False, bias=False))
    out.append(case("epsilon", randn(2, 4, 5, std=0.05), 2, "f32", eps=0.01))
    out.append(case("dynamic", randn(3, 8, 4, 5), 4, "f32", dynamic=[-1, 8, -1, -1]))
    out.append(case("dynamic_channels", randn(2, 8, 3), 4, "f32", dynamic=[-1, -1, -1]))
    out.append(case("empty_batch", randn(0, 4, 3), 2, "f32"))
    out.append(case("empty_spatial", randn(2, 4, 0), 2, "f32"))
    return out


def instance_norm_cases():
    out = []

    def case(what, x, dtype_name, weight=True, bias=True, eps=None, dynamic=None):
        c = x.shape[1]
        weights = {}
        if weight:
            weights["w"] = rand(c, dtype=x.dtype, low=0.5, high=1.5)
        if bias:
            weights["b"] = rand(c, dtype=x.dtype)
        attrs = {} if eps is None else {"epsilon": eps}
        e = 1e-5 if eps is None else eps
        return Case(f"instance_norm_{what}_{dtype_name}",
                    layer("instance_norm", ["x", "w" if weight else None, "b" if bias else None], **attrs), {"x": x},
                    lambda t: {"y": instance_norm_ref(t["x"], t.get("w"), t.get("b"), e)}, weights=weights,
                    dynamic={"x": dynamic} if dynamic else {})

    for dtype, name in FLOATS:
        out.append(case("nchw", randn(2, 5, 7, 9, dtype=dtype), name))
    out.append(case("rank3_odd", randn(2, 3, 17), "f32"))
    out.append(case("rank5", randn(1, 2, 3, 4, 5), "f32"))
    out.append(case("no_affine", randn(2, 3, 4, 4), "f32", weight=False, bias=False))
    out.append(case("epsilon", randn(2, 3, 6, std=0.05), "f32", eps=0.01))
    out.append(case("dynamic", randn(2, 4, 5, 6), "f32", dynamic=[-1, 4, -1, -1]))
    out.append(case("spatial_size1", randn(2, 3, 1), "f32"))
    out.append(case("empty_spatial", randn(2, 3, 0), "f32"))
    return out


def cases():
    return softmax_cases() + layer_norm_cases() + rms_norm_cases() + batch_norm_cases() + group_norm_cases() + \
        instance_norm_cases()
