// Tests of the Network API, symbolic shapes, the verifier and the JSON form.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "graph/dim_pool.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {
namespace {

using ::testing::HasSubstr;

// Runs `fn`, expecting a GraphError whose message contains every fragment.
template <typename Fn>
void expect_graph_error(Fn&& fn, std::initializer_list<const char*> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected GraphError";
  } catch (const GraphError& e) {
    for (const char* f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
  }
}

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("tensoracle_net_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST(DimPool, FoldsConstantsAndSimplifies) {
  graph::DimPool p;
  auto x = p.symbol(0, 0);
  EXPECT_EQ(p.value(p.add(p.constant(2), p.constant(3))), 5);
  EXPECT_EQ(p.mul(x, p.constant(1)), x);
  EXPECT_EQ(p.add(x, p.constant(0)), x);
  EXPECT_EQ(p.mul(p.constant(4), x), p.mul(x, p.constant(4)));  // commutative ops share an id
  EXPECT_EQ(p.value(p.floor_div(p.constant(-7), p.constant(2))), -4);
  EXPECT_EQ(p.value(p.ceil_div(p.constant(7), p.constant(2))), 4);
  EXPECT_EQ(p.broadcast(x, p.constant(1)), x);
  EXPECT_FALSE(p.broadcast(p.constant(2), p.constant(3)).has_value());
}

TEST(DimPool, EvaluatesExpressionsAndChecksBroadcastAtRuntime) {
  graph::DimPool p;
  auto b = p.symbol(0, 0), s = p.symbol(1, 1);
  auto scaled = p.mul(b, p.constant(12));
  auto halved = p.floor_div(s, p.constant(2));
  auto e = p.add(scaled, halved);
  EXPECT_EQ(p.evaluate(e, {Dims{3}, Dims{1, 9}}), 3 * 12 + 4);
  auto bc = *p.broadcast(b, s);
  EXPECT_EQ(p.evaluate(bc, {Dims{1}, Dims{0, 5}}), 5);
  EXPECT_THROW(p.evaluate(bc, {Dims{2}, Dims{0, 5}}), graph::DimEvaluationError);
  EXPECT_EQ(p.to_string(e, {"x", "y"}), "(x.0 * 12) + (y.1 // 2)");
}

TEST(Network, DynamicDimsPropagateAsExpressions) {
  Network net;
  auto a = net.add_input("a", DataType::kF32, {-1, 1, 4});
  auto b = net.add_input("b", DataType::kF32, {3, -1});
  auto y = net.add_binary("add", a, b);
  EXPECT_EQ(net.shape(y), Dims({-1, 3, -1}));
  EXPECT_EQ(net.dim_expression(y, 0), "a.0");
  EXPECT_EQ(net.dim_expression(y, 2), "broadcast(4, b.1)");
  net.mark_output(y, "y");
  auto shapes = net.infer_shapes({{"a", Dims{5, 1, 4}}, {"b", Dims{3, 1}}});
  EXPECT_EQ(shapes.at("y"), Dims({5, 3, 4}));
}

TEST(Network, RuntimeBroadcastMismatchNamesTheLayer) {
  Network net;
  auto a = net.add_input("a", DataType::kF32, {-1});
  auto b = net.add_input("b", DataType::kF32, {-1});
  net.mark_output(net.add_layer("add", {a, b}, {}, "sum").at(0), "y");
  expect_graph_error([&] { net.infer_shapes({{"a", Dims{3}}, {"b", Dims{4}}}); }, {"layer 'sum' (add)", "broadcast"});
}

TEST(Network, InferShapesRejectsBadInputShapes) {
  Network net;
  auto a = net.add_input("a", DataType::kF32, {-1, 4});
  net.mark_output(net.add_binary("add", a, a), "y");
  expect_graph_error([&] { net.infer_shapes({}); }, {"input 'a' has no shape"});
  expect_graph_error(
      [&] {
        net.infer_shapes({{"a", Dims{2, 5}}});
      },
      {"input 'a'", "does not match the declared [-1,4]"});
  expect_graph_error([&] { net.infer_shapes({{"a", Dims{2}}}); }, {"input 'a'", "rank"});
  expect_graph_error([&] { net.infer_shapes({{"a", Dims{2, 4}}, {"zz", Dims{1}}}); }, {"'zz' is not an input"});
}

TEST(Network, VerifierRules) {
  {
    Network net;
    net.add_input("x", DataType::kF32, {2});
    expect_graph_error([&] { net.verify(); }, {"no outputs"});
  }
  {
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2});
    net.add_input("unused", DataType::kF32, {2});
    net.mark_output(net.add_binary("add", x, x), "y");
    expect_graph_error([&] { net.verify(); }, {"input 'unused' is not used"});
  }
}

