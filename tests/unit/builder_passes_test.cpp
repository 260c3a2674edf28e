// Tests of the CUDA-target builder passes (matmul + bias as linear, products of one input fused, fused epilogues,
// channels last, attention layouts): the rewritten network computes what the original does (CPU reference executor) and
// has the expected layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "builder/memory_plan.hpp"
#include "builder/passes/passes.hpp"
#include "builder/weight_pool.hpp"
#include "graph/graph.hpp"
#include "graph/shape_eval.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {
namespace {

// Random f32 constants owned by a pool that outlives the networks.
struct Constants {
  builder::WeightPool pool;
  std::mt19937 rng{11};
  Tensor add(Network& net, const std::string& name, const Dims& shape, float scale = 0.3f) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(static_cast<std::size_t>(shape.volume()));
    for (auto& x : v) x = dist(rng);
    std::vector<std::byte> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return net.add_constant(pool.add(name, DataType::kF32, shape, std::move(bytes)), name);
  }
};

HostTensor random_input(const Dims& shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  HostTensor t(DataType::kF32, shape);
  for (std::size_t i = 0; i < t.size(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

std::vector<double> as_f64(const HostTensor& t) {
  std::vector<double> v(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) {
    switch (t.dtype) {
      case DataType::kF32: v[i] = t.data<float>()[i]; break;
      case DataType::kF16: v[i] = f16_bits_to_f32(t.data<std::uint16_t>()[i]); break;
      default: ADD_FAILURE() << "unexpected dtype"; break;
    }
  }
  return v;
}

double rel_l2(const HostTensor& got, const HostTensor& want) {
  EXPECT_EQ(got.shape, want.shape);
  const auto g = as_f64(got), w = as_f64(want);
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < g.size() && i < w.size(); ++i) {
    err += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return std::sqrt(err / norm);
}

int count_ops(const Network& net, const std::string& op) {
  int n = 0;
  for (const auto& layer : graph::graph_of(net).layers) n += layer.op == op ? 1 : 0;
  return n;
}

std::string attr(const graph::Layer& layer, const char* name) {
  auto it = layer.attrs.find(name);
  return it == layer.attrs.end() ? "" : std::get<std::string>(it->second);
}

std::vector<std::int64_t> ints_attr(const graph::Layer& layer, const char* name) {
  auto it = layer.attrs.find(name);
  return it == layer.attrs.end() ? std::vector<std::int64_t>{} : std::get<std::vector<std::int64_t>>(it->second);
}

// A bottleneck-like block: conv+relu, conv, + identity, relu, max pool, global average pool.
Network resnet_block(Constants& c) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 8, 10, 10});
  ConvOptions pad;
  pad.padding = {1, 1};
  Tensor h = net.add_convolution(x, c.add(net, "c1.w", {8, 8, 3, 3}), c.add(net, "c1.b", {8}), pad);
  h = net.add_activation("relu", h);
  h = net.add_convolution(h, c.add(net, "c2.w", {8, 8, 3, 3}), c.add(net, "c2.b", {8}), pad);
  h = net.add_activation("relu", net.add_binary("add", h, x));
  net.mark_output(h, "features");  // also read by the pooling: needs a channels-first twin
  Tensor p = net.add_layer("max_pool2d", {h}, {{"kernel", std::vector<std::int64_t>{2, 2}}})[0];
  Tensor q = net.add_convolution(p, c.add(net, "c3.w", {4, 8, 1, 1}), c.add(net, "c3.b", {4}));
  net.mark_output(net.add_global_average_pool(net.add_activation("relu", q)), "pooled");
  return net;
}

TEST(BuilderPasses, ConvEpiloguesFuseReluAndResidualAndKeepResults) {
  Constants c;
  Network net = resnet_block(c);
  Network fused = builder::fuse_epilogues(net);
  EXPECT_EQ(count_ops(fused, "relu"), 0);
  EXPECT_EQ(count_ops(fused, "add"), 0);
  EXPECT_EQ(count_ops(fused, "conv"), 3);
  int with_residual = 0;
  for (const auto& layer : graph::graph_of(fused).layers) {
    if (layer.op != "conv") continue;
    EXPECT_EQ(attr(layer, "activation"), "relu") << layer.name;
    with_residual += layer.inputs.size() > 3 ? 1 : 0;
  }
  EXPECT_EQ(with_residual, 1);
  std::map<std::string, HostTensor> in{{"x", random_input({2, 8, 10, 10}, 1)}};
  auto want = run_reference(net, in), got = run_reference(fused, in);
  for (const char* name : {"features", "pooled"}) EXPECT_LT(rel_l2(got.at(name), want.at(name)), 1e-6) << name;
}

TEST(BuilderPasses, ChannelsLastKeepsResultsAndTransposesOnlyAtTheEdges) {
  Constants c;
  Network net = resnet_block(c);
  Network low = builder::lower_precision(net, DataType::kF16, c.pool, plugin::Device::kHost);
  Network last = builder::to_channels_last(builder::fuse_epilogues(low), c.pool);
  int nhwc = 0;
  for (const auto& layer : graph::graph_of(last).layers) {
    if (layer.op == "conv" || layer.op == "max_pool2d" || layer.op == "global_avg_pool") {
      EXPECT_EQ(attr(layer, "layout"), "nhwc") << layer.name;
      ++nhwc;
    }
  }
  EXPECT_EQ(nhwc, 5);
  // One transpose in (x, read by the first conv and as the residual), one out (the "features" output).
  EXPECT_EQ(count_ops(last, "transpose"), 2);
  std::map<std::string, HostTensor> in{{"x", random_input({2, 8, 10, 10}, 2)}};
  auto want = run_reference(net, in), got = run_reference(last, in);
  for (const char* name : {"features", "pooled"}) EXPECT_LT(rel_l2(got.at(name), want.at(name)), 5e-3) << name;
  // f32 convolutions stay channels first.
  Network f32 = builder::to_channels_last(net, c.pool);
  EXPECT_EQ(count_ops(f32, "transpose"), 0);
}

