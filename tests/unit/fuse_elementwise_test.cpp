// Tests of the fuse_elementwise pass and the fused_elementwise op: the groups it forms, and that the fused network
// computes exactly what the unfused one did on the CPU reference.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/numeric.hpp"
#include "backends/cuda/codegen/elementwise_codegen.hpp"
#include "builder/passes/passes.hpp"
#include "builder/weight_pool.hpp"
#include "graph/elementwise_program.hpp"
#include "graph/graph.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> ops(const Network& net) {
  std::vector<std::string> out;
  for (const auto& layer : graph::graph_of(net).layers) out.push_back(layer.op);
  return out;
}

// The program of the i-th layer (a fused_elementwise layer).
graph::ElementwiseProgram program_of(const Network& net, std::size_t i) {
  const graph::Layer& layer = graph::graph_of(net).layers.at(i);
  return graph::ElementwiseProgram::parse(std::get<std::string>(layer.attrs.at("program")), layer.inputs.size(),
                                          layer.name);
}

std::vector<std::string> program_ops(const Network& net, std::size_t i) {
  std::vector<std::string> out;
  for (const auto& ins : program_of(net, i).instructions) out.push_back(ins.op);
  return out;
}

HostTensor random_tensor(DataType dtype, const Dims& shape, std::mt19937& rng) {
  HostTensor t(dtype, shape);
  std::vector<double> values(t.size());
  std::uniform_real_distribution<double> real(-3.0, 3.0);
  std::uniform_int_distribution<int> integer(-20, 20);
  for (auto& v : values) {
    if (is_floating_point(dtype)) {
      v = real(rng);
    } else if (dtype == DataType::kBool) {
      v = integer(rng) > 0 ? 1 : 0;
    } else {
      v = integer(rng);
    }
  }
  cpu::from_f64(t, values);
  return t;
}

// Runs both networks on the same random inputs and expects bit-identical outputs: the fused layer's CPU kernel runs
// the program instruction by instruction with the family's kernels, each result in its own dtype.
void expect_same_results(const Network& unfused, const Network& fused, const std::map<std::string, Dims>& shapes,
                         unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::map<std::string, HostTensor> inputs;
  for (auto id : graph::graph_of(unfused).inputs) {
    const auto& t = graph::graph_of(unfused).tensor(id);
    inputs[t.name] = random_tensor(t.dtype, shapes.at(t.name), rng);
  }
  const auto want = run_reference(unfused, inputs);
  const auto got = run_reference(fused, inputs);
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, w] : want) {
    const HostTensor& g = got.at(name);
    EXPECT_EQ(g.dtype, w.dtype) << name;
    EXPECT_EQ(g.shape, w.shape) << name;
    EXPECT_TRUE(g.bytes == w.bytes) << name << " differs";
  }
}

TEST(FuseElementwise, ChainWithBroadcastInputsBecomesOneLayer) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 8});
  Tensor b = net.add_input("b", DataType::kF32, {8});
  Tensor one = net.add_small_constant({1.0}, DataType::kF32, {}, "one");
  Tensor h = net.add_binary("add", net.add_binary("mul", x, b), one);
  net.mark_output(net.add_activation("gelu", h, {{"approximate", std::string("tanh")}}), "y");
  const Network fused = builder::fuse_elementwise(net);
  EXPECT_THAT(ops(fused), ElementsAre("fused_elementwise"));
  EXPECT_THAT(program_ops(fused, 0), ElementsAre("mul", "add", "gelu"));
  EXPECT_EQ(graph::graph_of(fused).layers[0].inputs.size(), 3U);
  EXPECT_EQ(fused.shape(Tensor{graph::graph_of(fused).outputs[0]}), (Dims{-1, 8}));
  EXPECT_EQ(graph::graph_of(fused).tensor(graph::graph_of(fused).outputs[0]).name, "y");
  expect_same_results(net, fused, {{"x", {5, 8}}, {"b", {8}}});
}

