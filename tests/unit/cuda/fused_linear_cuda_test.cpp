// The linear kernels with an erf-GELU epilogue, run directly through their registry entries: CUTLASS's sm_90 products
// and cuBLASLt's product followed by the GELU kernel, against a double-precision reference of the same f16/bf16
// operands; every output element written; caller buffers planned again at each launch, misaligned ones run by the
// fallback; replays in a captured CUDA graph.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle::cuda {
namespace {

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

bool sm90_gpu() {
  const auto devices = system_info().cuda_devices;
  return !devices.empty() && devices[0].compute_capability_major == 9 && devices[0].compute_capability_minor == 0;
}

float to_float(std::uint16_t bits, DataType dtype) {
  return dtype == DataType::kF16 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits);
}
std::uint16_t from_float(float v, DataType dtype) {
  return dtype == DataType::kF16 ? f32_to_f16_bits(v) : f32_to_bf16_bits(v);
}

// Random half-precision values in [-scale, scale].
std::vector<std::uint16_t> random_halves(std::size_t n, DataType dtype, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = from_float(dist(rng), dtype);
  return v;
}

struct DeviceBuffer {
  void* base = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t n) : bytes(n + 64) { cudaMalloc(&base, bytes); }
  ~DeviceBuffer() { cudaFree(base); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* at(std::size_t offset) const { return static_cast<char*>(base) + offset; }
};

struct Case {
  std::int64_t m, n, k;
  bool bias, residual;
};

// One linear layer x [m, k] · w[n, k]ᵀ (+ b) (+ r), activation gelu_erf, in a network whose graph the entries read.
class FusedLinear {
 public:
  FusedLinear(const Case& c, DataType dtype) : case_(c), dtype_(dtype) {
    Tensor x = net_.add_input("x", dtype, {c.m, c.k});
    std::vector<std::uint16_t> zeros_w(static_cast<std::size_t>(c.n * c.k)), zeros_b(static_cast<std::size_t>(c.n));
    Tensor w = net_.add_constant_copy(dtype, {c.n, c.k}, zeros_w.data(), "w");
    // Without bias and residual the layer has two inputs, as the builder's fused layers then have.
    std::vector<Tensor> inputs = {x, w};
    if (c.bias || c.residual) {
      inputs.push_back(c.bias ? net_.add_constant_copy(dtype, {c.n}, zeros_b.data(), "b") : Tensor{});
    }
    if (c.residual) inputs.push_back(net_.add_input("r", dtype, {c.m, c.n}));
    Tensor y = net_.add_layer("linear", inputs, {{"activation", std::string("gelu_erf")}}, "fc")[0];
    net_.mark_output(y, "y");
  }
  const graph::Graph& graph() const { return graph::graph_of(net_); }
  const graph::Layer& layer() const { return graph().layers.back(); }

 private:
  Case case_;
  DataType dtype_;
  Network net_;
};

struct Run {
  std::vector<std::uint16_t> x, w, b, r;
};

// gelu_erf(x·wᵀ + b + r) in double from the rounded operands.
std::vector<double> reference(const Case& c, const Run& in, DataType dtype) {
  std::vector<double> y(static_cast<std::size_t>(c.m * c.n));
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < c.n; ++j) {
      double s = c.bias ? to_float(in.b[static_cast<std::size_t>(j)], dtype) : 0.0;
      for (std::int64_t p = 0; p < c.k; ++p) {
        s += static_cast<double>(to_float(in.x[static_cast<std::size_t>(i * c.k + p)], dtype)) *
             to_float(in.w[static_cast<std::size_t>(j * c.k + p)], dtype);
      }
      if (c.residual) s += to_float(in.r[static_cast<std::size_t>(i * c.n + j)], dtype);
      y[static_cast<std::size_t>(i * c.n + j)] = 0.5 * s * (1.0 + std::erf(s * 0.70710678118654752440));
    }
  }
  return y;
}

