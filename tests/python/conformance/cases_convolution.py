"""Conformance cases of the convolution family: conv (1D/2D), conv_transpose2d, max/avg pooling,
global average pooling and resize.

conv and conv_transpose2d run as gemm in the CPU reference (sgemm with fp32 accumulation for f32,
f16 and bf16; dgemm for f64); their reduction lengths (C/groups * kh * kw, at most 144 here) keep the
f32 default tolerance (1e-5) comfortably.
"""
import torch
import torch.nn.functional as F

from .framework import Case, rand

F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64


def conv(name, x, weight, bias=None, stride=None, padding=None, dilation=None, groups=1, dynamic=None):
    attrs = {}
    if stride is not None:
        attrs["stride"] = stride
    if padding is not None:
        attrs["padding"] = padding
    if dilation is not None:
        attrs["dilation"] = dilation
    if groups != 1:
        attrs["groups"] = groups
    spatial = x.dim() - 2
    fn = F.conv1d if spatial == 1 else F.conv2d

    def reference(t):
        return {"y": fn(t["x"], t["w"], t.get("b"), stride=stride or 1, padding=padding or 0,
                        dilation=dilation or 1, groups=groups)}

    weights = {"w": weight}
    if bias is not None:
        weights["b"] = bias
    return Case(name, [{"op": "conv", "inputs": ["x", "w", "b" if bias is not None else None], "outputs": ["y"],
                        "attrs": attrs}], {"x": x}, reference, weights=weights, dynamic=dynamic or {})


def patch_tokens(name, x, weight, bias, patch):
    """ViT's patch embedding: conv (kernel = stride = patch) named as its output, flatten(2), transpose(1, 2) to
    [N, patches, E]: on CUDA targets one product whose rows, reshaped, are the tokens."""
    n, e = x.shape[0], weight.shape[0]
    patches = (x.shape[2] // patch) * (x.shape[3] // patch)

    def reference(t):
        y = F.conv2d(t["x"], t["w"], t["b"], stride=patch)
        return {"tokens": y.reshape(n, e, patches).transpose(1, 2)}

    layers = [{"name": "conv_proj", "op": "conv", "inputs": ["x", "w", "b"], "outputs": ["conv_proj"],
               "attrs": {"stride": [patch, patch]}},
              {"name": "flatten", "op": "reshape", "inputs": ["conv_proj"], "outputs": ["flat"],
               "attrs": {"shape": [0, e, patches]}},
              {"name": "permute", "op": "transpose", "inputs": ["flat"], "outputs": ["tokens"],
               "attrs": {"perm": [0, 2, 1]}}]
    return Case(name, layers, {"x": x}, reference, weights={"w": weight, "b": bias}, outputs=["tokens"],
                dynamic={"x": [-1] + list(x.shape[1:])})


def conv_transpose(name, x, weight, bias=None, stride=None, padding=None, output_padding=None, dilation=None,
                   groups=1, dynamic=None):
    attrs = {}
    for key, value in (("stride", stride), ("padding", padding), ("output_padding", output_padding),
                       ("dilation", dilation)):
        if value is not None:
            attrs[key] = value
    if groups != 1:
        attrs["groups"] = groups

    def reference(t):
        return {"y": F.conv_transpose2d(t["x"], t["w"], t.get("b"), stride=stride or 1, padding=padding or 0,
                                        output_padding=output_padding or 0, groups=groups, dilation=dilation or 1)}

    weights = {"w": weight}
    inputs = ["x", "w"]
    if bias is not None:
        weights["b"] = bias
        inputs.append("b")
    return Case(name, [{"op": "conv_transpose2d", "inputs": inputs, "outputs": ["y"], "attrs": attrs}], {"x": x},
                reference, weights=weights, dynamic=dynamic or {})


def pool(name, op, x, kernel, stride=None, padding=None, ceil_mode=False, count_include_pad=True, dynamic=None,
         layout=None):
    """layout "nhwc": x is [N, H, W, C]; PyTorch pools its channels-first view and the result is permuted back."""
    attrs = {"kernel": kernel}
    if layout is not None:
        attrs["layout"] = layout
    if stride is not None:
        attrs["stride"] = stride
    if padding is not None:
        attrs["padding"] = padding
    if ceil_mode:
        attrs["ceil_mode"] = 1
    if not count_include_pad:
        attrs["count_include_pad"] = 0

    def reference(t):
        x = t["x"].permute(0, 3, 1, 2) if layout == "nhwc" else t["x"]
        if op == "max_pool2d":
            y = F.max_pool2d(x, kernel, stride=stride or kernel, padding=padding or 0, ceil_mode=ceil_mode)
        else:
            y = F.avg_pool2d(x, kernel, stride=stride or kernel, padding=padding or 0, ceil_mode=ceil_mode,
                             count_include_pad=count_include_pad)
        return {"y": y.permute(0, 2, 3, 1).contiguous() if layout == "nhwc" else y}

    return Case(name, [{"op": op, "inputs": ["x"], "outputs": ["y"], "attrs": attrs}], {"x": x}, reference,
                dynamic=dynamic or {})


def blocks_to_channels_first(x, b):
    """x [N, H, W, b·b·C] in b x b cells (element (dy, dx) of a cell at channels (dy·b + dx)·C) as [N, C, b·H, b·W]."""
    n, h, w, cc = x.shape
    c = cc // (b * b)
    return x.reshape(n, h, w, b, b, c).permute(0, 5, 1, 3, 2, 4).reshape(n, c, b * h, b * w)


def pool_blocks(name, x, kernel, stride, padding, dynamic=None):
    """max_pool2d of a channels-last x in 2x2 cells (input_block_size 2: what a stem convolution in its blocked form
    writes, builder::to_channels_last)."""
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "layout": "nhwc", "input_block_size": 2}

    def reference(t):
        y = F.max_pool2d(blocks_to_channels_first(t["x"], 2), kernel, stride=stride, padding=padding)
        return {"y": y.permute(0, 2, 3, 1).contiguous()}

    return Case(name, [{"op": "max_pool2d", "inputs": ["x"], "outputs": ["y"], "attrs": attrs}], {"x": x}, reference,
                dynamic=dynamic or {})