TEST(FuseElementwise, DiamondsAreOneGroup) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {4, 6});
  Tensor t = net.add_unary("exp", x);
  Tensor u = net.add_unary("sin", t);
  Tensor v = net.add_unary("cos", t);
  Tensor w = net.add_binary("mul", net.add_binary("add", u, v), t);
  net.mark_output(w, "w");
  const Network fused = builder::fuse_elementwise(net);
  EXPECT_THAT(ops(fused), ElementsAre("fused_elementwise"));
  EXPECT_THAT(program_ops(fused, 0), ElementsAre("exp", "sin", "cos", "add", "mul"));
  expect_same_results(net, fused, {{"x", {4, 6}}});
}

TEST(FuseElementwise, InputsBroadcastToTheGroupsOutput) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {4, 1});
  Tensor b = net.add_input("b", DataType::kF32, {1, 3});
  Tensor c = net.add_input("c", DataType::kF32, {3});
  Tensor y = net.add_unary("tanh", net.add_binary("add", net.add_binary("mul", a, b), c));
  net.mark_output(y, "y");
  const Network fused = builder::fuse_elementwise(net);
  EXPECT_THAT(ops(fused), ElementsAre("fused_elementwise"));
  EXPECT_EQ(fused.shape(Tensor{graph::graph_of(fused).outputs[0]}), (Dims{4, 3}));
  expect_same_results(net, fused, {{"a", {4, 1}}, {"b", {1, 3}}, {"c", {3}}});
}

TEST(FuseElementwise, AValueReadOutsideItsGroupStaysItsOwnLayer) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 5});
  Tensor t = net.add_activation("relu", x);                               // read by softmax and by sigmoid
  Tensor s = net.add_softmax(t, -1);                                      // not elementwise
  Tensor y = net.add_binary("mul", net.add_activation("sigmoid", t), s);  // its own group
  net.mark_output(y, "y");
  const Network fused = builder::fuse_elementwise(net);
  EXPECT_THAT(ops(fused), ElementsAre("fused_elementwise", "softmax", "fused_elementwise"));
  EXPECT_THAT(program_ops(fused, 0), ElementsAre("relu"));
  EXPECT_THAT(program_ops(fused, 2), ElementsAre("sigmoid", "mul"));
  expect_same_results(net, fused, {{"x", {2, 5}}});

  // Read by two different groups: both read the tensor, so it is made once, by its own layer.
  Network two;
  Tensor x2 = two.add_input("x", DataType::kF32, {3});
  Tensor e = two.add_unary("exp", x2);
  two.mark_output(two.add_softmax(two.add_unary("neg", e), 0), "p");
  two.mark_output(two.add_softmax(two.add_unary("abs", e), 0), "q");
  const Network fused_two = builder::fuse_elementwise(two);
  EXPECT_THAT(ops(fused_two),
              ElementsAre("fused_elementwise", "fused_elementwise", "softmax", "fused_elementwise", "softmax"));
  expect_same_results(two, fused_two, {{"x", {3}}});
}

TEST(FuseElementwise, NetworkOutputsAreNotSwallowed) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {7});
  Tensor t = net.add_unary("exp", x);
  net.mark_output(t, "t");
  net.mark_output(net.add_unary("neg", net.add_unary("log", t)), "y");
  const Network fused = builder::fuse_elementwise(net);
  EXPECT_THAT(ops(fused), ElementsAre("fused_elementwise", "fused_elementwise"));
  EXPECT_THAT(program_ops(fused, 0), ElementsAre("exp"));
  EXPECT_THAT(program_ops(fused, 1), ElementsAre("log", "neg"));
  EXPECT_THAT(graph::graph_of(fused).input_names(), ElementsAre("x"));
  std::vector<std::string> outputs;
  for (auto id : graph::graph_of(fused).outputs) outputs.push_back(graph::graph_of(fused).tensor(id).name);
  EXPECT_THAT(outputs, ElementsAre("t", "y"));
  expect_same_results(net, fused, {{"x", {7}}});
}

