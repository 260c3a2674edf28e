// Shape-inference and verifier tests of the quantization ops.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tensoracle/network.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {
namespace {

using ::testing::HasSubstr;

// Runs `fn`, expecting a GraphError whose message contains every fragment.
template <typename Fn>
void expect_graph_error(Fn&& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected GraphError";
  } catch (const GraphError& e) {
    for (const auto& f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
  }
}

Attributes attrs(const std::string& to, std::int64_t axis = 0) { return {{"to", to}, {"axis", axis}}; }

TEST(QuantizationOps, QuantizePerTensor) {
  for (DataType from : {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64}) {
    for (DataType to : {DataType::kI8, DataType::kF8E4M3}) {
      Network net;
      auto x = net.add_input("x", from, {-1, 0, 5});
      auto q = net.add_quantize(x, net.add_scalar(0.1, DataType::kF32), to);
      EXPECT_EQ(net.dtype(q), to);
      EXPECT_EQ(net.shape(q), Dims({-1, 0, 5}));
      EXPECT_EQ(net.dim_expression(q, 0), "x.0");
      auto y = net.add_dequantize(q, net.add_scalar(0.1, DataType::kF32));
      EXPECT_EQ(net.dtype(y), DataType::kF32);
      net.mark_output(y, "y");
      EXPECT_EQ(net.infer_shapes({{"x", Dims{3, 0, 5}}}).at("y"), Dims({3, 0, 5}));
    }
  }
  // A per-tensor scale ignores the axis, even for a scalar x.
  Network net;
  auto x = net.add_input("x", DataType::kF32, {});
  EXPECT_EQ(net.shape(net.add_quantize(x, net.add_scalar(1.0, DataType::kF32), DataType::kI8, 5)), Dims({}));
}

TEST(QuantizationOps, PerChannelScaleAlongAxis) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {-1, 4, -1});
  auto s4 = net.add_input("s4", DataType::kF32, {4});
  auto sd = net.add_input("sd", DataType::kF32, {-1});
  auto q = net.add_quantize(x, s4, DataType::kI8, 1);
  EXPECT_EQ(net.shape(q), Dims({-1, 4, -1}));
  EXPECT_EQ(net.shape(net.add_quantize(x, s4, DataType::kF8E4M3, -2)), Dims({-1, 4, -1}));
  auto y = net.add_dequantize(q, sd, DataType::kBF16, -1);  // checked when the shapes are known
  EXPECT_EQ(net.dtype(y), DataType::kBF16);
  EXPECT_EQ(net.shape(y), Dims({-1, 4, -1}));
  net.mark_output(y, "y");
  EXPECT_EQ(net.infer_shapes({{"x", Dims{2, 4, 7}}, {"s4", Dims{4}}, {"sd", Dims{7}}}).at("y"), Dims({2, 4, 7}));
  expect_graph_error(
      [&] {
        net.infer_shapes({{"x", Dims{2, 4, 7}}, {"s4", Dims{4}}, {"sd", Dims{6}}});
      },
      {"(dequantize)", "per-channel scale 'sd'", "along axis -1", "6 != 7"});
}

TEST(QuantizationOps, DequantizeTargets) {
  for (DataType from : {DataType::kI8, DataType::kF8E4M3}) {
    for (DataType to : {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64}) {
      Network net;
      auto q = net.add_input("q", from, {3, 2});
      auto y = net.add_dequantize(q, net.add_small_constant({1, 2, 3}, DataType::kF32, {3}), to, 0);
      EXPECT_EQ(net.dtype(y), to);
      EXPECT_EQ(net.shape(y), Dims({3, 2}));
    }
  }
  Network net;
  auto q = net.add_input("q", DataType::kI8, {3});
  auto y = net.add_layer("dequantize", {q, net.add_scalar(1.0, DataType::kF32)}).at(0);  // `to` defaults to f32
  EXPECT_EQ(net.dtype(y), DataType::kF32);
}

TEST(QuantizationOps, QuantizeInputMustBeFloat) {
  Network net;
  auto i = net.add_input("i", DataType::kI32, {2});
  auto f8 = net.add_input("f8", DataType::kF8E4M3, {2});
  auto s = net.add_scalar(1.0, DataType::kF32);
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {i, s}, attrs("i8"), "q1");
      },
      {"layer 'q1' (quantize)", "input 'i' has dtype i32", "f32, f16, bf16, f64"});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {f8, s}, attrs("i8"), "q2");
      },
      {"layer 'q2' (quantize)", "input 'f8' has dtype f8e4m3"});
}

TEST(QuantizationOps, QuantizeTargetMustBeI8OrF8E4M3) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2});
  auto s = net.add_scalar(1.0, DataType::kF32);
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s}, {}, "q1");
      },
      {"layer 'q1' (quantize)", "attribute 'to' is required"});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s}, attrs("u8"), "q2");
      },
      {"layer 'q2' (quantize)", "attribute 'to' must be i8 or f8e4m3, not u8"});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s}, attrs("f8e5m2"), "q3");
      },
      {"layer 'q3' (quantize)", "not f8e5m2"});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s}, attrs("int8"), "q4");
      },
      {"layer 'q4' (quantize)", "attribute 'to' must name a data type"});
}

