// Tests of lower_quantized_products (a linear or conv between dequantizes becomes quantized_linear or quantized_conv; a
// linear whose weight alone is dequantized, a weight-only quantized_linear)
// and of what the later passes do with the result (f16 lowering keeps the scales f32; epilogues and a following
// quantize fuse into it; convolutions and quantizes run channels last): the layers made, and results equal to the
// original network's on the CPU reference executor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "builder/passes/passes.hpp"
#include "builder/weight_pool.hpp"
#include "graph/graph.hpp"
#include "graph/quantize_to.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {
namespace {

// Seeded anew for each test, so that a test draws the same values whether it runs alone (ctest) or after others.
std::mt19937& rng() {
  static std::mt19937 r;
  static std::string test;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = info != nullptr ? info->name() : "";
  if (name != test) {
    test = name;
    r.seed(29);
  }
  return r;
}

Tensor f32_constant(Network& net, const std::string& name, const Dims& shape, float low, float high) {
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(static_cast<std::size_t>(shape.volume()));
  for (auto& x : v) x = dist(rng());
  return net.add_constant_copy(DataType::kF32, shape, v.data(), name);
}

// A quantized weight: i8 values in [-127, 127], or f8e4m3 values of magnitude up to 448.
Tensor quantized_weight(Network& net, const std::string& name, DataType type, const Dims& shape) {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(shape.volume()));
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> f(-448.f, 448.f);
  for (auto& b : bytes) {
    b = type == DataType::kI8 ? static_cast<std::uint8_t>(static_cast<std::int8_t>(q(rng())))
                              : f32_to_f8e4m3_bits(f(rng()));
  }
  return net.add_constant_copy(type, shape, bytes.data(), name);
}
Tensor quantized_weight(Network& net, const std::string& name, DataType type, std::int64_t out, std::int64_t in) {
  return quantized_weight(net, name, type, Dims{out, in});
}

HostTensor random_input(const Dims& shape, std::uint32_t seed) {
  std::mt19937 r(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  HostTensor t(DataType::kF32, shape);
  for (std::size_t i = 0; i < t.size(); ++i) t.data<float>()[i] = dist(r);
  return t;
}

double rel_l2(const HostTensor& got, const HostTensor& want) {
  EXPECT_EQ(got.shape, want.shape);
  EXPECT_EQ(got.dtype, DataType::kF32);
  EXPECT_EQ(want.dtype, DataType::kF32);
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    err += (g - w) * (g - w);
    norm += w * w;
  }
  return std::sqrt(err / norm);
}

int count_ops(const Network& net, const std::string& op) {
  int n = 0;
  for (const auto& layer : graph::graph_of(net).layers) n += layer.op == op ? 1 : 0;
  return n;
}

const graph::Layer& only_layer(const Network& net, const std::string& op) {
  const graph::Layer* found = nullptr;
  for (const auto& layer : graph::graph_of(net).layers) {
    if (layer.op == op) found = &layer;
  }
  EXPECT_NE(found, nullptr) << op;
  return *found;
}

// x -> quantize -> dequantize -> linear (weight: a dequantize of a quantized constant) -> ...
Tensor quantized_linear_of(Network& net, Tensor x, DataType type, std::int64_t out, bool per_channel,
                           const std::string& name) {
  const Dims shape = net.shape(x);
  const std::int64_t in = shape[shape.rank() - 1];
  Tensor sx = net.add_small_constant({type == DataType::kI8 ? 2.0 / 127 : 2.0 / 448}, DataType::kF32, Dims{},
                                     name + ".x_scale");
  Tensor xq = net.add_dequantize(net.add_quantize(x, sx, type), sx);
  Tensor w = quantized_weight(net, name + ".weight", type, out, in);
  Tensor sw = per_channel ? f32_constant(net, name + ".weight_scale", Dims{out}, 0.001f, 0.004f)
                          : net.add_small_constant({0.002}, DataType::kF32, Dims{}, name + ".weight_scale");
  return net.add_linear(xq, net.add_dequantize(w, sw, DataType::kF32, 0),
                        f32_constant(net, name + ".bias", Dims{out}, -0.5f, 0.5f));
}

TEST(QuantizedProducts, LinearBetweenDequantizesBecomesOneQuantizedProduct) {
  for (DataType type : {DataType::kI8, DataType::kF8E4M3}) {
    for (bool per_channel : {false, true}) {
      SCOPED_TRACE(std::string(to_string(type)) + (per_channel ? " per channel" : " per tensor"));
      builder::WeightPool pool;
      Network net;
      Tensor x = net.add_input("x", DataType::kF32, {-1, 32});
      net.mark_output(quantized_linear_of(net, x, type, 24, per_channel, "fc"), "y");
      Network lowered = builder::lower_quantized_products(net, pool);
      EXPECT_EQ(count_ops(lowered, "linear"), 0);
      EXPECT_EQ(count_ops(lowered, "dequantize"), 0);  // both dropped: nothing else reads them
      EXPECT_EQ(count_ops(lowered, "quantize"), 1);
      const graph::Graph& g = graph::graph_of(lowered);
      const graph::Layer& q = only_layer(lowered, "quantized_linear");
      ASSERT_EQ(q.inputs.size(), 4u);
      EXPECT_EQ(g.tensor(q.inputs[1]).dtype, type);  // the weight stays quantized
      EXPECT_EQ(g.tensor(q.inputs[2]).dtype, DataType::kF32);
      EXPECT_EQ(g.static_dims(q.inputs[2]), Dims({24}));
      std::map<std::string, HostTensor> in{{"x", random_input({5, 32}, 3)}};
      EXPECT_LT(rel_l2(run_reference(lowered, in).at("y"), run_reference(net, in).at("y")), 1e-6);
    }
  }
}