TEST(FuseElementwise, OpsTheGeneratorCannotHandleStayAsTheyAre) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 4});
  Tensor q = net.add_cast(net.add_unary("abs", x), DataType::kF8E4M3);  // f8 is not generated
  Tensor y = net.add_activation("relu", net.add_cast(q, DataType::kF32));
  net.mark_output(net.add_softmax(y, 1), "y");
  const Network fused = builder::fuse_elementwise(net);
  EXPECT_THAT(ops(fused), ElementsAre("fused_elementwise", "cast", "cast", "fused_elementwise", "softmax"));
  expect_same_results(net, fused, {{"x", {2, 4}}});
}

TEST(FuseElementwise, LoweredPrecisionCastsJoinTheChain) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 16});
  Tensor w = net.add_small_constant(std::vector<double>(16, 0.37), DataType::kF32, {16}, "w");
  net.mark_output(net.add_activation("silu", net.add_binary("mul", x, w)), "y");
  builder::WeightPool pool;
  const Network lowered = builder::lower_precision(net, DataType::kF16, pool, plugin::Device::kHost);
  const Network fused = builder::fuse_elementwise(lowered);
  EXPECT_THAT(ops(fused), ElementsAre("fused_elementwise"));
  EXPECT_THAT(program_ops(fused, 0), ElementsAre("cast", "mul", "silu", "cast"));
  EXPECT_EQ(graph::graph_of(fused).tensor(graph::graph_of(fused).outputs[0]).dtype, DataType::kF32);
  expect_same_results(lowered, fused, {{"x", {3, 16}}});
  const Network bf16 = builder::lower_precision(net, DataType::kBF16, pool, plugin::Device::kHost);
  expect_same_results(bf16, builder::fuse_elementwise(bf16), {{"x", {3, 16}}});
}

TEST(FuseElementwise, IntegerAndBoolChainsAreExact) {
  Network net;
  Tensor a = net.add_input("a", DataType::kI32, {6});
  Tensor b = net.add_input("b", DataType::kI32, {6});
  Tensor q = net.add_binary("div", net.add_binary("mul", a, b), net.add_binary("sub", b, a));  // x/0 gives 0
  Tensor keep = net.add_unary("not", net.add_binary("less", q, a));
  Tensor y = net.add_where(keep, net.add_unary("abs", q), net.add_cast(net.add_binary("max", a, b), DataType::kI32));
  net.mark_output(net.add_cast(y, DataType::kI8), "y");
  net.mark_output(net.add_cast(net.add_binary("equal", a, b), DataType::kF16), "e");
  const Network fused = builder::fuse_elementwise(net);
  EXPECT_THAT(ops(fused), ElementsAre("fused_elementwise", "fused_elementwise"));
  for (unsigned seed = 1; seed < 6; ++seed) expect_same_results(net, fused, {{"a", {6}}, {"b", {6}}}, seed);
}

TEST(FuseElementwise, GroupsKeepAtMostSixteenInputs) {
  Network net;
  Tensor acc = net.add_input("x0", DataType::kF32, {3});
  for (int i = 1; i < 24; ++i)
    acc = net.add_binary("add", acc, net.add_input(fmt::format("x{}", i), DataType::kF32, {3}));
  net.mark_output(acc, "y");
  const Network fused = builder::fuse_elementwise(net);
  EXPECT_EQ(ops(fused), std::vector<std::string>(2, "fused_elementwise"));
  for (const auto& layer : graph::graph_of(fused).layers) {
    EXPECT_LE(layer.inputs.size(), 16U);
    EXPECT_TRUE(cuda::codegen::supports_fused_layer(graph::graph_of(fused), layer));
  }
  std::map<std::string, Dims> shapes;
  for (int i = 0; i < 24; ++i) shapes[fmt::format("x{}", i)] = Dims{3};
  expect_same_results(net, fused, shapes);
}

