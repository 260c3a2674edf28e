// The linear kernels with an erf-GELU epilogue, run directly through their registry entries: CUTLASS's sm_90 products
// and cuBLASLt's product followed by the GELU kernel; without an activation CUTLASS's small-tile products and
// cuBLASLt's first four heuristic algorithms; with tanh-GELU its first eight; against a double-precision reference of
// the same f16/bf16 operands; every output element written; caller buffers planned again at each launch, misaligned
// ones run by the fallback; replays in a captured CUDA graph.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "gpu_test.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::cuda {
namespace {

using gpu_test::device_tensor;
using gpu_test::DeviceBuffer;
using gpu_test::EntryLaunch;
using gpu_test::half_to_float;
using gpu_test::random_halves;

struct Case {
  std::int64_t m, n, k;
  bool bias, residual;
};

// One linear layer x [m, k] · w[n, k]ᵀ (+ b) (+ r), activation gelu_erf, gelu_tanh or none, in a network whose graph
// the entries read.
class FusedLinear {
 public:
  FusedLinear(const Case& c, DataType dtype, const std::string& activation) : case_(c), dtype_(dtype) {
    Tensor x = net_.add_input("x", dtype, {c.m, c.k});
    std::vector<std::uint16_t> zeros_w(static_cast<std::size_t>(c.n * c.k)), zeros_b(static_cast<std::size_t>(c.n));
    Tensor w = net_.add_constant_copy(dtype, {c.n, c.k}, zeros_w.data(), "w");
    // Without bias and residual the layer has two inputs, as the builder's fused layers then have.
    std::vector<Tensor> inputs = {x, w};
    if (c.bias || c.residual) {
      inputs.push_back(c.bias ? net_.add_constant_copy(dtype, {c.n}, zeros_b.data(), "b") : Tensor{});
    }
    if (c.residual) inputs.push_back(net_.add_input("r", dtype, {c.m, c.n}));
    Tensor y = net_.add_layer("linear", inputs, {{"activation", activation}}, "fc")[0];
    net_.mark_output(y, "y");
  }
  const graph::Graph& graph() const { return graph::graph_of(net_); }
  const graph::Layer& layer() const { return graph().layers.back(); }

 private:
  Case case_;
  DataType dtype_;
  Network net_;
};

// A case's operands (f16/bf16 bits) and the double-precision reference of its result.
struct Run {
  std::vector<std::uint16_t> x, w, b, r;
  std::vector<double> want;
};

// activation(x·wᵀ + b + r) (gelu_erf, gelu_tanh or none), in double from the rounded operands.
std::vector<double> reference(const Case& c, const Run& in, DataType dtype, const std::string& activation) {
  const auto widen = [dtype](const std::vector<std::uint16_t>& bits) {
    std::vector<double> v(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) v[i] = half_to_float(bits[i], dtype);
    return v;
  };
  const std::vector<double> x = widen(in.x), w = widen(in.w), b = widen(in.b), r = widen(in.r);
  std::vector<double> y(static_cast<std::size_t>(c.m * c.n));
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < c.n; ++j) {
      double s = c.bias ? b[static_cast<std::size_t>(j)] : 0.0;
      for (std::int64_t p = 0; p < c.k; ++p) {
        s += x[static_cast<std::size_t>(i * c.k + p)] * w[static_cast<std::size_t>(j * c.k + p)];
      }
      if (c.residual) s += r[static_cast<std::size_t>(i * c.n + j)];
      double v = s;
      if (activation == "gelu_erf") v = 0.5 * s * (1.0 + std::erf(s * 0.70710678118654752440));
      if (activation == "gelu_tanh")
        v = 0.5 * s * (1.0 + std::tanh(0.79788456080286535588 * (s + 0.044715 * s * s * s)));
      y[static_cast<std::size_t>(i * c.n + j)] = v;
    }
  }
  return y;
}

// The case's random operands (the same for every kernel) and their reference.
Run make_run(const Case& c, DataType dtype, const std::string& activation) {
  std::mt19937 rng(static_cast<unsigned>(c.m * 131 + c.n * 7 + c.k));
  Run in;
  in.x = random_halves(static_cast<std::size_t>(c.m * c.k), dtype, 1.0F, rng);
  in.w = random_halves(static_cast<std::size_t>(c.n * c.k), dtype, 1.0F / std::sqrt(static_cast<float>(c.k)), rng);
  if (c.bias) in.b = random_halves(static_cast<std::size_t>(c.n), dtype, 0.5F, rng);
  if (c.residual) in.r = random_halves(static_cast<std::size_t>(c.m * c.n), dtype, 1.0F, rng);
  in.want = reference(c, in, dtype, activation);
  return in;
}

