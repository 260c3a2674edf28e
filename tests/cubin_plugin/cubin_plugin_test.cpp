// Unit tests of the cubin plugin base (cubin_plugin.hpp) without a GPU: SHA-256 vectors, fields, PluginIO defaults,
// supports / infer_outputs / configure checks, Kernel::accepts, and launches and module lifetimes on a fake driver.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fake_cuda_driver.hpp"
#include "tensoracle/cubin_plugin.hpp"

namespace cubin = tensoracle::cubin;
namespace plugin = tensoracle::plugin;

// ---- the test bundle (what a generated bundle.cpp defines) ----
namespace {

const unsigned char kImage86[] = "fake sm86 image";  // 15 bytes + NUL; the digests are of the 15 bytes
const unsigned char kImage90[] = "fake sm90 image";
const char kSha86[] = "a0f3edc27c2e5fb70e2e6b021d659205b626f3f06c913c481f159c99556b7218";
const char kSha90[] = "213a629b07f5e35792185c1773c7e5fa3c387a36d823aad8bb4252b537bb2f60";
const char kWrongSha[] = "0000000000000000000000000000000000000000000000000000000000000000";

const cubin::ArgSpec kAddArgs[] = {
    {"x", cubin::ArgType::kPointer, 1, 16},
    {"y", cubin::ArgType::kPointer, 1, 16},
    {"n", cubin::ArgType::kI32, 1, 4},
    {"alpha", cubin::ArgType::kF32, 1, 1},
};
const cubin::Image kAddImages[] = {{86, kImage86, 15, kSha86, 0}, {90, kImage90, 15, kSha90, 0}};
const cubin::Constant kAddConstants[] = {{"BLOCK", "128"}};
const cubin::Image kBigSharedImages[] = {{90, kImage90, 15, kSha90, 64 * 1024}};
const cubin::Image kDamagedImages[] = {{90, kImage90, 15, kWrongSha, 0}};
const cubin::ArgSpec kPairArgs[] = {{"pair", cubin::ArgType::kU64, 2, 8}};

const cubin::KernelRecord kKernels[] = {
    // name, entry, args, arg_count, scratch_pointers, threads, constants, constant_count, images, image_count, source
    {"add", "add_kernel", kAddArgs, 4, 2, 128, kAddConstants, 1, kAddImages, 2, "src"},
    {"add.any_threads", "add_any_kernel", kAddArgs, 4, 0, 0, nullptr, 0, kAddImages, 2, "src"},
    {"big_shared", "big_kernel", kAddArgs, 4, 0, 0, nullptr, 0, kBigSharedImages, 1, "src"},
    {"damaged", "damaged_kernel", kAddArgs, 4, 0, 0, nullptr, 0, kDamagedImages, 1, "src"},
    {"no_entry", "missing_entry", kAddArgs, 4, 0, 0, nullptr, 0, kAddImages, 2, "src"},
    {"pair", "pair_kernel", kPairArgs, 1, 0, 0, nullptr, 0, kAddImages, 2, "src"},
};
const cubin::Bundle kBundle{"test-digest", kKernels, 6};

}  // namespace

const cubin::Bundle& cubin::embedded_bundle() noexcept { return kBundle; }

namespace {

// ---- helpers ----

struct FieldsBuilder {
  std::vector<plugin::Field> items;
  std::vector<std::int64_t> ints{3, 4, 5};
  std::vector<double> floats{0.5, 1.5};
  std::int64_t one_int = 7;
  double one_float = 2.5;
  std::string text = "tf32";