TEST(BuilderPasses, ConvolutionsOfAnImageReadItsChannelsPaddedToEight) {
  Constants c;
  Network net;
  // A CNN stem (7x7 stride 2 on 3 channels, relu, max pool) and a ViT-like patch projection of the same image; a
  // depthwise convolution (groups = channels) is left as it is.
  Tensor x = net.add_input("x", DataType::kF32, {2, 3, 16, 16});
  ConvOptions stem;
  stem.stride = {2, 2};
  stem.padding = {3, 3};
  Tensor h =
      net.add_activation("relu", net.add_convolution(x, c.add(net, "w1", {4, 3, 7, 7}), c.add(net, "b1", {4}), stem));
  PoolOptions pool;
  pool.kernel = {3, 3};
  pool.stride = {2, 2};
  pool.padding = {1, 1};
  net.mark_output(net.add_pool2d(h, PoolType::kMax, pool), "stem");
  ConvOptions patch;
  patch.stride = {4, 4};
  net.mark_output(net.add_convolution(x, c.add(net, "w2", {6, 3, 4, 4}), c.add(net, "b2", {6}), patch), "patches");
  ConvOptions depthwise;
  depthwise.groups = 3;
  depthwise.padding = {1, 1};
  net.mark_output(net.add_convolution(x, c.add(net, "w3", {3, 1, 3, 3}), {}, depthwise), "depthwise");
  Network low = builder::lower_precision(net, DataType::kF16, c.pool, plugin::Device::kHost);
  Network last = builder::to_channels_last(builder::fuse_epilogues(low), c.pool);
  const graph::Graph& g = graph::graph_of(last);
  // x padded to 8 channels for the patch projection; the stem's 4x4 space-to-depth input (padded spatially and to 64
  // channels) in one step.
  EXPECT_EQ(count_ops(last, "pad"), 1);
  EXPECT_EQ(count_ops(last, "space_to_depth"), 1);
  int padded = 0, stems = 0;
  for (const auto& layer : g.layers) {
    if (layer.op != "conv") continue;
    const Dims w = g.static_dims(layer.inputs[1]);
    const Dims in = g.static_dims(layer.inputs[0]);
    if (w[3] == 1) {  // the depthwise one: 3 channels, one per group
      EXPECT_EQ(in[3], 3) << layer.name;
      continue;
    }
    if (w[1] == 3 && w[2] == 3 && w[0] == 16) {  // the stem, read by a max pool: 3x3 over 16 · 3 channels padded
      EXPECT_EQ(in[3], 64) << layer.name;        // to 64, each 2x2 cell of its 4 results as 16 channels
      EXPECT_EQ(w[3], 64) << layer.name;
      ++stems;
      continue;
    }
    EXPECT_EQ(in[3], 8) << layer.name;
    EXPECT_EQ(w[3], 8) << layer.name;
    ++padded;
  }
  EXPECT_EQ(padded, 1);
  EXPECT_EQ(stems, 1);
  std::map<std::string, HostTensor> in{{"x", random_input({2, 3, 16, 16}, 7)}};
  auto want = run_reference(net, in), got = run_reference(last, in);
  for (const char* name : {"stem", "patches", "depthwise"})
    EXPECT_LT(rel_l2(got.at(name), want.at(name)), 5e-3) << name;
}