TEST(FusedElementwiseOp, JsonRoundTripAndCpuEngine) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 4});
  Tensor c = net.add_small_constant({0.5, -1, 2, 4}, DataType::kF32, {4}, "c");
  Tensor y = net.add_activation("clip", net.add_binary("pow", net.add_unary("abs", x), c),
                                {{"min", -std::numeric_limits<double>::infinity()}, {"max", 3.0}});
  net.mark_output(y, "y");
  const Network fused = builder::fuse_elementwise(net);
  const std::string text = fused.to_json();
  EXPECT_THAT(text, HasSubstr("fused_elementwise"));
  const Network again = Network::from_json(text, [](const std::string&, const std::string&) { return std::nullopt; });
  EXPECT_EQ(again.to_json(), text);
  expect_same_results(net, again, {{"x", {3, 4}}});

  // A CPU engine runs the layer with its reference kernel.
  BuilderConfig config;
  config.add_profile("x", {1, 4}, {2, 4}, {8, 4});
  auto engine = Engine::deserialize(Builder(config).build(fused));
  EXPECT_THAT(engine->manifest_json(), HasSubstr("fused_elementwise_cpu_reference"));
}

// Runs add_layer("fused_elementwise") with a program and expects a GraphError mentioning `fragment`.
void expect_rejected(const std::string& program, const std::string& fragment, DataType dtype = DataType::kF32) {
  Network net;
  Tensor x = net.add_input("x", dtype, {2, 3});
  Tensor y = net.add_input("y", dtype, {3});
  try {
    net.add_layer("fused_elementwise", {x, y}, {{"program", program}}, "f");
    ADD_FAILURE() << "accepted: " << program;
  } catch (const GraphError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fragment)) << program;
    EXPECT_THAT(e.what(), HasSubstr("layer 'f")) << program;
  }
}

TEST(FusedElementwiseOp, InvalidProgramsAreGraphErrors) {
  const std::string ok = R"([{"op":"add","args":[0,1],"dtype":"f32"},{"op":"relu","args":[2],"dtype":"f32"}])";
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 3});
  Tensor y = net.add_input("y", DataType::kF32, {3});
  EXPECT_EQ(net.shape(net.add_layer("fused_elementwise", {x, y}, {{"program", ok}})[0]), (Dims{2, 3}));

  expect_rejected("not json", "not valid JSON");
  expect_rejected("[]", "non-empty list");
  expect_rejected(R"([{"op":"softmax","args":[0],"attrs":{"axis":0},"dtype":"f32"}])", "can't be part");
  expect_rejected(R"([{"op":"fused_elementwise","args":[0],"dtype":"f32"}])", "can't be part");
  expect_rejected(R"([{"op":"add","args":[0,2],"dtype":"f32"}])", "not an input or an earlier result");
  expect_rejected(R"([{"op":"add","args":[0,-1],"dtype":"f32"}])", "not an input or an earlier result");
  expect_rejected(R"([{"op":"add","args":[0],"dtype":"f32"}])", "arguments");
  expect_rejected(R"([{"op":"add","args":[0,1],"dtype":"f16"}])", "records f16");
  expect_rejected(R"([{"op":"add","args":[0,1],"dtype":"f32"},{"op":"exp","args":[0],"dtype":"f32"}])", "never read");
  expect_rejected(R"([{"op":"relu","args":[0],"dtype":"f32"}])", "input 1 is never read");
  expect_rejected(R"([{"op":"add","args":[0,1],"attrs":{"alpha":1},"dtype":"f32"}])", "no attribute 'alpha'");
  expect_rejected(R"([{"op":"add","args":[0,1],"dtype":"f32","extra":1}])", "unknown key");
  expect_rejected(R"([{"op":"add","args":[0,1],"dtype":"x"}])", "unknown dtype");
  expect_rejected(R"([{"op":"gelu","args":[0],"attrs":{"approximate":"erf"},"dtype":"f32"},)"
                  R"({"op":"add","args":[2,1],"dtype":"f32"}])",
                  "approximate");
  expect_rejected(R"([{"op":"not","args":[0],"dtype":"bool"},{"op":"add","args":[2,1],"dtype":"bool"}])", "dtype",
                  DataType::kF32);
}

}  // namespace
}  // namespace tensoracle
