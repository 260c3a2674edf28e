// Calibration: the |x| histogram (doubling range, counts kept, NaN and infinity), the percentile choice against sorted
// data, and the Calibrator's quantized network (structure, skipped layers, per-channel scales, f8 weights against the
// f8 conversion, results near the float network's), its options' errors, and the written JSON and weights.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>

#include "calibrate/abs_histogram.hpp"
#include "graph/graph.hpp"
#include "tensoracle/calibrate.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {
namespace {

std::vector<float> normal(std::size_t n, std::uint32_t seed, float sigma = 1.0F) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0F, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Calibration, HistogramDoublesItsRangeAndKeepsEveryCount) {
  calibrate::AbsHistogram h(128);
  const std::vector<float> zeros(5, 0.0F);
  h.add(zeros.data(), zeros.size(), "t");
  EXPECT_EQ(h.range(), 0.0);
  const std::vector<float> a = {1.0F, -0.5F, 0.25F, 0.0F};
  h.add(a.data(), a.size(), "t");
  EXPECT_EQ(h.range(), 1.0);
  EXPECT_EQ(h.counts()[127], 1u);  // 1.0, the range itself, in the last bin
  EXPECT_EQ(h.counts()[0], 6u);    // the five zeros seen before any range, and this one
  const std::vector<float> b = {-3.0F, 2.5F, std::numeric_limits<float>::quiet_NaN()};
  h.add(b.data(), b.size(), "t");
  EXPECT_EQ(h.range(), 4.0);  // doubled twice
  EXPECT_EQ(h.max_abs(), 3.0);
  EXPECT_EQ(h.nans(), 1u);
  EXPECT_EQ(h.total(), 11u);
  EXPECT_EQ(std::accumulate(h.counts().begin(), h.counts().end(), std::uint64_t{0}), 11u);
  EXPECT_EQ(h.counts()[31], 1u);  // 1.0 was in bin 127 of [0, 1): bins merged twice, 127 / 4
  EXPECT_EQ(h.counts()[96], 1u);  // 3.0 in [0, 4)
  const std::vector<float> inf = {std::numeric_limits<float>::infinity()};
  EXPECT_THROW(h.add(inf.data(), inf.size(), "t"), InvalidArgumentError);
  EXPECT_THROW(calibrate::AbsHistogram(100 + 1), InvalidArgumentError);
  EXPECT_THROW(calibrate::AbsHistogram(64), InvalidArgumentError);
}

TEST(Calibration, PercentileIsTheOrderStatisticWithinABin) {
  calibrate::AbsHistogram h(2048);
  std::vector<float> all;
  for (std::uint32_t b = 0; b < 4; ++b) {
    const std::vector<float> v = normal(5000, b, 1.0F + static_cast<float>(b));  // later batches widen the range
    h.add(v.data(), v.size(), "t");
    all.insert(all.end(), v.begin(), v.end());
  }
  for (auto& x : all) x = std::fabs(x);
  std::sort(all.begin(), all.end());
  for (double p : {50.0, 99.0, 99.99}) {
    const double amax = calibrate::choose_amax(h, CalibrationMethod::kPercentile, p, DataType::kI8);
    const double v = all[static_cast<std::size_t>(std::ceil(static_cast<double>(all.size()) * p / 100.0)) - 1];
    EXPECT_GE(amax, v) << p;
    EXPECT_LE(amax, v + h.bin_width()) << p;
  }
  EXPECT_EQ(calibrate::choose_amax(h, CalibrationMethod::kMax, 0, DataType::kI8), all.back());
  // With outliers, MSE and entropy clip inside the largest value; f8's MSE clip too.
  const double mse = calibrate::choose_amax(h, CalibrationMethod::kMse, 0, DataType::kI8);
  const double entropy = calibrate::choose_amax(h, CalibrationMethod::kEntropy, 0, DataType::kI8);
  EXPECT_LT(mse, all.back());
  EXPECT_LT(entropy, all.back());
  EXPECT_GT(entropy, all[all.size() / 2]);
  EXPECT_LE(calibrate::choose_amax(h, CalibrationMethod::kMse, 0, DataType::kF8E4M3), all.back());
}

// x [-1, 8] -> fc1 (8 -> 16) -> relu -> fc2 (16 -> 4) -> y; the weights as one in-memory file.
struct Mlp {
  std::vector<float> w1 = normal(16 * 8, 1, 0.3F), b1 = normal(16, 2, 0.1F), w2 = normal(4 * 16, 3, 0.3F),
                     b2 = normal(4, 4, 0.1F);
  Network net;
  Mlp() {
    Tensor x = net.add_input("x", DataType::kF32, {-1, 8});
    Tensor h = net.add_linear(x, net.add_constant_copy(DataType::kF32, {16, 8}, w1.data(), "fc1.weight"),
                              net.add_constant_copy(DataType::kF32, {16}, b1.data(), "fc1.bias"));
    Tensor a = net.add_activation("relu", h);
    Tensor y = net.add_layer("linear",
                             {a, net.add_constant_copy(DataType::kF32, {4, 16}, w2.data(), "fc2.weight"),
                              net.add_constant_copy(DataType::kF32, {4}, b2.data(), "fc2.bias")},
                             {}, "fc2")[0];
    net.mark_output(y, "y");
  }
};

