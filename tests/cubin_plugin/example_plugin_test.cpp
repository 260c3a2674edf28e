// Unit tests of the example cubin plugin's host logic (examples/cubin_plugin/plugin.cpp) on the fake driver: the
// creators, field and shape checks, launch arguments and the dot variant choice; the bundle records below are checked
// against the example's kernels.json.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fake_cuda_driver.hpp"
#include "tensoracle/cubin_plugin.hpp"

namespace cubin = tensoracle::cubin;
namespace plugin = tensoracle::plugin;

extern "C" std::int32_t tensoracle_get_plugin_creators(std::int32_t*, plugin::PluginCreator* const**, std::int32_t*);

// ---- the example's bundle as the producer would write it from kernels.json (one fake sm90 image) ----
namespace {

const unsigned char kImage[] = "example image";
const cubin::Image kImages[] = {
    {90, kImage, 13, "0d85f5af1e0dfa09503f0bdb179ab8f37c4225b43d442a3a91e59c3c849bc99e", 0}};
using cubin::ArgType;
const cubin::ArgSpec kBiasArgs[] = {{"x", ArgType::kPointer, 1, 4},
                                    {"b", ArgType::kPointer, 1, 4},
                                    {"y", ArgType::kPointer, 1, 4},
                                    {"n", ArgType::kI64, 1, 1},
                                    {"c", ArgType::kI32, 1, 1}};
const cubin::ArgSpec kScaleArgs[] = {{"x", ArgType::kPointer, 1, 4},
                                     {"y", ArgType::kPointer, 1, 4},
                                     {"n", ArgType::kI64, 1, 1},
                                     {"alpha", ArgType::kF32, 1, 1}};
const cubin::ArgSpec kSpecializedArgs[] = {{"x", ArgType::kPointer, 1, 4},
                                           {"w", ArgType::kPointer, 1, 16},
                                           {"y", ArgType::kPointer, 1, 16},
                                           {"m", ArgType::kI32, 1, 1},
                                           {"n", ArgType::kI32, 1, 4}};
const cubin::Constant kSpecializedConstants[] = {{"DOT_BLOCK", "128"}, {"DOT_K", "64"}};
const cubin::ArgSpec kDotArgs[] = {{"x", ArgType::kPointer, 1, 4}, {"w", ArgType::kPointer, 1, 4},
                                   {"y", ArgType::kPointer, 1, 4}, {"m", ArgType::kI32, 1, 1},
                                   {"n", ArgType::kI32, 1, 1},     {"k", ArgType::kI32, 1, 1}};
const cubin::KernelRecord kKernels[] = {
    {"bias", "bias_f32", kBiasArgs, 5, 0, 0, nullptr, 0, kImages, 1, ""},
    {"scale", "scale_f32", kScaleArgs, 4, 0, 0, nullptr, 0, kImages, 1, ""},
    {"dot.specialized", "dot_f32_specialized", kSpecializedArgs, 5, 0, 128, kSpecializedConstants, 2, kImages, 1, ""},
    {"dot.unspecialized", "dot_f32_unspecialized", kDotArgs, 6, 0, 0, nullptr, 0, kImages, 1, ""},
    {"dot.tf32-control", "dot_f32_tf32_control", kDotArgs, 6, 0, 0, nullptr, 0, kImages, 1, ""},
};
const cubin::Bundle kBundle{"example-test", kKernels, 5};

}  // namespace

const cubin::Bundle& cubin::embedded_bundle() noexcept { return kBundle; }

