// The f16/bf16 attention entries run directly through the registry (cuDNN's fused attention, CUTLASS's Hopper flash
// attention, the flash kernel, the flash kernel with each query tile's keys split between four warps, the row
// kernel) on the shapes the models give
// them (BERT's and GPT-2's packed Q/K/V at batch 1, grouped heads of dim 128, a decoding row, a padding mask), against
// a double-precision reference of the same rounded operands; the NaN rows and columns of the reference's rules
// (a fully masked row, an inf in v behind a causal mask) exactly; replays in a captured CUDA graph, and programmatic
// launches as an sm_90 engine makes them.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "gpu_test.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::cuda {
namespace {

using gpu_test::device_tensor;
using gpu_test::DeviceBuffer;
using gpu_test::EntryLaunch;
using gpu_test::float_to_half;
using gpu_test::half_to_float;
using gpu_test::random_halves;
using gpu_test::run_entry;

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
    return static_cast<double>(half_to_float(t[static_cast<std::size_t>(i)], dtype));
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

// How a case's step is launched: plainly or captured in a graph replayed twice, and with or without the
// programmatic launches of an sm_90 engine (CUTLASS's attention then waits in the kernel, and the causal NaN scan
// after it reads v while it runs).
struct Mode {
  bool capture;
  bool programmatic;
  std::string name() const { return std::string(capture ? " captured" : "") + (programmatic ? " programmatic" : ""); }
};
constexpr Mode kModes[] = {{false, false}, {true, false}, {false, true}, {true, true}};

// Runs `kernel` on the case (false: the entry does not take it) as `mode` says, each time after poisoning the output;
// returns the output and the reference.
bool run_kernel(const std::string& kernel, const Case& c, DataType dtype, Mode mode, std::vector<std::uint16_t>& y,
                std::vector<double>& want) {
  const KernelEntry* entry = find_kernel_entry(kernel);
  EXPECT_NE(entry, nullptr) << kernel;
  if (entry == nullptr) return false;
  AttentionNet net(c, dtype);
  if (!entry->supports(net.graph(), net.layer(), Precision::kFp16)) return false;

  std::mt19937 rng(static_cast<unsigned>(c.b * 131 + c.sq * 7 + c.skv + c.d));
  const Layout at{c};
  std::vector<std::uint16_t> q, k, v;
  if (c.packed) {
    q = random_halves(static_cast<std::size_t>(c.b * c.sq * at.width()), dtype, 2.0F, rng);
  } else {
    q = random_halves(static_cast<std::size_t>(c.b * c.hq * c.sq * c.d), dtype, 2.0F, rng);
    k = random_halves(static_cast<std::size_t>(c.b * c.hkv * c.skv * c.d), dtype, 2.0F, rng);
    v = random_halves(static_cast<std::size_t>(c.b * c.hkv * c.skv * c.d), dtype, 2.0F, rng);
  }
  if (c.inf_in_v) {
    (c.packed ? q : v)[static_cast<std::size_t>(at.v(0, 0, c.skv / 2) + 1)] = float_to_half(INFINITY, dtype);
  }
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(c.b * c.skv));
  for (std::int64_t b = 0; b < c.b; ++b) {
    for (std::int64_t j = 0; j < c.skv; ++j) mask[static_cast<std::size_t>(b * c.skv + j)] = at.attends(b, c.skv, j);
  }
  // The reference once per case and dtype (the inputs are the same for every kernel).
  static std::map<std::string, std::vector<double>> references;
  const std::string key = c.name + (dtype == DataType::kF16 ? "/f16" : "/bf16");
  if (references.count(key) == 0) references[key] = reference(c, q, k, v, dtype);
  want = references[key];

