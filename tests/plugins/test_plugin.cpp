// A plugin library for the tests: plugin types with host implementations (and CUDA ones where the CUDA backend is
// built), computed shapes, several outputs, fields, workspace, and types that run on one device only.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "tensoracle/plugin.hpp"
#include "test_plugin_cuda.hpp"

namespace {

using namespace tensoracle::plugin;  // NOLINT(google-build-using-namespace): the plugin interface, throughout

std::int64_t volume(const TensorDesc& t) {
  std::int64_t v = 1;
  for (std::int32_t k = 0; k < t.rank; ++k) v *= t.dims[k];
  return v;
}

const Field* find_field(const Fields& fields, const char* name) {
  for (std::int32_t i = 0; i < fields.count; ++i) {
    if (std::strcmp(fields.items[i].name, name) == 0) return &fields.items[i];
  }
  return nullptr;
}

// "test.scale_bias" 1: y = alpha * x + b, x [..., C], b [C]; field alpha (float, default 1). Host: f32; CUDA: f32 and
// f16. It asks for C floats of workspace and checks it gets them.
class ScaleBiasKernel final : public PluginKernel {
 public:
  ScaleBiasKernel(double alpha, Device device) : alpha_(alpha), device_(device) {}
  bool configure(const TensorDesc* inputs, std::int32_t input_count, const TensorDesc* /*outputs*/,
                 std::int32_t output_count, ErrorSink& error) noexcept override {
    if (input_count != 2 || output_count != 1) {
      error.set("test.scale_bias: expects 2 inputs and 1 output");
      return false;
    }
    channels_ = inputs[1].dims[0];
    ++configured_;
    return true;
  }
  bool enqueue(const TensorDesc* inputs, const void* const* input_data, std::int32_t /*input_count*/,
               const TensorDesc* /*outputs*/, void* const* output_data, std::int32_t /*output_count*/, void* workspace,
               std::size_t workspace_bytes, void* stream, ErrorSink& error) noexcept override {
    if (configured_ == 0) {
      error.set("test.scale_bias: enqueue before configure");
      return false;
    }
    if (workspace == nullptr || workspace_bytes < static_cast<std::size_t>(channels_) * sizeof(float)) {
      error.set("test.scale_bias: the workspace is missing or too small");
      return false;
    }
    const std::int64_t n = volume(inputs[0]);
    if (device_ == Device::kCuda) {
      const char* failure =
          test_plugin_cuda::scale_bias(inputs[0].dtype == DType::kF16, input_data[0], input_data[1], output_data[0], n,
                                       channels_, static_cast<float>(alpha_), workspace, stream);
      if (failure != nullptr) error.set(failure);
      return failure == nullptr;
    }
    const auto* x = static_cast<const float*>(input_data[0]);
    const auto* b = static_cast<const float*>(input_data[1]);
    auto* y = static_cast<float*>(output_data[0]);
    auto* scratch = static_cast<float*>(workspace);
    for (std::int64_t c = 0; c < channels_; ++c) scratch[c] = b[c];  // the bias through the workspace
    for (std::int64_t i = 0; i < n; ++i)
      y[i] = static_cast<float>(alpha_ * static_cast<double>(x[i]) + scratch[i % channels_]);
    return true;
  }
  void destroy() noexcept override { delete this; }