TEST(QuantizedProducts, LoweringToF16KeepsScalesF32AndEpiloguesFuseIntoTheProduct) {
  builder::WeightPool pool;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {4, 3, 32});
  // BERT's MLP quantized: fc1 -> erf GELU -> fc2 + the block's input.
  Tensor h = net.add_activation("gelu", quantized_linear_of(net, x, DataType::kF8E4M3, 64, true, "fc1"));
  Tensor y = net.add_binary("add", quantized_linear_of(net, h, DataType::kF8E4M3, 32, true, "fc2"), x);
  net.mark_output(y, "y");
  Network lowered = builder::lower_quantized_products(net, pool);
  lowered = builder::lower_precision(lowered, DataType::kF16, pool, plugin::Device::kHost);
  lowered = builder::fuse_epilogues(builder::remove_dead_layers(lowered));
  EXPECT_EQ(count_ops(lowered, "quantized_linear"), 2);
  EXPECT_EQ(count_ops(lowered, "gelu"), 0);
  EXPECT_EQ(count_ops(lowered, "add"), 0);
  const graph::Graph& g = graph::graph_of(lowered);
  int gelu = 0, residual = 0;
  for (const auto& layer : g.layers) {
    if (layer.op == "quantize") {
      EXPECT_EQ(g.tensor(layer.inputs[1]).dtype, DataType::kF32) << layer.name;
    }
    if (layer.op != "quantized_linear") continue;
    EXPECT_EQ(g.tensor(layer.inputs[2]).dtype, DataType::kF32) << layer.name;
    EXPECT_EQ(g.tensor(layer.outputs[0]).dtype, DataType::kF16) << layer.name;
    auto it = layer.attrs.find("activation");
    gelu += it != layer.attrs.end() && std::get<std::string>(it->second) == "gelu_erf" ? 1 : 0;
    residual += layer.inputs.size() == 5 ? 1 : 0;
  }
  EXPECT_EQ(gelu, 1);
  EXPECT_EQ(residual, 1);
  std::map<std::string, HostTensor> in{{"x", random_input({4, 3, 32}, 4)}};
  // f16 activations may move a value across a rounding boundary of fc2's quantize: a few quantization steps at most.
  EXPECT_LT(rel_l2(run_reference(lowered, in).at("y"), run_reference(net, in).at("y")), 2e-2);
}

// A network that already holds layers quantizing their own result (as the builder writes them, or a user's JSON):
// lowering to f16 keeps their output scales f32, as the shape functions require.
TEST(QuantizedProducts, LoweringToF16KeepsTheOutputScalesOfLayersThatQuantizeTheirResult) {
  builder::WeightPool pool;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 8, 6, 6});
  Tensor scale = f32_constant(net, "pool_scale", Dims{}, 0.01f, 0.02f);
  Attributes pool_attrs{{"kernel", std::vector<std::int64_t>{2, 2}}, {"quantize_to", std::string("i8")}};
  net.mark_output(net.add_layer("max_pool2d", {x, scale}, pool_attrs, "pool")[0], "pooled");
  Tensor norm_scale = f32_constant(net, "norm_scale", Dims{}, 0.01f, 0.02f);
  Tensor g = f32_constant(net, "g", Dims{6}, 0.5f, 1.5f), b = f32_constant(net, "b", Dims{6}, -0.5f, 0.5f);
  const auto norm =
      net.add_layer("layer_norm", {x, g, b, norm_scale}, {{"quantize_to", std::string("f8e4m3")}}, "norm");
  net.mark_output(norm[1], "normalized");
  Tensor rms_scale = f32_constant(net, "rms_scale", Dims{}, 0.01f, 0.02f);
  const auto rms = net.add_layer("rms_norm", {x, g, rms_scale}, {{"quantize_to", std::string("i8")}}, "rms");
  net.mark_output(rms[1], "rms_normalized");
  Tensor cells_scale = f32_constant(net, "cells_scale", Dims{}, 0.01f, 0.02f);
  Attributes cells_attrs{{"block_size", std::int64_t{2}}, {"quantize_to", std::string("i8")}};
  net.mark_output(net.add_layer("space_to_depth", {x, cells_scale}, cells_attrs, "cells")[0], "cells");
  Network lowered = builder::lower_precision(net, DataType::kF16, pool, plugin::Device::kHost);
  const graph::Graph& lg = graph::graph_of(lowered);
  int checked = 0;
  for (const auto& layer : lg.layers) {  // each output scale read as it was, in f32
    if (const std::optional<std::size_t> i = graph::quantize_to_scale_input(layer.op)) {
      EXPECT_EQ(lg.tensor(layer.inputs[*i]).dtype, DataType::kF32) << layer.op;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4);
  std::map<std::string, HostTensor> in{{"x", random_input({2, 8, 6, 6}, 6)}};
  const auto want = run_reference(net, in).at("pooled"), got = run_reference(lowered, in).at("pooled");
  ASSERT_EQ(got.dtype, DataType::kI8);
  int far = 0;  // the f16 input may move a value across a rounding boundary: one step at most
  for (std::size_t i = 0; i < got.size(); ++i)
    far += std::abs(got.data<std::int8_t>()[i] - want.data<std::int8_t>()[i]) > 1;
  EXPECT_EQ(far, 0);
}

