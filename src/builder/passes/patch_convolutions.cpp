// Builder pass for the CUDA target: a convolution whose windows tile its input (kernel = stride, no padding) runs as
// one matrix product over the patches, which a library GEMM does far faster than a convolution kernel does.
#include <string>
#include <vector>

#include "builder/graph_rewriter.hpp"
#include "builder/passes/constant_data.hpp"
#include "builder/passes/passes.hpp"
#include "builder/passes/tensor_uses.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"

namespace tensoracle::builder {

namespace {

// Whether every entry of `values` (an absent attribute: `fallback` for all) equals `want`.
bool all_equal(const std::vector<std::int64_t>& values, std::int64_t want) {
  for (auto v : values) {
    if (v != want) return false;
  }
  return true;
}

// A 2D convolution [N, C, H, W] (channels first) by a constant weight [O, C, kh, kw] with stride (kh, kw), kernel
// larger than 1x1, no padding, no dilation, one group, H and W static multiples of the kernel, and no bias or a
// constant one: ViT's and Swin's patch embeddings, ConvNeXt's stem.
bool is_patch_convolution(const graph::Graph& g, const graph::Layer& layer) {
  if (layer.op != "conv" || layer.inputs.size() > 3 || layer.inputs.size() < 2) return false;
  if (g.tensor(layer.inputs[0]).shape.size() != 4 || !is_constant(g, layer.inputs[1])) return false;
  if (layer.inputs.size() == 3 && layer.inputs[2] >= 0 && !is_constant(g, layer.inputs[2])) return false;
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  if (attrs.get_string("layout", "nchw") != "nchw" || attrs.get_string("activation", "none") != "none") return false;
  if (attrs.get_int("groups", 1) != 1) return false;
  const Dims x = g.static_dims(layer.inputs[0]);
  const Dims w = g.static_dims(layer.inputs[1]);
  const std::int64_t kh = w[2], kw = w[3];
  if (kh * kw < 2 || x[2] <= 0 || x[3] <= 0 || x[2] % kh != 0 || x[3] % kw != 0) return false;
  const std::vector<std::int64_t> stride = attrs.get_ints("stride", std::vector<std::int64_t>{1, 1});
  const std::vector<std::int64_t> padding = attrs.get_ints("padding", std::vector<std::int64_t>{0, 0});
  const std::vector<std::int64_t> dilation = attrs.get_ints("dilation", std::vector<std::int64_t>{1, 1});
  return stride.size() == 2 && stride[0] == kh && stride[1] == kw && all_equal(padding, 0) && all_equal(dilation, 1);
}

// The transpose after a patch convolution's flatten — reshape [N, O, Ho, Wo] -> [N, O, Ho·Wo], then transpose
// [0, 2, 1] to [N, Ho·Wo, O] (ViT's and Swin's `flatten(2).transpose(1, 2)`) — when the convolution's output and the
// reshape's are read by nothing else: then the product's [N, Ho, Wo, O] rows, reshaped, are that transpose's output,
// and neither transpose is made. -1 when the pattern is not there.
std::int32_t flatten_transpose_after(const graph::Graph& g, const TensorUses& uses, const graph::Layer& conv) {
  const auto out = conv.outputs[0];
  const TensorUse* to_reshape = uses.only_reader(out);
  if (to_reshape == nullptr || g.layers[to_reshape->layer].op != "reshape") return -1;
  const graph::Layer& reshape = g.layers[to_reshape->layer];
  const TensorUse* to_transpose = uses.only_reader(reshape.outputs[0]);
  if (to_transpose == nullptr || g.layers[to_transpose->layer].op != "transpose") return -1;
  const graph::Layer& transpose = g.layers[to_transpose->layer];
  const auto perm =
      graph::AttrReader(transpose.attrs, transpose.name, transpose.op).get_ints("perm", std::vector<std::int64_t>{});
  const auto& conv_shape = g.tensor(out).shape;
  const auto& flat_shape = g.tensor(reshape.outputs[0]).shape;
  const Dims conv_dims = g.static_dims(out);
  const Dims flat = g.static_dims(reshape.outputs[0]);
  if (perm != std::vector<std::int64_t>{0, 2, 1} || flat.rank() != 3 || flat_shape[0] != conv_shape[0] ||
      flat[1] != conv_dims[1] || flat[2] != conv_dims[2] * conv_dims[3] || flat[2] <= 0) {
    return -1;
  }
  return static_cast<std::int32_t>(to_transpose->layer);
}

}  // namespace

Network patch_convolutions(const Network& network, WeightPool& pool) {
  const graph::Graph& g = graph::graph_of(network);
  const TensorUses uses(g);
  std::vector<bool> patch(g.layers.size(), false);      // the layers this pass rewrites
  std::vector<std::int32_t> tail(g.layers.size(), -1);  // patch convolution -> the transpose it absorbs
  std::vector<bool> absorbed(g.layers.size(), false);   // that transpose and the reshape before it
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    patch[l] = is_patch_convolution(g, g.layers[l]);
    if (!patch[l]) continue;
    tail[l] = flatten_transpose_after(g, uses, g.layers[l]);
    if (tail[l] < 0) continue;
    absorbed[static_cast<std::size_t>(tail[l])] = true;
    absorbed[uses.only_reader(g.layers[l].outputs[0])->layer] = true;
  }
  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& layer = g.layers[l];
    if (absorbed[l]) continue;
    if (!patch[l]) {
      rewriter.copy_layer(layer);
      continue;
    }
    const Dims xd = g.static_dims(layer.inputs[0]);
    const Dims wd = g.static_dims(layer.inputs[1]);
    const std::int64_t c = xd[1], kh = wd[2], kw = wd[3], ho = xd[2] / kh, wo = xd[3] / kw, o = wd[0];
    // [N, C, H, W] -> [N, C, Ho, kh, Wo, kw] -> [N, Ho, Wo, C, kh, kw] -> [N, Ho, Wo, C·kh·kw]: one row per patch, in
    // the weight's own (C, kh, kw) order, so the weight [O, C, kh, kw] is already the product's [O, C·kh·kw].
    const std::string& name = layer.name;
    Tensor x =
        net.add_layer("reshape", {rewriter.get(layer.inputs[0])},
                      Attributes{{"shape", std::vector<std::int64_t>{0, c, ho, kh, wo, kw}}}, name + "/windows")[0];
    x = net.add_layer("transpose", {x}, Attributes{{"perm", std::vector<std::int64_t>{0, 2, 4, 1, 3, 5}}},
                      name + "/patches")[0];
    x = net.add_layer("reshape", {x}, Attributes{{"shape", std::vector<std::int64_t>{0, ho, wo, c * kh * kw}}},
                      name + "/patch_rows")[0];
    HostTensor w = constant_tensor(g, layer.inputs[1]);
    const std::string wname = name + "/weight_rows";
    Tensor weight = net.add_constant(pool.add(wname, w.dtype, Dims{o, c * kh * kw}, std::move(w.bytes)), wname);
    std::vector<Tensor> inputs = {x, weight};
    if (layer.inputs.size() == 3 && layer.inputs[2] >= 0) inputs.push_back(rewriter.get(layer.inputs[2]));
    Tensor y = net.add_layer("linear", inputs, {}, name)[0];
    net.rename_tensor(y, g.tensor(layer.outputs[0]).name + ".patch_rows");
    if (tail[l] >= 0) {
      // [N, Ho, Wo, O] -> [N, Ho·Wo, O], the flatten's transpose output under its name.
      const auto out = g.layers[static_cast<std::size_t>(tail[l])].outputs[0];
      y = net.add_layer("reshape", {y}, Attributes{{"shape", std::vector<std::int64_t>{0, ho * wo, o}}},
                        name + "/flatten")[0];
      net.rename_tensor(y, g.tensor(out).name);
      rewriter.set(out, y);
      continue;
    }
    // [N, Ho, Wo, O] -> [N, O, Ho, Wo], the convolution's output under its name.
    y = net.add_layer("transpose", {y}, Attributes{{"perm", std::vector<std::int64_t>{0, 3, 1, 2}}},
                      name + "/to_nchw")[0];
    net.rename_tensor(y, g.tensor(layer.outputs[0]).name);
    rewriter.set(layer.outputs[0], y);
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
