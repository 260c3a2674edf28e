// The f16/bf16 attention entries run directly through the registry (cuDNN's fused attention, the flash kernel, the
// flash kernel with each query tile's keys split between four warps, the row kernel) on the shapes the models give
// them (BERT's and GPT-2's packed Q/K/V at batch 1, grouped heads of dim 128, a decoding row, a padding mask), against
// a double-precision reference of the same rounded operands; the NaN rows and columns of the reference's rules
// (a fully masked row, an inf in v behind a causal mask) exactly; replays in a captured CUDA graph.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
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

float to_float(std::uint16_t bits, DataType dtype) {
  return dtype == DataType::kF16 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits);
}
std::uint16_t from_float(float v, DataType dtype) {
  return dtype == DataType::kF16 ? f32_to_f16_bits(v) : f32_to_bf16_bits(v);
}

struct DeviceBuffer {
  void* base = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { cudaMalloc(&base, bytes + 16); }
  ~DeviceBuffer() { cudaFree(base); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// One attention problem. packed: one [B, S, (hq + 2 hkv)·D] input (sq = skv = S), output [B, S, hq, D]; else bhsd
// q [B, hq, sq, D], k and v [B, hkv, skv, D], output [B, hq, sq, D].
struct Case {
  std::string name;
  std::int64_t b, hq, hkv, sq, skv, d;
  bool packed = false;
  bool causal = false;
  bool padding_mask = false;  // bool mask [B, 1, 1, skv]: batch n attends to its first skv - n - 1 keys
  bool inf_in_v = false;      // v[b=0, kv head 0, key skv/2, column 1] = +inf
};

// Element offsets of (b, h, s, 0) of q, k, v and the output.
struct Layout {
  const Case& c;
  std::int64_t width() const { return (c.hq + 2 * c.hkv) * c.d; }
  std::int64_t q(std::int64_t b, std::int64_t h, std::int64_t s) const {
    return c.packed ? (b * c.sq + s) * width() + h * c.d : ((b * c.hq + h) * c.sq + s) * c.d;
  }
  std::int64_t k(std::int64_t b, std::int64_t h, std::int64_t s) const {
    return c.packed ? (b * c.skv + s) * width() + (c.hq + h) * c.d : ((b * c.hkv + h) * c.skv + s) * c.d;
  }
  std::int64_t v(std::int64_t b, std::int64_t h, std::int64_t s) const {
    return c.packed ? (b * c.skv + s) * width() + (c.hq + c.hkv + h) * c.d : ((b * c.hkv + h) * c.skv + s) * c.d;
  }
  std::int64_t out(std::int64_t b, std::int64_t h, std::int64_t s) const {
    return c.packed ? ((b * c.sq + s) * c.hq + h) * c.d : ((b * c.hq + h) * c.sq + s) * c.d;
  }
  bool attends(std::int64_t b, std::int64_t i, std::int64_t j) const {
    if (c.causal && j > i) return false;
    return !c.padding_mask || j < c.skv - b - 1;
  }
};

// softmax(q·kᵀ/√D + mask)·v in double; masked keys still add 0·v, and a row without keys is NaN (the reference's
// rules, src/backends/cpu/kernels/transformer.cpp).
std::vector<double> reference(const Case& c, const std::vector<std::uint16_t>& qkv,
                              const std::vector<std::uint16_t>& kk, const std::vector<std::uint16_t>& vv,
                              DataType dtype) {
  const Layout at{c};
  const std::vector<std::uint16_t>& q = qkv;
  const std::vector<std::uint16_t>& k = c.packed ? qkv : kk;
  const std::vector<std::uint16_t>& v = c.packed ? qkv : vv;
  const auto val = [&](const std::vector<std::uint16_t>& t, std::int64_t i) {
    return static_cast<double>(to_float(t[static_cast<std::size_t>(i)], dtype));
  };
  std::vector<double> y(static_cast<std::size_t>(c.b * c.hq * c.sq * c.d));
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  std::vector<double> p(static_cast<std::size_t>(c.skv));
  for (std::int64_t b = 0; b < c.b; ++b) {
    for (std::int64_t h = 0; h < c.hq; ++h) {
      const std::int64_t kh = h / (c.hq / c.hkv);
      for (std::int64_t i = 0; i < c.sq; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < c.skv; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < c.d; ++e) s += val(q, at.q(b, h, i) + e) * val(k, at.k(b, kh, j) + e);
          p[static_cast<std::size_t>(j)] = at.attends(b, i, j) ? s * scale : -std::numeric_limits<double>::infinity();
          mx = std::max(mx, p[static_cast<std::size_t>(j)]);
        }
        double sum = 0;
        for (auto& pj : p) {
          pj = std::isinf(mx) ? std::nan("") : std::exp(pj - mx);
          sum += pj;
        }
        for (std::int64_t e = 0; e < c.d; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j < c.skv; ++j)
            acc += p[static_cast<std::size_t>(j)] / sum * val(v, at.v(b, kh, j) + e);
          y[static_cast<std::size_t>(at.out(b, h, i) + e)] = acc;
        }
      }
    }
  }
  return y;
}