TEST(QuantizedProducts, QuantizedQueryKeyValueBecomeOneProductThatAttentionReadsPacked) {
  constexpr std::int64_t kHeads = 2, kDim = 16, kEmbed = kHeads * kDim;
  builder::WeightPool pool;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, -1, kEmbed});
  // BERT's self-attention with its three projections quantized (one quantize -> dequantize of x that all three read).
  Tensor sx = net.add_small_constant({3.0 / 127}, DataType::kF32, Dims{}, "x_scale");
  Tensor xq = net.add_dequantize(net.add_quantize(x, sx, DataType::kI8), sx);
  std::map<std::string, Tensor> heads;
  for (const char* n : {"query", "key", "value"}) {
    Tensor sw = f32_constant(net, std::string(n) + ".weight_scale", Dims{kEmbed}, 0.001f, 0.004f);
    Tensor w = net.add_dequantize(quantized_weight(net, std::string(n) + ".weight", DataType::kI8, kEmbed, kEmbed), sw,
                                  DataType::kF32, 0);
    Tensor t = net.add_layer("linear", {xq, w, f32_constant(net, std::string(n) + ".bias", Dims{kEmbed}, -.5f, .5f)},
                             {}, std::string("self.") + n)[0];
    heads[n] = net.add_transpose(net.add_reshape(t, {0, 0, kHeads, kDim}), {0, 2, 1, 3});
  }
  Tensor a = net.add_attention(heads["query"], heads["key"], heads["value"]);
  net.mark_output(net.add_reshape(net.add_transpose(a, {0, 2, 1, 3}), {0, 0, kEmbed}), "y");
  Network device = builder::device_layout_passes(builder::lower_quantized_products(net, pool), pool);
  EXPECT_EQ(count_ops(device, "quantized_linear"), 1);
  EXPECT_EQ(count_ops(device, "split"), 0);
  const graph::Graph& g = graph::graph_of(device);
  const graph::Layer& qkv = only_layer(device, "quantized_linear");
  EXPECT_EQ(qkv.name, "self.query+key+value");
  EXPECT_EQ(g.tensor(qkv.inputs[1]).dtype, DataType::kI8);
  EXPECT_EQ(g.static_dims(qkv.inputs[1]), Dims({3 * kEmbed, kEmbed}));
  EXPECT_EQ(g.static_dims(qkv.inputs[2]), Dims({3 * kEmbed}));
  EXPECT_EQ(g.static_dims(qkv.inputs[3]), Dims({3 * kEmbed}));
  const graph::Layer& attention = only_layer(device, "attention");
  EXPECT_EQ(std::get<std::string>(attention.attrs.at("layout")), "packed");
  std::map<std::string, HostTensor> in{{"x", random_input({2, 5, kEmbed}, 8)}};
  EXPECT_LT(rel_l2(run_reference(device, in).at("y"), run_reference(net, in).at("y")), 1e-6);
}

TEST(QuantizedProducts, AQuantizeAfterAProductBecomesItsEpilogue) {
  for (DataType type : {DataType::kI8, DataType::kF8E4M3}) {
    SCOPED_TRACE(to_string(type));
    builder::WeightPool pool;
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {-1, 32});
    // fc1 -> GELU -> fc2 (which quantizes its input): fc1's result is only ever quantized.
    Tensor h = net.add_activation("gelu", quantized_linear_of(net, x, type, 48, true, "fc1"));
    Tensor y = quantized_linear_of(net, h, type, 16, true, "fc2");
    net.mark_output(y, "y");
    // The same product whose result is also read as float, and one quantized per channel: neither is fused.
    Tensor g2 = quantized_linear_of(net, x, type, 16, false, "fc3");
    net.mark_output(g2, "g2");
    Tensor sc = f32_constant(net, "per_channel_scale", Dims{16}, 0.01f, 0.02f);
    net.mark_output(net.add_quantize(g2, sc, type, 1), "g2q");
    Tensor g3 = quantized_linear_of(net, x, type, 16, false, "fc4");
    net.mark_output(net.add_quantize(g3, sc, type, 1), "g3q");
    Network device = builder::device_layout_passes(builder::lower_quantized_products(net, pool), pool);
    EXPECT_EQ(count_ops(device, "quantized_linear"), 4);
    EXPECT_EQ(count_ops(device, "gelu"), 0);
    EXPECT_EQ(count_ops(device, "quantize"), 5);  // x's for fc1, fc3 and fc4, g2q's and g3q's: not h's for fc2
    const graph::Graph& g = graph::graph_of(device);
    int fused = 0;
    for (const auto& layer : g.layers) {
      if (layer.op != "quantized_linear" || layer.attrs.count("quantize_to") == 0) continue;
      ++fused;  // fc1, the only product with a GELU
      ASSERT_EQ(layer.inputs.size(), 6u);
      EXPECT_EQ(std::get<std::string>(layer.attrs.at("quantize_to")), to_string(type));
      EXPECT_EQ(std::get<std::string>(layer.attrs.at("activation")), "gelu_erf");
      EXPECT_EQ(g.tensor(layer.outputs[0]).dtype, type);
      EXPECT_EQ(g.tensor(layer.inputs[5]).dtype, DataType::kF32);
      EXPECT_TRUE(g.tensor(layer.inputs[5]).shape.empty());
    }
    EXPECT_EQ(fused, 1);
    std::map<std::string, HostTensor> in{{"x", random_input({7, 32}, 11)}};
    const auto want = run_reference(net, in);
    const auto got = run_reference(device, in);
    // The fused quantize divides the double epilogue value instead of the f32 GELU result: a value within an f32
    // rounding of a boundary may land one step over.
    EXPECT_LT(rel_l2(got.at("y"), want.at("y")), 1e-3);
    EXPECT_LT(rel_l2(got.at("g2"), want.at("g2")), 1e-6);
  }
}