HostTensor batch(std::uint32_t seed, std::int64_t rows = 32) {
  HostTensor t(DataType::kF32, {rows, 8});
  const std::vector<float> v = normal(t.size(), seed);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

int count_ops(const Network& net, const std::string& op) {
  int n = 0;
  for (const auto& layer : graph::graph_of(net).layers) n += layer.op == op ? 1 : 0;
  return n;
}

double rel_l2(const HostTensor& a, const HostTensor& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = a.data<float>()[i] - b.data<float>()[i];
    num += d * d;
    den += static_cast<double>(b.data<float>()[i]) * b.data<float>()[i];
  }
  return std::sqrt(num / den);
}

TEST(Calibration, QuantizedNetworkIsCloseToTheFloatOneAndQuantizesWhatWasAsked) {
  Mlp m;
  Calibrator calibrator(m.net);
  EXPECT_THROW(calibrator.activation_ranges(), InvalidArgumentError);  // no batch yet
  for (std::uint32_t b = 0; b < 3; ++b) calibrator.add_batch({{"x", batch(10 + b)}});
  const auto ranges = calibrator.activation_ranges();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].tensor, "x");
  EXPECT_EQ(ranges[0].values, 3u * 32 * 8);
  EXPECT_DOUBLE_EQ(ranges[0].scale, ranges[0].amax / 127);
  const auto weights = calibrator.weight_scales();
  ASSERT_EQ(weights.size(), 2u);
  EXPECT_EQ(weights[0].axis, 0);
  EXPECT_EQ(weights[0].scales.size(), 16u);
  const Network q = calibrator.quantized_network();
  EXPECT_EQ(count_ops(q, "quantize"), 2);
  EXPECT_EQ(count_ops(q, "dequantize"), 4);
  const std::map<std::string, HostTensor> in{{"x", batch(10)}};
  const double err = rel_l2(run_reference(q, in).at("y"), run_reference(m.net, in).at("y"));
  EXPECT_GT(err, 1e-5);  // quantized
  EXPECT_LT(err, 2e-2);  // and close

  CalibrationOptions skip;
  skip.skip_layers = {"fc2"};
  skip.activations = false;
  Calibrator weight_only(m.net, skip);
  EXPECT_TRUE(weight_only.activation_ranges().empty());
  const Network w = weight_only.quantized_network();
  EXPECT_EQ(count_ops(w, "quantize"), 0);
  EXPECT_EQ(count_ops(w, "dequantize"), 1);  // fc1's weight only
}

TEST(Calibration, F8WeightsAreTheF8ConversionOfWeightOverScale) {
  Mlp m;
  CalibrationOptions o;
  o.quantized = DataType::kF8E4M3;
  o.method = CalibrationMethod::kMse;
  Calibrator calibrator(m.net, o);
  calibrator.add_batch({{"x", batch(20)}});
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tensoracle_calibrate_test";
  std::filesystem::create_directories(dir);
  const std::filesystem::path side = calibrator.write_quantized_network(dir / "q.json");
  EXPECT_EQ(side, dir / "q.safetensors");
  auto file = SafetensorsFile::open(side);
  const HostTensor wq = HostTensor::from_view(file->get("fc1.weight.quantized"));
  const HostTensor scale = HostTensor::from_view(file->get("fc1.weight.scale"));
  ASSERT_EQ(wq.dtype, DataType::kF8E4M3);
  ASSERT_EQ(scale.size(), 16u);
  for (std::size_t i = 0; i < wq.size(); ++i) {
    const float s = scale.data<float>()[i / 8];
    const double v = static_cast<double>(m.w1[i]) / s;
    // |v| <= 448 by construction; rounding w/scale to e4m3 from float agrees with the double rounding here.
    EXPECT_EQ(wq.data<std::uint8_t>()[i], f32_to_f8e4m3_bits(static_cast<float>(v))) << i;
  }
  // The JSON names the side file for the quantized weights, their scales and the biases (in-memory constants), and
  // reads back into a network with the same results.
  std::ifstream text(dir / "q.json");
  const nlohmann::json doc = nlohmann::json::parse(text);
  int in_side = 0;
  for (const auto& c : doc["constants"]) in_side += c.value("file", "") == "q.safetensors" ? 1 : 0;
  EXPECT_EQ(in_side, 6);
  const Network back = Network::from_json_file(dir / "q.json");
  const std::map<std::string, HostTensor> in{{"x", batch(21)}};
  const HostTensor want = run_reference(calibrator.quantized_network(), in).at("y");
  const HostTensor got = run_reference(back, in).at("y");
  EXPECT_EQ(got.bytes, want.bytes);
  std::filesystem::remove_all(dir);
}