// A stem whose only reader is a max pool runs on the 4x4 space-to-depth input and writes each 2x2 cell of its results
// as channels, which the max pool reads (input_block_size 2); with a quantize after the pool, the quantized max pool
// reads them the same way. Left in the 2x2 form: an odd output extent, a 3x3 kernel (4x the padded work), and a stem
// that something else reads too.
TEST(BuilderPasses, AStemReadOnlyByAMaxPoolWritesItsResultsInTwoByTwoCells) {
  Constants c;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 3, 20, 16});
  Tensor odd = net.add_input("odd", DataType::kF32, {-1, 3, 15, 18});  // results 8 x 9
  PoolOptions pool;
  pool.kernel = {3, 3};
  pool.stride = {2, 2};
  pool.padding = {1, 1};
  auto stem = [&](Tensor in, const std::string& name, std::int64_t k) {  // with bias and relu
    ConvOptions options;
    options.stride = {2, 2};
    options.padding = {k / 2, k / 2};
    Tensor w = c.add(net, name + ".w", {5, 3, k, k});
    return net.add_activation("relu", net.add_convolution(in, w, c.add(net, name + ".b", {5}), options));
  };
  net.mark_output(net.add_pool2d(stem(x, "seven", 7), PoolType::kMax, pool), "seven");
  net.mark_output(net.add_pool2d(stem(x, "five", 5), PoolType::kMax, pool), "five");
  net.mark_output(net.add_pool2d(stem(odd, "odd", 7), PoolType::kMax, pool), "odd_pooled");
  net.mark_output(net.add_pool2d(stem(x, "three", 3), PoolType::kMax, pool), "three");
  Tensor shared = stem(x, "shared", 7);
  net.mark_output(net.add_pool2d(shared, PoolType::kMax, pool), "shared_pooled");
  net.mark_output(shared, "shared");
  Tensor q = net.add_small_constant({0.02}, DataType::kF32, Dims{}, "q.scale");
  Tensor pooled = net.add_pool2d(stem(x, "quantized", 7), PoolType::kMax, pool);
  net.mark_output(net.add_dequantize(net.add_quantize(pooled, q, DataType::kI8), q), "quantized");

  Network low = builder::lower_precision(net, DataType::kF16, c.pool, plugin::Device::kHost);
  Network last = builder::device_layout_passes(low, c.pool);
  const graph::Graph& g = graph::graph_of(last);
  std::vector<std::string> blocked_convs, blocked_pools;
  for (const auto& layer : g.layers) {
    if (layer.op == "conv" && g.static_dims(layer.inputs[0])[3] == 64) {
      blocked_convs.push_back(layer.name);
      const Dims w = g.static_dims(layer.inputs[1]), y = g.static_dims(layer.outputs[0]);
      EXPECT_EQ(w[0], 20) << layer.name;  // 2x2 results of 5 channels
      EXPECT_EQ(y[3], 20) << layer.name;
      EXPECT_EQ(y[1], 5) << layer.name;  // 10 x 8 results in 5 x 4 cells
      EXPECT_EQ(y[2], 4) << layer.name;
    }
    if (layer.op == "max_pool2d" && layer.attrs.count("input_block_size") != 0) {
      blocked_pools.push_back(layer.name);
      EXPECT_EQ(std::get<std::int64_t>(layer.attrs.at("input_block_size")), 2) << layer.name;
    }
  }
  EXPECT_EQ(blocked_convs.size(), 3U) << fmt::format("{}", fmt::join(blocked_convs, ", "));  // seven, five, quantized
  EXPECT_EQ(blocked_pools.size(), 3U);
  int quantized_pools = 0;
  for (const auto& layer : g.layers) {
    quantized_pools +=
        layer.op == "max_pool2d" && layer.attrs.count("quantize_to") != 0 && layer.attrs.count("input_block_size") != 0;
  }
  EXPECT_EQ(quantized_pools, 1);
  EXPECT_EQ(count_ops(last, "space_to_depth"), 6);  // every stem's input, in 4x4 or 2x2 cells
  std::map<std::string, HostTensor> in{{"x", random_input({2, 3, 20, 16}, 21)},
                                       {"odd", random_input({2, 3, 15, 18}, 22)}};
  auto want = run_reference(net, in), got = run_reference(last, in);
  for (const char* name : {"seven", "five", "odd_pooled", "three", "shared_pooled", "shared", "quantized"}) {
    ASSERT_EQ(got.at(name).shape, want.at(name).shape) << name;
    EXPECT_LT(rel_l2(got.at(name), want.at(name)), 5e-3) << name;
  }
}

TEST(BuilderPasses, AnImagesStrideTwoConvolutionRunsOnItsSpaceToDepthForm) {
  Constants c;
  Network net;
  // Stems of odd and even extents, dynamic batch: 7x7 stride 2 padding 3 with bias and relu, 3x3 stride 2 padding 1.
  // Left as they are: a 4x4 stride 2 unpadded one, which never reads x's last row (the form would crop, not pad), a
  // stride-2 convolution over 16 channels (no padding needed), and f32 convolutions.
  Tensor x = net.add_input("x", DataType::kF32, {-1, 3, 15, 18});
  ConvOptions seven;
  seven.stride = {2, 2};
  seven.padding = {3, 3};
  net.mark_output(
      net.add_activation("relu", net.add_convolution(x, c.add(net, "w1", {5, 3, 7, 7}), c.add(net, "b1", {5}), seven)),
      "seven");
  ConvOptions three;
  three.stride = {2, 2};
  three.padding = {1, 1};
  net.mark_output(net.add_convolution(x, c.add(net, "w2", {6, 3, 3, 3}), {}, three), "three");
  ConvOptions four;
  four.stride = {2, 2};
  net.mark_output(net.add_convolution(x, c.add(net, "w3", {7, 3, 4, 4}), c.add(net, "b3", {7}), four), "four");
  Tensor wide = net.add_input("wide", DataType::kF32, {-1, 16, 9, 9});
  net.mark_output(net.add_convolution(wide, c.add(net, "w4", {8, 16, 3, 3}), {}, three), "wide_out");
  Network low = builder::lower_precision(net, DataType::kF16, c.pool, plugin::Device::kHost);
  Network last = builder::to_channels_last(builder::fuse_epilogues(low), c.pool);
  const graph::Graph& g = graph::graph_of(last);
  int stems = 0;
  for (const auto& layer : g.layers) {
    if (layer.op != "conv") continue;
    EXPECT_EQ(attr(layer, "layout"), "nhwc") << layer.name;
    const Dims w = g.static_dims(layer.inputs[1]);
    if (w[3] == 16 && g.static_dims(layer.inputs[0])[3] == 16 && w[0] != 8) {
      EXPECT_EQ(ints_attr(layer, "stride"), (std::vector<std::int64_t>{1, 1}));
      EXPECT_EQ(ints_attr(layer, "padding"), (std::vector<std::int64_t>{0, 0}));
      ++stems;
    } else {
      EXPECT_TRUE(w[0] == 8 || w[0] == 7) << layer.name;  // the 16-channel one and the 4x4 one, as they were
      EXPECT_EQ(ints_attr(layer, "stride"), (std::vector<std::int64_t>{2, 2}));
    }
  }
  EXPECT_EQ(stems, 2);
  EXPECT_EQ(count_ops(last, "space_to_depth"), 2);  // each stem's input in one step, without pads of its own
  std::map<std::string, HostTensor> in{{"x", random_input({2, 3, 15, 18}, 11)},
                                       {"wide", random_input({2, 16, 9, 9}, 12)}};
  auto want = run_reference(net, in), got = run_reference(last, in);
  for (const char* name : {"seven", "three", "four", "wide_out"}) {
    ASSERT_EQ(got.at(name).shape, want.at(name).shape) << name;
    EXPECT_LT(rel_l2(got.at(name), want.at(name)), 5e-3) << name;
  }
  // f32 convolutions stay as they are.
  EXPECT_EQ(count_ops(builder::to_channels_last(net, c.pool), "transpose"), 0);
}