// A norm (layer_norm or rms_norm) whose result the next product reads quantized and an add reads in float (BERT's
// post-norm block boundary, a LLaMA-style block's norm): after the device passes it writes its result quantized too
// (output_scale after its weight and bias), which the product reads, while the add reads the float one.
void expect_norm_writes_its_quantized_result(const std::string& op, DataType type) {
  SCOPED_TRACE(op);
  builder::WeightPool pool;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 32});
  std::vector<Tensor> inputs = {x, f32_constant(net, op + ".weight", Dims{32}, 0.5f, 1.5f)};
  if (op == "layer_norm") inputs.push_back(f32_constant(net, op + ".bias", Dims{32}, -0.5f, 0.5f));
  Tensor n = net.add_layer(op, inputs, {}, "norm")[0];
  net.mark_output(net.add_binary("add", quantized_linear_of(net, n, type, 32, true, "fc"), n), "y");
  Network device = builder::device_layout_passes(builder::lower_quantized_products(net, pool), pool);
  EXPECT_EQ(count_ops(device, "quantize"), 0);
  const graph::Graph& g = graph::graph_of(device);
  const graph::Layer& norm = only_layer(device, op);
  ASSERT_EQ(norm.inputs.size(), inputs.size() + 1);
  ASSERT_EQ(norm.outputs.size(), 2u);
  EXPECT_EQ(g.tensor(norm.inputs.back()).dtype, DataType::kF32);
  EXPECT_EQ(std::get<std::string>(norm.attrs.at("quantize_to")), to_string(type));
  EXPECT_EQ(g.tensor(norm.outputs[0]).dtype, DataType::kF32);
  EXPECT_EQ(g.tensor(norm.outputs[1]).dtype, type);
  const graph::Layer& fc = only_layer(device, "quantized_linear");
  EXPECT_EQ(fc.inputs[0], norm.outputs[1]);  // the product reads the quantized result
  ASSERT_EQ(fc.inputs.size(), 5u);
  EXPECT_EQ(fc.inputs[4], norm.outputs[0]);  // the residual, the float one
  std::map<std::string, HostTensor> in{{"x", random_input({6, 32}, 12)}};
  // Quantized from the double value instead of the f32 one: a value within an f32 rounding of a step boundary may
  // land one step over.
  EXPECT_LT(rel_l2(run_reference(device, in).at("y"), run_reference(net, in).at("y")), 1e-3);
  // Lowered to f16, the output scale stays f32.
  Network low = builder::lower_precision(device, DataType::kF16, pool, plugin::Device::kHost);
  EXPECT_EQ(graph::graph_of(low).tensor(only_layer(low, op).inputs.back()).dtype, DataType::kF32);
}

TEST(QuantizedProducts, ALayerNormAlsoWritesItsQuantizedResult) {
  expect_norm_writes_its_quantized_result("layer_norm", DataType::kI8);
}

TEST(QuantizedProducts, AnRmsNormAlsoWritesItsQuantizedResult) {
  expect_norm_writes_its_quantized_result("rms_norm", DataType::kF8E4M3);
  expect_norm_writes_its_quantized_result("rms_norm", DataType::kI8);
}

// x -> quantize -> dequantize, one scale.
Tensor quantize_dequantize(Network& net, Tensor x, DataType type, const std::string& name) {
  Tensor sx = net.add_small_constant({type == DataType::kI8 ? 2.0 / 127 : 2.0 / 448}, DataType::kF32, Dims{},
                                     name + ".x_scale");
  return net.add_dequantize(net.add_quantize(x, sx, type), sx);
}

// A conv 3x3 of a dequantized x (weight: a dequantize of a quantized constant, per output channel).
Tensor conv_of_dequantized(Network& net, Tensor xq, DataType type, std::int64_t out, const std::string& name) {
  const std::int64_t in = net.shape(xq)[1];
  Tensor w = quantized_weight(net, name + ".weight", type, Dims{out, in, 3, 3});
  Tensor sw = f32_constant(net, name + ".weight_scale", Dims{out}, 0.0005f, 0.002f);
  ConvOptions options;
  options.padding = {1, 1};
  return net.add_convolution(xq, net.add_dequantize(w, sw, DataType::kF32, 0),
                             f32_constant(net, name + ".bias", Dims{out}, -0.5f, 0.5f), options);
}

// x -> quantize -> dequantize -> conv 3x3.
Tensor quantized_conv_of(Network& net, Tensor x, DataType type, std::int64_t out, const std::string& name) {
  return conv_of_dequantized(net, quantize_dequantize(net, x, type, name), type, out, name);
}

// A ResNet block: conv -> relu -> conv, + the block's input, relu.
Tensor quantized_block(Network& net, Tensor x, DataType type, const std::string& name) {
  const std::int64_t channels = net.shape(x)[1];
  Tensor h = net.add_activation("relu", quantized_conv_of(net, x, type, 32, name + ".conv1"));
  return net.add_activation("relu",
                            net.add_binary("add", quantized_conv_of(net, h, type, channels, name + ".conv2"), x));
}

