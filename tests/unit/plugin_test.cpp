// Plugin layers on the CPU target: loading plugin libraries, the creators' shapes and refusals, fields in the network
// and its JSON form, CPU engines running the plugin's host kernels, precision casts around it, and engines that
// record their plugins.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "tensoracle/builder.hpp"
#include "tensoracle/cache.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/plugin_registry.hpp"
#include "tensoracle/safetensors.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle {
namespace {

// The build's test plugin, or where TENSORACLE_TEST_PLUGIN says (a staged copy of the build).
const std::filesystem::path kPlugin =
    std::getenv("TENSORACLE_TEST_PLUGIN") != nullptr ? std::getenv("TENSORACLE_TEST_PLUGIN") : TENSORACLE_TEST_PLUGIN;

// The other test libraries, beside the test plugin (where a staged build has them too).
std::filesystem::path sibling(const std::filesystem::path& built) { return kPlugin.parent_path() / built.filename(); }

std::vector<LoadedPlugin> load_test_plugin() { return load_plugin_library(kPlugin); }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Plugins, LoadingALibraryRegistersItsCreators) {
  const auto plugins = load_test_plugin();
  ASSERT_EQ(plugins.size(), 4u);
  const std::string digest = sha256_file_hex(kPlugin);
  std::vector<std::string> types;
  for (const auto& p : plugins) {
    types.push_back(p.type);
    EXPECT_EQ(p.version, "1");
    EXPECT_EQ(p.library_sha256, digest);
    EXPECT_EQ(p.library, std::filesystem::canonical(kPlugin));
  }
  EXPECT_EQ(types, (std::vector<std::string>{"test.scale_bias", "test.outer", "test.cuda_only", "test.host_only"}));
  // Again: the same plugins, nothing registered twice.
  EXPECT_EQ(load_test_plugin().size(), 4u);
  std::size_t listed = 0;
  for (const auto& p : loaded_plugins()) listed += p.library_sha256 == digest ? 1 : 0;
  EXPECT_EQ(listed, 4u);
}

TEST(Plugins, LibrariesThatCantServeAreRefusedWithTheReason) {
  EXPECT_THROW(load_plugin_library("/nonexistent/libplugin.so"), IoError);
  const std::string wrong_abi = error_of([] { load_plugin_library(sibling(TENSORACLE_TEST_PLUGIN_WRONG_ABI)); });
  EXPECT_NE(wrong_abi.find("built for plugin ABI version 999"), std::string::npos) << wrong_abi;
  const std::string no_entry = error_of([] { load_plugin_library(sibling(TENSORACLE_TEST_PLUGIN_NO_ENTRY)); });
  EXPECT_NE(no_entry.find("exports no tensoracle_get_plugin_creators entry point"), std::string::npos) << no_entry;
  const auto text = std::filesystem::temp_directory_path() / "tensoracle-plugin-test-not-a-library.so";
  std::ofstream(text) << "not a shared library";
  const std::string not_library = error_of([&] { load_plugin_library(text); });
  EXPECT_NE(not_library.find("can't be loaded"), std::string::npos) << not_library;
  std::filesystem::remove(text);
  // A library providing plugins already provided by another: refused, naming the first.
  const auto copy = std::filesystem::temp_directory_path() / "tensoracle-plugin-test-copy.so";
  load_test_plugin();
  std::filesystem::copy_file(kPlugin, copy, std::filesystem::copy_options::overwrite_existing);
  const std::string twice = error_of([&] { load_plugin_library(copy); });
  EXPECT_NE(twice.find("is already provided by"), std::string::npos) << twice;
  std::filesystem::remove(copy);
}