TEST(BuilderPasses, PatchConvolutionsBecomeOneProduct) {
  Constants c;
  Network net;
  // ViT's patch embedding (4x4 patches of a 3-channel image, dynamic batch), a rectangular 2x4 patching without a
  // bias, and convolutions that are not patchings (overlapping windows, padding, a 1x1 kernel) left as they are.
  Tensor x = net.add_input("x", DataType::kF32, {-1, 3, 8, 16});
  ConvOptions patch;
  patch.stride = {4, 4};
  net.mark_output(net.add_convolution(x, c.add(net, "w1", {5, 3, 4, 4}), c.add(net, "b1", {5}), patch), "patches");
  ConvOptions rect;
  rect.stride = {2, 4};
  net.mark_output(net.add_convolution(x, c.add(net, "w2", {6, 3, 2, 4}), {}, rect), "rect");
  ConvOptions overlap;
  overlap.stride = {2, 2};
  net.mark_output(net.add_convolution(x, c.add(net, "w3", {4, 3, 4, 4}), {}, overlap), "overlap");
  ConvOptions padded = patch;
  padded.padding = {2, 2};
  net.mark_output(net.add_convolution(x, c.add(net, "w4", {4, 3, 4, 4}), {}, padded), "padded");
  net.mark_output(net.add_convolution(x, c.add(net, "w5", {4, 3, 1, 1})), "pointwise");
  // ViT's own: a layer whose output has its name, flattened and transposed to [N, patches, E] (the product's rows,
  // reshaped: no transpose back to channels first and none after).
  Attributes vit_attrs{{"stride", std::vector<std::int64_t>{4, 4}}};
  Tensor vit =
      net.add_layer("conv", {x, c.add(net, "w6", {7, 3, 4, 4}), c.add(net, "b6", {7})}, vit_attrs, "conv_proj")[0];
  net.rename_tensor(vit, "conv_proj");
  Tensor flat = net.add_layer("reshape", {vit}, Attributes{{"shape", std::vector<std::int64_t>{0, 7, 8}}},
                              "conv_proj.flatten")[0];
  net.mark_output(net.add_layer("transpose", {flat}, Attributes{{"perm", std::vector<std::int64_t>{0, 2, 1}}},
                                "conv_proj.permute")[0],
                  "tokens");
  Network products = builder::patch_convolutions(net, c.pool);
  EXPECT_EQ(count_ops(products, "conv"), 3);
  EXPECT_EQ(count_ops(products, "linear"), 3);
  // One transpose per patching gathers its patches; two of them go back to channels first; ViT's needs neither.
  EXPECT_EQ(count_ops(products, "transpose"), 5);
  std::map<std::string, HostTensor> in{{"x", random_input({2, 3, 8, 16}, 8)}};
  auto want = run_reference(net, in), got = run_reference(products, in);
  for (const char* name : {"patches", "rect", "overlap", "padded", "pointwise", "tokens"}) {
    EXPECT_LT(rel_l2(got.at(name), want.at(name)), 1e-6) << name;
  }
}

TEST(BuilderPasses, DeviceLayoutPassesKeepAViTBlocksResults) {
  Constants c;
  Network net;
  // A ViT in miniature, named as torchvision's export names it: patch embedding (conv named as its output, flatten,
  // transpose), layer norm, an MLP with erf GELU and the residual; lowered to f16 first, as the builder does.
  Tensor x = net.add_input("x", DataType::kF32, {-1, 3, 16, 16});
  Tensor h = net.add_layer("conv", {x, c.add(net, "conv_proj.weight", {8, 3, 4, 4}), c.add(net, "conv_proj.bias", {8})},
                           Attributes{{"stride", std::vector<std::int64_t>{4, 4}}}, "conv_proj")[0];
  net.rename_tensor(h, "conv_proj");
  h = net.add_layer("reshape", {h}, Attributes{{"shape", std::vector<std::int64_t>{0, 8, 16}}}, "conv_proj.flatten")[0];
  h = net.add_layer("transpose", {h}, Attributes{{"perm", std::vector<std::int64_t>{0, 2, 1}}}, "conv_proj.permute")[0];
  Tensor n = net.add_layer_norm(h, c.add(net, "ln.weight", {8}), c.add(net, "ln.bias", {8}));
  Tensor m = net.add_activation("gelu",
                                net.add_linear(n, c.add(net, "mlp.0.weight", {32, 8}), c.add(net, "mlp.0.bias", {32})));
  m = net.add_linear(m, c.add(net, "mlp.3.weight", {8, 32}), c.add(net, "mlp.3.bias", {8}));
  net.mark_output(net.add_binary("add", h, m), "y");
  Network low = builder::lower_precision(net, DataType::kF16, c.pool, plugin::Device::kCuda);
  Network device = builder::device_layout_passes(low, c.pool);
  EXPECT_EQ(count_ops(device, "conv"), 0);
  EXPECT_EQ(count_ops(device, "gelu"), 0);
  EXPECT_EQ(count_ops(device, "transpose"), 1);  // the patches' gather only
  std::map<std::string, HostTensor> in{{"x", random_input({2, 3, 16, 16}, 9)}};
  EXPECT_LT(rel_l2(run_reference(device, in).at("y"), run_reference(net, in).at("y")), 5e-3);
}