def stem_pool(name, x, weight, bias, dynamic=None):
    """A CNN's stem: conv 7x7 stride 2 padding 3, relu, max pool 3x3 stride 2 padding 1. On CUDA targets, with even
    result extents, the convolution runs on the 4x4 space-to-depth input and the max pool reads its 2x2 cells."""
    layers = [{"op": "conv", "inputs": ["x", "w", "b"], "outputs": ["h"], "attrs": {"stride": [2, 2], "padding": [3, 3]}},
              {"op": "relu", "inputs": ["h"], "outputs": ["hr"], "attrs": {}},
              {"op": "max_pool2d", "inputs": ["hr"], "outputs": ["y"],
               "attrs": {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]}}]

    def reference(t):
        h = F.conv2d(t["x"].to(torch.float64), t["w"].to(torch.float64), t["b"].to(torch.float64), stride=2, padding=3)
        return {"y": F.max_pool2d(h.relu(), 3, stride=2, padding=1).to(t["x"].dtype)}

    return Case(name, layers, {"x": x}, reference, weights={"w": weight, "b": bias}, outputs=["y"],
                dynamic=dynamic or {})


def conv_weight_input(name, x, weight, dynamic):
    """A conv whose weight is a network input, so that its kernel dims may be dynamic too."""
    return Case(name, [{"op": "conv", "inputs": ["x", "w"], "outputs": ["y"], "attrs": {"padding": [1, 0]}}],
                {"x": x, "w": weight}, lambda t: {"y": F.conv2d(t["x"], t["w"], padding=[1, 0])}, dynamic=dynamic)


def with_nan(x, *index):
    x = x.clone()
    x[index] = float("nan")
    return x


