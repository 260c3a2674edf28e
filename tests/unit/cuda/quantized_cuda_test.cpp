// The quantized kernels run directly through their registry entries: every quantized_linear entry (the tiled kernel
// and CUTLASS's sm_90 i8 and e4m3 products, f16 results and results quantized again; the weight-only form's
// dequantized product and rows kernel) against a double-precision
// reference of the same quantized operands, with fixed and caller-bound (also misaligned) buffers; the vector quantize
// kernels (f32 math) bit for bit against the element kernels (f64 math), exact ties and specials included; both
// quantized_conv entries
// against a double reference.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "gpu_test.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle::cuda {
namespace {

using gpu_test::DeviceBuffer;
using gpu_test::has_gpu;

// One step of `kernel` for the network's last layer with `workspace_bytes` of scratch: prepared with the given device
// tensors (the caller-bound ones unbound), bound, launched on a stream and synchronized.
void run_step(const std::string& kernel, const Network& net, std::vector<DeviceTensor> inputs,
              std::vector<DeviceTensor> outputs, std::size_t workspace_bytes = 0) {
  const graph::Graph& g = graph::graph_of(net);
  gpu_test::EntryLaunch how;
  how.workspace_bytes = workspace_bytes;
  gpu_test::run_entry(kernel, g, g.layers.back(), std::move(inputs), std::move(outputs), how);
}

DeviceTensor tensor(DataType dtype, Dims shape, void* data, bool caller) {
  return gpu_test::device_tensor(dtype, std::move(shape), data, caller);
}

// ---- quantized_linear ----

enum class Binding { kFixed, kCaller, kCallerMisaligned };

// The quantized grid's value nearest v (i8: half to even, saturating; e4m3: saturating at ±448), as its byte.
std::uint8_t quantize_host(DataType type, double v) {
  if (type == DataType::kI8) {
    const double r = std::nearbyint(std::fmax(-128.0, std::fmin(127.0, v)));
    return static_cast<std::uint8_t>(static_cast<std::int8_t>(r));
  }
  return f32_to_f8e4m3_bits(static_cast<float>(std::fmax(-448.0, std::fmin(448.0, v))));
}

// How many grid steps apart two quantized bytes are (i8: their difference; e4m3 codes of one sign are ordered by
// magnitude, so the difference of their 7-bit magnitudes, or their sum across zero). e4m3 values less than 2^-3 apart
// (in units of the output scale, about 1e-3 of the typical result here) count as one step at most: near zero e4m3's
// steps are finer than the sum's own accuracy (Hopper's tensor cores add FP8 products with fewer bits than f32 within
// a K tile, before CUTLASS promotes the partial sum to f32).
int steps_apart(DataType type, std::uint8_t a, std::uint8_t b) {
  if (type == DataType::kI8) return std::abs(static_cast<std::int8_t>(a) - static_cast<std::int8_t>(b));
  const int ma = a & 0x7F, mb = b & 0x7F;
  const int steps = (a & 0x80) == (b & 0x80) ? std::abs(ma - mb) : ma + mb;
  return std::fabs(f8e4m3_bits_to_f32(a) - f8e4m3_bits_to_f32(b)) <= 0x1p-3F ? std::min(steps, 1) : steps;
}

// Random bytes of a quantized type (i8 uniform in ±127, e4m3 the grid values of a uniform draw in ±240), and the
// values they stand for.
struct QuantizedDraws {
  DataType type;
  std::mt19937& rng;
  std::vector<std::uint8_t> operator()(std::size_t count) {
    std::uniform_int_distribution<int> i8(-127, 127);
    std::uniform_real_distribution<float> f8(-240.F, 240.F);
    std::vector<std::uint8_t> v(count);
    for (auto& b : v) {
      b = type == DataType::kI8 ? static_cast<std::uint8_t>(static_cast<std::int8_t>(i8(rng)))
                                : f32_to_f8e4m3_bits(f8(rng));
    }
    return v;
  }
  double value(std::uint8_t b) const {
    return type == DataType::kI8 ? static_cast<double>(static_cast<std::int8_t>(b)) : f8e4m3_bits_to_f32(b);
  }
};

// gelu_erf(scale[n] · Σ x·w + b[n] + r) over m x n x k quantized operands (r f16, or absent without `with_residual`:
// the CUTLASS products without C). An f16 result: returns rel-L2 against double. A result quantized again
// (`quantized_output`, by output scale 4/127 or 4/448): expects every element within one step of the double value's
// quantization and returns the fraction not equal to it.
double quantized_linear_error(const std::string& kernel, DataType type, std::int64_t m, std::int64_t n, std::int64_t k,
                              Binding binding, bool quantized_output, bool with_residual) {
  std::mt19937 rng(static_cast<unsigned>(m * 7 + n * 3 + k));
  std::uniform_real_distribution<float> unit(-1.F, 1.F);
  QuantizedDraws quantized{type, rng};
  const auto value = [&](std::uint8_t b) { return quantized.value(b); };
  const auto mk = static_cast<std::size_t>(m * k), nk = static_cast<std::size_t>(n * k),
             mn = static_cast<std::size_t>(m * n);
  const std::vector<std::uint8_t> x = quantized(mk), w = quantized(nk);
  const double typical = type == DataType::kI8 ? 73.0 * 73.0 : 140.0 * 140.0;  // |x·w| per term, roughly
  std::vector<float> scale(static_cast<std::size_t>(n));
  for (auto& s : scale) s = static_cast<float>((1.5 + unit(rng)) / (typical * std::sqrt(static_cast<double>(k))));
  std::vector<std::uint16_t> bias(static_cast<std::size_t>(n)), residual(mn);
  for (auto& b : bias) b = f32_to_f16_bits(0.5F * unit(rng));
  for (auto& r : residual) r = f32_to_f16_bits(unit(rng));

  Network net;
  Tensor tx = net.add_input("x", type, {m, k});
  Tensor tw = net.add_constant_copy(type, {n, k}, w.data(), "w");
  Tensor ts = net.add_constant_copy(DataType::kF32, {n}, scale.data(), "s");
  Tensor tb = net.add_constant_copy(DataType::kF16, {n}, bias.data(), "b");
  Tensor tr = with_residual ? net.add_input("r", DataType::kF16, {m, n}) : Tensor{};
  const std::vector<float> output_scale = {type == DataType::kI8 ? 4.F / 127 : 4.F / 448};
  std::vector<Tensor> inputs = {tx, tw, ts, tb, tr};
  Attributes attrs = {{"to", std::string("f16")}, {"activation", std::string("gelu_erf")}};
  if (quantized_output) {
    inputs.push_back(net.add_constant_copy(DataType::kF32, {}, output_scale.data(), "so"));
    attrs["quantize_to"] = std::string(to_string(type));
  }
  net.mark_output(net.add_layer("quantized_linear", inputs, attrs, "fc")[0], "y");

  const std::size_t out_bytes = quantized_output ? 1 : 2;
  DeviceBuffer dx(mk), dw(nk), ds(scale.size() * 4), db(bias.size() * 2), dr(mn * 2), dso(4), dy(mn * out_bytes);
  dx.upload(x);
  dw.upload(w);
  ds.upload(scale);
  db.upload(bias);
  dr.upload(residual);
  dso.upload(output_scale);
  // f16 NaN, e4m3 NaN, i8 -128 (below any GELU result here): an unwritten element fails.
  const int unwritten = quantized_output && type == DataType::kI8 ? 0x80 : 0xFF;
  EXPECT_EQ(cudaMemset(dy.base(), unwritten, mn * out_bytes + 64), cudaSuccess);
  const bool caller = binding != Binding::kFixed;
  void* y = dy.at(binding == Binding::kCallerMisaligned ? out_bytes : 0);
  std::vector<DeviceTensor> device_inputs = {
      tensor(type, {m, k}, dx.base(), caller), tensor(type, {n, k}, dw.base(), false),
      tensor(DataType::kF32, {n}, ds.base(), false), tensor(DataType::kF16, {n}, db.base(), false),
      with_residual ? tensor(DataType::kF16, {m, n}, dr.base(), caller) : tensor(DataType::kF32, {}, nullptr, false)};
  if (quantized_output) device_inputs.push_back(tensor(DataType::kF32, {}, dso.base(), false));
  run_step(kernel, net, device_inputs, {tensor(quantized_output ? type : DataType::kF16, {m, n}, y, caller)});
  std::vector<std::uint16_t> got(mn);
  std::vector<std::uint8_t> got_quantized(mn);
  EXPECT_EQ(cudaMemcpy(quantized_output ? static_cast<void*>(got_quantized.data()) : static_cast<void*>(got.data()), y,
                       mn * out_bytes, cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::int64_t different = 0;
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        sum += value(x[static_cast<std::size_t>(i * k + p)]) * value(w[static_cast<std::size_t>(j * k + p)]);
      }
      const auto o = static_cast<std::size_t>(i * n + j);
      double v = sum * scale[static_cast<std::size_t>(j)] + f16_bits_to_f32(bias[static_cast<std::size_t>(j)]) +
                 (with_residual ? f16_bits_to_f32(residual[o]) : 0.0);
      v = 0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440));
      if (quantized_output) {
        const std::uint8_t want = quantize_host(type, v / output_scale[0]);
        const int apart = steps_apart(type, got_quantized[o], want);
        EXPECT_LE(apart, 1) << "at " << i << ", " << j << ": got byte " << int{got_quantized[o]} << ", want "
                            << int{want};
        if (apart > 1) return std::numeric_limits<double>::infinity();
        different += apart;
        continue;
      }
      const double g = f16_bits_to_f32(got[o]);
      if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
      num += (g - v) * (g - v);
      den += v * v;
    }
  }
  return quantized_output ? static_cast<double>(different) / static_cast<double>(mn) : std::sqrt(num / den);
}