TEST(BuilderPasses, MatmulWithBiasRowBecomesLinearWithFusedResidualAndGelu) {
  Constants c;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 5, 8});
  // GPT-2's Conv1D: x @ W [in, out] + b, then tanh gelu, then x @ W2 + b2 + residual.
  Tensor h = net.add_binary("add", net.add_matmul(x, c.add(net, "w1", {8, 16})), c.add(net, "b1", {16}));
  h = net.add_activation("gelu", h, {{"approximate", std::string("tanh")}});
  Tensor y = net.add_binary("add", c.add(net, "b2", {1, 1, 8}), net.add_matmul(h, c.add(net, "w2", {16, 8})));
  y = net.add_binary("add", x, y);
  net.mark_output(y, "y");
  Network fused = builder::fuse_epilogues(builder::fuse_matmul_bias(net, c.pool));
  EXPECT_EQ(count_ops(fused, "matmul"), 0);
  EXPECT_EQ(count_ops(fused, "add"), 0);
  EXPECT_EQ(count_ops(fused, "gelu"), 0);
  ASSERT_EQ(count_ops(fused, "linear"), 2);
  const auto& layers = graph::graph_of(fused).layers;
  EXPECT_EQ(attr(layers[0], "activation"), "gelu_tanh");
  EXPECT_EQ(layers[1].inputs.size(), 4u);  // x as the residual
  std::map<std::string, HostTensor> in{{"x", random_input({3, 5, 8}, 3)}};
  EXPECT_LT(rel_l2(run_reference(fused, in).at("y"), run_reference(net, in).at("y")), 1e-6);
}

TEST(BuilderPasses, ErfGeluAfterALinearBecomesItsEpilogueAndConvKeepsIt) {
  Constants c;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 6, 8});
  // BERT's intermediate layer: linear + bias, erf GELU; and a convolution with a GELU after it (cuDNN's fused form
  // is relu only, so that one stays).
  Tensor h = net.add_activation("gelu", net.add_linear(x, c.add(net, "w1", {16, 8}), c.add(net, "b1", {16})));
  net.mark_output(net.add_linear(h, c.add(net, "w2", {8, 16}), c.add(net, "b2", {8})), "y");
  Tensor img = net.add_input("img", DataType::kF32, {2, 3, 6, 6});
  Tensor conv = net.add_convolution(img, c.add(net, "wc", {4, 3, 3, 3}), c.add(net, "bc", {4}));
  net.mark_output(net.add_activation("gelu", conv), "z");
  Network fused = builder::fuse_epilogues(net);
  EXPECT_EQ(count_ops(fused, "gelu"), 1);  // the convolution's
  int erf = 0;
  for (const auto& layer : graph::graph_of(fused).layers) erf += attr(layer, "activation") == "gelu_erf" ? 1 : 0;
  EXPECT_EQ(erf, 1);
  std::map<std::string, HostTensor> in{{"x", random_input({3, 6, 8}, 5)}, {"img", random_input({2, 3, 6, 6}, 6)}};
  auto want = run_reference(net, in), got = run_reference(fused, in);
  for (const char* name : {"y", "z"}) EXPECT_LT(rel_l2(got.at(name), want.at(name)), 1e-6) << name;
}

TEST(BuilderPasses, ValuesReadElsewhereAreNotFused) {
  Constants c;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {4, 8});
  Tensor a = net.add_linear(x, c.add(net, "wa", {8, 8}), c.add(net, "ba", {8}));
  Tensor b = net.add_linear(x, c.add(net, "wb", {8, 8}));
  net.mark_output(a, "a");                                             // a network output: no epilogue
  Tensor s = net.add_binary("add", net.add_activation("relu", a), b);  // b's add also reads a's relu
  net.mark_output(net.add_activation("gelu", s), "s");
  Network fused = builder::fuse_epilogues(net);
  EXPECT_EQ(count_ops(fused, "relu"), 1);
  EXPECT_EQ(count_ops(fused, "gelu"), 0);
  // gelu(b + relu(a)): b takes the add as its residual epilogue and the erf GELU as its activation.
  int residual = 0;
  for (const auto& layer : graph::graph_of(fused).layers) {
    if (layer.op != "linear" || layer.inputs.size() != 4) continue;
    ++residual;
    EXPECT_EQ(attr(layer, "activation"), "gelu_erf");
  }
  EXPECT_EQ(residual, 1);
  std::map<std::string, HostTensor> in{{"x", random_input({4, 8}, 4)}};
  auto want = run_reference(net, in), got = run_reference(fused, in);
  for (const char* name : {"a", "s"}) EXPECT_LT(rel_l2(got.at(name), want.at(name)), 1e-6) << name;
}