TEST(Plugins, CreatorsGiveComputedShapesAndSeveralOutputs) {
  load_test_plugin();
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1});
  Tensor y = net.add_input("y", DataType::kF32, {5});
  const auto outs = net.add_plugin("test.outer", "1", {x, y}, {}, "outer");
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(net.shape(outs[0]), (Dims{-1, 5}));
  EXPECT_EQ(net.shape(outs[1]), (Dims{-1}));
  EXPECT_EQ(net.dim_expression(outs[1], 0), "x.0 + 5");
  net.mark_output(outs[0], "product");
  net.mark_output(outs[1], "joined");
  const auto shapes = net.infer_shapes({{"x", {3}}, {"y", {5}}});
  EXPECT_EQ(shapes.at("product"), (Dims{3, 5}));
  EXPECT_EQ(shapes.at("joined"), (Dims{8}));
}

TEST(Plugins, UnknownPluginsAndRefusedFieldsAreGraphErrorsNamingTheLayer) {
  load_test_plugin();
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 4});
  std::vector<float> b(4, 1.f);
  Tensor bias = net.add_constant_copy(DataType::kF32, {4}, b.data(), "b");
  const std::string unknown = error_of([&] { net.add_plugin("test.missing", "7", {x}, {}, "mystery"); });
  EXPECT_NE(unknown.find("layer 'mystery'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("no loaded plugin library provides plugin 'test.missing' version '7'"), std::string::npos)
      << unknown;
  const std::string field = error_of([&] { net.add_plugin("test.scale_bias", "1", {x, bias}, {{"beta", 1.0}}); });
  EXPECT_NE(field.find("unknown field 'beta'"), std::string::npos) << field;
  const std::string type = error_of([&] {
    net.add_plugin("test.scale_bias", "1", {x, bias}, {{"alpha", std::int64_t{2}}});
  });
  EXPECT_NE(type.find("field 'alpha' must be a float"), std::string::npos) << type;
  EXPECT_THROW(net.add_plugin("test.scale_bias", "1", {x, bias}, {{"alpha", 1.0}, {"alpha", 2.0}}), GraphError);
  EXPECT_THROW(net.add_plugin("test.scale_bias", "1", {x, bias}, {{"bad name", 1.0}}), GraphError);
  EXPECT_THROW(net.add_plugin("test.scale_bias", "1", {x, Tensor{}}), GraphError);
  EXPECT_EQ(net.num_layers(), 0u);  // every refused layer left the network as it was
}

// y = relu(scale_bias(x [-1, 4], b, alpha)); {product, joined} = outer(u [-1], v [3]).
struct PluginModel {
  std::vector<float> bias{0.5f, -1.f, 2.f, 0.25f};
  double alpha = 2.5;
  Network net;
  PluginModel() {
    load_test_plugin();
    Tensor x = net.add_input("x", DataType::kF32, {-1, 4});
    Tensor b = net.add_constant_copy(DataType::kF32, {4}, bias.data(), "b");
    Tensor y = net.add_plugin("test.scale_bias", "1", {x, b}, {{"alpha", alpha}}, "scaled")[0];
    net.mark_output(net.add_activation("relu", y), "y");
    Tensor u = net.add_input("u", DataType::kF32, {-1});
    Tensor v = net.add_input("v", DataType::kF32, {3});
    const auto outs = net.add_plugin("test.outer", "1", {u, v}, {}, "outer");
    net.mark_output(outs[0], "product");
    net.mark_output(outs[1], "joined");
  }
  BuilderConfig config(Precision precision = Precision::kFp32) const {
    BuilderConfig c;
    c.target = Target::cpu();
    c.precision = precision;
    c.add_profile("x", {1, 4}, {2, 4}, {8, 4});
    c.add_profile("u", {1}, {2}, {6});
    return c;
  }
};

void run_and_check(const Engine& engine, double tolerance) {
  auto ctx = engine.create_execution_context();
  std::vector<float> x{1, -2, 3, -4, 0.5f, 0.25f, -0.125f, 8};
  std::vector<float> u{2, -3}, v{1, 10, 100};
  ctx->set_input_shapes({{"x", {2, 4}}, {"u", {2}}});
  ASSERT_EQ(ctx->tensor_shape("product"), (Dims{2, 3}));
  ASSERT_EQ(ctx->tensor_shape("joined"), (Dims{5}));
  std::vector<float> y(8), product(6), joined(5);
  ctx->set_tensor_address("x", x.data());
  ctx->set_tensor_address("u", u.data());
  ctx->set_tensor_address("v", v.data());
  ctx->set_tensor_address("y", y.data());
  ctx->set_tensor_address("product", product.data());
  ctx->set_tensor_address("joined", joined.data());
  ctx->enqueue();
  const std::vector<float> bias{0.5f, -1.f, 2.f, 0.25f};
  for (std::size_t i = 0; i < 8; ++i)
    EXPECT_NEAR(y[i], std::max(0.0, 2.5 * x[i] + bias[i % 4]), tolerance * (1 + std::abs(2.5 * x[i]))) << i;
  for (std::size_t i = 0; i < 2; ++i) {
    for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(product[i * 3 + j], u[i] * v[j]);
  }
  EXPECT_EQ(joined, (std::vector<float>{2, -3, 1, 10, 100}));
}

TEST(Plugins, CpuEnginesRunThePluginsHostKernels) {
  PluginModel model;
  const auto bytes = Builder(model.config()).build(model.net);
  run_and_check(*Engine::deserialize(bytes), 1e-6);
}

TEST(Plugins, EnginesRecordEachPluginWithItsLibraryDigest) {
  PluginModel model;
  const auto engine = Engine::deserialize(Builder(model.config()).build(model.net));
  const auto manifest = nlohmann::json::parse(engine->manifest_json());
  ASSERT_TRUE(manifest.contains("plugins"));
  ASSERT_EQ(manifest["plugins"].size(), 2u);
  for (const auto& p : manifest["plugins"]) {
    EXPECT_EQ(p["version"], "1");
    EXPECT_EQ(p["sha256"], sha256_file_hex(kPlugin));
    EXPECT_EQ(p["library"], kPlugin.filename().string());
  }
  std::vector<std::string> kernels;
  for (const auto& step : manifest["steps"]) {
    if (step["op"] == "plugin") kernels.push_back(step["kernel"]);
  }
  EXPECT_EQ(kernels, (std::vector<std::string>{"plugin_cpu_reference", "plugin_cpu_reference"}));
}

TEST(Plugins, FieldsSurviveTheJsonFormInOrder) {
  load_test_plugin();
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 4});
  Tensor b = net.add_input("b", DataType::kF32, {4});
  net.mark_output(net.add_plugin("test.scale_bias", "1", {x, b}, {{"alpha", 2.5}}, "scaled")[0], "y");
  const std::string json = net.to_json();
  const auto parsed = nlohmann::json::parse(json);
  bool found = false;
  for (const auto& layer : parsed["layers"]) {
    if (layer.value("name", "") != "scaled") continue;
    found = true;
    EXPECT_EQ(layer["op"], "plugin");
    EXPECT_EQ(layer["attrs"]["type"], "test.scale_bias");
    EXPECT_EQ(layer["attrs"]["version"], "1");
    EXPECT_EQ(layer["attrs"]["field_names"], "alpha");
    EXPECT_DOUBLE_EQ(layer["attrs"]["f:alpha"].get<double>(), 2.5);
  }
  EXPECT_TRUE(found) << json;
  Network back = Network::from_json(
      json, [](const std::string&, const std::string&) -> std::optional<TensorView> { return std::nullopt; });
  EXPECT_EQ(back.to_json(), json);
}