struct Entry {
  const char* name;
  DataType type;
  bool sm90;
};

// Every entry (the sm_90 ones on an sm_90 GPU of a build that has them) with fixed, caller and misaligned caller
// buffers, partial tiles in m and n and several K tiles, with a residual and without: quantized_linear_error below
// `limit(type)`.
template <typename Limit>
void check_entries(const std::vector<Entry>& entries, std::int64_t n, bool quantized_output, Limit limit) {
  for (const auto& e : entries) {
    if (e.sm90 && (!has_gpu(true) || find_kernel_entry(e.name) == nullptr)) continue;
    for (bool with_residual : {true, false}) {
      for (Binding binding : {Binding::kFixed, Binding::kCaller, Binding::kCallerMisaligned}) {
        SCOPED_TRACE(std::string(e.name) + " " + std::string(to_string(e.type)) + " binding " +
                     std::to_string(static_cast<int>(binding)) + (with_residual ? " residual" : " no residual"));
        EXPECT_LT(quantized_linear_error(e.name, e.type, 200, n, 512, binding, quantized_output, with_residual),
                  limit(e.type));
      }
    }
  }
}

TEST(CudaQuantizedLinear, EveryEntryComputesTheQuantizedProduct) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  check_entries(
      {
          {"quantized_linear_any_tiled", DataType::kI8, false},
          {"quantized_linear_any_tiled", DataType::kF8E4M3, false},
          {"quantized_linear_i8_f16_cutlass_sm90_coop128x256", DataType::kI8, true},
          {"quantized_linear_i8_f16_cutlass_sm90_pingpong128x128", DataType::kI8, true},
          {"quantized_linear_f8e4m3_f16_cutlass_sm90_coop128x256", DataType::kF8E4M3, true},
          {"quantized_linear_f8e4m3_f16_cutlass_sm90_coop128x128", DataType::kF8E4M3, true},
      },
      136, false, [](DataType) { return 2e-3; });
}

