// The example cubin plugin library: the plugin types bias, scale and dot on the cubin plugin base, launching the
// kernels of bias.cu, scale.cu and dot.cu from the embedded bundle (CUDA only).
#include <algorithm>
#include <cstdlib>
#include <string>

#include <tensoracle/cubin_plugin.hpp>

namespace {

namespace cubin = tensoracle::cubin;
namespace plugin = tensoracle::plugin;

constexpr std::uint32_t kBlock = 256;
constexpr std::int64_t kMaxBlocks = 4096;  // grid-stride kernels need no more

// Blocks for one thread per element in a grid-stride loop.
std::uint32_t grid_stride_blocks(std::int64_t n) {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>((n + kBlock - 1) / kBlock, 1, kMaxBlocks));
}

// bias: y = x + b, with b (a weight constant, the second input) a vector along x's last dimension.
class BiasPlugin final : public cubin::PluginBase {
 public:
  explicit BiasPlugin(const plugin::Fields& fields)
      : PluginBase("bias", "1", fields, cubin::PluginIO{{cubin::TensorSpec{}, cubin::TensorSpec{}}, {}, 0}) {
    this->fields().check_known({});
    bias_ = kernel("bias");
  }

  bool validate_shape(const plugin::TensorDesc* inputs, std::int32_t,
                      const plugin::TensorDesc&) const noexcept override {
    const plugin::TensorDesc& x = inputs[0];
    const plugin::TensorDesc& b = inputs[1];
    return x.rank >= 1 && b.rank == 1 && b.dims[0] == x.dims[x.rank - 1] && b.dims[0] <= INT32_MAX;
  }

 protected:
  bool run(const cubin::RunArgs& args, plugin::ErrorSink& error) noexcept override {
    const void* x = args.input_data[0];
    const void* b = args.input_data[1];
    void* y = args.output_data[0];
    std::int64_t n = cubin::element_count(args.inputs[0]);
    auto c = static_cast<std::int32_t>(args.inputs[1].dims[0]);
    if (n == 0) return true;
    const void* params[] = {&x, &b, &y, &n, &c};
    return bias_.launch({grid_stride_blocks(n)}, {kBlock}, params, 5, args.stream, error);
  }

 private:
  cubin::Kernel bias_;
};

// scale: y = alpha * x, alpha a float64 field.
class ScalePlugin final : public cubin::PluginBase {
 public:
  explicit ScalePlugin(const plugin::Fields& fields) : PluginBase("scale", "1", fields) {
    this->fields().check_known({"alpha"});
    alpha_ = static_cast<float>(this->fields().get_float("alpha"));
    scale_ = kernel("scale");
  }

 protected:
  bool run(const cubin::RunArgs& args, plugin::ErrorSink& error) noexcept override {
    const void* x = args.input_data[0];
    void* y = args.output_data[0];
    std::int64_t n = cubin::element_count(args.inputs[0]);
    if (n == 0) return true;
    const void* params[] = {&x, &y, &n, &alpha_};
    return scale_.launch({grid_stride_blocks(n)}, {kBlock}, params, 4, args.stream, error);
  }

 private:
  float alpha_ = 1;
  cubin::Kernel scale_;
};

// dot: y[..., n] = x[..., k] . w[k, n] with w a weight constant (the second input). The output shape is computed, so
// infer_outputs and check_shapes are overridden. Field "precision": "fp32" (default) picks dot.specialized when its
// compile-time K and divisibility rules accept the call (Kernel::accepts), else dot.unspecialized; "tf32-control"
// picks dot.tf32-control.
class DotPlugin final : public cubin::PluginBase {
 public:
  explicit DotPlugin(const plugin::Fields& fields)
      : PluginBase("dot", "1", fields, cubin::PluginIO{{cubin::TensorSpec{}, cubin::TensorSpec{}}, {}, 0}) {
    this->fields().check_known({"precision"});
    const std::string precision = this->fields().get_string("precision", "fp32");
    if (precision != "fp32" && precision != "tf32-control") {
      throw cubin::FieldError("plugin 'dot': field 'precision' is '" + precision +
                              "'; use \"fp32\" or \"tf32-control\"");
    }
    tf32_ = precision == "tf32-control";
    if (tf32_) {
      tf32_control_ = kernel("dot.tf32-control");
    } else {
      specialized_ = kernel("dot.specialized");
      unspecialized_ = kernel("dot.unspecialized");
      const char* k = specialized_.constant("DOT_K");
      specialized_k_ = k ? std::atoll(k) : -1;
    }
  }