  const DeviceBuffer dq(q.size() * 2), dk(k.size() * 2), dv(v.size() * 2), dmask(mask.size()), dy(want.size() * 2);
  dq.upload(q);
  dk.upload(k);
  dv.upload(v);
  dmask.upload(mask);
  std::vector<DeviceTensor> inputs, outputs;
  if (c.packed) {
    const DeviceTensor qkv = device_tensor(dtype, {c.b, c.sq, at.width()}, dq.base());
    inputs = {qkv, qkv, qkv};
    outputs = {device_tensor(dtype, {c.b, c.sq, c.hq, c.d}, dy.base())};
  } else {
    inputs = {device_tensor(dtype, {c.b, c.hq, c.sq, c.d}, dq.base()),
              device_tensor(dtype, {c.b, c.hkv, c.skv, c.d}, dk.base()),
              device_tensor(dtype, {c.b, c.hkv, c.skv, c.d}, dv.base())};
    outputs = {device_tensor(dtype, {c.b, c.hq, c.sq, c.d}, dy.base())};
  }
  if (c.padding_mask) inputs.push_back(device_tensor(DataType::kBool, {c.b, 1, 1, c.skv}, dmask.base()));
  EntryLaunch how;
  how.capture = mode.capture;
  how.programmatic = mode.programmatic;
  how.before_each = [&](cudaStream_t stream) {
    EXPECT_EQ(cudaMemsetAsync(dy.base(), 0x55, dy.bytes(), stream), cudaSuccess);
  };
  if (!run_entry(kernel, net.graph(), net.layer(), inputs, outputs, how)) return false;
  y = dy.download<std::uint16_t>(want.size());
  return true;
}

const std::vector<Case> kCases = {
    {"bert_b1_packed", 1, 12, 12, 128, 128, 64, true},
    {"gpt2_b1_causal_packed", 1, 12, 12, 512, 512, 64, true, true},
    // More query tiles than a grid of 132 blocks: the causal scheduler's second round, dealt backwards, is partial
    // (192 tiles of 128 queries, 144 of 192).
    {"causal_two_rounds_packed", 4, 12, 12, 512, 512, 64, true, true},
    {"causal_odd_length_inf_in_v", 2, 4, 4, 200, 200, 64, true, true, false, true},
    {"grouped_heads_d128", 2, 8, 2, 37, 70, 128},
    {"causal_d40_more_keys", 1, 3, 1, 45, 45, 40, false, true},
    {"decoding_row", 3, 4, 1, 1, 300, 64},
    {"padding_mask_fully_masked_row", 3, 2, 2, 9, 3, 16, false, false, true},
    // Whole 64- and 128-key tiles (CUTLASS's kernels take them): causal with an inf in v, and head dim 128.
    {"causal_whole_tiles_inf_in_v", 2, 4, 4, 256, 256, 64, false, true, false, true},
    {"more_keys_d128", 2, 4, 4, 64, 256, 128},
    // Key counts that are not whole tiles, unmasked (CUTLASS's kernels mask the last tile's missing keys), and query
    // counts that are not multiples of 8: ViT-B/16's 197 tokens packed, fewer queries than keys at head dim 128.
    {"vit_197_tokens_packed", 2, 12, 12, 197, 197, 64, true},
    {"partial_key_tile_d128", 2, 4, 4, 77, 130, 128},
    // Grouped heads of dim 128, causal and packed: the op-conformance case attention_packed_head_dim_128_bf16, where
    // the flash_split kernel gave rel-L2 0.24 against the CPU reference (an H100, 2026-12-07; the cause is not found,
    // and that kernel is no longer offered above head dim 64), then the same unpacked and unmasked: every other entry
    // runs them.
    {"grouped_heads_causal_packed_d128", 1, 2, 1, 40, 40, 128, true, true},
    {"grouped_heads_causal_d128", 1, 2, 1, 40, 40, 128, false, true},
    {"grouped_heads_packed_d128", 1, 2, 1, 40, 40, 128, true},
};

// One attention entry: a dtype and the kernel's name suffix. Each is its own test (e.g.
// CudaAttention.EveryCaseMatchesTheReference/f16_cutlass_sm90), so that a filter takes one kernel, as a slow
// compute-sanitizer racecheck run needs.
struct Entry {
  DataType dtype;
  std::string suffix;
  std::string kernel() const { return "attention_" + type() + "_f32acc_" + suffix; }
  std::string type() const { return dtype == DataType::kF16 ? "f16" : "bf16"; }
};
void PrintTo(const Entry& entry, std::ostream* os) { *os << entry.kernel(); }

std::vector<Entry> entries() {
  std::vector<Entry> all;
  for (DataType dtype : {DataType::kF16, DataType::kBF16}) {
    for (const char* suffix : {"cudnn", "cutlass_sm90", "cutlass_sm90_pingpong", "cutlass_sm90_pingpong_wide",
                               "cutlass_sm90_pingpong_tall", "flash", "flash_split", "rowwise"}) {
      all.push_back({dtype, suffix});
    }
  }
  return all;
}