TEST(CudaQuantizedLinear, EveryEntryQuantizesItsResultAgain) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  // Within one step everywhere (checked inside). i8 (an exact i32 sum): one step off only where the f32 epilogue value
  // lies within its rounding of a boundary, a few in ten thousand at most. e4m3: also where the sum's accuracy is
  // coarser than the grid near zero (steps_apart), a few percent.
  check_entries(
      {
          {"quantized_linear_any_tiled", DataType::kI8, false},
          {"quantized_linear_any_tiled", DataType::kF8E4M3, false},
          {"quantized_linear_i8_i8_cutlass_sm90_coop128x256", DataType::kI8, true},
          {"quantized_linear_i8_i8_cutlass_sm90_pingpong128x128", DataType::kI8, true},
          {"quantized_linear_f8e4m3_f8e4m3_cutlass_sm90_coop128x128", DataType::kF8E4M3, true},
      },
      144, true, [](DataType type) { return type == DataType::kI8 ? 1e-3 : 5e-2; });
}

// ---- quantized_linear, weight-only ----

// gelu_erf(scale[n] · Σ x·w + b[n] + r) of a float x (f16, bf16 or f32) and an i8 or e4m3 weight, the result in x's
// type (r absent without `with_residual`); rel-L2 against double of the same x and weight. The step gets 64 MiB of
// scratch (the dequantized product's weight and cuBLASLt's).
double weight_only_error(const std::string& kernel, DataType weight_type, DataType x_type, std::int64_t m,
                         std::int64_t n, std::int64_t k, Binding binding, bool with_residual) {
  std::mt19937 rng(static_cast<unsigned>(m * 7 + n * 3 + k));
  std::uniform_real_distribution<float> unit(-1.F, 1.F);
  const auto mk = static_cast<std::size_t>(m * k), nk = static_cast<std::size_t>(n * k),
             mn = static_cast<std::size_t>(m * n);
  const std::size_t x_bytes = element_size(x_type);
  // x's values rounded to its type, and their bytes (f16 / bf16 bits, or f32).
  std::vector<double> xv(mk), rv(mn), bv(static_cast<std::size_t>(n));
  auto encode = [&](std::vector<double>& values, float spread) {
    std::vector<std::uint8_t> bytes(values.size() * x_bytes);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float f = spread * unit(rng);
      if (x_type == DataType::kF16) {
        const std::uint16_t h = f32_to_f16_bits(f);
        values[i] = f16_bits_to_f32(h);
        std::memcpy(&bytes[i * 2], &h, 2);
      } else if (x_type == DataType::kBF16) {
        const std::uint16_t h = f32_to_bf16_bits(f);
        values[i] = bf16_bits_to_f32(h);
        std::memcpy(&bytes[i * 2], &h, 2);
      } else {
        values[i] = f;
        std::memcpy(&bytes[i * 4], &f, 4);
      }
    }
    return bytes;
  };
  const std::vector<std::uint8_t> x = encode(xv, 2.F), bias = encode(bv, 0.5F), residual = encode(rv, 1.F);
  QuantizedDraws quantized{weight_type, rng};
  const std::vector<std::uint8_t> w = quantized(nk);
  const auto value = [&](std::uint8_t b) { return quantized.value(b); };
  const double typical = weight_type == DataType::kI8 ? 73.0 : 140.0;  // |w| per term, roughly
  std::vector<float> scale(static_cast<std::size_t>(n));
  for (auto& s : scale) s = static_cast<float>((1.5 + unit(rng)) / (typical * std::sqrt(static_cast<double>(k))));

  Network net;
  Tensor tx = net.add_input("x", x_type, {m, k});
  Tensor tw = net.add_constant_copy(weight_type, {n, k}, w.data(), "w");
  Tensor ts = net.add_constant_copy(DataType::kF32, {n}, scale.data(), "s");
  Tensor tb = net.add_constant_copy(x_type, {n}, bias.data(), "b");
  Tensor tr = with_residual ? net.add_input("r", x_type, {m, n}) : Tensor{};
  const Attributes attrs = {{"to", std::string(to_string(x_type))}, {"activation", std::string("gelu_erf")}};
  net.mark_output(net.add_layer("quantized_linear", {tx, tw, ts, tb, tr}, attrs, "fc")[0], "y");

  DeviceBuffer dx(x.size()), dw(nk), ds(scale.size() * 4), db(bias.size()), dr(residual.size()), dy(mn * x_bytes);
  dx.upload(x);
  dw.upload(w);
  ds.upload(scale);
  db.upload(bias);
  dr.upload(residual);
  EXPECT_EQ(cudaMemset(dy.base(), 0xFF, mn * x_bytes + 64), cudaSuccess);  // NaN: an unwritten element fails
  const bool caller = binding != Binding::kFixed;
  // Misaligned: x and y one element past 16 bytes (the rows kernel's scalar loads of x).
  const std::size_t offset = binding == Binding::kCallerMisaligned ? x_bytes : 0;
  void* xp = dx.at(offset);
  void* y = dy.at(offset);
  if (offset != 0) {
    EXPECT_EQ(cudaMemcpy(xp, x.data(), x.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  run_step(kernel, net,
           {tensor(x_type, {m, k}, xp, caller), tensor(weight_type, {n, k}, dw.base(), false),
            tensor(DataType::kF32, {n}, ds.base(), false), tensor(x_type, {n}, db.base(), false),
            with_residual ? tensor(x_type, {m, n}, dr.base(), caller) : tensor(DataType::kF32, {}, nullptr, false)},
           {tensor(x_type, {m, n}, y, caller)}, std::size_t{64} << 20);
  std::vector<std::uint8_t> got(mn * x_bytes);
  EXPECT_EQ(cudaMemcpy(got.data(), y, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        sum += xv[static_cast<std::size_t>(i * k + p)] * value(w[static_cast<std::size_t>(j * k + p)]);
      }
      const auto o = static_cast<std::size_t>(i * n + j);
      double v =
          sum * scale[static_cast<std::size_t>(j)] + bv[static_cast<std::size_t>(j)] + (with_residual ? rv[o] : 0.0);
      v = 0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440));
      double g = 0;
      if (x_type == DataType::kF32) {
        float f = 0;
        std::memcpy(&f, &got[o * 4], 4);
        g = f;
      } else {
        std::uint16_t h = 0;
        std::memcpy(&h, &got[o * 2], 2);
        g = x_type == DataType::kF16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
      }
      if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
      num += (g - v) * (g - v);
      den += v * v;
    }
  }
  return std::sqrt(num / den);
}