// GPT-2's attention block: QKV product split into q, k, v, head reshapes and transposes, causal attention, the merge
// transpose and reshape. `extra_reader` also reads k's head transpose (then nothing may be rewritten).
Network qkv_attention_block(Constants& c, bool split_qkv, bool extra_reader) {
  constexpr std::int64_t kHeads = 2, kDim = 4, kEmbed = kHeads * kDim;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, -1, kEmbed});
  std::vector<Tensor> parts;
  if (split_qkv) {
    parts = net.add_split(net.add_linear(x, c.add(net, "w_qkv", {3 * kEmbed, kEmbed})), {kEmbed, kEmbed, kEmbed}, 2);
  } else {
    for (const char* n : {"w_q", "w_k", "w_v"}) parts.push_back(net.add_linear(x, c.add(net, n, {kEmbed, kEmbed})));
  }
  std::vector<Tensor> heads;
  for (Tensor t : parts) heads.push_back(net.add_transpose(net.add_reshape(t, {0, 0, kHeads, kDim}), {0, 2, 1, 3}));
  AttentionOptions causal;
  causal.causal = true;
  Tensor a = net.add_attention(heads[0], heads[1], heads[2], {}, causal);
  Tensor y = net.add_reshape(net.add_transpose(a, {0, 2, 1, 3}), {0, 0, kEmbed});
  net.mark_output(y, "y");
  if (extra_reader) net.mark_output(net.add_activation("relu", heads[1]), "k_relu");
  return net;
}

TEST(BuilderPasses, AttentionReadsTheQkvProductInPlace) {
  Constants c;
  Network net = qkv_attention_block(c, true, false);
  Network packed = builder::remove_dead_layers(builder::fuse_attention_layout(net));
  EXPECT_EQ(count_ops(packed, "transpose"), 0);
  EXPECT_EQ(count_ops(packed, "split"), 0);
  ASSERT_EQ(count_ops(packed, "attention"), 1);
  for (const auto& layer : graph::graph_of(packed).layers) {
    if (layer.op != "attention") continue;
    EXPECT_EQ(attr(layer, "layout"), "packed");
    EXPECT_EQ(std::get<std::int64_t>(layer.attrs.at("heads")), 2);
    EXPECT_EQ(std::get<std::int64_t>(layer.attrs.at("kv_heads")), 2);
    EXPECT_EQ(layer.inputs[0], layer.inputs[1]);
    EXPECT_EQ(layer.inputs[0], layer.inputs[2]);
  }
  std::map<std::string, HostTensor> in{{"x", random_input({2, 5, 8}, 5)}};
  EXPECT_LT(rel_l2(run_reference(packed, in).at("y"), run_reference(net, in).at("y")), 1e-6);
}

TEST(BuilderPasses, AttentionBetweenHeadTransposesReadsSequenceMajorHeads) {
  Constants c;
  Network net = qkv_attention_block(c, false, false);
  Network bshd = builder::remove_dead_layers(builder::fuse_attention_layout(net));
  EXPECT_EQ(count_ops(bshd, "transpose"), 0);
  for (const auto& layer : graph::graph_of(bshd).layers) {
    if (layer.op == "attention") {
      EXPECT_EQ(attr(layer, "layout"), "bshd");
    }
  }
  std::map<std::string, HostTensor> in{{"x", random_input({3, 4, 8}, 6)}};
  EXPECT_LT(rel_l2(run_reference(bshd, in).at("y"), run_reference(net, in).at("y")), 1e-6);
}

TEST(BuilderPasses, AttentionWhoseHeadsAreReadElsewhereKeepsItsTransposes) {
  Constants c;
  Network net = qkv_attention_block(c, true, true);
  Network same = builder::remove_dead_layers(builder::fuse_attention_layout(net));
  EXPECT_EQ(count_ops(same, "transpose"), 4);
  EXPECT_EQ(count_ops(same, "split"), 1);
  for (const auto& layer : graph::graph_of(same).layers) {
    if (layer.op == "attention") {
      EXPECT_EQ(attr(layer, "layout"), "");
    }
  }
}

// BERT's self-attention (bench/pytorch_models.py bert_network): separate query, key and value products of x, head
// reshapes and transposes, attention, the merge, the output dense with x as the residual. `reversed` makes the
// products in the order value, key, query (as an unspecified evaluation order of function arguments may); without
// `value_bias` the value product has no bias.
Network bert_attention_block(Constants& c, bool reversed, bool value_bias = true) {
  constexpr std::int64_t kHeads = 2, kDim = 4, kEmbed = kHeads * kDim;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, -1, kEmbed});
  const std::string p = "encoder.layer.0.attention.";
  std::map<std::string, Tensor> heads;
  std::vector<std::string> names{"query", "key", "value"};
  if (reversed) std::reverse(names.begin(), names.end());
  for (const auto& n : names) {
    Tensor w = c.add(net, p + "self." + n + ".weight", {kEmbed, kEmbed});
    std::vector<Tensor> inputs{x, w};
    if (n != "value" || value_bias) inputs.push_back(c.add(net, p + "self." + n + ".bias", {kEmbed}));
    Tensor t = net.add_layer("linear", inputs, {}, p + "self." + n)[0];
    heads[n] = net.add_transpose(net.add_reshape(t, {0, 0, kHeads, kDim}), {0, 2, 1, 3});
  }
  Tensor a = net.add_attention(heads["query"], heads["key"], heads["value"]);
  Tensor ctx = net.add_reshape(net.add_transpose(a, {0, 2, 1, 3}), {0, 0, kEmbed});
  Tensor dense = net.add_layer(
      "linear",
      {ctx, c.add(net, p + "output.dense.weight", {kEmbed, kEmbed}), c.add(net, p + "output.dense.bias", {kEmbed})}, {},
      p + "output.dense")[0];
  net.mark_output(net.add_binary("add", dense, x), "y");
  return net;
}