TEST(Network, LayerErrorsNameTheLayerAndProblem) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3});
  auto h = net.add_input("h", DataType::kF16, {2, 3});
  expect_graph_error([&] { net.add_layer("no_such_op", {x}, {}, "l1"); }, {"layer 'l1'", "unknown op 'no_such_op'"});
  expect_graph_error([&] { net.add_layer("add", {x}, {}, "l2"); }, {"layer 'l2' (add)", "takes 2 inputs, 1 given"});
  expect_graph_error(
      [&] {
        net.add_layer("add", {x, x}, {{"alpha", 1.0}}, "l3");
      },
      {"layer 'l3' (add)", "unknown attribute 'alpha'"});
  expect_graph_error(
      [&] {
        net.add_layer("add", {x, h}, {}, "l4");
      },
      {"layer 'l4' (add)", "'x' (f32)", "'h' (f16)", "same dtype"});
  expect_graph_error([&] { net.add_layer("add", {x, Tensor{999}}, {}, "l5"); }, {"invalid"});
  net.add_layer("add", {x, x}, {}, "dup");
  expect_graph_error([&] { net.add_layer("add", {x, x}, {}, "dup"); }, {"layer 'dup'", "already exists"});
  expect_graph_error([&] { net.add_input("x", DataType::kF32, {1}); }, {"'x'", "already exists"});
  expect_graph_error([&] { net.mark_output(x, "out"); }, {"'x' is a network input"});
  EXPECT_EQ(net.num_layers(), 1u);  // failed layers leave nothing behind
}

TEST(Network, JsonRoundTripIsExact) {
  TempDir dir;
  std::vector<float> w{1, 2, 3};
  write_safetensors(dir.path() / "w.safetensors", {{"bias", DataType::kF32, Dims{3}, w.data()}});
  auto store = WeightStore::open({dir.path() / "w.safetensors"});
  Network net;
  auto x = net.add_input("x", DataType::kF32, {-1, 3});
  auto b = net.add_constant(store.get("bias"));
  auto c = net.add_small_constant({0.5, -INFINITY, NAN}, DataType::kF32, {3}, "c");
  auto y = net.add_binary("add", net.add_binary("add", x, b), c);
  net.mark_output(y, "y");
  const std::string json = net.to_json();
  Network again = Network::from_json(json, store);
  EXPECT_EQ(again.to_json(), json);
  EXPECT_THAT(json, HasSubstr("\"weight\": \"bias\""));
  EXPECT_THAT(json, HasSubstr("\"-inf\""));
  EXPECT_EQ(again.shape(again.find("y")), Dims({-1, 3}));

  // The copy computes the same thing.
  HostTensor in(DataType::kF32, Dims{2, 3});
  for (int i = 0; i < 6; ++i) in.data<float>()[i] = static_cast<float>(i);
  auto out = run_reference(again, {{"x", in}}).at("y");
  EXPECT_EQ(out.data<float>()[0], 0.0f + 1.0f + 0.5f);
  EXPECT_EQ(out.data<float>()[1], -INFINITY);
  EXPECT_TRUE(std::isnan(out.data<float>()[5]));
}

TEST(Network, CopiedConstantsOutliveTheCallersBytes) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3});
  Tensor w;
  {
    std::vector<float> bytes{1.5f, -2.0f, 4.0f, 0.25f, 8.0f, -1.0f};
    w = net.add_constant_copy(DataType::kF32, Dims{2, 3}, bytes.data(), "w");
    std::fill(bytes.begin(), bytes.end(), 0.0f);  // the network has its own copy
  }
  const std::int16_t ints[2] = {7, -9};
  auto i = net.add_constant_copy(DataType::kI16, Dims{2}, ints);
  EXPECT_EQ(net.name(i), "const_0");
  EXPECT_EQ(net.shape(i), Dims({2}));
  net.mark_output(net.add_binary("mul", x, w), "y");
  net.mark_output(net.add_binary("add", i, i), "i");
  HostTensor in(DataType::kF32, Dims{2, 3});
  for (int k = 0; k < 6; ++k) in.data<float>()[k] = static_cast<float>(k + 1);
  auto out = run_reference(net, {{"x", in}});
  const float want[6] = {1.5f, -4.0f, 12.0f, 1.0f, 40.0f, -6.0f};
  for (int k = 0; k < 6; ++k) EXPECT_EQ(out.at("y").data<float>()[k], want[k]) << k;
  EXPECT_EQ(out.at("i").data<std::int16_t>()[1], -18);
  // Errors name the constant.
  expect_graph_error([&] { net.add_constant_copy(DataType::kF32, Dims{-1, 3}, ints, "dyn"); }, {"'dyn'", "static"});
  expect_graph_error([&] { net.add_constant_copy(DataType::kF32, Dims{2}, nullptr, "none"); }, {"'none'", "no data"});
  expect_graph_error([&] { net.add_constant_copy(DataType::kF32, Dims{1}, ints, "w"); }, {"'w'"});
}