// Every form (the dequantized cuBLASLt product, the rows kernel and the tensor-core kernel, f16 and bf16 x only) for
// one row, a few and many (partial groups of rows and of features; for the tensor-core kernel, a misaligned x runs
// the rows kernel), every x type and weight type, fixed, caller and misaligned caller buffers, with a residual
// and without. The dequantized product also takes a K that is no multiple of 8 (its dequantize element by element).
TEST(CudaQuantizedLinear, WeightOnlyEntriesComputeTheProductOfTheFloatXAndTheQuantizedWeight) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  struct Shape {
    std::int64_t m, n, k;
  };
  for (const char* kernel :
       {"quantized_linear_weight_only_dequantized_cublaslt", "quantized_linear_weight_only_dequantized_cublaslt_algo1",
        "quantized_linear_weight_only_rows", "quantized_linear_weight_only_mma",
        "quantized_linear_weight_only_mma_rows8"}) {
    const bool rows = std::string(kernel) == "quantized_linear_weight_only_rows";
    const bool mma = std::string(kernel).rfind("quantized_linear_weight_only_mma", 0) == 0;
    for (DataType weight_type : {DataType::kI8, DataType::kF8E4M3}) {
      for (DataType x_type : {DataType::kF16, DataType::kBF16, DataType::kF32}) {
        if (mma && x_type == DataType::kF32) continue;
        for (const Shape& shape : {Shape{1, 70, 256}, Shape{3, 72, 512}, Shape{37, 70, 128}, Shape{12, 40, 64},
                                   Shape{6, 24, 40}, Shape{5, 24, 36}}) {
          if ((rows && shape.k % 8 != 0) || (mma && shape.k % 64 != 0)) continue;
          for (Binding binding : {Binding::kFixed, Binding::kCaller, Binding::kCallerMisaligned}) {
            for (bool with_residual : {true, false}) {
              SCOPED_TRACE(fmt::format("{} w {} x {} m {} n {} k {} binding {}{}", kernel, to_string(weight_type),
                                       to_string(x_type), shape.m, shape.n, shape.k, static_cast<int>(binding),
                                       with_residual ? " residual" : ""));
              const double limit = x_type == DataType::kF32 ? 1e-5 : x_type == DataType::kF16 ? 2e-3 : 1.2e-2;
              EXPECT_LT(
                  weight_only_error(kernel, weight_type, x_type, shape.m, shape.n, shape.k, binding, with_residual),
                  limit);
            }
          }
        }
      }
    }
  }
}