TEST(QuantizationOps, DequantizeInputAndTarget) {
  Network net;
  auto u = net.add_input("u", DataType::kU8, {2});
  auto q = net.add_input("q", DataType::kI8, {2});
  auto s = net.add_scalar(1.0, DataType::kF32);
  expect_graph_error(
      [&] {
        net.add_layer("dequantize", {u, s}, attrs("f32"), "d1");
      },
      {"layer 'd1' (dequantize)", "input 'u' has dtype u8", "i8, f8e4m3"});
  expect_graph_error(
      [&] {
        net.add_layer("dequantize", {q, s}, attrs("i32"), "d2");
      },
      {"layer 'd2' (dequantize)", "attribute 'to' must be f32, f16, bf16 or f64, not i32"});
}

TEST(QuantizationOps, ScaleMustBeF32) {
  Network net;
  auto x = net.add_input("x", DataType::kF16, {2});
  auto s16 = net.add_scalar(1.0, DataType::kF16);
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s16}, attrs("i8"), "q");
      },
      {"layer 'q' (quantize)", "scale", "has dtype f16", "expected one of f32"});
  auto q = net.add_input("q", DataType::kI8, {2});
  expect_graph_error(
      [&] {
        net.add_layer("dequantize", {q, s16}, attrs("f16"), "d");
      },
      {"layer 'd' (dequantize)", "scale", "has dtype f16"});
}

TEST(QuantizationOps, ScaleMustBeScalarOrOnePerChannel) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {4, 3});
  auto s2d = net.add_input("s2d", DataType::kF32, {4, 1});
  auto s5 = net.add_input("s5", DataType::kF32, {5});
  auto q = net.add_input("q", DataType::kI8, {4, 3});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s2d}, attrs("i8"), "q1");
      },
      {"layer 'q1' (quantize)", "scale 's2d' must be a scalar (per tensor) or have rank 1", "[4,1]"});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s5}, attrs("i8", 1), "q2");
      },
      {"layer 'q2' (quantize)", "per-channel scale 's5'", "x 'x' along axis 1", "5 != 3"});
  expect_graph_error(
      [&] {
        net.add_layer("dequantize", {q, s5}, attrs("f32", 0), "d1");
      },
      {"layer 'd1' (dequantize)", "per-channel scale 's5'", "5 != 4"});
  auto scalar = net.add_input("scalar", DataType::kF32, {});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {scalar, s5}, attrs("i8"), "q3");
      },
      {"layer 'q3' (quantize)", "scale 's5' is per channel", "x 'scalar' is a scalar"});
}

TEST(QuantizationOps, AxisMustBeInRange) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {4, 3});
  auto s = net.add_input("s", DataType::kF32, {3});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s}, attrs("i8", 2), "q1");
      },
      {"layer 'q1' (quantize)", "axis 2 is out of range for tensor 'x' of rank 2"});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s}, attrs("i8", -3), "q2");
      },
      {"layer 'q2' (quantize)", "axis -3 is out of range"});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s}, {{"to", std::string("i8")}, {"axis", 1.5}}, "q3");
      },
      {"layer 'q3' (quantize)", "attribute 'axis' must be an integer"});
  expect_graph_error(
      [&] {
        net.add_layer("quantize", {x, s}, {{"to", std::string("i8")}, {"zero_point", 0.0}}, "q4");
      },
      {"layer 'q4' (quantize)", "unknown attribute 'zero_point'"});
}

// The f8 results themselves, which the PyTorch conformance cases (torch 1.13 has no float8) only
// see through a dequantize.
TEST(QuantizationOps, QuantizeToF8E4M3SaturatesAndKeepsNaN) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {7});
  auto s = net.add_scalar(2.0, DataType::kF32);
  net.mark_output(net.add_quantize(x, s, DataType::kF8E4M3), "q8");
  net.mark_output(net.add_quantize(x, s, DataType::kI8), "q");
  HostTensor in(DataType::kF32, Dims{7});
  const float values[7] = {2.0f, 1000.0f, -INFINITY, NAN, 0.5f * 2.0f * 0.001953125f, 5.0f, -255.0f};
  std::memcpy(in.bytes.data(), values, sizeof(values));
  auto out = run_reference(net, {{"x", in}});
  const auto* q8 = out.at("q8").data<std::uint8_t>();
  EXPECT_EQ(q8[0], 0x38);         // 1.0
  EXPECT_EQ(q8[1], 0x7E);         // 500 saturates to 448
  EXPECT_EQ(q8[2], 0xFE);         // -inf saturates to -448
  EXPECT_EQ(q8[3] & 0x7F, 0x7F);  // NaN stays NaN
  EXPECT_EQ(q8[4], 0x00);         // 2^-10 is the tie between 0 and 2^-9: even is 0
  EXPECT_EQ(q8[5], 0x42);         // 2.5 exactly (1.25 * 2^1)
  const auto* q = out.at("q").data<std::int8_t>();
  EXPECT_EQ(q[0], 1);
  EXPECT_EQ(q[1], 127);
  EXPECT_EQ(q[2], -128);
  EXPECT_EQ(q[3], 0);     // NaN -> 0
  EXPECT_EQ(q[5], 2);     // 2.5 -> 2: half to even
  EXPECT_EQ(q[6], -128);  // -127.5 -> -128
}

}  // namespace
}  // namespace tensoracle