 private:
  double alpha_;
  Device device_;
  std::int64_t channels_ = 0;
  int configured_ = 0;
};

bool cuda_built() { return test_plugin_cuda::built(); }

class ScaleBias final : public PluginCreator {
 public:
  const char* type() const noexcept override { return "test.scale_bias"; }
  const char* version() const noexcept override { return "1"; }
  bool infer_outputs(const Fields& fields, ShapeBuilder& shapes, OutputDesc* outputs, std::int32_t /*max_outputs*/,
                     std::int32_t* output_count, ErrorSink& error) const noexcept override {
    for (std::int32_t i = 0; i < fields.count; ++i) {
      if (std::strcmp(fields.items[i].name, "alpha") != 0) {
        error.set((std::string("test.scale_bias: unknown field '") + fields.items[i].name + "'").c_str());
        return false;
      }
      if (fields.items[i].type != FieldType::kFloat64) {
        error.set("test.scale_bias: field 'alpha' must be a float");
        return false;
      }
    }
    if (shapes.input_count() != 2 || shapes.input_rank(1) != 1 || shapes.input_rank(0) < 1) {
      error.set("test.scale_bias: takes x [..., C] and b [C]");
      return false;
    }
    if (shapes.input_dtype(0) != shapes.input_dtype(1)) {
      error.set("test.scale_bias: x and b must have one dtype");
      return false;
    }
    std::int64_t c = 0, b = 0;
    const DimExpr last = shapes.input_dim(0, shapes.input_rank(0) - 1);
    if (shapes.constant_value(last, &c) && shapes.constant_value(shapes.input_dim(1, 0), &b) && c != b) {
      error.set("test.scale_bias: b must have one value per channel of x");
      return false;
    }
    outputs[0].dtype = shapes.input_dtype(0);
    outputs[0].rank = shapes.input_rank(0);
    for (std::int32_t k = 0; k < outputs[0].rank; ++k) outputs[0].dims[k] = shapes.input_dim(0, k);
    *output_count = 1;
    return true;
  }
  bool supports(const Fields& /*fields*/, Device device, const TensorDesc* inputs, std::int32_t input_count,
                const TensorDesc* outputs, std::int32_t output_count) const noexcept override {
    if (input_count != 2 || output_count != 1) return false;
    const DType t = inputs[0].dtype;
    if (inputs[1].dtype != t || outputs[0].dtype != t) return false;
    if (device == Device::kHost) return t == DType::kF32;
    return cuda_built() && (t == DType::kF32 || t == DType::kF16);
  }
  std::size_t workspace_bytes(const Fields& /*fields*/, Device /*device*/, const TensorDesc* inputs,
                              std::int32_t /*input_count*/, const TensorDesc* /*outputs*/,
                              std::int32_t /*output_count*/) const noexcept override {
    return static_cast<std::size_t>(inputs[1].dims[0]) * sizeof(float);
  }
  PluginKernel* create(const Fields& fields, Device device, ErrorSink& error) const noexcept override {
    const Field* alpha = find_field(fields, "alpha");
    if (device == Device::kCuda && !cuda_built()) {
      error.set("test.scale_bias: this build of the test plugin has no CUDA kernels");
      return nullptr;
    }
    return new (std::nothrow)
        ScaleBiasKernel(alpha != nullptr ? *static_cast<const double*>(alpha->data) : 1.0, device);
  }
};

// "test.outer" 1: x [N], y [M] -> outer [N, M] (x_i * y_j) and joined [N + M] (x then y); f32, host and CUDA. Its
// output shapes are computed from the inputs' dims.
class OuterKernel final : public PluginKernel {
 public:
  explicit OuterKernel(Device device) : device_(device) {}
  bool configure(const TensorDesc*, std::int32_t, const TensorDesc*, std::int32_t, ErrorSink&) noexcept override {
    return true;
  }
  bool enqueue(const TensorDesc* inputs, const void* const* input_data, std::int32_t, const TensorDesc*,
               void* const* output_data, std::int32_t, void*, std::size_t, void* stream,
               ErrorSink& error) noexcept override {
    const std::int64_t n = inputs[0].dims[0], m = inputs[1].dims[0];
    if (device_ == Device::kCuda) {
      const char* failure =
          test_plugin_cuda::outer(input_data[0], input_data[1], output_data[0], output_data[1], n, m, stream);
      if (failure != nullptr) error.set(failure);
      return failure == nullptr;
    }
    const auto* x = static_cast<const float*>(input_data[0]);
    const auto* y = static_cast<const float*>(input_data[1]);
    auto* outer = static_cast<float*>(output_data[0]);
    auto* joined = static_cast<float*>(output_data[1]);
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < m; ++j) outer[i * m + j] = x[i] * y[j];
    }
    std::memcpy(joined, x, static_cast<std::size_t>(n) * sizeof(float));
    std::memcpy(joined + n, y, static_cast<std::size_t>(m) * sizeof(float));
    return true;
  }
  void destroy() noexcept override { delete this; }

 private:
  Device device_;
};