// A residual add's residual input (not a product's result, the other input being a conv's through its batch_norm) is
// quantized with --quantize-residuals, sharing the quantize of the conv that reads the same tensor; an add of two
// products' results is left alone, and nothing changes without the option.
TEST(Calibration, QuantizeResidualsQuantizesTheResidualInputOfResidualAdds) {
  Network net;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0F, 0.2F);
  auto constant = [&](const std::string& name, const Dims& shape, float offset = 0.0F) {
    std::vector<float> v(static_cast<std::size_t>(shape.volume()));
    for (float& e : v) e = offset + dist(rng);
    return net.add_constant_copy(DataType::kF32, shape, v.data(), name);
  };
  ConvOptions same;
  same.padding = {1, 1};
  Tensor x = net.add_input("x", DataType::kF32, {1, 16, 6, 6});
  Tensor a = net.add_convolution(x, constant("wa", {16, 16, 3, 3}), {}, same);
  Tensor bn = net.add_batch_norm(a, constant("mean", {16}), constant("var", {16}, 1.0F), constant("gamma", {16}, 1.0F),
                                 constant("beta", {16}));
  Tensor r1 = net.add_activation("relu", net.add_binary("add", bn, x));
  Tensor b = net.add_convolution(r1, constant("wb", {16, 16, 3, 3}), {}, same);
  Tensor c = net.add_convolution(r1, constant("wc", {16, 16, 3, 3}), {}, same);
  net.mark_output(net.add_binary("add", b, c), "y");
  HostTensor in(DataType::kF32, {1, 16, 6, 6});
  const std::vector<float> v = normal(in.size(), 4);
  std::memcpy(in.bytes.data(), v.data(), in.bytes.size());

  for (bool residuals : {false, true}) {
    SCOPED_TRACE(residuals ? "quantize_residuals" : "default");
    CalibrationOptions o;
    o.quantize_residuals = residuals;
    Calibrator calibrator(net, o);
    calibrator.add_batch({{"x", in}});
    const auto ranges = calibrator.activation_ranges();
    ASSERT_EQ(ranges.size(), 2u);  // x and r1 either way: the residual x is also conv a's input
    EXPECT_EQ(ranges[0].tensor, "x");
    EXPECT_EQ(ranges[0].layers.size(), residuals ? 2u : 1u);
    const Network q = calibrator.quantized_network();
    EXPECT_EQ(count_ops(q, "quantize"), 2);
    const graph::Graph& g = graph::graph_of(q);
    int dequantized_adds = 0;
    for (const auto& layer : g.layers) {
      if (layer.op != "add") continue;
      for (auto id : layer.inputs) {
        const std::int32_t producer = g.tensor(id).producer;
        if (producer >= 0 && g.layers[static_cast<std::size_t>(producer)].op == "dequantize") ++dequantized_adds;
      }
    }
    EXPECT_EQ(dequantized_adds, residuals ? 1 : 0);
    const std::map<std::string, HostTensor> inputs{{"x", in}};
    EXPECT_LT(rel_l2(run_reference(q, inputs).at("y"), run_reference(net, inputs).at("y")), 5e-2);
  }
}

TEST(Calibration, OptionsThatCannotWorkAreRefused) {
  Mlp m;
  CalibrationOptions entropy_f8;
  entropy_f8.method = CalibrationMethod::kEntropy;
  entropy_f8.quantized = DataType::kF8E4M3;
  EXPECT_THROW(Calibrator(m.net, entropy_f8), InvalidArgumentError);
  CalibrationOptions nothing;
  nothing.ops = {"conv"};
  EXPECT_THROW(Calibrator(m.net, nothing), InvalidArgumentError);
  CalibrationOptions i16;
  i16.quantized = DataType::kI16;
  EXPECT_THROW(Calibrator(m.net, i16), InvalidArgumentError);
  CalibrationOptions percentile;
  percentile.percentile = 0;
  EXPECT_THROW(Calibrator(m.net, percentile), InvalidArgumentError);
  EXPECT_EQ(parse_calibration_method("entropy"), CalibrationMethod::kEntropy);
  EXPECT_THROW(parse_calibration_method("median"), InvalidArgumentError);
}

}  // namespace
}  // namespace tensoracle