TEST(QuantizedProducts, ConvolutionsBetweenDequantizesRunQuantizedChannelsLast) {
  for (DataType type : {DataType::kI8, DataType::kF8E4M3}) {
    SCOPED_TRACE(to_string(type));
    builder::WeightPool pool;
    Network net;
    // Two blocks; 24 channels (not a multiple of 16: padded for the convolutions that read them).
    Tensor x = net.add_input("x", DataType::kF32, {2, 24, 6, 6});
    net.mark_output(quantized_block(net, quantized_block(net, x, type, "block1"), type, "block2"), "y");
    Network lowered = builder::lower_quantized_products(net, pool);
    EXPECT_EQ(count_ops(lowered, "conv"), 0);
    EXPECT_EQ(count_ops(lowered, "quantized_conv"), 4);
    EXPECT_EQ(count_ops(lowered, "dequantize"), 0);
    std::map<std::string, HostTensor> in{{"x", random_input({2, 24, 6, 6}, 5)}};
    EXPECT_LT(rel_l2(run_reference(lowered, in).at("y"), run_reference(net, in).at("y")), 1e-6);

    lowered = builder::lower_precision(lowered, DataType::kF16, pool, plugin::Device::kHost);
    lowered = builder::device_layout_passes(builder::remove_dead_layers(lowered), pool);
    EXPECT_EQ(count_ops(lowered, "relu"), 0);
    EXPECT_EQ(count_ops(lowered, "add"), 0);
    // conv1's result is quantized in its epilogue for conv2; each block's input (read by the residual too) is quantized
    // by a step of its own.
    EXPECT_EQ(count_ops(lowered, "quantize"), 2);
    const graph::Graph& g = graph::graph_of(lowered);
    int residuals = 0, quantized_results = 0;
    for (const auto& layer : g.layers) {
      if (layer.op == "quantize") {
        EXPECT_EQ(g.tensor(layer.inputs[1]).dtype, DataType::kF32) << layer.name;
        // Block 2's input quantize reads block 1's channels-last result: [N, H, W, C].
        const std::int32_t producer = g.tensor(layer.inputs[0]).producer;
        if (producer >= 0 && g.layers[static_cast<std::size_t>(producer)].op == "quantized_conv") {
          EXPECT_EQ(g.static_dims(layer.inputs[0]), Dims({2, 6, 6, 24})) << layer.name;
        }
      }
      if (layer.op != "quantized_conv") continue;
      EXPECT_EQ(std::get<std::string>(layer.attrs.at("layout")), "nhwc") << layer.name;
      EXPECT_EQ(std::get<std::string>(layer.attrs.at("activation")), "relu") << layer.name;
      EXPECT_EQ(g.tensor(layer.inputs[2]).dtype, DataType::kF32) << layer.name;
      const bool quantized = layer.attrs.count("quantize_to") != 0;
      quantized_results += quantized ? 1 : 0;
      EXPECT_EQ(g.tensor(layer.outputs[0]).dtype, quantized ? type : DataType::kF16) << layer.name;
      residuals += layer.inputs.size() == 5 ? 1 : 0;
    }
    EXPECT_EQ(residuals, 2);
    EXPECT_EQ(quantized_results, 2);
    // Transposes only where the network's channels-first input enters and its output leaves: x for the quantize and
    // for the residual, y back.
    EXPECT_LE(count_ops(lowered, "transpose"), 3);
    // f16 activations and f32 quantization may move a value across a rounding boundary: a few steps at most.
    EXPECT_LT(rel_l2(run_reference(lowered, in).at("y"), run_reference(net, in).at("y")), 2e-2);
  }
}

// A CNN's stem: a max pool whose only reader is the quantize of the first block's input writes its result quantized
// (the quantize joins it); a max pool whose float result is read elsewhere too keeps its quantize.
TEST(QuantizedProducts, AMaxPoolWritesItsQuantizedResult) {
  for (DataType type : {DataType::kI8, DataType::kF8E4M3}) {
    SCOPED_TRACE(to_string(type));
    builder::WeightPool pool;
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {2, 16, 10, 10});
    PoolOptions options;
    options.kernel = {3, 3};
    options.stride = {2, 2};
    options.padding = {1, 1};
    Tensor p = net.add_pool2d(x, PoolType::kMax, options);
    Tensor h = net.add_activation("relu", quantized_conv_of(net, p, type, 32, "conv1"));
    net.mark_output(h, "y");
    Tensor p2 = net.add_pool2d(x, PoolType::kMax, options);  // read by a quantized conv and as an output
    net.mark_output(net.add_activation("relu", quantized_conv_of(net, p2, type, 16, "conv2")), "y2");
    net.mark_output(p2, "pooled");
    Network lowered = builder::lower_precision(builder::lower_quantized_products(net, pool), DataType::kF16, pool,
                                               plugin::Device::kHost);
    lowered = builder::device_layout_passes(builder::remove_dead_layers(lowered), pool);
    const graph::Graph& g = graph::graph_of(lowered);
    int quantized_pools = 0;
    for (const auto& layer : g.layers) {
      if (layer.op != "max_pool2d" || layer.attrs.count("quantize_to") == 0) continue;
      ++quantized_pools;
      EXPECT_EQ(layer.inputs.size(), 2U) << layer.name;
      EXPECT_EQ(g.tensor(layer.inputs[1]).dtype, DataType::kF32) << layer.name;
      EXPECT_EQ(g.tensor(layer.outputs[0]).dtype, type) << layer.name;
    }
    EXPECT_EQ(quantized_pools, 1);
    EXPECT_EQ(count_ops(lowered, "quantize"), 1);  // p2's, which its float result still needs
    std::map<std::string, HostTensor> in{{"x", random_input({2, 16, 10, 10}, 9)}};
    auto want = run_reference(net, in), got = run_reference(lowered, in);
    for (const char* name : {"y", "y2"}) EXPECT_LT(rel_l2(got.at(name), want.at(name)), 2e-2) << name;
  }
}