TEST(Network, JsonFileResolvesRelativeWeightFiles) {
  TempDir dir;
  std::vector<float> w{4, 5};
  write_safetensors(dir.path() / "model.safetensors", {{"w", DataType::kF32, Dims{2}, w.data()}});
  std::ofstream(dir.path() / "net.json") << R"({"format": "tensoracle-network", "version": 1,
    "inputs": [{"name": "x", "dtype": "f32", "shape": [2]}],
    "constants": [{"name": "w", "weight": "w", "file": "model.safetensors"}],
    "layers": [{"name": "s", "op": "add", "inputs": ["x", "w"], "outputs": ["y"], "attrs": {}}],
    "outputs": ["y"]})";
  Network net = Network::from_json_file(dir.path() / "net.json");
  HostTensor in(DataType::kF32, Dims{2});
  auto out = run_reference(net, {{"x", in}}).at("y");
  EXPECT_EQ(out.data<float>()[1], 5.0f);
}

TEST(Network, JsonErrors) {
  WeightStore empty = WeightStore::open({});
  auto load = [&](const std::string& layers, const std::string& outputs = R"(["b"])") {
    return Network::from_json(R"({"format": "tensoracle-network", "version": 1,
      "inputs": [{"name": "x", "dtype": "f32", "shape": [2]}], "constants": [], "layers": )" +
                                  layers + R"(, "outputs": )" + outputs + "}",
                              empty);
  };
  // Out of order is fine; a cycle is not.
  EXPECT_NO_THROW(load(R"([{"name": "l2", "op": "add", "inputs": ["a", "a"], "outputs": ["b"]},
                           {"name": "l1", "op": "add", "inputs": ["x", "x"], "outputs": ["a"]}])"));
  expect_graph_error(
      [&] {
        load(R"([{"name": "l1", "op": "add", "inputs": ["x", "b"], "outputs": ["a"]},
                                    {"name": "l2", "op": "add", "inputs": ["a", "x"], "outputs": ["b"]}])");
      },
      {"cycle", "l1", "l2"});
  expect_graph_error([&] { load(R"([{"name": "l1", "op": "add", "inputs": ["x", "nope"], "outputs": ["b"]}])"); },
                     {"layer 'l1'", "input 'nope'"});
  expect_graph_error(
      [&] { load(R"([{"name": "l1", "op": "add", "inputs": ["x", "x"], "outputs": ["b"]}])", R"(["zz"])"); },
      {"output 'zz'"});
  expect_graph_error([&] { Network::from_json("{not json", empty); }, {"not valid JSON"});
  expect_graph_error([&] { Network::from_json(R"({"format": "other", "version": 1})", empty); }, {"'format'"});
  // A format of another JSON type (found by fuzzing: it escaped as a JSON library exception).
  expect_graph_error([&] { Network::from_json(R"({"format": ["tensoracle-network"], "version": 1})", empty); },
                     {"'format'"});
  EXPECT_THROW(Network::from_json(R"({"format": "tensoracle-network", "version": 1, "inputs": [],
      "constants": [{"name": "w", "weight": "missing", "file": "m.safetensors"}], "layers": [], "outputs": []})",
                                  empty),
               NotFoundError);
}

TEST(ReferenceExecutor, InputErrorsAreClear) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2});
  net.mark_output(net.add_binary("add", x, x), "y");
  EXPECT_THROW(run_reference(net, {}), InvalidArgumentError);
  EXPECT_THROW(run_reference(net, {{"x", HostTensor(DataType::kF16, Dims{2})}}), InvalidArgumentError);
  EXPECT_THROW(run_reference(net, {{"x", HostTensor(DataType::kF32, Dims{3})}}), GraphError);
}

}  // namespace
}  // namespace tensoracle