namespace {

const char* type_name(ArgType t) {
  switch (t) {
    case ArgType::kPointer: return "pointer";
    case ArgType::kI32: return "i32";
    case ArgType::kI64: return "i64";
    case ArgType::kU32: return "u32";
    case ArgType::kU64: return "u64";
    case ArgType::kF32: return "f32";
    case ArgType::kF64: return "f64";
  }
  return "?";
}

plugin::TensorDesc tensor(std::vector<std::int64_t> dims) {
  plugin::TensorDesc t{};
  t.dtype = plugin::DType::kF32;
  t.format = plugin::Format::kLinear;
  t.rank = std::int32_t(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) t.dims[i] = dims[i];
  return t;
}

class Shapes final : public plugin::ShapeBuilder {
 public:
  explicit Shapes(std::vector<plugin::TensorDesc> inputs) : inputs_(std::move(inputs)) {}
  std::int32_t input_count() const noexcept override { return std::int32_t(inputs_.size()); }
  std::int32_t input_rank(std::int32_t i) const noexcept override {
    return i >= 0 && i < input_count() ? inputs_[i].rank : -1;
  }
  plugin::DType input_dtype(std::int32_t i) const noexcept override { return inputs_[i].dtype; }
  plugin::DimExpr input_dim(std::int32_t i, std::int32_t a) noexcept override {
    return a >= 0 && a < input_rank(i) ? constant(inputs_[i].dims[a]) : -1;
  }
  plugin::DimExpr constant(std::int64_t v) noexcept override {
    values_.push_back(v);
    return plugin::DimExpr(values_.size() - 1);
  }
  plugin::DimExpr operation(plugin::DimOperation, plugin::DimExpr, plugin::DimExpr) noexcept override { return -1; }
  bool constant_value(plugin::DimExpr e, std::int64_t* v) const noexcept override {
    if (e < 0 || e >= plugin::DimExpr(values_.size())) return false;
    *v = values_[e];
    return true;
  }
  std::vector<std::int64_t> dims(const plugin::OutputDesc& out) const {
    std::vector<std::int64_t> d;
    for (std::int32_t a = 0; a < out.rank; ++a) d.push_back(values_[out.dims[a]]);
    return d;
  }

 private:
  std::vector<plugin::TensorDesc> inputs_;
  std::vector<std::int64_t> values_;
};

class ExamplePlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_cuda::reset();
    fake_cuda::set_current(fake_cuda::make_context(90));
    fake_cuda::driver().param_sizes = {{"bias_f32", {8, 8, 8, 8, 4}},
                                       {"scale_f32", {8, 8, 8, 4}},
                                       {"dot_f32_specialized", {8, 8, 8, 4, 4}},
                                       {"dot_f32_unspecialized", {8, 8, 8, 4, 4, 4}},
                                       {"dot_f32_tf32_control", {8, 8, 8, 4, 4, 4}}};
    std::int32_t abi = 0, count = 0;
    plugin::PluginCreator* const* all = nullptr;
    ASSERT_EQ(tensoracle_get_plugin_creators(&abi, &all, &count), 0);
    ASSERT_EQ(abi, plugin::kAbiVersion);
    for (std::int32_t i = 0; i < count; ++i) creators_[all[i]->type()] = all[i];
  }
  void TearDown() override { fake_cuda::reset(); }

  const plugin::PluginCreator& creator(const std::string& type) { return *creators_.at(type); }

  // configure + enqueue of one layer; returns the launch the fake driver saw (entry empty when none).
  fake_cuda::LaunchRecord run(const std::string& type, const plugin::Fields& fields,
                              std::vector<plugin::TensorDesc> inputs, const std::vector<const void*>& data,
                              plugin::TensorDesc output, void* out, std::string* error = nullptr) {
    cubin::StringErrorSink sink;
    plugin::PluginKernel* k = creator(type).create(fields, plugin::Device::kCuda, sink);
    EXPECT_NE(k, nullptr) << sink.message();
    if (k == nullptr) return {};
    void* outs[] = {out};
    bool ok = k->configure(inputs.data(), std::int32_t(inputs.size()), &output, 1, sink) &&
              k->enqueue(inputs.data(), data.data(), std::int32_t(inputs.size()), &output, outs, 1, nullptr, 0, nullptr,
                         sink);
    k->destroy();
    if (error) *error = sink.message();
    if (!ok || fake_cuda::driver().launches.empty()) return {};
    auto launch = fake_cuda::driver().launches.back();
    fake_cuda::driver().launches.clear();
    return launch;
  }

  std::map<std::string, const plugin::PluginCreator*> creators_;
};

template <typename T>
T param(const fake_cuda::LaunchRecord& l, std::size_t i) {
  return l.value<T>(i);
}