// With the residual quantized too (calibrate --quantize-residuals): the block's input is quantized once, for conv1 and
// for the residual, which the second conv reads quantized (input 6, its scale); so its result can stay quantized for
// the next block, and no quantize step is left but the network input's.
TEST(QuantizedProducts, AQuantizedResidualIsReadQuantizedAndTheBlockOutputStaysQuantized) {
  for (DataType type : {DataType::kI8, DataType::kF8E4M3}) {
    SCOPED_TRACE(to_string(type));
    builder::WeightPool pool;
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {2, 32, 6, 6});
    Tensor y = x;
    for (const char* block : {"block1", "block2"}) {
      const std::string name = block;
      Tensor xd = quantize_dequantize(net, y, type, name + ".input");  // one quantize for conv1 and the residual
      Tensor h = net.add_activation("relu", conv_of_dequantized(net, xd, type, 32, name + ".conv1"));
      y = net.add_activation("relu", net.add_binary("add", quantized_conv_of(net, h, type, 32, name + ".conv2"), xd));
    }
    net.mark_output(y, "y");
    Network lowered = builder::lower_quantized_products(net, pool);
    lowered = builder::lower_precision(lowered, DataType::kF16, pool, plugin::Device::kHost);
    lowered = builder::device_layout_passes(builder::remove_dead_layers(lowered), pool);
    EXPECT_EQ(count_ops(lowered, "quantize"), 1);  // x's; every other one is an epilogue
    EXPECT_EQ(count_ops(lowered, "dequantize"), 0);
    EXPECT_EQ(count_ops(lowered, "add"), 0);
    const graph::Graph& g = graph::graph_of(lowered);
    int quantized_residuals = 0;
    for (const auto& layer : g.layers) {
      if (layer.op != "quantized_conv" || layer.inputs.size() < 7) continue;
      const bool last = ++quantized_residuals == 2;
      EXPECT_EQ(g.tensor(layer.inputs[4]).dtype, type) << layer.name;
      EXPECT_EQ(g.static_dims(layer.inputs[4]), Dims({2, 6, 6, 32})) << layer.name;  // channels last, as y
      EXPECT_EQ(g.tensor(layer.inputs[6]).dtype, DataType::kF32) << layer.name;
      EXPECT_TRUE(g.tensor(layer.inputs[6]).shape.empty()) << layer.name;
      // Block 1's result only feeds block 2's quantize: it is written quantized; block 2's is the network's output.
      EXPECT_EQ(layer.attrs.count("quantize_to") != 0, !last) << layer.name;
    }
    EXPECT_EQ(quantized_residuals, 2);
    std::map<std::string, HostTensor> in{{"x", random_input({2, 32, 6, 6}, 8)}};
    // The residual added exactly (not rounded to f16) and the block result quantized from f32: values near a rounding
    // boundary land a step away, a larger step on e4m3's grid.
    EXPECT_LT(rel_l2(run_reference(lowered, in).at("y"), run_reference(net, in).at("y")),
              type == DataType::kI8 ? 2e-2 : 5e-2);
  }
}

TEST(QuantizedProducts, ABatchNormFoldsIntoTheQuantizedWeightsScale) {
  for (bool per_channel : {false, true}) {
    SCOPED_TRACE(per_channel ? "per channel" : "per tensor");
    builder::WeightPool pool;
    Network net;
    // conv (no bias, a weight quantized explicitly) -> batch_norm -> relu, as calibrate writes a torchvision ResNet.
    Tensor x = net.add_input("x", DataType::kF32, {2, 16, 5, 5});
    Tensor sx = net.add_small_constant({2.0 / 127}, DataType::kF32, Dims{}, "sx");
    Tensor xq = net.add_dequantize(net.add_quantize(x, sx, DataType::kI8), sx);
    Tensor w = quantized_weight(net, "w", DataType::kI8, Dims{8, 16, 3, 3});
    Tensor sw = per_channel ? f32_constant(net, "sw", Dims{8}, 0.0005f, 0.002f)
                            : net.add_small_constant({0.001}, DataType::kF32, Dims{}, "sw");
    ConvOptions options;
    options.padding = {1, 1};
    Tensor c = net.add_convolution(xq, net.add_dequantize(w, sw, DataType::kF32, 0), {}, options);
    Tensor bn = net.add_batch_norm(c, f32_constant(net, "mean", Dims{8}, -0.5f, 0.5f),
                                   f32_constant(net, "var", Dims{8}, 0.5f, 2.f),
                                   f32_constant(net, "gamma", Dims{8}, -1.5f, 1.5f),  // negative factors too
                                   f32_constant(net, "beta", Dims{8}, -0.5f, 0.5f));
    net.mark_output(net.add_activation("relu", bn), "y");
    Network folded = builder::fold_batch_norm(net, pool);
    EXPECT_EQ(count_ops(folded, "batch_norm"), 0);
    Network lowered = builder::lower_quantized_products(folded, pool);
    EXPECT_EQ(count_ops(lowered, "quantized_conv"), 1);
    const graph::Graph& g = graph::graph_of(lowered);
    const graph::Layer& q = only_layer(lowered, "quantized_conv");
    ASSERT_GE(q.inputs.size(), 4u);
    EXPECT_EQ(g.tensor(q.inputs[1]).dtype, DataType::kI8);  // the quantized values as they were
    EXPECT_GE(q.inputs[3], 0);                              // the batch norm's shift as the bias
    std::map<std::string, HostTensor> in{{"x", random_input({2, 16, 5, 5}, 6)}};
    EXPECT_LT(rel_l2(run_reference(lowered, in).at("y"), run_reference(net, in).at("y")), 1e-5);
  }
}

TEST(QuantizedProducts, AConvolutionOfFewChannelsStaysFloat) {
  builder::WeightPool pool;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 3, 8, 8});  // an image: a CNN's stem
  net.mark_output(quantized_conv_of(net, x, DataType::kI8, 16, "stem"), "y");
  Network lowered = builder::lower_quantized_products(net, pool);
  EXPECT_EQ(count_ops(lowered, "quantized_conv"), 0);
  EXPECT_EQ(count_ops(lowered, "conv"), 1);
}

