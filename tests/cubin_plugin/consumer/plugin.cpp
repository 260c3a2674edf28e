// The consumer test's plugin library: two plugin types on the cubin plugin base, exported through the entry point.
#include <tensoracle/cubin_plugin.hpp>

namespace {

namespace cubin = tensoracle::cubin;
namespace plugin = tensoracle::plugin;

// y = x + alpha (field "alpha", default 0); `scale` (y = x + alpha * x would need another kernel) reuses it as a second
// type so that the library publishes two creators.
class AddPlugin final : public cubin::PluginBase {
 public:
  explicit AddPlugin(const plugin::Fields& fields) : PluginBase("consumer_add", "1", fields) {
    this->fields().check_known({"alpha"});
    alpha_ = static_cast<float>(this->fields().get_float("alpha", 0.0));
    add_ = kernel("add");
  }

 protected:
  bool run(const cubin::RunArgs& args, plugin::ErrorSink& error) noexcept override {
    const void* x = args.input_data[0];
    void* y = args.output_data[0];
    auto n = static_cast<std::int32_t>(cubin::element_count(args.inputs[0]));
    const void* params[] = {&x, &y, &n, &alpha_};
    return add_.launch({static_cast<std::uint32_t>((n + 255) / 256)}, {256}, params, 4, args.stream, error);
  }

 private:
  float alpha_ = 0;
  cubin::Kernel add_;
};

// Two f32 inputs; the output has the shape of input 1.
class AddLikePlugin final : public cubin::PluginBase {
 public:
  explicit AddLikePlugin(const plugin::Fields& fields)
      : PluginBase("consumer_add_like", "2", fields,
                   cubin::PluginIO{{cubin::TensorSpec{}, cubin::TensorSpec{}}, cubin::TensorSpec{}, 1}) {
    add_ = kernel("add");
  }

 protected:
  bool run(const cubin::RunArgs& args, plugin::ErrorSink& error) noexcept override {
    const void* x = args.input_data[1];
    void* y = args.output_data[0];
    auto n = static_cast<std::int32_t>(cubin::element_count(args.inputs[1]));
    float alpha = 1;
    const void* params[] = {&x, &y, &n, &alpha};
    return add_.launch({static_cast<std::uint32_t>((n + 255) / 256)}, {256}, params, 4, args.stream, error);
  }

 private:
  cubin::Kernel add_;
};

}  // namespace

extern "C" TENSORACLE_PLUGIN_EXPORT std::int32_t tensoracle_get_plugin_creators(
    std::int32_t* abi_version, tensoracle::plugin::PluginCreator* const** creators, std::int32_t* count) {
  static cubin::Creator<AddPlugin> add("consumer_add", "1");
  static cubin::Creator<AddLikePlugin> add_like("consumer_add_like", "2");
  static plugin::PluginCreator* const all[] = {&add, &add_like};
  return cubin::publish_creators(all, 2, abi_version, creators, count);
}