alignas(64) float buffer[4096];

TEST_F(ExamplePlugin, RecordsMatchKernelsJson) {
  std::ifstream file(TENSORACLE_EXAMPLE_KERNELS_JSON);
  ASSERT_TRUE(file) << TENSORACLE_EXAMPLE_KERNELS_JSON;
  auto spec = nlohmann::json::parse(file);
  ASSERT_EQ(spec["kernels"].size(), 5u);
  for (const auto& k : spec["kernels"]) {
    const cubin::KernelRecord* r = nullptr;
    for (const auto& record : kKernels) {
      if (k["name"] == record.name) r = &record;
    }
    ASSERT_NE(r, nullptr) << k["name"];
    EXPECT_EQ(k["entry"], r->entry);
    EXPECT_EQ(k.value("threads", 0), r->threads) << r->name;
    ASSERT_EQ(k["args"].size(), std::size_t(r->arg_count)) << r->name;
    for (std::int32_t i = 0; i < r->arg_count; ++i) {
      const auto& a = k["args"][std::size_t(i)];
      EXPECT_EQ(a["name"], r->args[i].name) << r->name;
      EXPECT_EQ(a["type"], type_name(r->args[i].type)) << r->name;
      EXPECT_EQ(a.value("count", 1), r->args[i].count) << r->name;
      EXPECT_EQ(a.value("divisibility", 1), r->args[i].divisibility) << r->name << " " << r->args[i].name;
    }
    std::size_t constants = k.contains("constants") ? k["constants"].size() : 0;
    ASSERT_EQ(constants, std::size_t(r->constant_count)) << r->name;
    for (std::int32_t i = 0; i < r->constant_count; ++i) {
      EXPECT_EQ(std::to_string(k["constants"][r->constants[i].name].get<int>()), r->constants[i].value);
    }
  }
}

TEST_F(ExamplePlugin, Creators) {
  EXPECT_EQ(creators_.size(), 3u);
  for (const char* type : {"bias", "scale", "dot"}) {
    ASSERT_TRUE(creators_.count(type)) << type;
    EXPECT_STREQ(creator(type).version(), "1");
    cubin::StringErrorSink sink;
    EXPECT_EQ(creator(type).create(plugin::Fields{nullptr, 0}, plugin::Device::kHost, sink), nullptr);
  }
}

TEST_F(ExamplePlugin, Scale) {
  Shapes shapes({tensor({4, 8})});
  plugin::OutputDesc out[1];
  std::int32_t count = 0;
  cubin::StringErrorSink sink;
  EXPECT_FALSE(creator("scale").infer_outputs(plugin::Fields{nullptr, 0}, shapes, out, 1, &count, sink));
  EXPECT_NE(sink.message().find("needs the float64 field 'alpha'"), std::string::npos) << sink.message();
  double alpha = 2.5;
  plugin::Field f[] = {{"alpha", plugin::FieldType::kFloat64, &alpha, 1}};
  ASSERT_TRUE(creator("scale").infer_outputs(plugin::Fields{f, 1}, shapes, out, 1, &count, sink)) << sink.message();
  EXPECT_EQ(shapes.dims(out[0]), (std::vector<std::int64_t>{4, 8}));

  auto l = run("scale", plugin::Fields{f, 1}, {tensor({4, 8})}, {buffer}, tensor({4, 8}), buffer + 64);
  EXPECT_EQ(l.entry, "scale_f32");
  EXPECT_EQ(param<std::int64_t>(l, 2), 32);
  EXPECT_EQ(param<float>(l, 3), 2.5f);
  EXPECT_EQ(param<void*>(l, 1), static_cast<void*>(buffer + 64));
}