TEST(Plugins, LoweredPrecisionKeepsPluginsOnTheDtypesTheySupport) {
  PluginModel model;  // test.scale_bias has an f32-only host kernel: under fp16 it gets casts around it
  const auto engine = Engine::deserialize(Builder(model.config(Precision::kFp16)).build(model.net));
  const auto manifest = nlohmann::json::parse(engine->manifest_json());
  bool plugin_in_f32 = false;
  for (const auto& step : manifest["steps"]) {
    if (step["layer"] == "scaled") plugin_in_f32 = step["outputs"][0]["dtype"] == "f32";
  }
  EXPECT_TRUE(plugin_in_f32);
  run_and_check(*engine, 2e-3);
}

TEST(Plugins, ATargetThePluginCantRunOnIsRefusedNamingIt) {
  load_test_plugin();
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {4});
  net.mark_output(net.add_plugin("test.cuda_only", "1", {x}, {}, "gpu_copy")[0], "y");
  BuilderConfig config;
  config.target = Target::cpu();
  const std::string message = error_of([&] { Builder(config).build(net); });
  EXPECT_NE(message.find("layer 'gpu_copy': plugin 'test.cuda_only' version '1'"), std::string::npos) << message;
  EXPECT_NE(message.find("has no host (CPU) implementation"), std::string::npos) << message;
}