// The case's network: its inputs and one attention layer, whose graph the entries read.
class AttentionNet {
 public:
  AttentionNet(const Case& c, DataType dtype) {
    std::vector<Tensor> inputs;
    Attributes attrs;
    if (c.packed) {
      Tensor qkv = net_.add_input("qkv", dtype, {c.b, c.sq, (c.hq + 2 * c.hkv) * c.d});
      inputs = {qkv, qkv, qkv};
      attrs = {{"layout", std::string("packed")}, {"heads", c.hq}, {"kv_heads", c.hkv}};
    } else {
      inputs = {net_.add_input("q", dtype, {c.b, c.hq, c.sq, c.d}),
                net_.add_input("k", dtype, {c.b, c.hkv, c.skv, c.d}),
                net_.add_input("v", dtype, {c.b, c.hkv, c.skv, c.d})};
    }
    if (c.padding_mask) inputs.push_back(net_.add_input("mask", DataType::kBool, {c.b, 1, 1, c.skv}));
    attrs["causal"] = std::int64_t{c.causal ? 1 : 0};
    Tensor y = net_.add_layer("attention", inputs, attrs, "attention")[0];
    net_.mark_output(y, "y");
  }
  const graph::Graph& graph() const { return graph::graph_of(net_); }
  const graph::Layer& layer() const { return graph().layers.back(); }

 private:
  Network net_;
};

