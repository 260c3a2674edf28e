// Loads a plugin library with dlopen, calls its entry point and checks the ABI version and the creators' types and
// versions; with --probe it also asks each creator infer_outputs / supports and creates and destroys a kernel, all of
// which must work without a GPU. Usage: plugin_checker <library> [--probe] <type/version>...
#include <dlfcn.h>

#include <cstdio>
#include <string>
#include <vector>

#include <tensoracle/plugin.hpp>

namespace plugin = tensoracle::plugin;

namespace {

class PrintingSink final : public plugin::ErrorSink {
 public:
  void set(const char* message) noexcept override { text = message; }
  std::string text;
};

// Shapes of one f32 [2, 8] input or two (for creators with two inputs); DimExprs are constants by index.
class Shapes final : public plugin::ShapeBuilder {
 public:
  explicit Shapes(int inputs) : inputs_(inputs) {}
  std::int32_t input_count() const noexcept override { return inputs_; }
  std::int32_t input_rank(std::int32_t i) const noexcept override { return i >= 0 && i < inputs_ ? 2 : -1; }
  plugin::DType input_dtype(std::int32_t) const noexcept override { return plugin::DType::kF32; }
  plugin::DimExpr input_dim(std::int32_t i, std::int32_t axis) noexcept override {
    return input_rank(i) > axis ? constant(axis == 0 ? 2 : 8) : -1;
  }
  plugin::DimExpr constant(std::int64_t value) noexcept override {
    values_.push_back(value);
    return static_cast<plugin::DimExpr>(values_.size() - 1);
  }
  plugin::DimExpr operation(plugin::DimOperation, plugin::DimExpr, plugin::DimExpr) noexcept override { return -1; }
  bool constant_value(plugin::DimExpr e, std::int64_t* v) const noexcept override {
    if (e < 0 || static_cast<std::size_t>(e) >= values_.size()) return false;
    *v = values_[static_cast<std::size_t>(e)];
    return true;
  }

 private:
  int inputs_;
  std::vector<std::int64_t> values_;
};

int fail(const std::string& message) {
  std::fprintf(stderr, "plugin_checker: %s\n", message.c_str());
  return 1;
}

bool probe(const plugin::PluginCreator& creator, std::string* why) {
  const plugin::Fields none{nullptr, 0};
  plugin::TensorDesc t{plugin::DType::kF32, plugin::Format::kLinear, 2, {2, 8}};
  for (int inputs = 1; inputs <= 2; ++inputs) {
    Shapes shapes(inputs);
    plugin::OutputDesc out[plugin::kMaxOutputs];
    std::int32_t count = 0;
    PrintingSink sink;
    if (!creator.infer_outputs(none, shapes, out, plugin::kMaxOutputs, &count, sink)) continue;
    std::int64_t last = 0;
    if (count != 1 || out[0].rank != 2 || !shapes.constant_value(out[0].dims[1], &last) || last != 8) {
      return *why = "infer_outputs gave an unexpected output", false;
    }
    plugin::TensorDesc in[2] = {t, t};
    if (!creator.supports(none, plugin::Device::kCuda, in, inputs, &t, 1)) return *why = "supports: false", false;
    if (creator.supports(none, plugin::Device::kHost, in, inputs, &t, 1)) return *why = "supports the host", false;
    plugin::PluginKernel* kernel = creator.create(none, plugin::Device::kCuda, sink);
    if (kernel == nullptr) return *why = "create failed: " + sink.text, false;
    kernel->destroy();
    std::printf("  %s/%s: %d input(s) -> 1 output [2, 8]; supports cuda, not host; create + destroy\n", creator.type(),
                creator.version(), inputs);
    return true;
  }
  return *why = "infer_outputs refused one and two f32 [2, 8] inputs", false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: plugin_checker <library> [--probe] <type/version>...");
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return fail(std::string("dlopen: ") + dlerror());
  auto entry = reinterpret_cast<tensoracle_get_plugin_creators_fn>(dlsym(library, TENSORACLE_PLUGIN_ENTRY_NAME));
  if (entry == nullptr) return fail(std::string("no ") + TENSORACLE_PLUGIN_ENTRY_NAME);
  std::int32_t abi = -1, count = -1;
  plugin::PluginCreator* const* creators = nullptr;
  if (entry(&abi, &creators, &count) != 0) return fail("the entry point returned nonzero");
  if (abi != plugin::kAbiVersion) return fail("ABI version " + std::to_string(abi));
  bool do_probe = argc > 2 && std::string(argv[2]) == "--probe";
  std::vector<std::string> expected(argv + (do_probe ? 3 : 2), argv + argc);
  if (count != static_cast<std::int32_t>(expected.size())) return fail("creator count " + std::to_string(count));
  std::printf("%s: ABI version %d, %d creator(s)\n", argv[1], abi, count);
  for (std::int32_t i = 0; i < count; ++i) {
    std::string name = std::string(creators[i]->type()) + "/" + creators[i]->version();
    if (name != expected[static_cast<std::size_t>(i)]) return fail("creator " + std::to_string(i) + " is " + name);
    std::printf("  %s\n", name.c_str());
    std::string why;
    if (do_probe && !probe(*creators[i], &why)) return fail(name + ": " + why);
  }
  std::printf("plugin_checker OK\n");
  return 0;
}