TEST(Plugins, PluginLayersAreNotFoldedIntoConstants) {
  load_test_plugin();
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {4});
  std::vector<float> c{1, 2, 3, 4};
  Tensor k = net.add_constant_copy(DataType::kF32, {4}, c.data(), "k");
  Tensor copied = net.add_plugin("test.host_only", "1", {k}, {}, "copy_of_k")[0];
  net.mark_output(net.add_binary("add", x, copied), "y");
  BuilderConfig config;
  config.target = Target::cpu();
  const auto engine = Engine::deserialize(Builder(config).build(net));
  const auto manifest = nlohmann::json::parse(engine->manifest_json());
  bool kept = false;
  for (const auto& step : manifest["steps"]) kept = kept || step["layer"] == "copy_of_k";
  EXPECT_TRUE(kept);
}

TEST(Plugins, OpenEngineLoadsTheDeclaredLibrariesAndReusesTheEngine) {
  const auto dir = std::filesystem::temp_directory_path() / ("tensoracle-plugin-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto weights_file = dir / "w.safetensors";
  std::filesystem::create_directories(dir);
  std::vector<float> b{0.5f, -1.f, 2.f, 0.25f};
  write_safetensors(weights_file, {TensorToWrite{"b", DataType::kF32, {4}, b.data()}});
  EngineDeclaration declaration;
  declaration.name = "plugin-model";
  declaration.graph_version = 1;
  declaration.inputs = {TensorSpec{"x", DataType::kF32, {2, 4}}};
  declaration.outputs = {TensorSpec{"y", DataType::kF32, {2, 4}}};
  declaration.builder.target = Target::cpu();
  declaration.plugin_libraries = {kPlugin};
  int calls = 0;
  auto graph = [&](const WeightStore& weights) {
    ++calls;
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {2, 4});
    Tensor bias = net.add_constant(weights.get("b"));
    net.mark_output(net.add_plugin("test.scale_bias", "1", {x, bias}, {{"alpha", 3.0}})[0], "y");
    return net;
  };
  OpenEngineOptions options;
  options.cache_dir = dir / "cache";
  const EngineHandle first = open_engine(declaration, {weights_file}, graph, options);
  const EngineHandle second = open_engine(declaration, {weights_file}, graph, options);
  EXPECT_TRUE(first.built);
  EXPECT_FALSE(second.built);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(first.path, second.path);
  EXPECT_NE(first.conditions_json.find(sha256_file_hex(kPlugin)), std::string::npos);
  auto ctx = second.create_execution_context();
  std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8}, y(8);
  ctx->set_tensor_address("x", x.data());
  ctx->set_tensor_address("y", y.data());
  ctx->enqueue();
  for (std::size_t i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(y[i], 3.f * x[i] + b[i % 4]);
  // A declared library that is not there: the error names it.
  declaration.plugin_libraries = {dir / "libgone.so"};
  const std::string gone = error_of([&] { open_engine(declaration, {weights_file}, graph, options); });
  EXPECT_NE(gone.find("libgone.so: no such file"), std::string::npos) << gone;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensoracle
