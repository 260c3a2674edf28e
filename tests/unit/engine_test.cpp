// Builder and runtime tests on the CPU target: round trip, profiles, shape errors, passes and damaged engines.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "backends/cuda/codegen/elementwise_codegen.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "builder/passes/passes.hpp"
#include "plan/plan_format.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/reference_executor.hpp"
#include "tensoracle/target_memory.hpp"

namespace tensoracle {
namespace {

// Weights held in memory as a safetensors file, alive for the test.
struct Weights {
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  std::vector<std::byte> bytes;
  std::shared_ptr<const SafetensorsFile> file;

  void add(const std::string& name, const Dims& shape, std::mt19937& rng, float scale = 0.5f) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    auto& v = data.emplace_back(static_cast<std::size_t>(shape.volume()));
    for (auto& x : v) x = dist(rng);
    tensors.push_back(TensorToWrite{name, DataType::kF32, shape, nullptr});
  }
  void finish() {
    for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].data = data[i].data();
    bytes = serialize_safetensors(tensors);
    file = SafetensorsFile::from_bytes(bytes.data(), bytes.size(), "test weights");
  }
  TensorView get(const std::string& name) const { return file->get(name); }
};

HostTensor random_tensor(const Dims& shape, std::mt19937& rng) {
  HostTensor t(DataType::kF32, shape);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (std::size_t i = 0; i < t.size(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// x [-1, 16] → linear 16→32 → gelu → linear 32→8 → softmax; plus a constant subgraph (transpose of a weight).
struct MlpModel {
  Weights weights;
  Network net;
  explicit MlpModel(std::mt19937& rng) {
    weights.add("fc1.weight", {32, 16}, rng);
    weights.add("fc1.bias", {32}, rng);
    weights.add("fc2.weight_t", {32, 8}, rng);
    weights.add("fc2.bias", {8}, rng);
    weights.add("unused", {4}, rng);
    weights.finish();
    Tensor x = net.add_input("x", DataType::kF32, {-1, 16});
    Tensor h =
        net.add_linear(x, net.add_constant(weights.get("fc1.weight")), net.add_constant(weights.get("fc1.bias")));
    h = net.add_activation("gelu", h);
    // transpose of a constant: folded at build time
    Tensor w2 = net.add_transpose(net.add_constant(weights.get("fc2.weight_t")), {1, 0});
    Tensor y = net.add_linear(h, w2, net.add_constant(weights.get("fc2.bias")));
    net.mark_output(net.add_softmax(y, -1), "probs");
    net.mark_output(net.add_activation("relu", h), "hidden");
    net.add_unary("abs", net.add_constant(weights.get("unused")));  // dead layer
  }
};

double max_rel_diff(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(a.shape, b.shape);
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    worst = std::max(worst, std::abs(x - y) / std::max(1e-6, std::abs(y)));
  }
  return worst;
}

std::map<std::string, HostTensor> run_engine(ExecutionContext& ctx, const std::map<std::string, HostTensor>& inputs) {
  std::map<std::string, Dims> shapes;
  for (const auto& [name, t] : inputs) shapes[name] = t.shape;
  ctx.set_input_shapes(shapes);
  std::map<std::string, HostTensor> outputs;
  for (const auto& out : ctx.engine().outputs()) {
    outputs.emplace(out.name, HostTensor(ctx.tensor_dtype(out.name), ctx.tensor_shape(out.name)));
  }
  for (auto& [name, t] : inputs) ctx.set_tensor_address(name, const_cast<std::byte*>(t.bytes.data()));
  for (auto& [name, t] : outputs) ctx.set_tensor_address(name, t.bytes.data());
  ctx.enqueue();
  return outputs;
}

BuilderConfig mlp_config() {
  BuilderConfig config;
  config.add_profile("x", {1, 16}, {4, 16}, {9, 16});
  return config;
}

TEST(Engine, RoundTripEqualsDirectExecution) {
  std::mt19937 rng(1);
  MlpModel model(rng);
  const auto bytes = Builder(mlp_config()).build(model.net);
  auto engine = Engine::deserialize(bytes);
  ASSERT_EQ(engine->inputs().size(), 1u);
  EXPECT_EQ(engine->inputs()[0].dims, Dims({-1, 16}));
  EXPECT_EQ(engine->inputs()[0].profile.max, Dims({9, 16}));
  ASSERT_EQ(engine->outputs().size(), 2u);
  auto ctx = engine->create_execution_context();
  for (std::int64_t batch : {1, 4, 9, 3}) {
    std::map<std::string, HostTensor> inputs{{"x", random_tensor({batch, 16}, rng)}};
    auto got = run_engine(*ctx, inputs);
    auto want = run_reference(model.net, inputs);
    EXPECT_EQ(got.at("probs").shape, Dims({batch, 8}));
    // Identical kernels, but the engine folded the transpose: results agree to rounding.
    EXPECT_LT(max_rel_diff(got.at("probs"), want.at("probs")), 1e-6) << "batch " << batch;
    EXPECT_LT(max_rel_diff(got.at("hidden"), want.at("hidden")), 1e-6) << "batch " << batch;
  }
  const std::string manifest = engine->manifest_json();
  EXPECT_EQ(manifest.find("\"unused\""), std::string::npos) << "the dead layer's weight was packed";
  EXPECT_NE(manifest.find("linear_cpu_reference"), std::string::npos);
  EXPECT_EQ(manifest.find("transpose_cpu_reference"), std::string::npos) << "the constant transpose was not folded";
}

// A weight file whose only tensor is empty has an empty data section, so the tensor sits at the very end of the file
// and its view points one past the header; the engine's weights section is empty too. Built, saved and run, nothing
// may copy from or into a null pointer (the sanitizer build checks).
TEST(Engine, ZeroSizeWeightsAtTheEndOfAnEmptyDataSection) {
  const std::vector<std::byte> file_bytes =
      serialize_safetensors({TensorToWrite{"empty", DataType::kF32, Dims{2, 0}, nullptr}});
  auto file = SafetensorsFile::from_bytes(file_bytes.data(), file_bytes.size(), "empty weights");
  ASSERT_EQ(file->data_start(), file_bytes.size());
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 3});
  const Tensor empty = net.add_constant(file->get("empty"));
  net.mark_output(net.add_concat({x, empty}, 1), "y");
  net.mark_output(net.add_concat({empty, x}, 1), "z");
  auto engine = Engine::deserialize(Builder(BuilderConfig{}).build(net));
  auto ctx = engine->create_execution_context();
  std::mt19937 rng(3);
  const std::map<std::string, HostTensor> inputs{{"x", random_tensor({2, 3}, rng)}};
  const auto got = run_engine(*ctx, inputs);
  EXPECT_EQ(got.at("y").shape, Dims({2, 3}));
  EXPECT_EQ(got.at("y").bytes, inputs.at("x").bytes);
  EXPECT_EQ(got.at("z").bytes, inputs.at("x").bytes);
}