// ---- quantized_conv ----

// relu(scale[o] · conv3x3(x, w) + b[o] + r) of n x 8 x 8 x c quantized x (padding 1, stride 1) and c -> o filters,
// channels last or first. An f16 result: returns rel-L2 against double. A result quantized again (by output scale
// 4/127 or 4/448): expects every element within one step of the double value's quantization and returns the fraction
// not equal to it. With quantized_residual, r is of x's type times a residual scale (input 6); without with_residual
// there is none. A pointwise layer is 1x1 (no padding) over 9 x 9 positions.
double quantized_conv_error(const std::string& kernel, DataType type, bool nhwc, Binding binding,
                            bool quantized_output = false, bool quantized_residual = false, bool pointwise = false,
                            bool with_residual = true) {
  const std::int64_t n = 2, c = 32, hw = pointwise ? 9 : 8, o = 48, k = pointwise ? 1 : 3, pad = k / 2;
  std::mt19937 rng(static_cast<unsigned>(c + o + (nhwc ? 1 : 0)));
  std::uniform_real_distribution<float> unit(-1.F, 1.F);
  QuantizedDraws quantized{type, rng};
  const auto value = [&](std::uint8_t b) { return quantized.value(b); };
  const auto xs = static_cast<std::size_t>(n * c * hw * hw), ws = static_cast<std::size_t>(o * c * k * k),
             ys = static_cast<std::size_t>(n * o * hw * hw);
  const std::vector<std::uint8_t> x = quantized(xs), w = quantized(ws);
  const double typical = type == DataType::kI8 ? 73.0 * 73.0 : 140.0 * 140.0;
  std::vector<float> scale(static_cast<std::size_t>(o));
  for (auto& s : scale)
    s = static_cast<float>((1.5 + unit(rng)) / (typical * std::sqrt(static_cast<double>(c * k * k))));
  std::vector<std::uint16_t> bias(static_cast<std::size_t>(o)), residual(ys);
  for (auto& b : bias) b = f32_to_f16_bits(0.5F * unit(rng));
  for (auto& r : residual) r = f32_to_f16_bits(unit(rng));
  const std::vector<std::uint8_t> residual_q = quantized(ys);
  const std::vector<float> residual_scale = {type == DataType::kI8 ? 1.F / 127 : 1.F / 240};
  const DataType residual_type = quantized_residual ? type : DataType::kF16;
  auto residual_at = [&](std::size_t i) {
    if (!with_residual) return 0.0;
    return quantized_residual ? value(residual_q[i]) * residual_scale[0] : f16_bits_to_f32(residual[i]);
  };
  // Index of (batch, channel, row, column) in either layout.
  auto at = [&](std::int64_t b, std::int64_t ch, std::int64_t channels, std::int64_t i, std::int64_t j) {
    return static_cast<std::size_t>(nhwc ? ((b * hw + i) * hw + j) * channels + ch
                                         : ((b * channels + ch) * hw + i) * hw + j);
  };
  auto weight_at = [&](std::int64_t oc, std::int64_t ch, std::int64_t i, std::int64_t j) {
    return static_cast<std::size_t>(nhwc ? ((oc * k + i) * k + j) * c + ch : ((oc * c + ch) * k + i) * k + j);
  };
  const Dims x_shape = nhwc ? Dims{n, hw, hw, c} : Dims{n, c, hw, hw};
  const Dims w_shape = nhwc ? Dims{o, k, k, c} : Dims{o, c, k, k};
  const Dims y_shape = nhwc ? Dims{n, hw, hw, o} : Dims{n, o, hw, hw};

  Network net;
  Tensor tx = net.add_input("x", type, x_shape);
  Tensor tw = net.add_constant_copy(type, w_shape, w.data(), "w");
  Tensor ts = net.add_constant_copy(DataType::kF32, {o}, scale.data(), "s");
  Tensor tb = net.add_constant_copy(DataType::kF16, {o}, bias.data(), "b");
  Tensor tr = with_residual ? net.add_input("r", residual_type, y_shape) : Tensor{};
  const Attributes attrs = {{"to", std::string("f16")},
                            {"activation", std::string("relu")},
                            {"padding", std::vector<std::int64_t>{pad, pad}},
                            {"layout", std::string(nhwc ? "nhwc" : "nchw")}};
  std::vector<Tensor> inputs = {tx, tw, ts, tb, tr};
  Attributes layer_attrs = attrs;
  const std::vector<float> output_scale = {type == DataType::kI8 ? 4.F / 127 : 4.F / 448};
  if (quantized_output) {
    inputs.push_back(net.add_constant_copy(DataType::kF32, {}, output_scale.data(), "so"));
    layer_attrs["quantize_to"] = std::string(to_string(type));
  }
  if (quantized_residual && with_residual) {
    if (!quantized_output) inputs.emplace_back();
    inputs.push_back(net.add_constant_copy(DataType::kF32, {}, residual_scale.data(), "sr"));
  }
  net.mark_output(net.add_layer("quantized_conv", inputs, layer_attrs, "conv")[0], "y");

  const std::size_t out_bytes = quantized_output ? 1 : 2;
  DeviceBuffer dx(xs), dw(ws), ds(scale.size() * 4), db(bias.size() * 2), dr(ys * 2), dso(4), dsr(4),
      dy(ys * out_bytes);
  dx.upload(x);
  dw.upload(w);
  ds.upload(scale);
  db.upload(bias);
  if (quantized_residual) {
    dr.upload(residual_q);
  } else {
    dr.upload(residual);
  }
  dso.upload(output_scale);
  dsr.upload(residual_scale);
  // f16 NaN, e4m3 NaN, i8 -128 (below any relu result): an unwritten element fails.
  const int unwritten = quantized_output && type == DataType::kI8 ? 0x80 : 0xFF;
  EXPECT_EQ(cudaMemset(dy.base(), unwritten, ys * out_bytes + 64), cudaSuccess);
  const bool caller = binding != Binding::kFixed;
  void* y = dy.at(binding == Binding::kCallerMisaligned ? out_bytes : 0);
  std::vector<DeviceTensor> device_inputs = {
      tensor(type, x_shape, dx.base(), caller), tensor(type, w_shape, dw.base(), false),
      tensor(DataType::kF32, {o}, ds.base(), false), tensor(DataType::kF16, {o}, db.base(), false),
      with_residual ? tensor(residual_type, y_shape, dr.base(), caller) : tensor(DataType::kF32, {}, nullptr, false)};
  if (quantized_output) device_inputs.push_back(tensor(DataType::kF32, {}, dso.base(), false));
  if (quantized_residual && with_residual) {
    if (!quantized_output) device_inputs.push_back(tensor(DataType::kF32, {}, nullptr, false));
    device_inputs.push_back(tensor(DataType::kF32, {}, dsr.base(), false));
  }
  run_step(kernel, net, device_inputs, {tensor(quantized_output ? type : DataType::kF16, y_shape, y, caller)});
  std::vector<std::uint16_t> got(ys);
  std::vector<std::uint8_t> got_quantized(ys);
  EXPECT_EQ(cudaMemcpy(quantized_output ? static_cast<void*>(got_quantized.data()) : static_cast<void*>(got.data()), y,
                       ys * out_bytes, cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::int64_t different = 0;
  double num = 0, den = 0;
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t oc = 0; oc < o; ++oc) {
      for (std::int64_t i = 0; i < hw; ++i) {
        for (std::int64_t j = 0; j < hw; ++j) {
          double sum = 0;
          for (std::int64_t ch = 0; ch < c; ++ch) {
            for (std::int64_t a = 0; a < k; ++a) {
              for (std::int64_t e = 0; e < k; ++e) {
                const std::int64_t ii = i - pad + a, jj = j - pad + e;
                if (ii < 0 || ii >= hw || jj < 0 || jj >= hw) continue;
                sum += value(x[at(b, ch, c, ii, jj)]) * value(w[weight_at(oc, ch, a, e)]);
              }
            }
          }
          const std::size_t out = at(b, oc, o, i, j);
          double v = sum * scale[static_cast<std::size_t>(oc)] + f16_bits_to_f32(bias[static_cast<std::size_t>(oc)]) +
                     residual_at(out);
          v = v < 0 ? 0 : v;
          if (quantized_output) {
            const std::uint8_t want = quantize_host(type, v / output_scale[0]);
            const int apart = steps_apart(type, got_quantized[out], want);
            EXPECT_LE(apart, 1) << "at " << b << ", " << oc << ", " << i << ", " << j << ": got byte "
                                << int{got_quantized[out]} << ", want " << int{want};
            if (apart > 1) return std::numeric_limits<double>::infinity();
            different += apart;
            continue;
          }
          const double g = f16_bits_to_f32(got[out]);
          if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
          num += (g - v) * (g - v);
          den += v * v;
        }
      }
    }
  }
  return quantized_output ? static_cast<double>(different) / static_cast<double>(ys) : std::sqrt(num / den);
}