// Relative L2 error of the device result; NaN (a poisoned, unwritten element) fails it.
double rel_l2(const std::vector<std::uint16_t>& got, const std::vector<double>& want, DataType dtype) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = to_float(got[i], dtype);
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    num += (g - want[i]) * (g - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

// How the operands' buffers are given: fixed addresses known at prepare (arena and constants), caller buffers bound
// at each launch, or caller buffers of which the output is 2 bytes off 16-byte alignment.
enum class Binding { kFixed, kCaller, kCallerMisaligned };

// Prepares `kernel` for the case and launches it `launches` times (each after poisoning the output), plainly or as a
// captured graph; returns the output of the last launch.
void run_kernel(const std::string& kernel, const Case& c, DataType dtype, Binding binding, bool capture,
                std::vector<std::uint16_t>& result, double& error) {
  const KernelEntry* entry = find_kernel_entry(kernel);
  ASSERT_NE(entry, nullptr) << kernel;
  FusedLinear linear(c, dtype);
  ASSERT_TRUE(entry->supports(linear.graph(), linear.layer(), Precision::kFp16)) << kernel;
  std::mt19937 rng(static_cast<unsigned>(c.m * 131 + c.n * 7 + c.k));
  Run in;
  in.x = random_halves(static_cast<std::size_t>(c.m * c.k), dtype, 1.0F, rng);
  in.w = random_halves(static_cast<std::size_t>(c.n * c.k), dtype, 1.0F / std::sqrt(static_cast<float>(c.k)), rng);
  if (c.bias) in.b = random_halves(static_cast<std::size_t>(c.n), dtype, 0.5F, rng);
  if (c.residual) in.r = random_halves(static_cast<std::size_t>(c.m * c.n), dtype, 1.0F, rng);
  const std::size_t out_bytes = static_cast<std::size_t>(c.m * c.n) * 2;
  DeviceBuffer x(in.x.size() * 2), w(in.w.size() * 2), b(in.b.size() * 2 + 2), r(in.r.size() * 2 + 2), y(out_bytes);
  const std::size_t y_offset = binding == Binding::kCallerMisaligned ? 2 : 0;
  CHECK_CUDA(cudaMemcpy(x.base, in.x.data(), in.x.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(w.base, in.w.data(), in.w.size() * 2, cudaMemcpyHostToDevice));
  if (c.bias) {
    CHECK_CUDA(cudaMemcpy(b.base, in.b.data(), in.b.size() * 2, cudaMemcpyHostToDevice));
  }
  if (c.residual) {
    CHECK_CUDA(cudaMemcpy(r.base, in.r.data(), in.r.size() * 2, cudaMemcpyHostToDevice));
  }

  const graph::Layer& layer = linear.layer();
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  StepLaunch launch;
  launch.layer = &layer;
  launch.attrs = &attrs;
  launch.precision = Precision::kFp16;
  const bool caller = binding != Binding::kFixed;
  auto tensor = [&](void* data, Dims shape, bool is_caller) {
    DeviceTensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.caller_buffer = is_caller;
    t.data = is_caller ? nullptr : data;
    return t;
  };
  launch.inputs = {tensor(x.base, {c.m, c.k}, caller), tensor(w.base, {c.n, c.k}, false)};
  if (c.bias || c.residual) launch.inputs.push_back(c.bias ? tensor(b.base, {c.n}, false) : DeviceTensor{});
  if (c.residual) launch.inputs.push_back(tensor(r.base, {c.m, c.n}, caller));
  launch.outputs = {tensor(y.at(y_offset), {c.m, c.n}, caller)};
  DeviceBuffer workspace(entry->workspace_bytes);
  launch.workspace = entry->workspace_bytes != 0 ? workspace.base : nullptr;
  launch.workspace_bytes = entry->workspace_bytes;
  LibraryHandles handles;
  launch.handles = &handles;
  std::unique_ptr<StepState> state;
  try {
    state = entry->prepare(launch);
  } catch (const Error& e) {
    FAIL() << kernel << " did not prepare: " << e.what();
  }
  // Bind, as an enqueue does.
  launch.inputs[0].data = x.base;
  if (c.residual) launch.inputs[3].data = r.base;
  launch.outputs[0].data = y.at(y_offset);
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launch.stream = stream;
  CHECK_CUDA(cudaMemsetAsync(y.base, 0xFF, y.bytes, stream));  // NaN in f16 and bf16
  if (capture) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    entry->launch(launch, *state);
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 2; ++i) {
      CHECK_CUDA(cudaMemsetAsync(y.base, 0xFF, y.bytes, stream));
      CHECK_CUDA(cudaGraphLaunch(exec, stream));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  } else {
    entry->launch(launch, *state);
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaStreamDestroy(stream));
  result.resize(static_cast<std::size_t>(c.m * c.n));
  CHECK_CUDA(cudaMemcpy(result.data(), y.at(y_offset), out_bytes, cudaMemcpyDeviceToHost));
  error = rel_l2(result, reference(c, in, dtype), dtype);
}

const std::vector<Case> kCases = {
    {74, 96, 64, true, false},     // partial tiles in m
    {256, 384, 512, true, true},   // bias and residual
    {1, 8, 8, false, false},       // one row, no bias (a layer of two inputs)
    {300, 264, 72, false, false},  // no bias, partial tiles everywhere
    {64, 32, 16, false, true},     // a residual without a bias
    {300, 520, 136, true, false},  // partial tiles in m and n, k not a tile multiple
};

std::vector<std::string> fused_kernels(DataType dtype) {
  const std::string prefix = dtype == DataType::kF16 ? "linear_f16_f32acc_" : "linear_bf16_f32acc_";
  std::vector<std::string> names = {prefix + "cublaslt_bias_epilogue"};  // cuBLASLt's product, then the GELU kernel
  for (const char* config : {"coop128x256", "coop128x128", "pingpong128x128"}) {
    const std::string name = prefix + "cutlass_sm90_" + config + "_gelu_erf";
    if (find_kernel_entry(name) != nullptr) names.push_back(name);
  }
  return names;
}

TEST(CudaFusedLinear, ErfGeluEpilogueMatchesTheReferenceForEveryKernelAndBinding) {
  if (system_info().cuda_devices.empty()) {
    const char* required = std::getenv("TENSORACLE_REQUIRE_GPU");
    if (required != nullptr && std::string(required) == "1") FAIL() << "TENSORACLE_REQUIRE_GPU=1 but no GPU";
    GTEST_SKIP() << "no CUDA GPU on this machine";
  }
  for (DataType dtype : {DataType::kF16, DataType::kBF16}) {
    const std::vector<std::string> kernels = fused_kernels(dtype);
    // An sm_90 GPU with a build that has CUTLASS runs all four; other GPUs the cuBLASLt one.
    if (sm90_gpu() && std::getenv("TENSORACLE_REQUIRE_GPU") != nullptr) {
      EXPECT_EQ(kernels.size(), 4u);
    }
    const double limit = dtype == DataType::kF16 ? 2e-3 : 1.2e-2;
    for (const std::string& kernel : kernels) {
      if (!sm90_gpu() && kernel.find("cutlass") != std::string::npos) continue;
      for (const Case& c : kCases) {
        for (Binding binding : {Binding::kFixed, Binding::kCaller, Binding::kCallerMisaligned}) {
          for (bool capture : {false, true}) {
            SCOPED_TRACE(kernel + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
                         " binding " + std::to_string(static_cast<int>(binding)) + (capture ? " captured" : ""));
            std::vector<std::uint16_t> y;
            double error = 0;
            run_kernel(kernel, c, dtype, binding, capture, y, error);
            EXPECT_LT(error, limit);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tensoracle::cuda