TEST(Engine, ActivationMemoryIsReusedAlongAChain) {
  std::mt19937 rng(10);
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {64, 64});
  Tensor h = x;
  for (int i = 0; i < 8; ++i) h = net.add_activation("relu", net.add_binary("add", h, x));
  net.mark_output(h, "y");
  auto engine = Engine::deserialize(Builder(BuilderConfig{}).build(net));
  // 15 intermediates of 16 KiB each; at most three are alive at once.
  EXPECT_LE(engine->context_memory_bytes(), 3u * 64 * 64 * 4);
  auto ctx = engine->create_execution_context();
  std::map<std::string, HostTensor> inputs{{"x", random_tensor({64, 64}, rng)}};
  auto got = run_engine(*ctx, inputs);
  auto want = run_reference(net, inputs);
  EXPECT_EQ(max_rel_diff(got.at("y"), want.at("y")), 0.0);
}

TEST(Engine, EngineFileIsBarelyLargerThanItsWeights) {
  std::mt19937 rng(2);
  Weights w;
  w.add("big", {512, 512}, rng);
  w.finish();
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 512});
  net.mark_output(net.add_linear(x, net.add_constant(w.get("big"))), "y");
  const auto bytes = Builder(BuilderConfig{}).build(net);
  const double weights = 512.0 * 512 * 4;
  EXPECT_LT(static_cast<double>(bytes.size()), weights * 1.05);
}