def global_avg_pool(name, x, dynamic=None):
    def reference(t):
        return {"y": t["x"].mean(dim=tuple(range(2, t["x"].dim())), keepdim=True)}

    return Case(name, [{"op": "global_avg_pool", "inputs": ["x"], "outputs": ["y"]}], {"x": x}, reference,
                dynamic=dynamic or {})


def resize(name, x, mode, size, align_corners=False, dynamic=None):
    attrs = {"mode": mode, "size": size}
    if align_corners:
        attrs["align_corners"] = 1

    def reference(t):
        if mode == "nearest":
            # The documented source index floor(dst * in / out), exactly (integer arithmetic). PyTorch's own
            # nearest index differs between versions and dtypes where dst * in / out is an integer.
            x = t["x"]
            rows = torch.tensor([(d * x.shape[2]) // size[0] for d in range(size[0])], dtype=torch.int64)
            cols = torch.tensor([(d * x.shape[3]) // size[1] for d in range(size[1])], dtype=torch.int64)
            return {"y": x.index_select(2, rows).index_select(3, cols)}
        return {"y": F.interpolate(t["x"], size=size, mode="bilinear", align_corners=align_corners)}

    return Case(name, [{"op": "resize", "inputs": ["x"], "outputs": ["y"], "attrs": attrs}], {"x": x}, reference,
                dynamic=dynamic or {})


def cases():
    return [
        # ---- conv 1D ----
        conv("conv_1d_bias_f32", rand(2, 3, 13), rand(4, 3, 3), rand(4)),
        conv("conv_1d_stride_pad_dilation_f16", rand(2, 4, 17, dtype=F16), rand(6, 4, 3, dtype=F16),
             rand(6, dtype=F16), stride=[2], padding=[3], dilation=[2]),
        conv("conv_1d_depthwise_bf16", rand(1, 5, 11, dtype=BF16), rand(5, 1, 4, dtype=BF16), padding=[1], groups=5),
        conv("conv_1d_dynamic_f64", rand(3, 2, 9, dtype=F64), rand(3, 2, 5, dtype=F64), rand(3, dtype=F64),
             padding=[2], dynamic={"x": [-1, 2, -1]}),
        # ---- conv 2D ----
        conv("conv_2d_bias_f32", rand(2, 3, 9, 11), rand(5, 3, 3, 3), rand(5)),
        conv("conv_2d_bias_f16", rand(2, 3, 9, 11, dtype=F16), rand(5, 3, 3, 3, dtype=F16), rand(5, dtype=F16),
             padding=[1, 1]),
        conv("conv_2d_nobias_bf16", rand(1, 3, 7, 13, dtype=BF16), rand(4, 3, 3, 5, dtype=BF16), padding=[1, 2]),
        conv("conv_2d_bias_f64", rand(2, 3, 7, 6, dtype=F64), rand(4, 3, 2, 3, dtype=F64), rand(4, dtype=F64),
             stride=[2, 2], padding=[1, 1]),
        conv("conv_2d_1x1_f32", rand(2, 16, 5, 7), rand(8, 16, 1, 1), rand(8)),
        # Patchings (kernel = stride, no padding): one product over the patches on CUDA targets.
        conv("conv_2d_patches_f16", rand(2, 3, 32, 48, dtype=F16), rand(16, 3, 8, 8, dtype=F16) * 0.2,
             rand(16, dtype=F16), stride=[8, 8], dynamic={"x": [-1, 3, 32, 48]}),
        conv("conv_2d_patches_rect_nobias_f32", rand(1, 4, 6, 12), rand(5, 4, 2, 3), stride=[2, 3]),
        patch_tokens("conv_2d_patches_flatten_tokens_f16", rand(3, 3, 32, 32, dtype=F16),
                     rand(24, 3, 8, 8, dtype=F16) * 0.2, rand(24, dtype=F16), 8),
        # Stride-2 convolutions of an image: on CUDA targets a stride-1 convolution of the space-to-depth input.
        conv("conv_2d_stem_3_channels_f16", rand(2, 3, 20, 20, dtype=F16), rand(8, 3, 7, 7, dtype=F16) * 0.2,
             rand(8, dtype=F16), stride=[2, 2], padding=[3, 3]),
        conv("conv_2d_stem_odd_extent_bf16", rand(2, 3, 21, 18, dtype=BF16), rand(6, 3, 7, 7, dtype=BF16) * 0.2,
             rand(6, dtype=BF16), stride=[2, 2], padding=[3, 3], dynamic={"x": [-1, 3, 21, 18]}),
        conv("conv_2d_3x3_stride2_3_channels_f16", rand(2, 3, 17, 16, dtype=F16), rand(8, 3, 3, 3, dtype=F16) * 0.3,
             stride=[2, 2], padding=[1, 1]),
        conv("conv_2d_1x1_stride_f16", rand(1, 8, 7, 9, dtype=F16), rand(3, 8, 1, 1, dtype=F16), stride=[2, 3]),
        conv("conv_2d_grouped_f32", rand(2, 6, 8, 9), rand(9, 2, 3, 3), rand(9), padding=[1, 1], groups=3),
        conv("conv_2d_depthwise_f32", rand(2, 8, 10, 7), rand(8, 1, 3, 3), rand(8), padding=[1, 1], groups=8),
        # 16 channels: channels-last cuDNN graph plans on CUDA targets (whose x and w were once read as f16 for bf16).
        conv("conv_2d_16_channels_bf16", rand(2, 16, 9, 9, dtype=BF16), rand(16, 16, 3, 3, dtype=BF16) * 0.3,
             rand(16, dtype=BF16), padding=[1, 1]),
        conv("conv_2d_16_channels_f16", rand(2, 16, 9, 9, dtype=F16), rand(16, 16, 3, 3, dtype=F16) * 0.3,
             rand(16, dtype=F16), padding=[1, 1]),
        # 1x1: on CUDA targets also a product over the pixels (timed against cuDNN's plans).
        conv("conv_2d_1x1_16_channels_f16", rand(2, 16, 6, 7, dtype=F16), rand(32, 16, 1, 1, dtype=F16) * 0.3,
             rand(32, dtype=F16)),
        conv("conv_2d_1x1_16_channels_bf16", rand(2, 16, 6, 7, dtype=BF16), rand(32, 16, 1, 1, dtype=BF16) * 0.3,
             rand(32, dtype=BF16)),
        conv("conv_2d_depthwise_multiplier_bf16", rand(1, 4, 9, 9, dtype=BF16), rand(8, 1, 3, 3, dtype=BF16),
             rand(8, dtype=BF16), stride=[2, 2], padding=[1, 1], groups=4),
        conv("conv_2d_dilation_f64", rand(1, 2, 13, 11, dtype=F64), rand(3, 2, 3, 3, dtype=F64), dilation=[2, 3],
             padding=[2, 1]),
        conv("conv_2d_asymmetric_f32", rand(2, 3, 13, 7), rand(4, 3, 3, 2), rand(4), stride=[2, 1], padding=[1, 2],
             dilation=[1, 2]),
        conv("conv_2d_kernel_as_input_f32", rand(2, 16, 3, 3), rand(7, 16, 3, 3), rand(7)),
        conv("conv_2d_large_k_f32", rand(1, 16, 11, 12), rand(6, 16, 3, 3), rand(6), padding=[1, 1]),
        conv("conv_2d_empty_batch_f32", rand(0, 3, 5, 5), rand(4, 3, 3, 3), rand(4)),
        conv("conv_2d_dynamic_f32", rand(2, 3, 9, 10), rand(4, 3, 3, 3), rand(4), stride=[2, 2], padding=[1, 1],
             dynamic={"x": [-1, 3, -1, -1]}),
        conv_weight_input("conv_2d_dynamic_weight_input_f32", rand(2, 3, 6, 9), rand(4, 3, 3, 2),
                          dynamic={"x": [2, 3, -1, -1], "w": [-1, 3, -1, -1]}),
        # ---- conv_transpose2d ----
        conv_transpose("conv_transpose2d_bias_f32", rand(2, 3, 5, 6), rand(3, 4, 3, 3), rand(4)),
        conv_transpose("conv_transpose2d_stride_output_padding_f32", rand(1, 4, 5, 7), rand(4, 2, 3, 3), rand(2),
                       stride=[2, 2], padding=[1, 1], output_padding=[1, 1]),
        conv_transpose("conv_transpose2d_asymmetric_f16", rand(2, 3, 4, 7, dtype=F16), rand(3, 5, 2, 3, dtype=F16),
                       rand(5, dtype=F16), stride=[3, 1], padding=[1, 0], output_padding=[2, 0]),
        conv_transpose("conv_transpose2d_grouped_dilation_bf16", rand(1, 4, 5, 5, dtype=BF16),
                       rand(4, 3, 3, 3, dtype=BF16), rand(6, dtype=BF16), dilation=[2, 2], output_padding=[1, 1],
                       groups=2),
        conv_transpose("conv_transpose2d_depthwise_f64", rand(2, 3, 6, 5, dtype=F64), rand(3, 1, 4, 4, dtype=F64),
                       stride=[2, 2], padding=[1, 1], groups=3),
        conv_transpose("conv_transpose2d_1x1_f32", rand(1, 8, 3, 5), rand(8, 3, 1, 1), rand(3)),
        conv_transpose("conv_transpose2d_empty_batch_f32", rand(0, 2, 3, 3), rand(2, 2, 3, 3)),
        conv_transpose("conv_transpose2d_dynamic_f32", rand(2, 3, 5, 4), rand(3, 2, 3, 3), rand(2), stride=[2, 2],
                       padding=[1, 1], output_padding=[1, 0], dynamic={"x": [-1, 3, -1, -1]}),
        # ---- max_pool2d ----
        pool("max_pool2d_basic_f32", "max_pool2d", rand(2, 3, 8, 10), [2, 2]),
        pool("max_pool2d_pad_stride_f16", "max_pool2d", rand(2, 3, 9, 11, dtype=F16), [3, 3], stride=[2, 2],
             padding=[1, 1]),
        pool("max_pool2d_odd_bf16", "max_pool2d", rand(1, 2, 7, 13, dtype=BF16), [3, 2], stride=[2, 3]),
        pool("max_pool2d_ceil_f64", "max_pool2d", rand(1, 2, 7, 13, dtype=F64), [2, 3], stride=[2, 2],
             ceil_mode=True),
        # H: ceil((4 + 2 - 2) / 3) + 1 = 3, but the last window would start at 6 >= 4 + 1: dropped.
        pool("max_pool2d_ceil_drop_last_f32", "max_pool2d", rand(2, 2, 4, 9), [2, 4], stride=[3, 3], padding=[1, 2],
             ceil_mode=True),
        pool("max_pool2d_nan_propagates_f32", "max_pool2d", with_nan(rand(1, 2, 6, 6), 0, 1, 2, 3), [2, 2]),
        pool("max_pool2d_empty_batch_f32", "max_pool2d", rand(0, 2, 5, 5), [2, 2]),
        pool("max_pool2d_dynamic_f32", "max_pool2d", rand(2, 3, 9, 8), [3, 3], stride=[2, 2], padding=[1, 1],
             ceil_mode=True, dynamic={"x": [-1, -1, -1, -1]}),
        # Channels last: whole 16-byte words of channels (a CUDA thread per word: ResNet's stem pool) and not.
        pool("max_pool2d_nhwc_words_f16", "max_pool2d", rand(2, 9, 11, 24, dtype=F16), [3, 3], stride=[2, 2],
             padding=[1, 1], layout="nhwc"),
        pool("max_pool2d_nhwc_words_nan_f32", "max_pool2d", with_nan(rand(1, 6, 6, 8), 0, 1, 2, 3), [2, 2],
             layout="nhwc"),
        pool("max_pool2d_nhwc_words_3x3_nan_f32", "max_pool2d", with_nan(rand(1, 7, 6, 8), 0, 4, 3, 5), [3, 3],
             stride=[2, 2], padding=[1, 1], layout="nhwc"),
        pool("max_pool2d_nhwc_words_3x3_stride1_bf16", "max_pool2d", rand(2, 5, 7, 16, dtype=BF16), [3, 3],
             padding=[1, 1], layout="nhwc"),
        pool("max_pool2d_nhwc_words_ceil_dynamic_f64", "max_pool2d", rand(3, 7, 5, 4, dtype=F64), [2, 3],
             stride=[2, 2], ceil_mode=True, layout="nhwc", dynamic={"x": [-1, 7, 5, 4]}),
        pool("max_pool2d_nhwc_odd_channels_bf16", "max_pool2d", rand(2, 7, 5, 3, dtype=BF16), [3, 2], stride=[2, 1],
             padding=[1, 1], layout="nhwc"),
        # Channels last in 2x2 cells (input_block_size 2): whole words of channels and not.
        pool_blocks("max_pool2d_nhwc_blocks_words_f16", rand(2, 5, 6, 4 * 16, dtype=F16), [3, 3], [2, 2], [1, 1],
                    dynamic={"x": [-1, 5, 6, 64]}),
        pool_blocks("max_pool2d_nhwc_blocks_odd_channels_bf16", rand(2, 4, 3, 4 * 3, dtype=BF16), [3, 2], [2, 1],
                    [1, 1]),
        pool_blocks("max_pool2d_nhwc_blocks_words_nan_f32", with_nan(rand(1, 3, 3, 4 * 4), 0, 1, 2, 3), [2, 2], [2, 2],
                    [0, 0]),
        pool_blocks("max_pool2d_nhwc_blocks_words_3x3_nan_f32", with_nan(rand(2, 3, 4, 4 * 8), 1, 2, 1, 13), [3, 3],
                    [2, 2], [1, 1]),
        # A stem and its max pool: results 12 x 10 (the blocked form on CUDA), and 8 x 9 (the 2x2 form).
        stem_pool("stem_pool_blocks_f16", rand(2, 3, 24, 20, dtype=F16), rand(16, 3, 7, 7, dtype=F16) * 0.2,
                  rand(16, dtype=F16), dynamic={"x": [-1, 3, 24, 20]}),
        stem_pool("stem_pool_blocks_bf16", rand(1, 3, 16, 16, dtype=BF16), rand(8, 3, 7, 7, dtype=BF16) * 0.2,
                  rand(8, dtype=BF16)),
        stem_pool("stem_pool_odd_extent_f16", rand(2, 3, 15, 18, dtype=F16), rand(16, 3, 7, 7, dtype=F16) * 0.2,
                  rand(16, dtype=F16)),
        # ---- avg_pool2d ----
        pool("avg_pool2d_basic_f32", "avg_pool2d", rand(2, 3, 8, 10), [2, 2]),
        pool("avg_pool2d_pad_include_f16", "avg_pool2d", rand(2, 3, 9, 11, dtype=F16), [3, 3], stride=[2, 2],
             padding=[1, 1]),
        pool("avg_pool2d_pad_exclude_f32", "avg_pool2d", rand(2, 3, 9, 11), [3, 3], stride=[2, 2], padding=[1, 1],
             count_include_pad=False),
        # H: the last ceil_mode window starts at 5 and is clipped at the padded edge 7 (2 rows).
        pool("avg_pool2d_ceil_include_f64", "avg_pool2d", rand(1, 2, 6, 7, dtype=F64), [3, 3], stride=[2, 2],
             padding=[1, 1], ceil_mode=True),
        pool("avg_pool2d_ceil_exclude_bf16", "avg_pool2d", rand(1, 2, 6, 7, dtype=BF16), [3, 3], stride=[2, 2],
             padding=[1, 1], ceil_mode=True, count_include_pad=False),
        pool("avg_pool2d_ceil_drop_last_f32", "avg_pool2d", rand(2, 2, 4, 9), [2, 4], stride=[3, 3], padding=[1, 2],
             ceil_mode=True),
        pool("avg_pool2d_dynamic_f32", "avg_pool2d", rand(2, 3, 7, 13), [2, 3], stride=[1, 2],
             dynamic={"x": [2, 3, -1, -1]}),
        # ---- global_avg_pool ----
        global_avg_pool("global_avg_pool_2d_f32", rand(2, 3, 7, 13)),
        global_avg_pool("global_avg_pool_1d_f16", rand(2, 5, 13, dtype=F16)),
        global_avg_pool("global_avg_pool_3d_bf16", rand(1, 2, 3, 4, 5, dtype=BF16)),
        global_avg_pool("global_avg_pool_2d_f64", rand(2, 3, 7, 13, dtype=F64)),
        global_avg_pool("global_avg_pool_size1_f32", rand(1, 1, 1, 1)),
        global_avg_pool("global_avg_pool_empty_channels_f32", rand(2, 0, 3, 3)),
        global_avg_pool("global_avg_pool_empty_spatial_f32", rand(2, 3, 0, 4)),  # mean of nothing: NaN
        global_avg_pool("global_avg_pool_dynamic_f32", rand(3, 4, 5, 6), dynamic={"x": [-1, -1, -1, -1]}),
        # ---- resize ----
        resize("resize_nearest_up_f32", rand(2, 3, 5, 7), "nearest", [13, 11]),
        resize("resize_nearest_down_f16", rand(2, 3, 13, 11, dtype=F16), "nearest", [5, 7]),
        # Source index floor(dst * in / out) where it is an integer: 26 -> 22 maps dst 11 to 13 (with the
        # scale in float, as PyTorch's f32 kernel: 12), 2 -> 98 maps dst 49 to 1 (in double: 0).
        resize("resize_nearest_float_scale_f64", rand(1, 2, 26, 2, dtype=F64), "nearest", [22, 98]),
        resize("resize_nearest_2x_bf16", rand(1, 2, 4, 5, dtype=BF16), "nearest", [8, 10]),
        resize("resize_nearest_to_1_f64", rand(1, 2, 4, 5, dtype=F64), "nearest", [1, 1]),
        resize("resize_bilinear_up_f32", rand(2, 3, 5, 7), "bilinear", [13, 11]),
        resize("resize_bilinear_down_f32", rand(2, 3, 13, 11), "bilinear", [5, 7]),
        resize("resize_bilinear_align_corners_up_f16", rand(2, 3, 5, 7, dtype=F16), "bilinear", [13, 11],
               align_corners=True),
        resize("resize_bilinear_align_corners_down_bf16", rand(1, 3, 13, 11, dtype=BF16), "bilinear", [5, 7],
               align_corners=True),
        resize("resize_bilinear_mixed_f64", rand(2, 2, 6, 9, dtype=F64), "bilinear", [9, 4]),
        resize("resize_bilinear_from_1_f32", rand(1, 2, 1, 1), "bilinear", [3, 4]),
        resize("resize_bilinear_align_corners_to_1_f32", rand(1, 2, 5, 6), "bilinear", [1, 1], align_corners=True),
        resize("resize_bilinear_same_size_f32", rand(1, 2, 5, 6), "bilinear", [5, 6]),
        resize("resize_nearest_empty_batch_f32", rand(0, 2, 4, 4), "nearest", [3, 5]),
        resize("resize_bilinear_dynamic_f32", rand(2, 3, 6, 5), "bilinear", [9, 7], dynamic={"x": [-1, -1, -1, -1]}),
    ]