  bool infer_outputs(plugin::ShapeBuilder& shapes, plugin::OutputDesc* outputs, std::int32_t max_outputs,
                     std::int32_t* output_count, std::string& error) const override {
    if (shapes.input_count() != 2) return error = "takes x and w (2 inputs)", false;
    const std::int32_t rank = shapes.input_rank(0);
    if (rank < 1 || shapes.input_rank(1) != 2) return error = "x needs rank >= 1 and w rank 2 ([k, n])", false;
    std::int64_t xk = 0, wk = 0;
    if (shapes.constant_value(shapes.input_dim(0, rank - 1), &xk) &&
        shapes.constant_value(shapes.input_dim(1, 0), &wk) && xk != wk) {
      return error = "x's last dimension " + std::to_string(xk) + " is not w's first " + std::to_string(wk), false;
    }
    if (max_outputs < 1) return error = "no room for the output", false;
    outputs[0].dtype = plugin::DType::kF32;
    outputs[0].rank = rank;
    for (std::int32_t a = 0; a + 1 < rank; ++a) outputs[0].dims[a] = shapes.input_dim(0, a);
    outputs[0].dims[rank - 1] = shapes.input_dim(1, 1);
    *output_count = 1;
    return true;
  }

  bool check_shapes(const plugin::TensorDesc* inputs, std::int32_t input_count, const plugin::TensorDesc* outputs,
                    std::int32_t output_count, std::string* why) const noexcept override {
    if (!check_io(inputs, input_count, outputs, output_count, why)) return false;
    const plugin::TensorDesc& x = inputs[0];
    const plugin::TensorDesc& w = inputs[1];
    const plugin::TensorDesc& y = outputs[0];
    bool ok = x.rank >= 1 && w.rank == 2 && y.rank == x.rank && x.dims[x.rank - 1] == w.dims[0] &&
              y.dims[y.rank - 1] == w.dims[1];
    for (std::int32_t a = 0; ok && a + 1 < x.rank; ++a) ok = y.dims[a] == x.dims[a];
    // The kernels index with 32-bit m, n, k (and 64-bit element offsets).
    ok = ok && cubin::element_count(x) / std::max<std::int64_t>(w.dims[0], 1) <= INT32_MAX && w.dims[0] <= INT32_MAX &&
         w.dims[1] <= INT32_MAX;
    if (!ok && why) *why = "needs x [..., k], w [k, n] and y [..., n] with m, n, k below 2^31";
    return ok;
  }

 protected:
  bool prepare(const plugin::TensorDesc* inputs, std::int32_t, const plugin::TensorDesc*, std::int32_t,
               plugin::ErrorSink&) noexcept override {
    k_ = static_cast<std::int32_t>(inputs[1].dims[0]);
    n_ = static_cast<std::int32_t>(inputs[1].dims[1]);
    m_ = static_cast<std::int32_t>(k_ > 0 ? cubin::element_count(inputs[0]) / k_ : 0);
    return true;
  }

  bool run(const cubin::RunArgs& args, plugin::ErrorSink& error) noexcept override {
    const void* x = args.input_data[0];
    const void* w = args.input_data[1];
    void* y = args.output_data[0];
    const std::int64_t outputs = std::int64_t(m_) * n_;
    if (outputs == 0) return true;
    const auto blocks = [](std::int64_t threads, std::int64_t block) {
      return static_cast<std::uint32_t>((threads + block - 1) / block);
    };
    if (!tf32_ && k_ == specialized_k_) {
      const void* params[] = {&x, &w, &y, &m_, &n_};
      if (specialized_.accepts(params, 5)) {
        const std::int64_t threads = specialized_.record()->threads;
        return specialized_.launch({blocks(outputs / 4, threads)}, {0, 0, 0}, params, 5, args.stream, error);
      }
    }
    const void* params[] = {&x, &w, &y, &m_, &n_, &k_};
    const cubin::Kernel& plain = tf32_ ? tf32_control_ : unspecialized_;
    return plain.launch({blocks(outputs, kBlock)}, {kBlock}, params, 6, args.stream, error);
  }

 private:
  bool tf32_ = false;
  cubin::Kernel specialized_, unspecialized_, tf32_control_;
  std::int64_t specialized_k_ = -1;
  std::int32_t m_ = 0, n_ = 0, k_ = 0;
};

}  // namespace

// The library's one export: its creators, made on the first call (no static registration).
extern "C" TENSORACLE_PLUGIN_EXPORT std::int32_t tensoracle_get_plugin_creators(
    std::int32_t* abi_version, tensoracle::plugin::PluginCreator* const** creators, std::int32_t* count) {
  static cubin::Creator<BiasPlugin> bias("bias", "1");
  static cubin::Creator<ScalePlugin> scale("scale", "1");
  static cubin::Creator<DotPlugin> dot("dot", "1");
  static plugin::PluginCreator* const all[] = {&bias, &scale, &dot};
  return cubin::publish_creators(all, 3, abi_version, creators, count);
}