TEST(Engine, ShapesOutsideTheProfileAreRejectedAndBlockEnqueue) {
  std::mt19937 rng(3);
  MlpModel model(rng);
  auto engine = Engine::deserialize(Builder(mlp_config()).build(model.net));
  auto ctx = engine->create_execution_context();
  EXPECT_FALSE(ctx->shapes_ready());
  EXPECT_THROW(ctx->tensor_shape("probs"), InvalidArgumentError);
  EXPECT_THROW(ctx->enqueue(), InvalidArgumentError);
  ctx->set_input_shapes({{"x", {2, 16}}});
  EXPECT_EQ(ctx->tensor_shape("probs"), Dims({2, 8}));
  try {
    ctx->set_input_shapes({{"x", {10, 16}}});
    FAIL() << "a shape above the profile max was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("outside its profile"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ctx->tensor_shape("probs"), InvalidArgumentError) << "queries must refuse after a failed setting";
  EXPECT_THROW(ctx->enqueue(), InvalidArgumentError);
  EXPECT_THROW(ctx->set_input_shapes({{"x", {2, 17}}}), InvalidArgumentError);
  EXPECT_THROW(ctx->set_input_shapes({{"y", {2, 16}}}), InvalidArgumentError);
  EXPECT_THROW(ctx->set_input_shapes({}), InvalidArgumentError);
  ctx->set_input_shapes({{"x", {5, 16}}});
  EXPECT_EQ(ctx->tensor_shape("probs"), Dims({5, 8}));
  // Missing address.
  EXPECT_THROW(ctx->enqueue(), InvalidArgumentError);
  EXPECT_THROW(ctx->set_tensor_address("nope", nullptr), InvalidArgumentError);
}

TEST(Engine, ProfilesAreChecked) {
  std::mt19937 rng(4);
  MlpModel model(rng);
  EXPECT_THROW(Builder(BuilderConfig{}).build(model.net), InvalidArgumentError) << "dynamic input without a profile";
  BuilderConfig bad;
  bad.add_profile("x", {4, 16}, {2, 16}, {8, 16});
  EXPECT_THROW(Builder(bad).build(model.net), InvalidArgumentError);
  BuilderConfig wrong_dim;
  wrong_dim.add_profile("x", {1, 15}, {2, 15}, {8, 15});
  EXPECT_THROW(Builder(wrong_dim).build(model.net), InvalidArgumentError);
  BuilderConfig unknown = mlp_config();
  unknown.add_profile("z", {1}, {1}, {1});
  EXPECT_THROW(Builder(unknown).build(model.net), InvalidArgumentError);
}

TEST(Engine, FixedShapesAreSetAtContextCreation) {
  std::mt19937 rng(5);
  MlpModel model(rng);
  BuilderConfig config;
  config.add_profile("x", {3, 16}, {3, 16}, {3, 16});
  auto engine = Engine::deserialize(Builder(config).build(model.net));
  auto ctx = engine->create_execution_context();
  EXPECT_TRUE(ctx->shapes_ready());
  EXPECT_EQ(ctx->tensor_shape("probs"), Dims({3, 8}));
}

TEST(Engine, ContextsRunConcurrentlyFromThreads) {
  std::mt19937 rng(6);
  MlpModel model(rng);
  auto engine = Engine::deserialize(Builder(mlp_config()).build(model.net));
  std::map<std::string, HostTensor> in_a{{"x", random_tensor({2, 16}, rng)}}, in_b{{"x", random_tensor({7, 16}, rng)}};
  auto want_a = run_reference(model.net, in_a), want_b = run_reference(model.net, in_b);
  std::vector<double> errors(2, 1.0);
  std::thread ta([&] {
    auto ctx = engine->create_execution_context();
    double worst = 0;
    for (int i = 0; i < 50; ++i)
      worst = std::max(worst, max_rel_diff(run_engine(*ctx, in_a).at("probs"), want_a.at("probs")));
    errors[0] = worst;
  });
  std::thread tb([&] {
    auto ctx = engine->create_execution_context();
    double worst = 0;
    for (int i = 0; i < 50; ++i)
      worst = std::max(worst, max_rel_diff(run_engine(*ctx, in_b).at("probs"), want_b.at("probs")));
    errors[1] = worst;
  });
  ta.join();
  tb.join();
  EXPECT_LT(errors[0], 1e-6);
  EXPECT_LT(errors[1], 1e-6);
}

TEST(Engine, BatchNormIsFoldedIntoTheConvolution) {
  std::mt19937 rng(7);
  Weights w;
  w.add("conv.weight", {6, 3, 3, 3}, rng);
  w.add("conv.bias", {6}, rng);
  w.add("bn.mean", {6}, rng);
  w.add("bn.var", {6}, rng);
  w.add("bn.weight", {6}, rng);
  w.add("bn.bias", {6}, rng);
  for (auto& v : w.data[3]) v = std::abs(v) + 0.5f;  // variances are positive
  w.finish();
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 3, 8, 8});
  ConvOptions opt;
  opt.padding = {1, 1};
  Tensor c = net.add_convolution(x, net.add_constant(w.get("conv.weight")), net.add_constant(w.get("conv.bias")), opt);
  Tensor b = net.add_batch_norm(c, net.add_constant(w.get("bn.mean")), net.add_constant(w.get("bn.var")),
                                net.add_constant(w.get("bn.weight")), net.add_constant(w.get("bn.bias")));
  net.mark_output(net.add_activation("relu", b), "y");
  auto engine = Engine::deserialize(Builder(BuilderConfig{}).build(net));
  EXPECT_EQ(engine->manifest_json().find("batch_norm_cpu_reference"), std::string::npos) << "not folded";
  auto ctx = engine->create_execution_context();
  std::map<std::string, HostTensor> inputs{{"x", random_tensor({2, 3, 8, 8}, rng)}};
  auto got = run_engine(*ctx, inputs);
  auto want = run_reference(net, inputs);
  const auto& g = got.at("y");
  const auto& r = want.at("y");
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    err += std::pow(g.data<float>()[i] - r.data<float>()[i], 2);
    norm += std::pow(r.data<float>()[i], 2);
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-5);
}