const graph::Layer* layer_named(const Network& net, const std::string& name) {
  for (const auto& layer : graph::graph_of(net).layers) {
    if (layer.name == name) return &layer;
  }
  return nullptr;
}

TEST(BuilderPasses, BertProjectionsBecomeOneProductThatAttentionReadsPacked) {
  Constants c;
  Network net = bert_attention_block(c, false);
  Network fused = builder::fuse_qkv_projections(net, c.pool);
  EXPECT_EQ(count_ops(net, "linear"), 4);
  EXPECT_EQ(count_ops(fused, "linear"), 2);  // query+key+value, output.dense
  EXPECT_EQ(count_ops(fused, "split"), 1);
  const graph::Layer* qkv = layer_named(fused, "encoder.layer.0.attention.self.query+key+value");
  ASSERT_NE(qkv, nullptr);
  const graph::Graph& fg = graph::graph_of(fused);
  EXPECT_EQ(fg.static_dims(qkv->inputs[1]), (Dims{24, 8}));
  EXPECT_EQ(fg.static_dims(qkv->inputs[2]), (Dims{24}));
  // The products' outputs keep their names.
  for (const char* n : {"query", "key", "value"}) {
    const std::string name = std::string("encoder.layer.0.attention.self.") + n;
    ASSERT_EQ(fg.tensor_by_name.count(name), 1u) << name;
    EXPECT_EQ(fg.layers[static_cast<std::size_t>(fg.tensor(fg.tensor_by_name.at(name)).producer)].op, "split");
  }
  std::map<std::string, HostTensor> in{{"x", random_input({2, 5, 8}, 7)}};
  const HostTensor want = run_reference(net, in).at("y");
  EXPECT_LT(rel_l2(run_reference(fused, in).at("y"), want), 1e-6);

  // The CUDA pass order: the attention reads the fused product itself, the output dense takes the residual.
  Network device =
      builder::fuse_epilogues(builder::fuse_qkv_projections(builder::fuse_matmul_bias(net, c.pool), c.pool));
  device = builder::remove_dead_layers(builder::fuse_attention_layout(device));
  EXPECT_EQ(count_ops(device, "split"), 0);
  EXPECT_EQ(count_ops(device, "transpose"), 0);
  EXPECT_EQ(count_ops(device, "add"), 0);
  EXPECT_EQ(count_ops(device, "linear"), 2);
  ASSERT_EQ(count_ops(device, "attention"), 1);
  for (const auto& layer : graph::graph_of(device).layers) {
    if (layer.op != "attention") continue;
    EXPECT_EQ(attr(layer, "layout"), "packed");
    EXPECT_EQ(std::get<std::int64_t>(layer.attrs.at("heads")), 2);
    EXPECT_EQ(std::get<std::int64_t>(layer.attrs.at("kv_heads")), 2);
    const auto producer = graph::graph_of(device).tensor(layer.inputs[0]).producer;
    EXPECT_EQ(graph::graph_of(device).layers[static_cast<std::size_t>(producer)].name,
              "encoder.layer.0.attention.self.query+key+value");
  }
  EXPECT_LT(rel_l2(run_reference(device, in).at("y"), want), 1e-6);

  // fp16 builds lower the precision first: the f16 products fuse the same way.
  Network low = builder::lower_precision(net, DataType::kF16, c.pool, plugin::Device::kHost);
  Network low_fused = builder::fuse_attention_layout(builder::fuse_qkv_projections(low, c.pool));
  EXPECT_EQ(count_ops(low_fused, "linear"), 2);
  for (const auto& layer : graph::graph_of(low_fused).layers) {
    if (layer.op == "attention") {
      EXPECT_EQ(attr(layer, "layout"), "packed");
    }
  }
  EXPECT_LT(rel_l2(run_reference(low_fused, in).at("y"), want), 5e-3);
}

TEST(BuilderPasses, ProjectionsMadeInAnotherOrderAreFusedAsQueryKeyValue) {
  Constants c;
  Network net = bert_attention_block(c, true);
  Network fused = builder::fuse_qkv_projections(net, c.pool);
  EXPECT_NE(layer_named(fused, "encoder.layer.0.attention.self.query+key+value"), nullptr);
  Network packed = builder::remove_dead_layers(builder::fuse_attention_layout(fused));
  EXPECT_EQ(count_ops(packed, "split"), 0);
  for (const auto& layer : graph::graph_of(packed).layers) {
    if (layer.op == "attention") {
      EXPECT_EQ(attr(layer, "layout"), "packed");
    }
  }
  std::map<std::string, HostTensor> in{{"x", random_input({3, 4, 8}, 8)}};
  EXPECT_LT(rel_l2(run_reference(packed, in).at("y"), run_reference(net, in).at("y")), 1e-6);
}

// Products that share an input but feed no attention's q, k and v stay apart: one product and a split would copy the
// whole product again.
TEST(BuilderPasses, ProjectionsWithAndWithoutBiasStayApart) {
  Constants c;
  Network net = bert_attention_block(c, false, /*value_bias=*/false);
  Network same = builder::fuse_qkv_projections(net, c.pool);
  EXPECT_EQ(count_ops(same, "linear"), 4);
  EXPECT_EQ(count_ops(same, "split"), 0);
}