TEST(CudaQuantizedConv, EveryEntryComputesTheQuantizedConvolution) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  // cuDNN (channels last: a plan; channels first, and misaligned caller buffers: the direct kernel behind it) and the
  // direct kernel as an entry of its own (channels first only).
  for (const char* kernel : {"quantized_conv_any_cudnn", "quantized_conv_any_direct"}) {
    for (DataType type : {DataType::kI8, DataType::kF8E4M3}) {
      for (bool nhwc : {true, false}) {
        if (nhwc && std::string(kernel) == "quantized_conv_any_direct") continue;
        for (Binding binding : {Binding::kFixed, Binding::kCaller, Binding::kCallerMisaligned}) {
          SCOPED_TRACE(std::string(kernel) + " " + std::string(to_string(type)) + (nhwc ? " nhwc" : " nchw") +
                       " binding " + std::to_string(static_cast<int>(binding)));
          EXPECT_LT(quantized_conv_error(kernel, type, nhwc, binding), 2e-3);
        }
      }
    }
  }
}

TEST(CudaQuantizedConv, EveryEntryAddsAQuantizedResidual) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  // An f16 result and one quantized again, each with the residual read quantized (i8 or e4m3 times its scale).
  for (const char* kernel : {"quantized_conv_any_cudnn", "quantized_conv_any_direct"}) {
    for (DataType type : {DataType::kI8, DataType::kF8E4M3}) {
      for (bool quantized_output : {false, true}) {
        for (Binding binding : {Binding::kFixed, Binding::kCallerMisaligned}) {
          SCOPED_TRACE(std::string(kernel) + " " + std::string(to_string(type)) +
                       (quantized_output ? " quantized result" : " f16 result") + " binding " +
                       std::to_string(static_cast<int>(binding)));
          const bool nhwc = std::string(kernel) == "quantized_conv_any_cudnn";
          const double limit = quantized_output ? (type == DataType::kI8 ? 1e-3 : 5e-2) : 2e-3;
          EXPECT_LT(quantized_conv_error(kernel, type, nhwc, binding, quantized_output, true), limit);
        }
      }
    }
  }
}