TEST(Engine, Fp16LoweringKeepsInputAndOutputTypes) {
  std::mt19937 rng(8);
  MlpModel model(rng);
  BuilderConfig config = mlp_config();
  config.precision = Precision::kFp16;
  auto engine = Engine::deserialize(Builder(config).build(model.net));
  EXPECT_EQ(engine->precision(), Precision::kFp16);
  EXPECT_EQ(engine->inputs()[0].dtype, DataType::kF32);
  EXPECT_EQ(engine->outputs()[0].dtype, DataType::kF32);
  EXPECT_NE(engine->manifest_json().find("\"f16\""), std::string::npos);
  auto ctx = engine->create_execution_context();
  std::map<std::string, HostTensor> inputs{{"x", random_tensor({4, 16}, rng)}};
  auto got = run_engine(*ctx, inputs);
  auto want = run_reference(model.net, inputs);
  EXPECT_LT(max_rel_diff(got.at("probs"), want.at("probs")), 2e-2);
  EXPECT_GT(max_rel_diff(got.at("probs"), want.at("probs")), 0.0) << "fp16 should differ from fp32 somewhere";
}

TEST(Engine, DamagedEnginesAreCleanErrors) {
  std::mt19937 rng(9);
  MlpModel model(rng);
  const auto bytes = Builder(mlp_config()).build(model.net);
  // Every truncation.
  for (std::size_t n = 0; n < bytes.size(); n += (n < 4096 ? 1 : 97)) {
    std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(Engine::deserialize(cut), Error) << "truncated to " << n;
  }
  // Byte flips in the header and manifest: an error or a valid engine, never a crash.
  int rejected = 0;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 6000); i += 3) {
    auto damaged = bytes;
    damaged[i] ^= std::byte{0x5A};
    try {
      auto e = Engine::deserialize(damaged);
      auto ctx = e->create_execution_context();
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
  std::vector<std::byte> newer = bytes;
  newer[8] = std::byte{99};
  EXPECT_THROW(Engine::deserialize(newer), UnsupportedError);
}

TEST(Engine, OlderFormatVersionsAreRead) {
  std::mt19937 rng(10);
  MlpModel model(rng);
  auto bytes = Builder(mlp_config()).build(model.net);
  EXPECT_EQ(static_cast<int>(bytes[8]), 2);  // the current format version
  bytes[8] = std::byte{1};                   // an engine without generated kernels is also a valid version 1 engine
  EXPECT_NO_THROW(Engine::deserialize(bytes));
  bytes[8] = std::byte{3};
  EXPECT_THROW(Engine::deserialize(bytes), UnsupportedError);
}

// ---- generated kernels: the "kernels" section ----

using Json = nlohmann::json;

// The bytes of a kernel binary for the fused layer: a real CUBIN where NVRTC is built in, else an ELF-looking stub
// (only the loader on a GPU looks further).
std::vector<std::byte> kernel_binary(const Network& net) {
  if (cuda::backend_built()) {
    const auto& layer = graph::graph_of(net).layers.at(0);
    const auto generated = cuda::generate_step_kernel(graph::graph_of(net), layer, "fused_elementwise_nvrtc");
    return cuda::compile_generated_kernel(generated.value().source, 9, 0, "layer '" + layer.name + "'");
  }
  std::vector<std::byte> stub(96, std::byte{0});
  std::memcpy(stub.data(),
              "\x7F"
              "ELF",
              4);
  return stub;
}

// A CUDA engine, for a GPU no machine has, whose one step runs a generated kernel stored in the kernels section.
// `change` may damage the manifest or the section before the engine is written.
std::vector<std::byte> engine_with_kernels(const std::function<void(Json&, std::vector<std::byte>&)>& change = {},
                                           bool with_section = true, bool cpu_target = false) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 3});
  net.mark_output(net.add_activation("relu", net.add_binary("mul", x, x)), "y");
  const Network fused = builder::fuse_elementwise(net);
  const auto cpu_bytes = Builder(BuilderConfig{}).build(fused);
  const plan::ParsedPlan plan = plan::parse_plan(cpu_bytes, "cpu engine");
  Json manifest = plan.manifest;
  manifest.erase("sections");
  if (!cpu_target) {
    manifest["target"] = Json{{"kind", "cuda"},
                              {"device_name", "GPU no machine has"},
                              {"compute_capability", "9.0"},
                              {"multiprocessor_count", 132},
                              {"total_memory_bytes", 150000000000},
                              {"cuda_runtime_version", 13000}};
    manifest["steps"][0]["kernel"] = "fused_elementwise_nvrtc";
  }
  std::vector<std::byte> kernels = kernel_binary(fused);
  manifest["steps"][0]["binary"] =
      Json{{"offset", 0}, {"size", kernels.size()}, {"entries", cuda::codegen::entry_names()}};
  if (change) change(manifest, kernels);
  std::vector<plan::SectionData> sections{{"weights", plan.section("weights", "cpu engine")}};
  if (with_section) sections.push_back({"kernels", kernels});
  return plan::write_plan(manifest, sections);
}