// Relative L2 error of the device result; NaN (a poisoned, unwritten element) fails it.
double rel_l2(const std::vector<std::uint16_t>& got, const std::vector<double>& want, DataType dtype) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = half_to_float(got[i], dtype);
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    num += (g - want[i]) * (g - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

// How the operands' buffers are given: fixed addresses known at prepare (arena and constants), caller buffers bound
// at each launch, or caller buffers of which the output is 2 bytes off 16-byte alignment.
enum class Binding { kFixed, kCaller, kCallerMisaligned };

// Runs `kernel` on the case's operands, plainly or captured in a graph replayed twice, each time after poisoning the
// output; returns the output and its error against the reference.
void run_kernel(const std::string& kernel, const Case& c, const Run& in, DataType dtype, const std::string& activation,
                Binding binding, bool capture, std::vector<std::uint16_t>& result, double& error) {
  error = std::numeric_limits<double>::infinity();
  FusedLinear linear(c, dtype, activation);
  const std::size_t out_bytes = static_cast<std::size_t>(c.m * c.n) * 2;
  const DeviceBuffer x(in.x.size() * 2), w(in.w.size() * 2), b(in.b.size() * 2), r(in.r.size() * 2), y(out_bytes);
  const std::size_t y_offset = binding == Binding::kCallerMisaligned ? 2 : 0;
  x.upload(in.x);
  w.upload(in.w);
  b.upload(in.b);
  r.upload(in.r);

  const bool caller = binding != Binding::kFixed;
  std::vector<DeviceTensor> inputs = {device_tensor(dtype, {c.m, c.k}, x.base(), caller),
                                      device_tensor(dtype, {c.n, c.k}, w.base())};
  if (c.bias || c.residual) inputs.push_back(c.bias ? device_tensor(dtype, {c.n}, b.base()) : DeviceTensor{});
  if (c.residual) inputs.push_back(device_tensor(dtype, {c.m, c.n}, r.base(), caller));
  EntryLaunch how;
  how.capture = capture;
  how.before_each = [&](cudaStream_t stream) {
    EXPECT_EQ(cudaMemsetAsync(y.base(), 0xFF, y.bytes(), stream), cudaSuccess);  // NaN in f16 and bf16
  };
  if (!gpu_test::run_entry(kernel, linear.graph(), linear.layer(), inputs,
                           {device_tensor(dtype, {c.m, c.n}, y.at(y_offset), caller)}, how)) {
    return;
  }
  result = y.download<std::uint16_t>(static_cast<std::size_t>(c.m * c.n), y_offset);
  error = rel_l2(result, in.want, dtype);
}

const std::vector<Case> kCases = {
    {74, 96, 64, true, false},     // partial tiles in m
    {256, 384, 512, true, true},   // bias and residual
    {1, 8, 8, false, false},       // one row, no bias (a layer of two inputs)
    {300, 264, 72, false, false},  // no bias, partial tiles everywhere
    {64, 32, 16, false, true},     // a residual without a bias
    {300, 520, 136, true, false},  // partial tiles in m and n, k not a tile multiple
    {128, 768, 1024, true, true},  // one sequence of 128 at BERT-base's width: few rows, a long k
    {648, 392, 200, true, true},   // an odd count of 128-row tiles (clusters of two rows) and partial 192-column tiles
};

// The entries for linear with erf-GELU (cuBLASLt's product then the GELU kernel, and every CUTLASS configuration),
// without an activation (cuBLASLt's product with its heuristic's first to fourth algorithms, CUTLASS's small tiles,
// its 128x128 ping-pong tile and its 128x192 cooperative tile), or with tanh-GELU in cuBLASLt's epilogue (its first to
// eighth algorithms: no CUTLASS product has that epilogue), that this build has.
std::vector<std::string> linear_kernels(DataType dtype, const std::string& activation) {
  const std::string prefix = dtype == DataType::kF16 ? "linear_f16_f32acc_" : "linear_bf16_f32acc_";
  std::vector<std::string> names = {prefix + "cublaslt_bias_epilogue"};
  const bool gelu_erf = activation == "gelu_erf";
  if (!gelu_erf) {  // the builder's timed "_algoN" candidates
    const int algorithms = activation == "gelu_tanh" ? 8 : 4;
    for (int algo = 1; algo < algorithms; ++algo) {
      names.push_back(prefix + "cublaslt_bias_epilogue_algo" + std::to_string(algo));
    }
  }
  const std::vector<const char*> gelu_configs = {"coop128x256",     "coop256x128",        "coop128x128",
                                                 "pingpong128x128", "pingpong128x128e64", "pingpong64x128",
                                                 "pingpong64x64"};
  const std::vector<const char*> plain_configs = {"pingpong64x128", "pingpong64x64", "pingpong128x128", "coop128x192"};
  const std::vector<const char*> no_configs;
  for (const char* config : gelu_erf ? gelu_configs : activation == "none" ? plain_configs : no_configs) {
    const std::string name = prefix + "cutlass_sm90_" + config + (gelu_erf ? "_gelu_erf" : "");
    if (find_kernel_entry(name) != nullptr) names.push_back(name);
  }
  return names;
}

// Every kernel of linear_kernels on every case, binding and launch (plain, captured).
void check_every_kernel(const std::string& activation) {
  for (DataType dtype : {DataType::kF16, DataType::kBF16}) {
    const std::vector<std::string> kernels = linear_kernels(dtype, activation);
    // An sm_90 GPU with a build that has CUTLASS runs them all; other GPUs the cuBLASLt ones.
    if (gpu_test::has_gpu(true) && gpu_test::gpu_required()) {
      // erf-GELU: cuBLASLt's and seven CUTLASS products; none: four cuBLASLt and four CUTLASS; tanh-GELU: eight
      // cuBLASLt.
      EXPECT_EQ(kernels.size(), 8u);
    }
    const double limit = dtype == DataType::kF16 ? 2e-3 : 1.2e-2;
    for (const Case& c : kCases) {
      // Once per case: recomputed for every kernel, binding and launch, the reference made this test take 121 s.
      const Run in = make_run(c, dtype, activation);
      for (const std::string& kernel : kernels) {
        if (!gpu_test::has_gpu(true) && kernel.find("cutlass") != std::string::npos) continue;
        for (Binding binding : {Binding::kFixed, Binding::kCaller, Binding::kCallerMisaligned}) {
          for (bool capture : {false, true}) {
            SCOPED_TRACE(kernel + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
                         " binding " + std::to_string(static_cast<int>(binding)) + (capture ? " captured" : ""));
            std::vector<std::uint16_t> y;
            double error = 0;
            run_kernel(kernel, c, in, dtype, activation, binding, capture, y, error);
            EXPECT_LT(error, limit);
          }
        }
      }
    }
  }
}

// The registry's choice of candidates (no GPU needed): the heuristic's second to fourth algorithms for every product,
// its fifth to eighth only for an activation that cuBLASLt's epilogue applies.
TEST(CudaFusedLinear, LaterHeuristicAlgorithmsAreOfferedOnlyForEpilogueActivations) {
  const Case c{256, 384, 512, true, true};
  for (const char* activation : {"none", "gelu_erf", "gelu_tanh", "relu"}) {
    const FusedLinear linear(c, DataType::kF16, activation);
    const bool in_epilogue = std::string(activation) == "gelu_tanh" || std::string(activation) == "relu";
    for (int algo = 1; algo < 8; ++algo) {
      const std::string name = "linear_f16_f32acc_cublaslt_bias_epilogue_algo" + std::to_string(algo);
      SCOPED_TRACE(name + " with activation " + activation);
      const KernelEntry* entry = find_kernel_entry(name);
      ASSERT_NE(entry, nullptr);
      EXPECT_EQ(entry->supports(linear.graph(), linear.layer(), Precision::kFp16), algo < 4 || in_epilogue);
    }
  }
}

TEST(CudaFusedLinear, ErfGeluEpilogueMatchesTheReferenceForEveryKernelAndBinding) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  check_every_kernel("gelu_erf");
}

TEST(CudaFusedLinear, TanhGeluEpilogueMatchesTheReferenceForEveryAlgorithmAndBinding) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  check_every_kernel("gelu_tanh");
}

TEST(CudaFusedLinear, ProductsWithoutActivationMatchTheReferenceForEveryKernelAndBinding) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  check_every_kernel("none");
}

}  // namespace
}  // namespace tensoracle::cuda