TEST(CudaQuantizedConv, CutlassTakesPointwiseI8ConvolutionsWithTheirResiduals) {
  if (!has_gpu(true)) GTEST_SKIP() << "no sm_90 GPU";
  // i8 1x1 convolutions as CUTLASS products: 162 positions (a partial row tile), 48 filters (a partial column tile),
  // the residual i8 times its scale, f16, or absent, caller buffers planned again at each enqueue (misaligned ones: the
  // direct kernel).
  const char* kernel = "quantized_conv_i8_1x1_cutlass_sm90_coop128x256";
  for (const char* residual : {"i8", "f16", "none"}) {
    for (Binding binding : {Binding::kFixed, Binding::kCaller, Binding::kCallerMisaligned}) {
      SCOPED_TRACE(std::string("residual ") + residual + " binding " + std::to_string(static_cast<int>(binding)));
      const bool with_residual = std::string(residual) != "none", quantized = std::string(residual) == "i8";
      EXPECT_LT(quantized_conv_error(kernel, DataType::kI8, true, binding, true, quantized, true, with_residual), 1e-3);
    }
  }
}

TEST(CudaQuantizedConv, EveryEntryQuantizesItsResultAgain) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  // Within one step everywhere (checked inside); one step off only where the f32 value lies within its rounding of a
  // boundary (i8: a few in ten thousand), or for e4m3 where the f32 sum is coarser than the grid near zero.
  for (const char* kernel : {"quantized_conv_any_cudnn", "quantized_conv_any_direct"}) {
    for (DataType type : {DataType::kI8, DataType::kF8E4M3}) {
      for (Binding binding : {Binding::kFixed, Binding::kCallerMisaligned}) {
        SCOPED_TRACE(std::string(kernel) + " " + std::string(to_string(type)) + " binding " +
                     std::to_string(static_cast<int>(binding)));
        const bool nhwc = std::string(kernel) == "quantized_conv_any_cudnn";
        EXPECT_LT(quantized_conv_error(kernel, type, nhwc, binding, true), type == DataType::kI8 ? 1e-3 : 5e-2);
      }
    }
  }
}