TEST(BuilderPasses, ProductsThatFeedNoAttentionStayApart) {
  Constants c;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 6});
  Tensor a = net.add_layer("linear", {x, c.add(net, "a.w", {4, 6}), c.add(net, "a.b", {4})}, {}, "a")[0];
  Tensor d = net.add_layer("linear", {x, c.add(net, "d.w", {3, 6}), c.add(net, "d.b", {3})}, {}, "d")[0];
  Tensor e = net.add_layer("linear", {x, c.add(net, "e.w", {3, 6}), c.add(net, "e.b", {3})}, {}, "e")[0];
  net.mark_output(a, "a_out");
  net.mark_output(net.add_activation("relu", d), "d_relu");
  net.mark_output(e, "e_out");
  Network same = builder::fuse_qkv_projections(net, c.pool);
  EXPECT_EQ(count_ops(same, "linear"), 3);
  EXPECT_EQ(count_ops(same, "split"), 0);
}

TEST(BuilderPasses, ProductsThatCannotShareOneProductAreNotFused) {
  Constants c;
  // Different inputs (x and relu(x)).
  {
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {2, 8});
    net.mark_output(net.add_linear(x, c.add(net, "w1", {8, 8}), c.add(net, "b1", {8})), "y1");
    net.mark_output(net.add_linear(net.add_activation("relu", x), c.add(net, "w2", {8, 8}), c.add(net, "b2", {8})),
                    "y2");
    Network same = builder::fuse_qkv_projections(net, c.pool);
    EXPECT_EQ(count_ops(same, "linear"), 2);
    EXPECT_EQ(count_ops(same, "split"), 0);
  }
  // Bias in one, not in the other.
  {
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {2, 8});
    net.mark_output(net.add_linear(x, c.add(net, "w1", {8, 8}), c.add(net, "b1", {8})), "y1");
    net.mark_output(net.add_linear(x, c.add(net, "w2", {8, 8})), "y2");
    EXPECT_EQ(count_ops(builder::fuse_qkv_projections(net, c.pool), "split"), 0);
  }
  // Different dtypes: a product's weight has its input's dtype (the graph refuses an f16 weight for an f32 x), so an
  // f32 and an f16 product read different inputs (x and its cast) and stay apart.
  {
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {2, 8});
    Tensor w16 = net.add_small_constant(std::vector<double>(64, 0.25), DataType::kF16, {8, 8}, "w16");
    EXPECT_THROW(net.add_linear(x, w16), GraphError);
    net.mark_output(net.add_linear(x, c.add(net, "w32", {8, 8})), "y32");
    net.mark_output(net.add_linear(net.add_cast(x, DataType::kF16), w16), "y16");
    Network same = builder::fuse_qkv_projections(net, c.pool);
    EXPECT_EQ(count_ops(same, "linear"), 2);
    EXPECT_EQ(count_ops(same, "split"), 0);
  }
  // A weight that is not a constant, and a product that already has a residual epilogue.
  {
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {2, 8});
    Tensor w = net.add_input("w", DataType::kF32, {8, 8});
    net.mark_output(net.add_linear(x, c.add(net, "w1", {8, 8}), c.add(net, "b1", {8})), "y1");
    net.mark_output(net.add_linear(x, w, c.add(net, "b2", {8})), "y2");
    Tensor r = net.add_linear(x, c.add(net, "w3", {8, 8}), c.add(net, "b3", {8}));
    net.mark_output(net.add_binary("add", r, x), "y3");
    Network epilogues = builder::fuse_epilogues(net);
    ASSERT_EQ(count_ops(epilogues, "add"), 0);
    Network same = builder::fuse_qkv_projections(epilogues, c.pool);
    EXPECT_EQ(count_ops(same, "linear"), 3);
    EXPECT_EQ(count_ops(same, "split"), 0);
  }
}

TEST(MemoryPlan, ReshapesShareTheirInputsBytesWhenAliasing) {
  Constants c;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {4, 8});
  Tensor h = net.add_linear(x, c.add(net, "w", {8, 8}));
  Tensor r = net.add_layer("reshape", {h}, {{"shape", std::vector<std::int64_t>{2, 16}}})[0];
  Tensor u = net.add_layer("unsqueeze", {r}, {{"axes", std::vector<std::int64_t>{0}}})[0];
  Tensor y = net.add_activation("relu", u);
  Tensor z = net.add_activation("relu", y);
  net.mark_output(net.add_binary("add", z, u), "out");  // u (an alias of h) lives until the last layer
  const graph::Graph& g = graph::graph_of(net);
  const std::vector<std::vector<Dims>> shapes(3, graph::evaluate_shapes(g, {Dims{4, 8}}));
  const builder::MemoryPlan plain = builder::plan_memory(g, shapes, false);
  const builder::MemoryPlan aliased = builder::plan_memory(g, shapes, true);
  EXPECT_NE(plain.offset[static_cast<std::size_t>(r.id)], plain.offset[static_cast<std::size_t>(h.id)]);
  EXPECT_EQ(aliased.offset[static_cast<std::size_t>(r.id)], aliased.offset[static_cast<std::size_t>(h.id)]);
  EXPECT_EQ(aliased.offset[static_cast<std::size_t>(u.id)], aliased.offset[static_cast<std::size_t>(h.id)]);
  // y and z are live while the alias group is: neither may share its bytes.
  for (Tensor t : {y, z}) {
    EXPECT_NE(aliased.offset[static_cast<std::size_t>(t.id)], aliased.offset[static_cast<std::size_t>(h.id)]);
  }
  EXPECT_LE(aliased.arena_bytes, plain.arena_bytes);
}

}  // namespace
}  // namespace tensoracle