TEST_F(ExamplePlugin, Bias) {
  std::string error;
  auto l = run("bias", plugin::Fields{nullptr, 0}, {tensor({2, 8}), tensor({8})}, {buffer, buffer + 16}, tensor({2, 8}),
               buffer + 32);
  EXPECT_EQ(l.entry, "bias_f32");
  EXPECT_EQ(param<std::int64_t>(l, 3), 16);
  EXPECT_EQ(param<std::int32_t>(l, 4), 8);
  EXPECT_EQ(param<const void*>(l, 1), static_cast<const void*>(buffer + 16));
  l = run("bias", plugin::Fields{nullptr, 0}, {tensor({2, 8}), tensor({7})}, {buffer, buffer + 16}, tensor({2, 8}),
          buffer + 32, &error);
  EXPECT_TRUE(l.entry.empty());
  EXPECT_EQ(error, "plugin 'bias': refuses the input shapes [2, 8], [7]");
}

TEST_F(ExamplePlugin, DotShapes) {
  Shapes shapes({tensor({2, 3, 64}), tensor({64, 12})});
  plugin::OutputDesc out[1];
  std::int32_t count = 0;
  cubin::StringErrorSink sink;
  ASSERT_TRUE(creator("dot").infer_outputs(plugin::Fields{nullptr, 0}, shapes, out, 1, &count, sink)) << sink.message();
  EXPECT_EQ(shapes.dims(out[0]), (std::vector<std::int64_t>{2, 3, 12}));
  Shapes mismatch({tensor({3, 64}), tensor({32, 12})});
  EXPECT_FALSE(creator("dot").infer_outputs(plugin::Fields{nullptr, 0}, mismatch, out, 1, &count, sink));
  EXPECT_EQ(sink.message(), "dot: x's last dimension 64 is not w's first 32");
  std::string text = "fp16";
  plugin::Field f[] = {{"precision", plugin::FieldType::kString, text.c_str(), 4}};
  EXPECT_FALSE(creator("dot").infer_outputs(plugin::Fields{f, 1}, shapes, out, 1, &count, sink));
  EXPECT_NE(sink.message().find("use \"fp32\" or \"tf32-control\""), std::string::npos) << sink.message();
  std::string error;
  auto l = run("dot", plugin::Fields{nullptr, 0}, {tensor({3, 64}), tensor({64, 12})}, {buffer, buffer + 256},
               tensor({3, 13}), buffer + 2048, &error);
  EXPECT_TRUE(l.entry.empty());
  EXPECT_NE(error.find("needs x [..., k], w [k, n] and y [..., n]"), std::string::npos) << error;
}

TEST_F(ExamplePlugin, DotPicksItsVariant) {
  auto dot = [&](std::int64_t m, std::int64_t k, std::int64_t n, const float* w, const char* precision = nullptr) {
    std::string text = precision ? precision : "";
    plugin::Field f[] = {{"precision", plugin::FieldType::kString, text.c_str(), std::int64_t(text.size())}};
    plugin::Fields fields{f, precision ? 1 : 0};
    return run("dot", fields, {tensor({m, k}), tensor({k, n})}, {buffer, w}, tensor({m, n}), buffer + 2048);
  };
  auto l = dot(3, 64, 12, buffer + 256);  // K = DOT_K, n % 4 == 0, 16-byte aligned
  EXPECT_EQ(l.entry, "dot_f32_specialized");
  EXPECT_EQ(l.block[0], 128u);
  EXPECT_EQ(l.grid[0], 1u);
  EXPECT_EQ(param<std::int32_t>(l, 3), 3);
  EXPECT_EQ(param<std::int32_t>(l, 4), 12);
  EXPECT_EQ(dot(3, 64, 10, buffer + 256).entry, "dot_f32_unspecialized");  // n % 4 != 0
  EXPECT_EQ(dot(3, 64, 12, buffer + 257).entry, "dot_f32_unspecialized");  // w not 16-byte aligned
  l = dot(3, 32, 12, buffer + 256);                                        // another K
  EXPECT_EQ(l.entry, "dot_f32_unspecialized");
  EXPECT_EQ(param<std::int32_t>(l, 5), 32);
  EXPECT_EQ(l.grid[0], 1u);
  EXPECT_EQ(l.block[0], 256u);
  EXPECT_EQ(dot(3, 64, 12, buffer + 256, "tf32-control").entry, "dot_f32_tf32_control");
  EXPECT_EQ(dot(3, 64, 12, buffer + 256, "fp32").entry, "dot_f32_specialized");
}

}  // namespace