// An i8 stem (7x7 stride 2 on 3 channels) whose result a max pool reads through a relu, and a quantize after the pool:
// the stem becomes a quantized_conv (its blocked form on CUDA: 3x3 over the 4x4 space-to-depth input, 2x2 cells of
// results), the quantize moves before the pool into the stem's epilogue (rounding by a positive scale is monotonic),
// and the pool reads the i8 cells; the stem's space_to_depth step quantizes the f32 image. The same stem in f8e4m3
// (cuDNN's e4m3 stem was slower than f16) or with odd result extents (no blocked form) stays a float conv.
TEST(QuantizedProducts, AnI8StemBeforeAMaxPoolRunsQuantizedAndThePoolReadsItsI8Result) {
  for (DataType type : {DataType::kI8, DataType::kF8E4M3}) {
    for (std::int64_t width : {16, 18}) {  // results 10 x 8, 10 x 9
      SCOPED_TRACE(fmt::format("{} width {}", to_string(type), width));
      const bool quantized = type == DataType::kI8 && width == 16;
      builder::WeightPool pool;
      Network net;
      Tensor x = net.add_input("x", DataType::kF32, {2, 3, 20, width});
      Tensor xq = quantize_dequantize(net, x, type, "stem");
      Tensor w = quantized_weight(net, "stem.weight", type, Dims{16, 3, 7, 7});
      Tensor sw = f32_constant(net, "stem.weight_scale", Dims{16}, 0.0005f, 0.002f);
      ConvOptions stem;
      stem.stride = {2, 2};
      stem.padding = {3, 3};
      Tensor h =
          net.add_activation("relu", net.add_convolution(xq, net.add_dequantize(w, sw, DataType::kF32, 0),
                                                         f32_constant(net, "stem.bias", Dims{16}, -0.5f, 0.5f), stem));
      PoolOptions options;
      options.kernel = {3, 3};
      options.stride = {2, 2};
      options.padding = {1, 1};
      Tensor p = net.add_pool2d(h, PoolType::kMax, options);
      net.mark_output(net.add_activation("relu", quantized_conv_of(net, p, type, 16, "conv1")), "y");
      Network lowered = builder::lower_quantized_products(net, pool);
      EXPECT_EQ(count_ops(lowered, "quantized_conv"), quantized ? 2 : 1);
      lowered = builder::fold_constants(lowered, pool, std::size_t{1} << 26);  // a float stem's weight, as the builder
      lowered = builder::lower_precision(lowered, DataType::kF16, pool, plugin::Device::kHost);
      lowered = builder::device_layout_passes(builder::remove_dead_layers(lowered), pool);
      const graph::Graph& g = graph::graph_of(lowered);
      const graph::Layer& pooled = only_layer(lowered, "max_pool2d");
      EXPECT_EQ(pooled.attrs.count("quantize_to"), quantized ? 0U : 1U);
      EXPECT_EQ(g.tensor(pooled.inputs[0]).dtype, quantized ? DataType::kI8 : DataType::kF16);
      EXPECT_EQ(g.tensor(pooled.outputs[0]).dtype, type);
      // x's quantize: its own step, or (a quantized stem) the stem's space_to_depth, which reads x as given (f32:
      // an input that only a quantize reads is not cast to f16).
      EXPECT_EQ(count_ops(lowered, "quantize"), quantized ? 0 : 1);
      const graph::Layer& s2d = only_layer(lowered, "space_to_depth");
      EXPECT_EQ(s2d.attrs.count("quantize_to"), quantized ? 1U : 0U);
      EXPECT_EQ(g.tensor(s2d.inputs[0]).dtype, quantized ? DataType::kF32 : DataType::kF16);
      EXPECT_EQ(g.tensor(s2d.outputs[0]).dtype, quantized ? DataType::kI8 : DataType::kF16);
      if (quantized) {
        const std::int32_t producer = g.tensor(pooled.inputs[0]).producer;
        ASSERT_GE(producer, 0);
        const graph::Layer& conv = g.layers[static_cast<std::size_t>(producer)];
        EXPECT_EQ(conv.op, "quantized_conv");
        EXPECT_EQ(std::get<std::string>(conv.attrs.at("quantize_to")), "i8");
        EXPECT_EQ(std::get<std::string>(conv.attrs.at("activation")), "relu");
        EXPECT_EQ(g.static_dims(conv.inputs[0]), Dims({2, 7, 6, 64}));  // 4x4 cells of the padded x, 48 -> 64 channels
        EXPECT_EQ(g.static_dims(conv.inputs[1]), Dims({64, 3, 3, 64}));
        EXPECT_EQ(g.static_dims(conv.inputs[2]), Dims({64}));  // the scale per channel, for each result of a cell
        EXPECT_EQ(g.static_dims(conv.outputs[0]), Dims({2, 5, 4, 64}));
        EXPECT_EQ(std::get<std::int64_t>(pooled.attrs.at("input_block_size")), 2);
      }
      std::map<std::string, HostTensor> in{{"x", random_input({2, 3, 20, width}, 13)}};
      EXPECT_LT(rel_l2(run_reference(lowered, in).at("y"), run_reference(net, in).at("y")), 2e-2);
    }
  }
}