  plugin::Fields fields() const { return plugin::Fields{items.data(), std::int32_t(items.size())}; }
};

FieldsBuilder all_types() {
  FieldsBuilder b;
  b.items = {
      {"count", plugin::FieldType::kInt64, &b.one_int, 1},
      {"alpha", plugin::FieldType::kFloat64, &b.one_float, 1},
      {"mode", plugin::FieldType::kString, b.text.c_str(), std::int64_t(b.text.size())},
      {"dims", plugin::FieldType::kInt64s, b.ints.data(), 3},
      {"weights", plugin::FieldType::kFloat64s, b.floats.data(), 2},
  };
  return b;
}

plugin::TensorDesc tensor(plugin::DType dtype, std::vector<std::int64_t> dims) {
  plugin::TensorDesc t{};
  t.dtype = dtype;
  t.format = plugin::Format::kLinear;
  t.rank = std::int32_t(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) t.dims[i] = dims[i];
  return t;
}

// A ShapeBuilder over concrete shapes: a DimExpr is an index into `values`.
class ConstantShapes final : public plugin::ShapeBuilder {
 public:
  explicit ConstantShapes(std::vector<plugin::TensorDesc> inputs) : inputs_(std::move(inputs)) {}
  std::int32_t input_count() const noexcept override { return std::int32_t(inputs_.size()); }
  std::int32_t input_rank(std::int32_t i) const noexcept override {
    return i >= 0 && i < input_count() ? inputs_[i].rank : -1;
  }
  plugin::DType input_dtype(std::int32_t i) const noexcept override { return inputs_[i].dtype; }
  plugin::DimExpr input_dim(std::int32_t i, std::int32_t axis) noexcept override {
    if (input_rank(i) <= axis || axis < 0) return -1;
    return constant(inputs_[i].dims[axis]);
  }
  plugin::DimExpr constant(std::int64_t value) noexcept override {
    values.push_back(value);
    return plugin::DimExpr(values.size() - 1);
  }
  plugin::DimExpr operation(plugin::DimOperation, plugin::DimExpr, plugin::DimExpr) noexcept override { return -1; }
  bool constant_value(plugin::DimExpr e, std::int64_t* v) const noexcept override {
    if (e < 0 || e >= plugin::DimExpr(values.size())) return false;
    *v = values[e];
    return true;
  }
  std::vector<std::int64_t> values;

 private:
  std::vector<plugin::TensorDesc> inputs_;
};

// A plugin on the base: y = x + alpha with kernel "add"; refuses a last dim of 3 in validate_shape.
class AddPlugin final : public cubin::PluginBase {
 public:
  explicit AddPlugin(const plugin::Fields& fields) : PluginBase("add", "1", fields) {
    this->fields().check_known({"alpha"});
    alpha_ = float(this->fields().get_float("alpha", 1.0));
    add_ = kernel("add");
  }
  AddPlugin(const plugin::Fields& fields, cubin::PluginIO io) : PluginBase("add", "1", fields, std::move(io)) {}

  bool validate_shape(const plugin::TensorDesc* inputs, std::int32_t,
                      const plugin::TensorDesc&) const noexcept override {
    return inputs[0].dims[inputs[0].rank - 1] != 3;
  }
  float alpha() const { return alpha_; }
  int runs = 0;

 protected:
  bool run(const cubin::RunArgs& args, plugin::ErrorSink& error) noexcept override {
    ++runs;
    const void* x = args.input_data[0];
    void* y = args.output_data[0];
    auto n = std::int32_t(cubin::element_count(args.inputs[0]));
    const void* params[] = {&x, &y, &n, &alpha_};
    return add_.launch({std::uint32_t((n + 127) / 128)}, {0, 0, 0}, params, 4, args.stream, error);
  }

 private:
  float alpha_ = 1;
  cubin::Kernel add_;
};

class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_cuda::reset();
    // x, y, n, alpha (and for "add" the two scratch pointers), as the fake copies them.
    driver().param_sizes = {
        {"add_kernel", {8, 8, 4, 4, 8, 8}}, {"add_any_kernel", {8, 8, 4, 4}}, {"big_kernel", {8, 8, 4, 4}}};
  }
  void TearDown() override { fake_cuda::reset(); }
  fake_cuda::Driver& driver() { return fake_cuda::driver(); }
};

cubin::Kernel kernel_named(const char* name, cubin::ModuleCache* modules) {
  for (const auto& k : kKernels) {
    if (std::strcmp(k.name, name) == 0) return cubin::Kernel(&k, modules);
  }
  return cubin::Kernel();
}

// ---- SHA-256 ----