TEST(Engine, GeneratedKernelsRoundTripInTheKernelsSection) {
  const auto bytes = engine_with_kernels();
  const Json manifest = Json::parse(Engine::inspect(bytes));
  EXPECT_EQ(manifest["steps"][0]["kernel"], "fused_elementwise_nvrtc");
  EXPECT_EQ(manifest["steps"][0]["binary"]["entries"].size(), 3U);
  EXPECT_EQ(manifest["sections"][1]["name"], "kernels");
  EXPECT_EQ(manifest["sections"][1]["offset"].get<std::uint64_t>() % 256, 0U);
  // Valid, but made for a GPU this machine does not have (or a build without CUDA): not a format error.
  EXPECT_THROW(Engine::deserialize(bytes), UnsupportedError);
}

TEST(Engine, DamagedKernelsSectionsAreFormatErrors) {
  using Change = std::function<void(Json&, std::vector<std::byte>&)>;
  auto binary = [](Json& m) -> Json& { return m["steps"][0]["binary"]; };
  const std::vector<std::pair<std::string, Change>> changes = {
      {"misaligned offset", [&](Json& m, auto&) { binary(m)["offset"] = 8; }},
      {"offset past the section", [&](Json& m, auto& k) { binary(m)["offset"] = (k.size() / 256 + 1) * 256; }},
      {"size past the section", [&](Json& m, auto& k) { binary(m)["size"] = k.size() + 1; }},
      {"size 0", [&](Json& m, auto&) { binary(m)["size"] = 0; }},
      {"huge size", [&](Json& m, auto&) { binary(m)["size"] = std::uint64_t{1} << 63; }},
      {"negative offset", [&](Json& m, auto&) { binary(m)["offset"] = -256; }},
      {"float size", [&](Json& m, auto&) { binary(m)["size"] = 1.5; }},
      {"two entries",
       [&](Json& m, auto&) {
         binary(m)["entries"] = Json{"a", "b"};
       }},
      {"four entries", [&](Json& m, auto&) { binary(m)["entries"].push_back("d"); }},
      {"entries not strings",
       [&](Json& m, auto&) {
         binary(m)["entries"] = Json{1, 2, 3};
       }},
      {"entry not an identifier", [&](Json& m, auto&) { binary(m)["entries"][1] = "bad name"; }},
      {"empty entry", [&](Json& m, auto&) { binary(m)["entries"][2] = ""; }},
      {"entries not a list", [&](Json& m, auto&) { binary(m)["entries"] = "x"; }},
      {"no entries", [&](Json& m, auto&) { binary(m).erase("entries"); }},
      {"no binary", [&](Json& m, auto&) { m["steps"][0].erase("binary"); }},
      {"binary not an object", [&](Json& m, auto&) { binary(m) = Json::array(); }},
      {"unknown binary key", [&](Json& m, auto&) { binary(m)["extra"] = 1; }},
      {"not an ELF image", [&](Json&, auto& k) { k[0] = std::byte{0}; }},
      {"binary on a hand-written kernel", [&](Json& m, auto&) { m["steps"][0]["kernel"] = "add_f32_broadcast"; }},
  };
  for (const auto& [what, change] : changes) {
    const auto bytes = engine_with_kernels(change);
    EXPECT_THROW(Engine::inspect(bytes), FormatError) << what;
    EXPECT_THROW(Engine::deserialize(bytes), FormatError) << what;
  }
  EXPECT_THROW(Engine::inspect(engine_with_kernels({}, /*with_section=*/false)), FormatError) << "no kernels section";
  EXPECT_THROW(Engine::deserialize(engine_with_kernels({}, true, /*cpu_target=*/true)), FormatError)
      << "a CPU step with a binary";

  // Unknown sections are rejected too.
  const std::vector<std::byte> engine_bytes = engine_with_kernels();  // the parsed sections view these bytes
  const plan::ParsedPlan plan = plan::parse_plan(engine_bytes, "engine");
  Json manifest = plan.manifest;
  manifest.erase("sections");
  std::vector<plan::SectionData> sections = plan.sections;
  const std::vector<std::byte> other(8, std::byte{1});
  sections.push_back({"other", other});
  EXPECT_THROW(Engine::inspect(plan::write_plan(manifest, sections)), FormatError);

  // Truncations and byte flips of the whole engine, kernels included: errors, never crashes.
  const auto bytes = engine_with_kernels();
  for (std::size_t n = 0; n < bytes.size(); n += (n < 2048 ? 7 : 211)) {
    std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(Engine::inspect(cut), Error) << "truncated to " << n;
  }
  for (std::size_t i = 0; i < bytes.size(); i += 13) {
    auto damaged = bytes;
    damaged[i] ^= std::byte{0x5A};
    try {
      Engine::deserialize(damaged);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace tensoracle

namespace tensoracle {
namespace {

TEST(TargetGraph, OnTheCpuEachLaunchRunsTheWorkAgain) {
  TargetStream stream(Target{});
  int runs = 0;
  TargetGraph graph(Target{}, stream.get(), [&] { ++runs; });
  EXPECT_EQ(runs, 0);  // nothing is captured on the CPU
  graph.launch();
  graph.launch();
  EXPECT_EQ(runs, 2);
}

}  // namespace
}  // namespace tensoracle