// A linear whose weight alone is a dequantize (weight-only quantization): the float x times the quantized weight,
// the weight's scale per output feature; through f16 lowering and the epilogue passes its GELU joins it, and a
// quantize after it stays a step of its own (its result is never quantized).
TEST(QuantizedProducts, AWeightOnlyLinearReadsTheQuantizedWeight) {
  const std::pair<DataType, bool> variants[] = {
      {DataType::kI8, false}, {DataType::kI8, true}, {DataType::kF8E4M3, false}, {DataType::kF8E4M3, true}};
  for (const auto& [type, per_channel] : variants) {
    SCOPED_TRACE(fmt::format("{}, scale per {}", to_string(type), per_channel ? "channel" : "tensor"));
    builder::WeightPool pool;
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {-1, 32});
    Tensor sw = per_channel ? f32_constant(net, "fc.weight_scale", Dims{24}, 0.001f, 0.004f)
                            : net.add_small_constant({0.002}, DataType::kF32, Dims{}, "fc.weight_scale");
    Tensor h = net.add_linear(x, net.add_dequantize(quantized_weight(net, "fc.weight", type, 24, 32), sw),
                              f32_constant(net, "fc.bias", Dims{24}, -0.5f, 0.5f));
    Tensor y = net.add_activation("gelu", h);
    Tensor sy = net.add_small_constant({0.05}, DataType::kF32, Dims{}, "sy");
    net.mark_output(y, "y");
    net.mark_output(net.add_dequantize(net.add_quantize(y, sy, DataType::kI8), sy), "yq");
    Network lowered = builder::lower_quantized_products(net, pool);
    EXPECT_EQ(count_ops(lowered, "linear"), 0);
    const graph::Graph& g = graph::graph_of(lowered);
    const graph::Layer& q = only_layer(lowered, "quantized_linear");
    EXPECT_EQ(g.tensor(q.inputs[0]).dtype, DataType::kF32);  // x as it is
    EXPECT_EQ(g.tensor(q.inputs[1]).dtype, type);            // the weight stays quantized
    EXPECT_EQ(g.static_dims(q.inputs[2]), Dims({24}));
    EXPECT_EQ(count_ops(lowered, "dequantize"), 1);  // the weight's is gone; yq's stays
    std::map<std::string, HostTensor> in{{"x", random_input({5, 32}, 3)}};
    EXPECT_LT(rel_l2(run_reference(lowered, in).at("y"), run_reference(net, in).at("y")), 1e-6);

    Network low = builder::lower_precision(lowered, DataType::kF16, pool, plugin::Device::kHost);
    low = builder::fuse_quantized_outputs(builder::fuse_epilogues(builder::remove_dead_layers(low)));
    const graph::Graph& lg = graph::graph_of(low);
    const graph::Layer& lq = only_layer(low, "quantized_linear");
    EXPECT_EQ(lg.tensor(lq.inputs[0]).dtype, DataType::kF16);
    EXPECT_EQ(lg.tensor(lq.inputs[2]).dtype, DataType::kF32);  // the scale stays f32
    EXPECT_EQ(lg.tensor(lq.outputs[0]).dtype, DataType::kF16);
    EXPECT_EQ(std::get<std::string>(lq.attrs.at("activation")), "gelu_erf");
    EXPECT_EQ(lq.attrs.count("quantize_to"), 0u);
    EXPECT_EQ(count_ops(low, "quantize"), 1);
    EXPECT_LT(rel_l2(run_reference(low, in).at("y"), run_reference(net, in).at("y")), 2e-3);
  }
}

TEST(QuantizedProducts, AWeightOnlyProductChecksItsTypes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, {3, 16});
  Tensor w = quantized_weight(net, "w", DataType::kI8, 8, 16);
  Tensor s = f32_constant(net, "s", Dims{8}, 0.01f, 0.02f);
  // x must have `to`'s type (f32 by default).
  EXPECT_THROW(net.add_layer("quantized_linear", {x, w, s}, {}, "fc"), GraphError);
  // No quantized result.
  Tensor so = net.add_small_constant({0.1}, DataType::kF32, Dims{}, "so");
  EXPECT_THROW(net.add_layer("quantized_linear", {x, w, s, {}, {}, so},
                             {{"to", std::string("f16")}, {"quantize_to", std::string("i8")}}, "fc"),
               GraphError);
  // A float weight is not a weight-only product.
  Tensor wf = f32_constant(net, "wf", Dims{8, 16}, -1.f, 1.f);
  EXPECT_THROW(net.add_layer("quantized_linear", {net.add_input("x32", DataType::kF32, {3, 16}), wf, s}, {}, "fc"),
               GraphError);
  EXPECT_NO_THROW(net.add_layer("quantized_linear", {x, w, s}, {{"to", std::string("f16")}}, "fc"));
}

TEST(QuantizedProducts, OtherPatternsKeepTheirLinear) {
  builder::WeightPool pool;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {3, 16});
  // Weight-only, but the dequantized weight is also read by another layer (a tied embedding): it stays float.
  Tensor sw = net.add_small_constant({0.01}, DataType::kF32, Dims{}, "sw");
  Tensor tied = net.add_dequantize(quantized_weight(net, "wa", DataType::kI8, 8, 16), sw);
  Tensor a = net.add_linear(x, tied);
  net.mark_output(net.add_activation("relu", tied), "tied");
  // The weight's scale runs along `in` (axis 1): it cannot leave the sum.
  Tensor sx = net.add_small_constant({0.02}, DataType::kF32, Dims{}, "sx");
  Tensor xq = net.add_dequantize(net.add_quantize(x, sx, DataType::kI8), sx);
  Tensor sin = f32_constant(net, "s_in", Dims{16}, 0.001f, 0.01f);
  Tensor b =
      net.add_linear(xq, net.add_dequantize(quantized_weight(net, "wb", DataType::kI8, 8, 16), sin, DataType::kF32, 1));
  // x per channel (its scale differs along the sum).
  Tensor sxc = f32_constant(net, "sxc", Dims{16}, 0.01f, 0.03f);
  Tensor xc = net.add_dequantize(net.add_quantize(x, sxc, DataType::kI8, 1), sxc, DataType::kF32, 1);
  Tensor c = net.add_linear(xc, net.add_dequantize(quantized_weight(net, "wc", DataType::kI8, 8, 16), sw));
  // Different quantized types.
  Tensor w8 = quantized_weight(net, "wd", DataType::kF8E4M3, 8, 16);
  Tensor d = net.add_linear(xq, net.add_dequantize(w8, sw));
  net.mark_output(a, "a");
  net.mark_output(b, "b");
  net.mark_output(c, "c");
  net.mark_output(d, "d");
  Network lowered = builder::lower_quantized_products(net, pool);
  EXPECT_EQ(count_ops(lowered, "quantized_linear"), 0);
  EXPECT_EQ(count_ops(lowered, "linear"), 4);
  EXPECT_EQ(count_ops(lowered, "dequantize"), 6);  // nothing lowered: the four weights' and two of x
}

}  // namespace
}  // namespace tensoracle