class Outer final : public PluginCreator {
 public:
  const char* type() const noexcept override { return "test.outer"; }
  const char* version() const noexcept override { return "1"; }
  bool infer_outputs(const Fields& /*fields*/, ShapeBuilder& shapes, OutputDesc* outputs, std::int32_t max_outputs,
                     std::int32_t* output_count, ErrorSink& error) const noexcept override {
    if (shapes.input_count() != 2 || shapes.input_rank(0) != 1 || shapes.input_rank(1) != 1 || max_outputs < 2) {
      error.set("test.outer: takes two vectors");
      return false;
    }
    outputs[0] = OutputDesc{DType::kF32, 2, {shapes.input_dim(0, 0), shapes.input_dim(1, 0)}};
    outputs[1] = OutputDesc{
        DType::kF32, 1, {shapes.operation(DimOperation::kAdd, shapes.input_dim(0, 0), shapes.input_dim(1, 0))}};
    *output_count = 2;
    return true;
  }
  bool supports(const Fields&, Device device, const TensorDesc* inputs, std::int32_t input_count, const TensorDesc*,
                std::int32_t) const noexcept override {
    return input_count == 2 && inputs[0].dtype == DType::kF32 && inputs[1].dtype == DType::kF32 &&
           (device == Device::kHost || cuda_built());
  }
  std::size_t workspace_bytes(const Fields&, Device, const TensorDesc*, std::int32_t, const TensorDesc*,
                              std::int32_t) const noexcept override {
    return 0;
  }
  PluginKernel* create(const Fields&, Device device, ErrorSink&) const noexcept override {
    return new (std::nothrow) OuterKernel(device);
  }
};

// "test.cuda_only" 1 and "test.host_only" 1: y = x (f32), each with one implementation.
class CopyKernel final : public PluginKernel {
 public:
  explicit CopyKernel(Device device) : device_(device) {}
  bool configure(const TensorDesc*, std::int32_t, const TensorDesc*, std::int32_t, ErrorSink&) noexcept override {
    return true;
  }
  bool enqueue(const TensorDesc* inputs, const void* const* input_data, std::int32_t, const TensorDesc*,
               void* const* output_data, std::int32_t, void*, std::size_t, void* stream,
               ErrorSink& error) noexcept override {
    const std::size_t bytes = static_cast<std::size_t>(volume(inputs[0])) * sizeof(float);
    if (device_ == Device::kCuda) {
      const char* failure = test_plugin_cuda::copy(output_data[0], input_data[0], bytes, stream);
      if (failure != nullptr) error.set(failure);
      return failure == nullptr;
    }
    std::memcpy(output_data[0], input_data[0], bytes);
    return true;
  }
  void destroy() noexcept override { delete this; }

 private:
  Device device_;
};

class Copy final : public PluginCreator {
 public:
  Copy(const char* type, Device device) : type_(type), device_(device) {}
  const char* type() const noexcept override { return type_; }
  const char* version() const noexcept override { return "1"; }
  bool infer_outputs(const Fields&, ShapeBuilder& shapes, OutputDesc* outputs, std::int32_t, std::int32_t* output_count,
                     ErrorSink& error) const noexcept override {
    if (shapes.input_count() != 1) {
      error.set("takes one input");
      return false;
    }
    outputs[0].dtype = shapes.input_dtype(0);
    outputs[0].rank = shapes.input_rank(0);
    for (std::int32_t k = 0; k < outputs[0].rank; ++k) outputs[0].dims[k] = shapes.input_dim(0, k);
    *output_count = 1;
    return true;
  }
  bool supports(const Fields&, Device device, const TensorDesc* inputs, std::int32_t, const TensorDesc*,
                std::int32_t) const noexcept override {
    return device == device_ && inputs[0].dtype == DType::kF32 && (device == Device::kHost || cuda_built());
  }
  std::size_t workspace_bytes(const Fields&, Device, const TensorDesc*, std::int32_t, const TensorDesc*,
                              std::int32_t) const noexcept override {
    return 0;
  }
  PluginKernel* create(const Fields&, Device device, ErrorSink&) const noexcept override {
    return new (std::nothrow) CopyKernel(device);
  }

 private:
  const char* type_;
  Device device_;
};

const ScaleBias kScaleBias;
const Outer kOuter;
const Copy kCudaOnly("test.cuda_only", Device::kCuda);
const Copy kHostOnly("test.host_only", Device::kHost);
PluginCreator* const kCreators[] = {const_cast<ScaleBias*>(&kScaleBias), const_cast<Outer*>(&kOuter),
                                    const_cast<Copy*>(&kCudaOnly), const_cast<Copy*>(&kHostOnly)};

}  // namespace

extern "C" TENSORACLE_PLUGIN_EXPORT std::int32_t tensoracle_get_plugin_creators(
    std::int32_t* abi_version, tensoracle::plugin::PluginCreator* const** creators, std::int32_t* count) {
#ifdef TEST_PLUGIN_ABI_VERSION
  *abi_version = TEST_PLUGIN_ABI_VERSION;  // the "wrong ABI" variant of the tests
#else
  *abi_version = tensoracle::plugin::kAbiVersion;
#endif
  *creators = kCreators;
  *count = static_cast<std::int32_t>(sizeof kCreators / sizeof kCreators[0]);
  return 0;
}