// Prepares `kernel` for the case (false: the entry does not take it) and launches it, plainly or captured in a graph
// replayed twice, each time after poisoning the output; returns the output.
bool run_kernel(const std::string& kernel, const Case& c, DataType dtype, bool capture, std::vector<std::uint16_t>& y,
                std::vector<double>& want) {
  const KernelEntry* entry = find_kernel_entry(kernel);
  EXPECT_NE(entry, nullptr) << kernel;
  if (entry == nullptr) return false;
  AttentionNet net(c, dtype);
  if (!entry->supports(net.graph(), net.layer(), Precision::kFp16)) return false;

  std::mt19937 rng(static_cast<unsigned>(c.b * 131 + c.sq * 7 + c.skv + c.d));
  std::uniform_real_distribution<float> dist(-2.0F, 2.0F);
  const auto random = [&](std::int64_t n) {
    std::vector<std::uint16_t> t(static_cast<std::size_t>(n));
    for (auto& x : t) x = from_float(dist(rng), dtype);
    return t;
  };
  const Layout at{c};
  std::vector<std::uint16_t> q, k, v;
  if (c.packed) {
    q = random(c.b * c.sq * at.width());
  } else {
    q = random(c.b * c.hq * c.sq * c.d);
    k = random(c.b * c.hkv * c.skv * c.d);
    v = random(c.b * c.hkv * c.skv * c.d);
  }
  if (c.inf_in_v) (c.packed ? q : v)[static_cast<std::size_t>(at.v(0, 0, c.skv / 2) + 1)] = from_float(INFINITY, dtype);
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(c.b * c.skv));
  for (std::int64_t b = 0; b < c.b; ++b) {
    for (std::int64_t j = 0; j < c.skv; ++j) mask[static_cast<std::size_t>(b * c.skv + j)] = at.attends(b, c.skv, j);
  }
  // The reference once per case and dtype (the inputs are the same for every kernel).
  static std::map<std::string, std::vector<double>> references;
  const std::string key = c.name + (dtype == DataType::kF16 ? "/f16" : "/bf16");
  if (references.count(key) == 0) references[key] = reference(c, q, k, v, dtype);
  want = references[key];

  DeviceBuffer dq(q.size() * 2), dk(k.size() * 2), dv(v.size() * 2), dmask(mask.size()), dy(want.size() * 2);
  EXPECT_EQ(cudaMemcpy(dq.base, q.data(), q.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dk.base, k.data(), k.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dv.base, v.data(), v.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dmask.base, mask.data(), mask.size(), cudaMemcpyHostToDevice), cudaSuccess);

  const graph::Layer& layer = net.layer();
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  StepLaunch launch;
  launch.layer = &layer;
  launch.attrs = &attrs;
  launch.precision = Precision::kFp16;
  const auto tensor = [&](void* data, Dims shape, DataType t = DataType::kF16) {
    DeviceTensor d;
    d.dtype = t == DataType::kBool ? t : dtype;
    d.shape = std::move(shape);
    d.data = data;
    return d;
  };
  if (c.packed) {
    const DeviceTensor qkv = tensor(dq.base, {c.b, c.sq, at.width()});
    launch.inputs = {qkv, qkv, qkv};
    launch.outputs = {tensor(dy.base, {c.b, c.sq, c.hq, c.d})};
  } else {
    launch.inputs = {tensor(dq.base, {c.b, c.hq, c.sq, c.d}), tensor(dk.base, {c.b, c.hkv, c.skv, c.d}),
                     tensor(dv.base, {c.b, c.hkv, c.skv, c.d})};
    launch.outputs = {tensor(dy.base, {c.b, c.hq, c.sq, c.d})};
  }
  if (c.padding_mask) launch.inputs.push_back(tensor(dmask.base, {c.b, 1, 1, c.skv}, DataType::kBool));
  DeviceBuffer workspace(entry->workspace_bytes);
  launch.workspace = entry->workspace_bytes != 0 ? workspace.base : nullptr;
  launch.workspace_bytes = entry->workspace_bytes;
  LibraryHandles handles;
  launch.handles = &handles;
  std::unique_ptr<StepState> state;
  try {
    state = entry->prepare(launch);
  } catch (const Error& e) {
    ADD_FAILURE() << kernel << " did not prepare: " << e.what();
    return false;
  }
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  launch.stream = stream;
  const std::size_t out_bytes = want.size() * 2;
  EXPECT_EQ(cudaMemsetAsync(dy.base, 0x55, out_bytes, stream), cudaSuccess);
  if (capture) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    entry->launch(launch, *state);
    EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(cudaMemsetAsync(dy.base, 0x55, out_bytes, stream), cudaSuccess);
      EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  } else {
    entry->launch(launch, *state);
  }
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  y.resize(want.size());
  EXPECT_EQ(cudaMemcpy(y.data(), dy.base, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return true;
}

const std::vector<Case> kCases = {
    {"bert_b1_packed", 1, 12, 12, 128, 128, 64, true},
    {"gpt2_b1_causal_packed", 1, 12, 12, 512, 512, 64, true, true},
    {"causal_odd_length_inf_in_v", 2, 4, 4, 200, 200, 64, true, true, false, true},
    {"grouped_heads_d128", 2, 8, 2, 37, 70, 128},
    {"causal_d40_more_keys", 1, 3, 1, 45, 45, 40, false, true},
    {"decoding_row", 3, 4, 1, 1, 300, 64},
    {"padding_mask_fully_masked_row", 3, 2, 2, 9, 3, 16, false, false, true},
};

TEST(CudaAttention, EveryHalfPrecisionEntryMatchesTheReference) {
  if (system_info().cuda_devices.empty()) {
    const char* required = std::getenv("TENSORACLE_REQUIRE_GPU");
    if (required != nullptr && std::string(required) == "1") FAIL() << "TENSORACLE_REQUIRE_GPU=1 but no GPU";
    GTEST_SKIP() << "no CUDA GPU on this machine";
  }
  for (DataType dtype : {DataType::kF16, DataType::kBF16}) {
    const std::string t = dtype == DataType::kF16 ? "f16" : "bf16";
    const double limit = dtype == DataType::kF16 ? 2e-3 : 1.5e-2;
    for (const char* suffix : {"cudnn", "flash", "flash_split", "rowwise"}) {
      const std::string kernel = "attention_" + t + "_f32acc_" + std::string(suffix);
      int ran = 0;
      for (const Case& c : kCases) {
        for (bool capture : {false, true}) {
          SCOPED_TRACE(kernel + " " + c.name + (capture ? " captured" : ""));
          std::vector<std::uint16_t> y;
          std::vector<double> want;
          if (!run_kernel(kernel, c, dtype, capture, y, want)) continue;
          ran += capture ? 0 : 1;
          double num = 0, den = 0;
          std::size_t nan_mismatches = 0, nans = 0;
          for (std::size_t i = 0; i < want.size(); ++i) {
            const double got = to_float(y[i], dtype);
            if (!std::isfinite(want[i]) || !std::isfinite(got)) {  // NaN where the reference has NaN, inf as inf
              nans += std::isnan(want[i]) ? 1 : 0;
              nan_mismatches += std::isnan(want[i]) ? (std::isnan(got) ? 0 : 1) : (got == want[i] ? 0 : 1);
              continue;
            }
            num += (got - want[i]) * (got - want[i]);
            den += want[i] * want[i];
          }
          EXPECT_EQ(nan_mismatches, 0u) << "non-finite values that differ (the reference has " << nans << " NaN)";
          EXPECT_LT(std::sqrt(num / den), limit);
          if (c.inf_in_v || c.padding_mask) {
            EXPECT_GT(nans, 0u);  // the case does test the NaN rules
          }
        }
      }
      // Every entry takes the unmasked cases at least (cuDNN's the ones it has a plan for).
      EXPECT_GE(ran, 5) << kernel;
    }
  }
}

}  // namespace
}  // namespace tensoracle::cuda