TEST(CubinSha256, KnownVectors) {
  EXPECT_EQ(cubin::sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(cubin::sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char* two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(cubin::sha256_hex(two_blocks, std::strlen(two_blocks)),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  EXPECT_EQ(cubin::sha256_hex(million.data(), million.size()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(CubinSha256, PaddingBoundaries) {
  // Lengths around the 56-byte padding limit and the block size (references from Python's hashlib).
  const std::pair<std::size_t, const char*> cases[] = {
      {55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
      {56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
      {63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
      {64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
      {119, "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c"},
      {120, "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98"},
  };
  for (const auto& [size, hex] : cases) {
    std::string data(size, 'x');
    EXPECT_EQ(cubin::sha256_hex(data.data(), size), hex) << size << " bytes";
  }
  EXPECT_EQ(cubin::sha256_hex(kImage86, 15), kSha86);
}

// ---- fields ----

TEST(CubinFields, KeepOrderAndTypes) {
  FieldsBuilder b = all_types();
  cubin::FieldList f("test", b.fields());
  ASSERT_EQ(f.items().size(), 5u);
  const char* order[] = {"count", "alpha", "mode", "dims", "weights"};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f.items()[i].name, order[i]);
  EXPECT_EQ(f.get_int("count"), 7);
  EXPECT_EQ(f.get_float("alpha"), 2.5);
  EXPECT_EQ(f.get_float("count"), 7.0);  // an int64 reads as a float64 too
  EXPECT_EQ(f.get_string("mode"), "tf32");
  EXPECT_EQ(f.get_ints("dims"), (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(f.get_floats("weights"), (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(f.get_int("absent", -1), -1);
  EXPECT_EQ(f.get_string("absent", "x"), "x");
  EXPECT_TRUE(f.has("dims"));
  EXPECT_FALSE(f.has("absent"));
}

TEST(CubinFields, WrongNameOrTypeFailsClearly) {
  FieldsBuilder b = all_types();
  cubin::FieldList f("bias", b.fields());
  try {
    f.get_int("mode");
    FAIL() << "no error";
  } catch (const cubin::FieldError& e) {
    EXPECT_STREQ(e.what(), "plugin 'bias': field 'mode' is string, expected int64");
  }
  try {
    f.get_float("beta");
    FAIL() << "no error";
  } catch (const cubin::FieldError& e) {
    EXPECT_NE(std::string(e.what()).find("needs the float64 field 'beta'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("count, alpha, mode, dims, weights"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.get_ints("weights"), cubin::FieldError);
  EXPECT_THROW(f.check_known({"count", "alpha", "mode", "dims"}), cubin::FieldError);
  EXPECT_NO_THROW(f.check_known({"count", "alpha", "mode", "dims", "weights"}));
}

TEST(CubinFields, MalformedListsAreRefused) {
  std::int64_t v = 1;
  plugin::Field twice[] = {{"a", plugin::FieldType::kInt64, &v, 1}, {"a", plugin::FieldType::kInt64, &v, 1}};
  EXPECT_THROW(cubin::FieldList("p", plugin::Fields{twice, 2}), cubin::FieldError);
  plugin::Field unnamed[] = {{"", plugin::FieldType::kInt64, &v, 1}};
  EXPECT_THROW(cubin::FieldList("p", plugin::Fields{unnamed, 1}), cubin::FieldError);
  plugin::Field no_data[] = {{"a", plugin::FieldType::kInt64s, nullptr, 2}};
  EXPECT_THROW(cubin::FieldList("p", plugin::Fields{no_data, 1}), cubin::FieldError);
  plugin::Field two_scalars[] = {{"a", plugin::FieldType::kInt64, &v, 2}};
  EXPECT_THROW(cubin::FieldList("p", plugin::Fields{two_scalars, 1}), cubin::FieldError);
  EXPECT_THROW(cubin::FieldList("p", plugin::Fields{nullptr, 1}), cubin::FieldError);
  EXPECT_NO_THROW(cubin::FieldList("p", plugin::Fields{nullptr, 0}));
}

// ---- PluginIO, infer_outputs, supports ----

TEST(CubinPluginIO, Defaults) {
  cubin::PluginIO io;
  ASSERT_EQ(io.inputs.size(), 1u);
  EXPECT_EQ(io.inputs[0].type, plugin::DType::kF32);
  EXPECT_EQ(io.inputs[0].format, plugin::Format::kLinear);
  EXPECT_EQ(io.output.type, plugin::DType::kF32);
  EXPECT_EQ(io.shape_input_index, 0);
  AddPlugin p(plugin::Fields{nullptr, 0});
  EXPECT_EQ(p.io().inputs.size(), 1u);
  EXPECT_EQ(p.type(), "add");
  EXPECT_EQ(p.version(), "1");
  EXPECT_EQ(p.alpha(), 1.0f);
}

TEST(CubinPluginIO, ShapeInputIndexMustNameAnInput) {
  cubin::PluginIO io;
  io.shape_input_index = 1;
  EXPECT_THROW(AddPlugin(plugin::Fields{nullptr, 0}, io), cubin::FieldError);
}

TEST(CubinPluginIO, InferOutputsCopiesTheShapeInput) {
  cubin::PluginIO io;
  io.inputs = {{plugin::DType::kF32, plugin::Format::kLinear}, {plugin::DType::kF16, plugin::Format::kLinear}};
  io.output = {plugin::DType::kF16, plugin::Format::kLinear};
  io.shape_input_index = 1;
  AddPlugin p(plugin::Fields{nullptr, 0}, io);
  ConstantShapes shapes({tensor(plugin::DType::kF32, {2, 3}), tensor(plugin::DType::kF16, {4, 5, 6})});
  plugin::OutputDesc out[2];
  std::int32_t count = 0;
  std::string error;
  ASSERT_TRUE(p.infer_outputs(shapes, out, 2, &count, error)) << error;
  EXPECT_EQ(count, 1);
  EXPECT_EQ(out[0].dtype, plugin::DType::kF16);
  ASSERT_EQ(out[0].rank, 3);
  std::int64_t v = 0;
  ASSERT_TRUE(shapes.constant_value(out[0].dims[2], &v));
  EXPECT_EQ(v, 6);

  ConstantShapes one({tensor(plugin::DType::kF32, {2, 3})});
  EXPECT_FALSE(p.infer_outputs(one, out, 2, &count, error));
  EXPECT_EQ(error, "takes 2 input(s), the layer has 1");
}

TEST(CubinPluginIO, SupportsChecksCountTypeFormatAndDevice) {
  AddPlugin p(plugin::Fields{nullptr, 0});
  plugin::TensorDesc f32 = tensor(plugin::DType::kF32, {-1, 8});
  plugin::TensorDesc f16 = tensor(plugin::DType::kF16, {-1, 8});
  EXPECT_TRUE(p.supports(plugin::Device::kCuda, &f32, 1, &f32, 1));
  EXPECT_FALSE(p.supports(plugin::Device::kHost, &f32, 1, &f32, 1));
  EXPECT_FALSE(p.supports(plugin::Device::kCuda, &f16, 1, &f32, 1));
  EXPECT_FALSE(p.supports(plugin::Device::kCuda, &f32, 1, &f16, 1));
  plugin::TensorDesc two[] = {f32, f32};
  EXPECT_FALSE(p.supports(plugin::Device::kCuda, two, 2, &f32, 1));
  EXPECT_FALSE(p.supports(plugin::Device::kCuda, &f32, 1, two, 2));
  plugin::TensorDesc odd = f32;
  odd.format = static_cast<plugin::Format>(7);
  EXPECT_FALSE(p.supports(plugin::Device::kCuda, &odd, 1, &f32, 1));
}

// ---- Creator ----

TEST(CubinCreator, AnswersForItsType) {
  cubin::Creator<AddPlugin> creator("add", "1");
  EXPECT_STREQ(creator.type(), "add");
  EXPECT_STREQ(creator.version(), "1");
  ConstantShapes shapes({tensor(plugin::DType::kF32, {2, 3})});
  plugin::OutputDesc out[1];
  std::int32_t count = 0;
  cubin::StringErrorSink error;
  EXPECT_TRUE(creator.infer_outputs(plugin::Fields{nullptr, 0}, shapes, out, 1, &count, error)) << error.message();
  EXPECT_EQ(count, 1);

  std::string text = "3";
  plugin::Field wrong[] = {{"alpha", plugin::FieldType::kString, text.c_str(), 1}};
  EXPECT_FALSE(creator.infer_outputs(plugin::Fields{wrong, 1}, shapes, out, 1, &count, error));
  EXPECT_EQ(error.message(), "add: plugin 'add': field 'alpha' is string, expected float64");
  plugin::TensorDesc f32 = tensor(plugin::DType::kF32, {2, 3});
  EXPECT_FALSE(creator.supports(plugin::Fields{wrong, 1}, plugin::Device::kCuda, &f32, 1, &f32, 1));
  EXPECT_TRUE(creator.supports(plugin::Fields{nullptr, 0}, plugin::Device::kCuda, &f32, 1, &f32, 1));
  EXPECT_EQ(creator.workspace_bytes(plugin::Fields{nullptr, 0}, plugin::Device::kCuda, &f32, 1, &f32, 1), 0u);

  EXPECT_EQ(creator.create(plugin::Fields{nullptr, 0}, plugin::Device::kHost, error), nullptr);
  EXPECT_NE(error.message().find("CUDA devices only"), std::string::npos);
  EXPECT_EQ(creator.create(plugin::Fields{wrong, 1}, plugin::Device::kCuda, error), nullptr);
  plugin::PluginKernel* made = creator.create(plugin::Fields{nullptr, 0}, plugin::Device::kCuda, error);
  ASSERT_NE(made, nullptr);
  made->destroy();  // no GPU was touched: no context, nothing to unload
}

TEST(CubinCreator, PublishCreators) {
  static cubin::Creator<AddPlugin> creator("add", "1");
  static plugin::PluginCreator* const all[] = {&creator};
  std::int32_t abi = 0, count = 0;
  plugin::PluginCreator* const* creators = nullptr;
  EXPECT_EQ(cubin::publish_creators(all, 1, &abi, &creators, &count), 0);
  EXPECT_EQ(abi, plugin::kAbiVersion);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(creators[0], &creator);
  EXPECT_NE(cubin::publish_creators(all, 1, nullptr, &creators, &count), 0);
}

TEST(CubinPluginBase, UnknownKernelNamesTheBundle) {
  class Bad final : public cubin::PluginBase {
   public:
    Bad() : PluginBase("bad", "1", plugin::Fields{nullptr, 0}) { kernel("nope"); }
    bool run(const cubin::RunArgs&, plugin::ErrorSink&) noexcept override { return false; }
  };
  try {
    Bad bad;
    FAIL() << "no error";
  } catch (const cubin::FieldError& e) {
    EXPECT_NE(std::string(e.what()).find("no kernel 'nope' (it has: add, add.any_threads"), std::string::npos)
        << e.what();
  }
}

// ---- Kernel::accepts ----

TEST(CubinKernel, AcceptsChecksCountAndDivisibility) {
  cubin::Kernel add = kernel_named("add", nullptr);
  EXPECT_EQ(add.parameter_count(), 4);
  EXPECT_STREQ(add.constant("BLOCK"), "128");
  EXPECT_EQ(add.constant("K"), nullptr);
  alignas(64) float buffer[64];
  void* x = buffer;
  void* y = buffer + 4;  // 16-byte aligned
  std::int32_t n = 8;
  float alpha = 1;
  const void* args[] = {&x, &y, &n, &alpha};
  std::string why;
  EXPECT_TRUE(add.accepts(args, 4, &why)) << why;
  EXPECT_FALSE(add.accepts(args, 3, &why));
  EXPECT_EQ(why, "kernel 'add' takes 4 arguments, the call gives 3");

  void* misaligned = buffer + 1;
  const void* bad_pointer[] = {&x, &misaligned, &n, &alpha};
  EXPECT_FALSE(add.accepts(bad_pointer, 4, &why));
  EXPECT_NE(why.find("argument 'y' address"), std::string::npos) << why;
  EXPECT_NE(why.find("not divisible by 16"), std::string::npos) << why;

  std::int32_t odd = 6;
  const void* bad_int[] = {&x, &y, &odd, &alpha};
  EXPECT_FALSE(add.accepts(bad_int, 4));
  std::int32_t negative = -8;
  const void* negative_int[] = {&x, &y, &negative, &alpha};
  EXPECT_TRUE(add.accepts(negative_int, 4));
  void* null = nullptr;
  const void* null_pointer[] = {&x, &null, &n, &alpha};
  EXPECT_TRUE(add.accepts(null_pointer, 4));  // address 0 is divisible
  const void* missing_value[] = {&x, &y, nullptr, &alpha};
  EXPECT_FALSE(add.accepts(missing_value, 4));
  EXPECT_FALSE(cubin::Kernel().accepts(args, 4));
}

TEST(CubinKernel, AcceptsCountsRepeatedParameters) {
  cubin::Kernel pair = kernel_named("pair", nullptr);
  EXPECT_EQ(pair.parameter_count(), 2);
  std::uint64_t a = 16, b = 12;
  const void* args[] = {&a, &b};
  std::string why;
  EXPECT_FALSE(pair.accepts(args, 2, &why));
  EXPECT_NE(why.find("argument 'pair'[1] value 12"), std::string::npos) << why;
  b = 24;
  EXPECT_TRUE(pair.accepts(args, 2));
  EXPECT_FALSE(pair.accepts(args, 1));
}

// ---- launches on the fake driver ----

TEST_F(DriverTest, ConfigureAndEnqueueLaunchWithScratchPointers) {
  CUcontext ctx = fake_cuda::make_context(90);
  fake_cuda::set_current(ctx);
  AddPlugin p(plugin::Fields{nullptr, 0});
  plugin::TensorDesc t = tensor(plugin::DType::kF32, {2, 256});
  cubin::StringErrorSink error;
  ASSERT_TRUE(p.configure(&t, 1, &t, 1, error)) << error.message();
  EXPECT_EQ(driver().module_loads, 1);  // only the kernel the plugin asked for
  EXPECT_EQ(driver().loaded_entries, std::vector<std::string>{"add_kernel"});

  alignas(16) static float x[512], y[512];
  const void* in[] = {x};
  void* out[] = {y};
  auto stream = reinterpret_cast<void*>(0x1234);
  ASSERT_TRUE(p.enqueue(&t, in, 1, &t, out, 1, nullptr, 0, stream, error)) << error.message();
  ASSERT_EQ(driver().launches.size(), 1u);
  const auto& l = driver().launches[0];
  EXPECT_EQ(l.context, ctx);
  EXPECT_EQ(l.grid[0], 4u);
  EXPECT_EQ(l.block[0], 128u);  // the record's threads
  EXPECT_EQ(l.stream, reinterpret_cast<CUstream>(stream));
  EXPECT_EQ(l.value<void*>(0), static_cast<void*>(x));
  EXPECT_EQ(l.value<std::int32_t>(2), 512);
  EXPECT_EQ(l.value<float>(3), 1.0f);
  EXPECT_EQ(l.value<void*>(4), nullptr);  // the two scratch pointers
  EXPECT_EQ(l.value<void*>(5), nullptr);
  EXPECT_EQ(driver().module_loads, 1);  // no load at enqueue
}

TEST_F(DriverTest, ConfigureRefusesShapes) {
  fake_cuda::set_current(fake_cuda::make_context(90));
  AddPlugin p(plugin::Fields{nullptr, 0});
  plugin::TensorDesc in = tensor(plugin::DType::kF32, {2, 8});
  plugin::TensorDesc other = tensor(plugin::DType::kF32, {2, 9});
  cubin::StringErrorSink error;
  EXPECT_FALSE(p.configure(&in, 1, &other, 1, error));
  EXPECT_EQ(error.message(), "plugin 'add': the output [2, 9] must have the shape of input 0 [2, 8]");
  plugin::TensorDesc three = tensor(plugin::DType::kF32, {2, 3});
  EXPECT_FALSE(p.configure(&three, 1, &three, 1, error));
  EXPECT_EQ(error.message(), "plugin 'add': refuses the input shapes [2, 3]");
  plugin::TensorDesc f16 = tensor(plugin::DType::kF16, {2, 8});
  EXPECT_FALSE(p.configure(&f16, 1, &f16, 1, error));
  EXPECT_EQ(error.message(), "plugin 'add': input 0 must be f32 (linear), not f16");
  EXPECT_EQ(driver().module_loads, 0);
}

TEST_F(DriverTest, ExactSmMatchAndAClearErrorOtherwise) {
  fake_cuda::set_current(fake_cuda::make_context(89));
  AddPlugin p(plugin::Fields{nullptr, 0});
  plugin::TensorDesc t = tensor(plugin::DType::kF32, {2, 8});
  cubin::StringErrorSink error;
  EXPECT_FALSE(p.configure(&t, 1, &t, 1, error));
  EXPECT_EQ(error.message(),
            "plugin 'add': kernel 'add' has no cubin for sm_89 (this device); the bundle has sm_86, sm_90: produce "
            "the bundle for sm_89 too");
  fake_cuda::set_current(nullptr);
  EXPECT_FALSE(p.configure(&t, 1, &t, 1, error));
  EXPECT_NE(error.message().find("no current CUDA context"), std::string::npos) << error.message();
}

TEST_F(DriverTest, LaunchChecksCountsThreadsAndResults) {
  fake_cuda::set_current(fake_cuda::make_context(86));
  cubin::ModuleCache modules("test");
  cubin::Kernel add = kernel_named("add", &modules);
  alignas(16) static float x[16];
  void* px = x;
  std::int32_t n = 16;
  float alpha = 2;
  const void* args[] = {&px, &px, &n, &alpha};
  cubin::StringErrorSink error;
  EXPECT_FALSE(add.launch({1}, {0, 0, 0}, args, 3, nullptr, error));
  EXPECT_EQ(error.message(), "test: kernel 'add' takes 4 arguments, the call gives 3");
  EXPECT_FALSE(add.launch({1}, {64}, args, 4, nullptr, error));
  EXPECT_EQ(error.message(), "test: kernel 'add' was compiled for 128 threads per block, the launch asks 64");
  EXPECT_TRUE(add.launch({1}, {128}, args, 4, nullptr, error)) << error.message();
  EXPECT_EQ(driver().module_loads, 1);  // loaded at the first launch in this context

  cubin::Kernel any = kernel_named("add.any_threads", &modules);
  EXPECT_FALSE(any.launch({1}, {0, 0, 0}, args, 4, nullptr, error));
  EXPECT_NE(error.message().find("records no thread count"), std::string::npos);
  driver().max_threads_per_block = 256;
  EXPECT_FALSE(any.launch({1}, {512}, args, 4, nullptr, error));
  EXPECT_EQ(error.message(), "test: kernel 'add.any_threads': 512 threads per block, the function allows 256");
  EXPECT_TRUE(any.launch({2, 2}, {16, 16}, args, 4, nullptr, error)) << error.message();
  EXPECT_EQ(driver().launches.back().values.size(), 4u);  // no scratch pointers for this record

  driver().launch_result = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  EXPECT_FALSE(any.launch({1}, {32}, args, 4, nullptr, error));
  EXPECT_EQ(error.message(),
            "test: kernel 'add.any_threads': cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
  EXPECT_FALSE(cubin::Kernel().launch({1}, {1}, args, 4, nullptr, error));
}

TEST_F(DriverTest, SharedMemoryChecks) {
  fake_cuda::set_current(fake_cuda::make_context(90));
  cubin::ModuleCache modules("test");
  cubin::Kernel big = kernel_named("big_shared", &modules);
  void* p = nullptr;
  std::int32_t n = 0;
  float alpha = 0;
  const void* args[] = {&p, &p, &n, &alpha};
  cubin::StringErrorSink error;
  ASSERT_TRUE(big.launch({1}, {32}, args, 4, nullptr, error)) << error.message();
  EXPECT_EQ(driver().launches.back().shared_bytes, 64u * 1024);  // the image's dynamic shared memory
  ASSERT_EQ(driver().dynamic_shared_set.size(), 1u);             // above 48 KiB: raised once at load
  EXPECT_EQ(driver().dynamic_shared_set[0].second, 64 * 1024);
  EXPECT_TRUE(big.launch({1}, {32}, args, 4, nullptr, error, 1024)) << error.message();  // below: nothing to raise
  EXPECT_EQ(driver().dynamic_shared_set.size(), 1u);
  EXPECT_FALSE(big.launch({1}, {32}, args, 4, nullptr, error, 200 * 1024));
  EXPECT_NE(error.message().find("exceed the device's 102400 per block"), std::string::npos) << error.message();

  // Static shared memory counts against the 48 KiB a function gets without the attribute.
  driver().static_shared = 40 * 1024;
  cubin::ModuleCache with_static("test");
  cubin::Kernel any = kernel_named("add.any_threads", &with_static);
  ASSERT_TRUE(any.launch({1}, {32}, args, 4, nullptr, error, 4 * 1024)) << error.message();
  EXPECT_EQ(driver().dynamic_shared_set.size(), 1u);
  ASSERT_TRUE(any.launch({1}, {32}, args, 4, nullptr, error, 16 * 1024)) << error.message();
  ASSERT_EQ(driver().dynamic_shared_set.size(), 2u);
  EXPECT_EQ(driver().dynamic_shared_set[1].second, 16 * 1024);

  fake_cuda::reset();
  fake_cuda::driver().shared_optin = 48 * 1024;
  fake_cuda::set_current(fake_cuda::make_context(90));
  cubin::ModuleCache small("test");
  EXPECT_FALSE(kernel_named("big_shared", &small).launch({1}, {32}, args, 4, nullptr, error));
  EXPECT_NE(error.message().find("needs 65536 bytes of shared memory, the device allows 49152"), std::string::npos)
      << error.message();
}

TEST_F(DriverTest, DigestAndEntryAreChecked) {
  fake_cuda::set_current(fake_cuda::make_context(90));
  cubin::ModuleCache modules("test");
  void* p = nullptr;
  std::int32_t n = 0;
  float alpha = 0;
  const void* args[] = {&p, &p, &n, &alpha};
  cubin::StringErrorSink error;
  EXPECT_FALSE(kernel_named("damaged", &modules).launch({1}, {32}, args, 4, nullptr, error));
  EXPECT_NE(error.message().find("kernel 'damaged': the sm_90 cubin's SHA-256 is 213a629b"), std::string::npos)
      << error.message();
  EXPECT_EQ(driver().module_loads, 0);  // never loaded
  EXPECT_FALSE(kernel_named("no_entry", &modules).launch({1}, {32}, args, 4, nullptr, error));
  EXPECT_NE(error.message().find("cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND for entry 'missing_entry'"),
            std::string::npos)
      << error.message();
  ASSERT_EQ(driver().unloads.size(), 1u);  // the module without the entry was unloaded again
}

TEST_F(DriverTest, OneModulePerContextUnloadedInItsOwnContext) {
  CUcontext a = fake_cuda::make_context(90);
  CUcontext b = fake_cuda::make_context(86);
  CUcontext c = fake_cuda::make_context(90);
  void* p = nullptr;
  std::int32_t n = 0;
  float alpha = 0;
  const void* args[] = {&p, &p, &n, &alpha};
  cubin::StringErrorSink error;
  {
    cubin::ModuleCache modules("test");
    cubin::Kernel k = kernel_named("add.any_threads", &modules);
    for (CUcontext ctx : {a, b, a, c, b}) {
      fake_cuda::set_current(ctx);
      ASSERT_TRUE(k.launch({1}, {32}, args, 4, nullptr, error)) << error.message();
    }
    EXPECT_EQ(driver().module_loads, 3);
    fake_cuda::destroy_context(c);  // destroyed first: its module went with it
    fake_cuda::set_current(b);
  }
  ASSERT_EQ(driver().unloads.size(), 2u);
  EXPECT_EQ(driver().unloads[0].context, a);  // pushed for the unload
  EXPECT_EQ(driver().unloads[1].context, b);
  CUcontext now = nullptr;
  cuCtxGetCurrent(&now);
  EXPECT_EQ(now, b);  // popped again
}

TEST_F(DriverTest, ANewContextAtADestroyedOnesAddressLoadsAgain) {
  CUcontext a = fake_cuda::make_context(90);
  fake_cuda::set_current(a);
  void* p = nullptr;
  std::int32_t n = 0;
  float alpha = 0;
  const void* args[] = {&p, &p, &n, &alpha};
  cubin::StringErrorSink error;
  cubin::ModuleCache modules("test");
  cubin::Kernel k = kernel_named("add.any_threads", &modules);
  ASSERT_TRUE(k.launch({1}, {32}, args, 4, nullptr, error)) << error.message();
  fake_cuda::recreate_context(a, 86);
  ASSERT_TRUE(k.launch({1}, {32}, args, 4, nullptr, error)) << error.message();
  EXPECT_EQ(driver().module_loads, 2);
}

}  // namespace