class CudaAttention : public ::testing::TestWithParam<Entry> {};

// The registry's offer, without a GPU: the split flash kernel takes static head dims up to 64 only (it failed at 128),
// the plain flash kernel every head dim.
TEST(CudaAttentionOffer, SplitFlashKernelIsOfferedUpToHeadDim64Only) {
  for (const DataType dtype : {DataType::kF16, DataType::kBF16}) {
    const std::string type = dtype == DataType::kF16 ? "f16" : "bf16";
    const KernelEntry* split = find_kernel_entry("attention_" + type + "_f32acc_flash_split");
    const KernelEntry* flash = find_kernel_entry("attention_" + type + "_f32acc_flash");
    ASSERT_NE(split, nullptr);
    ASSERT_NE(flash, nullptr);
    for (const Case& c : kCases) {
      SCOPED_TRACE(type + " " + c.name);
      const AttentionNet net(c, dtype);
      EXPECT_EQ(split->supports(net.graph(), net.layer(), Precision::kFp16), c.d <= 64);
      EXPECT_TRUE(flash->supports(net.graph(), net.layer(), Precision::kFp16));
    }
  }
}

TEST_P(CudaAttention, EveryCaseMatchesTheReference) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  const DataType dtype = GetParam().dtype;
  const std::string suffix = GetParam().suffix;
  const double limit = dtype == DataType::kF16 ? 2e-3 : 1.5e-2;
  const std::string kernel = GetParam().kernel();
  // CUTLASS's kernels: a build with them, on a compute capability 9.0 GPU.
  const bool cutlass = suffix.starts_with("cutlass_sm90");
  if (cutlass && (find_kernel_entry(kernel) == nullptr || !gpu_test::has_gpu(true))) {
    GTEST_SKIP() << kernel << ": not in this build, or no compute capability 9.0 GPU";
  }
  int ran = 0;
  for (const Case& c : kCases) {
    for (const Mode& mode : kModes) {
      SCOPED_TRACE(kernel + " " + c.name + mode.name());
      std::vector<std::uint16_t> y;
      std::vector<double> want;
      // CUTLASS's entry says when it leaves a problem to the flash kernel; the whole-tile cases must not be left.
      std::vector<std::string> declined;
      set_log_callback([&](LogSeverity, std::string_view message) {
        if (message.find("CUTLASS's sm_90 attention does not take") != std::string_view::npos) {
          declined.emplace_back(message);
        }
      });
      const LogSeverity level = log_level();
      set_log_level(LogSeverity::kVerbose);
      const bool ran_case = run_kernel(kernel, c, dtype, mode, y, want);
      set_log_level(level);
      set_log_callback(nullptr);
      // CUTLASS's kernels take head dims 64 and 128 (the wide and tall ones 64), any key count unmasked, whole key
      // tiles (64 keys at head dim 64, 128 at 128 and in the wide and tall kernels) causal.
      const bool d64_only = suffix.ends_with("_wide") || suffix.ends_with("_tall");
      const std::int64_t key_tile = c.d == 64 && !d64_only ? 64 : 128;
      if (cutlass && (c.d == 64 || (c.d == 128 && !d64_only)) && c.hq == c.hkv && !c.padding_mask &&
          (!c.causal || c.skv % key_tile == 0)) {
        EXPECT_TRUE(declined.empty()) << declined.front();
      }
      if (!ran_case) continue;
      ran += mode.capture || mode.programmatic ? 0 : 1;
      double num = 0, den = 0;
      std::size_t nan_mismatches = 0, nans = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        const double got = half_to_float(y[i], dtype);
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

std::string entry_test_name(const ::testing::TestParamInfo<Entry>& entry) {
  return entry.param.type() + "_" + entry.param.suffix;
}

// No prefix: the tests are CudaAttention.EveryCaseMatchesTheReference/<dtype>_<suffix>.
INSTANTIATE_TEST_SUITE_P(, CudaAttention, ::testing::ValuesIn(entries()), entry_test_name);

}  // namespace
}  // namespace tensoracle::cuda