// ---- quantize: the vector kernel (f32 math) against the element kernel (f64 math) ----

// The vector kernels divide in f32 and defer to f64 only where the f32 quotient is a rounding midpoint; they must give
// the element kernels' bytes everywhere. Scales: a power of two (many exact ties), and others whose f32 quotients
// sometimes round onto a midpoint that the exact quotient misses (the f64 fallback decides those).
TEST(CudaQuantize, VectorKernelsMatchTheElementKernelsBitForBit) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  const std::int64_t count = 8 * 100000;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> wide(-200.F, 200.F);
  std::uniform_real_distribution<float> narrow(-2.F, 2.F);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = f32_to_f16_bits(i % 2 == 0 ? wide(rng) : narrow(rng));
  // Exact ties of x / 0.25 (k + 0.5, for both grids), saturating values, infinities, NaN and signed zeros.
  const float specials[] = {0.125F,  0.375F, -0.125F, -0.625F, 31.875F,      1000.F,
                            -1000.F, 0.F,    -0.F,    112.5F,  0.0029296875F};
  for (std::size_t i = 0; i < std::size(specials); ++i) x[i] = f32_to_f16_bits(specials[i]);
  x[20] = 0x7C00;  // +inf
  x[21] = 0xFC00;  // -inf
  x[22] = 0x7E00;  // NaN
  x[23] = 0xFE00;  // -NaN
  x[24] = 0x0001;  // the smallest subnormal
  x[25] = 0x8001;
  DeviceBuffer dx(x.size() * 2), ds(4), dy(x.size());
  dx.upload(x);
  for (const float s : {0.25F, 0.1F, 0.0137F, 3.3F, 1e-6F}) {
    ds.upload(std::vector<float>{s});
    for (const char* to : {"i8", "f8e4m3"}) {
      const DataType type = std::string(to) == "i8" ? DataType::kI8 : DataType::kF8E4M3;
      Network net;
      Tensor tx = net.add_input("x", DataType::kF16, {count});
      net.mark_output(net.add_quantize(tx, net.add_small_constant({s}, DataType::kF32, Dims{}, "s"), type), "y");
      std::vector<std::vector<std::uint8_t>> results;
      for (const std::string& kernel : {std::string("quantize_f16_") + to + "_f64math_elementwise",
                                        std::string("quantize_f16_") + to + "_f32math_vector16"}) {
        SCOPED_TRACE(kernel + " scale " + std::to_string(s));
        ASSERT_EQ(cudaMemset(dy.base(), 0x55, x.size()), cudaSuccess);
        run_step(kernel, net,
                 {tensor(DataType::kF16, {count}, dx.base(), false), tensor(DataType::kF32, {}, ds.base(), false)},
                 {tensor(type, {count}, dy.base(), false)});
        results.emplace_back(x.size());
        ASSERT_EQ(cudaMemcpy(results.back().data(), dy.base(), x.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      }
      std::size_t mismatches = 0, first = x.size();
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (results[0][i] != results[1][i]) {
          ++mismatches;
          first = std::min(first, i);
        }
      }
      EXPECT_EQ(mismatches, 0U) << to << " scale " << s << ": first at x bits 0x" << std::hex
                                << (first < x.size() ? x[first] : 0) << " (element kernel 0x"
                                << (first < x.size() ? +results[0][first] : 0) << ", vector kernel 0x"
                                << (first < x.size() ? +results[1][first] : 0) << ")";
    }
  }
}

}  // namespace
}  // namespace tensoracle::cuda
