// Shape-inference and verifier tests of the convolution ops.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/network.hpp"

namespace tensoracle {
namespace {

using Ints = std::vector<std::int64_t>;

// Passes when f throws GraphError whose message contains every part.
template <typename F>
::testing::AssertionResult FailsWith(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
  } catch (const GraphError& e) {
    const std::string message = e.what();
    for (std::string_view part : parts) {
      if (message.find(part) == std::string::npos) {
        return ::testing::AssertionFailure() << "message \"" << message << "\" lacks \"" << part << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no GraphError was thrown";
}

Tensor zeros(Network& net, const std::string& name, const Dims& dims, DataType dtype = DataType::kF32) {
  return net.add_small_constant(std::vector<double>(static_cast<std::size_t>(dims.volume()), 0.0), dtype, dims, name);
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}

// PyTorch's pooling_output_shape (dilation 1).
std::int64_t torch_pool_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, bool ceil_mode) {
  std::int64_t out = floor_div(in + 2 * p - k + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// ---- conv ----

TEST(ConvolutionConv, Static1d) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 3, 13});
  Tensor w = zeros(net, "w", {4, 3, 3});
  Tensor b = zeros(net, "b", {4});
  EXPECT_EQ(net.shape(net.add_convolution(x, w, b)), Dims({2, 4, 11}));
  ConvOptions o;
  o.stride = {2};
  o.padding = {3};
  o.dilation = {2};
  // (13 + 6 - 5) // 2 + 1
  EXPECT_EQ(net.shape(net.add_convolution(x, w, {}, o)), Dims({2, 4, 8}));
}

TEST(ConvolutionConv, Static2dAsymmetric) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, {2, 3, 13, 7});
  Tensor w = zeros(net, "w", {4, 3, 3, 2}, DataType::kF16);
  ConvOptions o;
  o.stride = {2, 1};
  o.padding = {1, 2};
  o.dilation = {1, 2};
  Tensor y = net.add_convolution(x, w, {}, o);
  EXPECT_EQ(net.shape(y), Dims({2, 4, 7, 9}));
  EXPECT_EQ(net.dtype(y), DataType::kF16);
}

TEST(ConvolutionConv, GroupedAndDepthwise) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 6, 8, 8});
  ConvOptions o;
  o.groups = 3;
  EXPECT_EQ(net.shape(net.add_convolution(x, zeros(net, "w", {9, 2, 3, 3}), {}, o)), Dims({1, 9, 6, 6}));
  o.groups = 6;
  o.padding = {1, 1};
  EXPECT_EQ(net.shape(net.add_convolution(x, zeros(net, "dw", {12, 1, 3, 3}), {}, o)), Dims({1, 12, 8, 8}));
}

TEST(ConvolutionConv, EmptyBatchAndOneByOne) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {0, 16, 5, 7});
  EXPECT_EQ(net.shape(net.add_convolution(x, zeros(net, "w", {8, 16, 1, 1}))), Dims({0, 8, 5, 7}));
  Tensor k = net.add_input("k", DataType::kF32, {2, 2, 3, 3});
  EXPECT_EQ(net.shape(net.add_convolution(k, zeros(net, "w3", {8, 2, 3, 3}))), Dims({2, 8, 1, 1}));
}

TEST(ConvolutionConv, DynamicShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 3, -1, -1});
  Tensor w = zeros(net, "w", {4, 3, 3, 3});
  ConvOptions o;
  o.stride = {2, 2};
  Tensor y = net.add_convolution(x, w, zeros(net, "b", {4}), o);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), Dims({-1, 4, -1, -1}));
  EXPECT_EQ(net.dim_expression(y, 0), "x.0");
  EXPECT_EQ(net.dim_expression(y, 2), "1 + ((x.2 - 3) // 2)");
  for (std::int64_t h = 3; h < 12; ++h) {
    EXPECT_EQ(net.infer_shapes({{"x", {2, 3, h, 2 * h}}}).at("y"), Dims({2, 4, (h - 3) / 2 + 1, (2 * h - 3) / 2 + 1}));
  }
  EXPECT_TRUE(FailsWith(
      [&] {
        net.infer_shapes({{"x", {2, 3, 2, 5}}});
      },
      {"(conv)", "spatial dim 0 of x 'x' [2,3,2,5] is 2 with padding, smaller than the dilated kernel size 3"}));
}

TEST(ConvolutionConv, DynamicChannelsAreCheckedForConcreteShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, -1, 5});
  Tensor y = net.add_layer("conv", {x, zeros(net, "w", {4, 2, 3})}, {{"groups", std::int64_t{2}}}, "c1").at(0);
  net.mark_output(y, "y");
  EXPECT_EQ(net.infer_shapes({{"x", {1, 4, 5}}}).at("y"), Dims({1, 4, 3}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.infer_shapes({{"x", {1, 6, 5}}});
      },
      {"layer 'c1' (conv)", "weight's dim 1 times groups = 2 must equal x's channels", "4 != 6"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.infer_shapes({{"x", {1, 3, 5}}});
      },
      {"x 'x' has 3 channels, which is not divisible by groups = 2"}));
}

TEST(ConvolutionConv, RejectsBadRanks) {
  Network net;
  Tensor x2 = net.add_input("x2", DataType::kF32, {3, 5});
  Tensor x5 = net.add_input("x5", DataType::kF32, {1, 3, 5, 5, 5});
  Tensor x = net.add_input("x", DataType::kF32, {1, 3, 5, 5});
  Tensor w4 = zeros(net, "w4", {2, 3, 3, 3});
  Tensor w3 = zeros(net, "w3", {2, 3, 3});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x2, w3}, {}, "c");
      },
      {"layer 'c' (conv)", "x 'x2' must have rank 3"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("conv", {x5, w4}, {}, "c"); }, {"x 'x5' must have rank 3", "[1,3,5,5,5]"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, w3}, {}, "c");
      },
      {"weight 'w3' has shape [2,3,3] but x 'x' has shape [1,3,5,5]: weight must have rank 4"}));
}

TEST(ConvolutionConv, RejectsChannelMismatches) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 6, 5, 5});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, zeros(net, "w", {2, 4, 3, 3})}, {}, "c");
      },
      {"layer 'c' (conv)", "weight 'w' has shape [2,4,3,3] but x 'x' has shape [1,6,5,5]", "4 != 6"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, zeros(net, "w2", {2, 2, 3, 3})}, {{"groups", std::int64_t{4}}}, "c");
      },
      {"x 'x' has 6 channels, which is not divisible by groups = 4"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, zeros(net, "w3", {4, 2, 3, 3})}, {{"groups", std::int64_t{3}}}, "c");
      },
      {"weight 'w3' has 4 output channels, which is not divisible by groups = 3"}));
  Tensor empty = net.add_input("empty", DataType::kF32, {1, 0, 5, 5});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {empty, zeros(net, "w4", {2, 0, 3, 3}, DataType::kF32)}, {}, "c");
      },
      {"x 'empty' has shape [1,0,5,5]: it has no channels"}));
}

TEST(ConvolutionConv, RejectsBadBias) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 3, 5, 5});
  Tensor w = zeros(net, "w", {4, 3, 3, 3});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, w, zeros(net, "b", {3})}, {}, "c");
      },
      {"layer 'c' (conv)", "bias 'b' has shape [3] but the output has 4 channels"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, w, zeros(net, "b2", {1, 4})}, {}, "c");
      },
      {"bias 'b2' must have rank 1"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, w, zeros(net, "bh", {4}, DataType::kF16)}, {}, "c");
      },
      {"'x' (f32) and 'bh' (f16) must have the same dtype"}));
}

TEST(ConvolutionConv, RejectsBadAttributes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 3, 5, 5});
  Tensor w = zeros(net, "w", {4, 3, 3, 3});
  auto conv = [&](Attributes attrs) { net.add_layer("conv", {x, w}, attrs, "c"); };
  EXPECT_TRUE(FailsWith(
      [&] {
        conv({{"stride", Ints{1}}});
      },
      {"layer 'c' (conv)", "attribute 'stride' must have 2 values (one per spatial dim), but has 1"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        conv({{"stride", Ints{1, 0}}});
      },
      {"attribute 'stride' values must be in [1, 2147483647], got [1,0]"}));
  EXPECT_TRUE(FailsWith([&] { conv({{"padding", Ints{-1, 0}}}); }, {"attribute 'padding' values must be in [0,"}));
  EXPECT_TRUE(FailsWith([&] { conv({{"padding", Ints{1, 1, 1, 1}}}); }, {"attribute 'padding' must have 2 values"}));
  EXPECT_TRUE(FailsWith([&] { conv({{"dilation", Ints{0, 1}}}); }, {"attribute 'dilation' values must be in [1,"}));
  EXPECT_TRUE(FailsWith([&] { conv({{"groups", std::int64_t{0}}}); }, {"attribute 'groups' must be in [1,"}));
  EXPECT_TRUE(FailsWith([&] { conv({{"stride", 2.5}}); }, {"attribute 'stride' must be a list of integers"}));
  EXPECT_TRUE(FailsWith([&] { conv({{"output_padding", Ints{1, 1}}}); }, {"unknown attribute 'output_padding'"}));
}

TEST(ConvolutionConv, RejectsKernelLargerThanPaddedInput) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 3, 5, 4});
  Tensor w = zeros(net, "w", {4, 3, 3, 3});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, w}, {{"dilation", Ints{1, 2}}}, "c");
      },
      {"layer 'c' (conv)",
       "spatial dim 1 of x 'x' [1,3,5,4] is 4 with padding, smaller than the dilated kernel size 5"}));
  // With padding it fits: (4 + 2 - 5) + 1.
  EXPECT_EQ(net.shape(net.add_layer("conv", {x, w}, {{"dilation", Ints{1, 2}}, {"padding", Ints{0, 1}}}).at(0)),
            Dims({1, 4, 3, 2}));
}

TEST(ConvolutionConv, RejectsEmptySpatialDimsAndKernels) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 3, 0});
  Tensor x1 = net.add_input("x1", DataType::kF32, {1, 3, 4});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, zeros(net, "w", {2, 3, 1})}, {{"padding", Ints{1}}}, "c");
      },
      {"layer 'c' (conv)", "x 'x' has shape [1,3,0]: its spatial dims must not be empty"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x1, zeros(net, "w0", {2, 3, 0})}, {}, "c");
      },
      {"weight 'w0' has shape [2,3,0]: its kernel dims must not be empty"}));
}

TEST(ConvolutionConv, RejectsBadDtypes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kI32, {1, 3, 5});
  Tensor xf = net.add_input("xf", DataType::kF32, {1, 3, 5});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {x, zeros(net, "w", {2, 3, 3}, DataType::kI32)}, {}, "c");
      },
      {"layer 'c' (conv)", "x 'x' has dtype i32"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv", {xf, zeros(net, "wb", {2, 3, 3}, DataType::kBF16)}, {}, "c");
      },
      {"'xf' (f32) and 'wb' (bf16) must have the same dtype"}));
}

// ---- conv_transpose2d ----

TEST(ConvolutionConvTranspose, StaticShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 4, 5, 7});
  ConvOptions o;
  o.stride = {2, 2};
  o.padding = {1, 1};
  o.output_padding = {1, 1};
  // (5 - 1)·2 - 2 + 2 + 1 + 1 = 10, (7 - 1)·2 - 2 + 2 + 1 + 1 = 14.
  EXPECT_EQ(net.shape(net.add_conv_transpose2d(x, zeros(net, "w", {4, 2, 3, 3}), zeros(net, "b", {2}), o)),
            Dims({1, 2, 10, 14}));
  o.groups = 2;
  o.dilation = {2, 1};
  // (5 - 1)·2 - 2 + 4 + 1 + 1 = 12.
  EXPECT_EQ(net.shape(net.add_conv_transpose2d(x, zeros(net, "wg", {4, 3, 3, 3}), zeros(net, "bg", {6}), o)),
            Dims({1, 6, 12, 14}));
  EXPECT_EQ(net.shape(net.add_conv_transpose2d(x, zeros(net, "w1", {4, 3, 1, 1}))), Dims({1, 3, 5, 7}));
}

TEST(ConvolutionConvTranspose, DynamicShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 3, -1, -1});
  ConvOptions o;
  o.stride = {2, 3};
  o.padding = {1, 0};
  o.output_padding = {1, 2};
  Tensor y = net.add_conv_transpose2d(x, zeros(net, "w", {3, 2, 3, 4}), {}, o);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), Dims({-1, 2, -1, -1}));
  for (std::int64_t h = 1; h < 8; ++h) {
    EXPECT_EQ(net.infer_shapes({{"x", {2, 3, h, h + 1}}}).at("y"),
              Dims({2, 2, (h - 1) * 2 - 2 + 2 + 1 + 1, h * 3 + 3 + 2 + 1}));
  }
}

TEST(ConvolutionConvTranspose, RejectsBadOutputPadding) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 4, 5, 5});
  Tensor w = zeros(net, "w", {4, 2, 3, 3});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv_transpose2d", {x, w}, {{"output_padding", Ints{1, 0}}}, "t");
      },
      {"layer 't' (conv_transpose2d)",
       "'output_padding' [1,0] must be smaller than either stride [1,1] or dilation [1,1]"}));
  // Smaller than the dilation is enough.
  EXPECT_EQ(
      net.shape(
          net.add_layer("conv_transpose2d", {x, w}, {{"output_padding", Ints{1, 0}}, {"dilation", Ints{2, 1}}}).at(0)),
      Dims({1, 2, 10, 7}));
}

TEST(ConvolutionConvTranspose, RejectsChannelMismatches) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 4, 5, 5});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv_transpose2d", {x, zeros(net, "w", {3, 2, 3, 3})}, {}, "t");
      },
      {"layer 't' (conv_transpose2d)", "weight 'w' has shape [3,2,3,3] but x 'x' has shape [1,4,5,5]", "3 != 4"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv_transpose2d", {x, zeros(net, "w3", {4, 2, 3, 3})}, {{"groups", std::int64_t{3}}}, "t");
      },
      {"x 'x' has 4 channels, which is not divisible by groups = 3"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv_transpose2d", {x, zeros(net, "w2", {4, 2, 3, 3}), zeros(net, "b", {2})},
                      {{"groups", std::int64_t{2}}}, "t");
      },
      {"bias 'b' has shape [2] but the output has 4 channels"}));
}

TEST(ConvolutionConvTranspose, RejectsEmptyOutputAndBadRank) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 1, 1, 1});
  Tensor w = zeros(net, "w", {1, 1, 1, 1});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv_transpose2d", {x, w}, {{"padding", Ints{1, 0}}}, "t");
      },
      {"layer 't' (conv_transpose2d)", "spatial dim 0 of the output would be -1"}));
  Tensor x3 = net.add_input("x3", DataType::kF32, {1, 1, 4});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv_transpose2d", {x3, zeros(net, "w3", {1, 1, 1})}, {}, "t");
      },
      {"x 'x3' must have rank 4"}));
  Tensor e = net.add_input("e", DataType::kF32, {1, 1, 0, 4});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("conv_transpose2d", {e, w}, {}, "t");
      },
      {"its spatial dims must not be empty"}));
}

// ---- pooling ----

TEST(ConvolutionPool, StaticShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 3, 8, 10});
  PoolOptions o;
  o.kernel = {2, 2};
  EXPECT_EQ(net.shape(net.add_pool2d(x, PoolType::kMax, o)), Dims({2, 3, 4, 5}));
  o.kernel = {3, 3};
  o.stride = {2, 2};
  o.padding = {1, 1};
  EXPECT_EQ(net.shape(net.add_pool2d(x, PoolType::kAverage, o)), Dims({2, 3, 4, 5}));
  o.ceil_mode = true;
  o.count_include_pad = false;
  // H: ceil((8 + 2 - 3) / 2) + 1 = 5, last start 8 >= 8 + 1? no. W: ceil(9 / 2) + 1 = 6, start 10 >= 11? no.
  EXPECT_EQ(net.shape(net.add_pool2d(x, PoolType::kAverage, o)), Dims({2, 3, 5, 6}));
  // ceil((4 + 2 - 2) / 3) + 1 = 3, but the last window would start at 6 >= 4 + 1: dropped.
  Tensor s = net.add_input("s", DataType::kF32, {1, 1, 4, 4});
  PoolOptions c;
  c.kernel = {2, 2};
  c.stride = {3, 3};
  c.padding = {1, 1};
  c.ceil_mode = true;
  EXPECT_EQ(net.shape(net.add_pool2d(s, PoolType::kMax, c)), Dims({1, 1, 2, 2}));
}

TEST(ConvolutionPool, DynamicShapesFollowPyTorch) {
  for (bool ceil_mode : {false, true}) {
    for (std::int64_t k = 1; k <= 4; ++k) {
      for (std::int64_t s = 1; s <= 3; ++s) {
        for (std::int64_t p = 0; p <= k / 2; ++p) {
          Network net;
          Tensor x = net.add_input("x", DataType::kF32, {-1, -1, -1, 3 + k});
          PoolOptions o;
          o.kernel = {k, k};
          o.stride = {s, s};
          o.padding = {p, p};
          o.ceil_mode = ceil_mode;
          Tensor y = net.add_pool2d(x, PoolType::kMax, o);
          net.mark_output(y, "y");
          EXPECT_EQ(net.shape(y)[3], torch_pool_size(3 + k, k, s, p, ceil_mode));
          for (std::int64_t h = std::max<std::int64_t>(1, k - 2 * p); h < 14; ++h) {
            const Dims got = net.infer_shapes({{"x", {1, 2, h, 3 + k}}}).at("y");
            EXPECT_EQ(got[2], torch_pool_size(h, k, s, p, ceil_mode))
                << "h=" << h << " k=" << k << " s=" << s << " p=" << p << " ceil=" << ceil_mode;
          }
        }
      }
    }
  }
}

TEST(ConvolutionPool, RejectsInputSmallerThanKernel) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 1, -1, 5});
  Tensor y = net.add_layer("max_pool2d", {x}, {{"kernel", Ints{3, 3}}}, "p").at(0);
  net.mark_output(y, "y");
  EXPECT_TRUE(FailsWith(
      [&] {
        net.infer_shapes({{"x", {1, 1, 2, 5}}});
      },
      {"layer 'p' (max_pool2d)", "spatial dim 0 of x 'x' [1,1,2,5] is 2 with padding, smaller than the kernel [3,3]"}));
  EXPECT_TRUE(FailsWith([&] { net.infer_shapes({{"x", {1, 1, 0, 5}}}); }, {"its spatial dims must not be empty"}));
  Tensor small = net.add_input("small", DataType::kF32, {1, 1, 5, 2});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("avg_pool2d", {small}, {{"kernel", Ints{3, 3}}}, "a");
      },
      {"layer 'a' (avg_pool2d)", "spatial dim 1", "smaller than the kernel"}));
}

TEST(ConvolutionPool, RejectsBadAttributes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 1, 8, 8});
  auto pool = [&](const std::string& op, Attributes attrs) { net.add_layer(op, {x}, attrs, "p"); };
  EXPECT_TRUE(FailsWith([&] { pool("max_pool2d", {}); }, {"layer 'p' (max_pool2d)", "attribute 'kernel' is required"}));
  EXPECT_TRUE(FailsWith([&] { pool("max_pool2d", {{"kernel", Ints{}}}); }, {"attribute 'kernel' must be [kh, kw]"}));
  EXPECT_TRUE(FailsWith([&] { pool("max_pool2d", {{"kernel", Ints{2}}}); }, {"attribute 'kernel' must have 2 values"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        pool("max_pool2d", {{"kernel", Ints{2, 0}}});
      },
      {"attribute 'kernel' values must be in [1,"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        pool("max_pool2d", {{"kernel", Ints{2, 2}}, {"stride", Ints{0, 1}}});
      },
      {"attribute 'stride' values must be in [1,"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        pool("avg_pool2d", {{"kernel", Ints{3, 2}}, {"padding", Ints{1, 2}}});
      },
      {"layer 'p' (avg_pool2d)", "attribute 'padding' [1,2] must be at most half of 'kernel' [3,2]"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        pool("max_pool2d", {{"kernel", Ints{2, 2}}, {"ceil_mode", std::int64_t{2}}});
      },
      {"attribute 'ceil_mode' must be a boolean"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        pool("avg_pool2d", {{"kernel", Ints{2, 2}}, {"count_include_pad", std::int64_t{-1}}});
      },
      {"attribute 'count_include_pad' must be a boolean"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        pool("max_pool2d", {{"kernel", Ints{2, 2}}, {"count_include_pad", std::int64_t{0}}});
      },
      {"unknown attribute 'count_include_pad'"}));
}

// max_pool2d's input_block_size: a channels-last x [N, H, W, b·b·C] holds [N, b·H, b·W, C].
TEST(ConvolutionPool, ChannelsLastInputInCells) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, {-1, 5, 4, 64});
  const Attributes pool = {
      {"kernel", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}, {"layout", std::string("nhwc")}};
  Attributes blocks = pool;
  blocks["input_block_size"] = std::int64_t{2};
  Tensor y = net.add_layer("max_pool2d", {x}, blocks, "p").at(0);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), Dims({-1, 5, 4, 16}));  // 10 x 8 -> 5 x 4, 16 channels
  EXPECT_EQ(net.infer_shapes({{"x", {3, 5, 4, 64}}}).at("y"), Dims({3, 5, 4, 16}));
  Tensor odd = net.add_input("odd", DataType::kF16, {1, 5, 4, 30});
  EXPECT_TRUE(FailsWith([&] { net.add_layer("max_pool2d", {odd}, blocks, "q"); },
                        {"layer 'q' (max_pool2d)",
                         "x 'odd' [1,5,4,30] has 30 channels, not a multiple of "
                         "input_block_size^2 = 4"}));
  Attributes first = blocks;
  first.erase("layout");
  EXPECT_TRUE(
      FailsWith([&] { net.add_layer("max_pool2d", {x}, first, "r"); }, {"'input_block_size' needs layout \"nhwc\""}));
  blocks["input_block_size"] = std::int64_t{0};
  EXPECT_TRUE(FailsWith([&] { net.add_layer("max_pool2d", {x}, blocks, "s"); },
                        {"attribute 'input_block_size' must be in [1, 8], got 0"}));
  EXPECT_TRUE(
      FailsWith([&] { net.add_layer("avg_pool2d", {x}, blocks, "t"); }, {"unknown attribute 'input_block_size'"}));
}

// max_pool2d takes i8 x (a quantized result: the maximum of integers), but not with quantize_to; avg_pool2d does not.
TEST(ConvolutionPool, MaxPoolOfI8) {
  Network net;
  Tensor x = net.add_input("x", DataType::kI8, {2, 8, 6, 16});
  const Attributes pool = {
      {"kernel", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}, {"layout", std::string("nhwc")}};
  Tensor y = net.add_layer("max_pool2d", {x}, pool, "p").at(0);
  EXPECT_EQ(net.shape(y), Dims({2, 4, 3, 16}));
  EXPECT_EQ(net.dtype(y), DataType::kI8);
  Tensor s = net.add_small_constant({0.5}, DataType::kF32, Dims{}, "s");
  Attributes quantized = pool;
  quantized["quantize_to"] = std::string("i8");
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("max_pool2d", {x, s}, quantized, "q");
      },
      {"layer 'q' (max_pool2d)", "x 'x' is already quantized (i8)"}));
  Attributes first = {{"kernel", Ints{2, 2}}};
  EXPECT_TRUE(FailsWith([&] { net.add_layer("avg_pool2d", {x}, first, "a"); }, {"x 'x' has dtype i8"}));
}

TEST(ConvolutionPool, RejectsBadInputs) {
  Network net;
  Tensor x3 = net.add_input("x3", DataType::kF32, {1, 8, 8});
  Tensor xi = net.add_input("xi", DataType::kI64, {1, 1, 8, 8});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("max_pool2d", {x3}, {{"kernel", Ints{2, 2}}}, "p");
      },
      {"layer 'p' (max_pool2d)", "x 'x3' must have rank 4"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("avg_pool2d", {xi}, {{"kernel", Ints{2, 2}}}, "p");
      },
      {"x 'xi' has dtype i64"}));
}

// ---- global_avg_pool ----

TEST(ConvolutionGlobalAvgPool, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kBF16, {2, 3, 7, 13});
  EXPECT_EQ(net.shape(net.add_global_average_pool(x)), Dims({2, 3, 1, 1}));
  Tensor v = net.add_input("v", DataType::kF32, {1, 2, 3, 4, 5});
  EXPECT_EQ(net.shape(net.add_global_average_pool(v)), Dims({1, 2, 1, 1, 1}));
  Tensor d = net.add_input("d", DataType::kF32, {-1, -1, -1});
  Tensor y = net.add_global_average_pool(d);
  EXPECT_EQ(net.shape(y), Dims({-1, -1, 1}));
  EXPECT_EQ(net.dim_expression(y, 1), "d.1");
}

TEST(ConvolutionGlobalAvgPool, RejectsBadInputs) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 3});
  Tensor xi = net.add_input("xi", DataType::kI32, {2, 3, 4});
  EXPECT_TRUE(FailsWith([&] { net.add_layer("global_avg_pool", {x}, {}, "g"); },
                        {"layer 'g' (global_avg_pool)", "x 'x' must have rank >= 3", "[2,3]"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("global_avg_pool", {xi}, {}, "g"); }, {"x 'xi' has dtype i32"}));
}

// ---- resize ----

TEST(ConvolutionResize, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, {2, 3, 5, 7});
  EXPECT_EQ(net.shape(net.add_resize(x, ResizeMode::kNearest, {13, 11})), Dims({2, 3, 13, 11}));
  EXPECT_EQ(net.shape(net.add_resize(x, ResizeMode::kBilinear, {1, 1}, true)), Dims({2, 3, 1, 1}));
  Tensor d = net.add_input("d", DataType::kF32, {-1, 3, -1, -1});
  Tensor y = net.add_resize(d, ResizeMode::kBilinear, {9, 4});
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), Dims({-1, 3, 9, 4}));
  EXPECT_EQ(net.infer_shapes({{"x", {2, 3, 5, 7}}, {"d", {4, 3, 20, 1}}}).at("y"), Dims({4, 3, 9, 4}));
}

TEST(ConvolutionResize, RejectsBadAttributes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {1, 3, 5, 7});
  auto resize = [&](Attributes attrs) { net.add_layer("resize", {x}, attrs, "r"); };
  EXPECT_TRUE(FailsWith(
      [&] {
        resize({{"mode", std::string("bicubic")}, {"size", Ints{2, 2}}});
      },
      {"layer 'r' (resize)", "attribute 'mode' must be \"nearest\" or \"bilinear\", not \"bicubic\""}));
  EXPECT_TRUE(FailsWith([&] { resize({{"size", Ints{2, 2}}}); }, {"attribute 'mode' is required"}));
  EXPECT_TRUE(FailsWith([&] { resize({{"mode", std::string("nearest")}}); }, {"attribute 'size' is required"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        resize({{"mode", std::string("nearest")}, {"size", Ints{2}}});
      },
      {"attribute 'size' must be [H', W'] with both in [1,", "got [2]"}));
  EXPECT_TRUE(FailsWith([&] { resize({{"mode", std::string("bilinear")}, {"size", Ints{0, 3}}}); }, {"got [0,3]"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        resize({{"mode", std::string("nearest")}, {"size", Ints{2, 2}}, {"align_corners", std::int64_t{1}}});
      },
      {"attribute 'align_corners' applies to mode \"bilinear\" only"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        resize({{"mode", std::string("bilinear")}, {"size", Ints{2, 2}}, {"align_corners", std::int64_t{3}}});
      },
      {"attribute 'align_corners' must be a boolean"}));
}

TEST(ConvolutionResize, RejectsBadInputs) {
  Network net;
  Tensor x3 = net.add_input("x3", DataType::kF32, {1, 5, 7});
  Tensor e = net.add_input("e", DataType::kF32, {1, 2, 0, 7});
  Tensor xi = net.add_input("xi", DataType::kU8, {1, 2, 3, 7});
  const Attributes attrs = {{"mode", std::string("nearest")}, {"size", Ints{2, 2}}};
  EXPECT_TRUE(
      FailsWith([&] { net.add_layer("resize", {x3}, attrs, "r"); }, {"layer 'r' (resize)", "x 'x3' must have rank 4"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("resize", {e}, attrs, "r"); },
                        {"x 'e' has shape [1,2,0,7]: its spatial dims must not be empty"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("resize", {xi}, attrs, "r"); }, {"x 'xi' has dtype u8"}));
}

}  // namespace
}  // namespace tensoracle

namespace tensoracle {
namespace {

// quantized_conv's quantized residual: i8 or f8e4m3 with an f32 scalar residual_scale (input 6), never alone.
TEST(ConvolutionQuantizedConv, QuantizedResidualNeedsItsScalarScale) {
  Network net;
  Tensor x = net.add_input("x", DataType::kI8, {1, 16, 4, 4});
  std::vector<std::int8_t> w(16 * 16);
  Tensor weight = net.add_constant_copy(DataType::kI8, {16, 16, 1, 1}, w.data(), "w");
  Tensor scale = net.add_small_constant(std::vector<double>(16, 0.01), DataType::kF32, Dims{16}, "s");
  Tensor rq = net.add_input("rq", DataType::kI8, {1, 16, 4, 4});
  Tensor rf = net.add_input("rf", DataType::kF16, {1, 16, 4, 4});
  Tensor rs = net.add_small_constant({0.02}, DataType::kF32, Dims{}, "rs");
  Tensor rv = net.add_small_constant({0.02, 0.03}, DataType::kF32, Dims{2}, "rv");
  const Attributes attrs = {{"to", std::string("f16")}, {"activation", std::string("relu")}};
  Tensor y = net.add_layer("quantized_conv", {x, weight, scale, Tensor{}, rq, Tensor{}, rs}, attrs, "ok")[0];
  EXPECT_EQ(net.dtype(y), DataType::kF16);
  EXPECT_EQ(net.shape(y), Dims({1, 16, 4, 4}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("quantized_conv", {x, weight, scale, Tensor{}, rf, Tensor{}, rs}, attrs, "a");
      },
      {"residual (quantized: residual_scale is given) 'rf' has dtype f16"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("quantized_conv", {x, weight, scale, Tensor{}, rq}, attrs, "b");
      },
      {"residual 'rq' has dtype i8"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("quantized_conv", {x, weight, scale, Tensor{}, Tensor{}, Tensor{}, rs}, attrs, "c");
      },
      {"residual_scale (input 6) is given but there is no residual (input 4)"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("quantized_conv", {x, weight, scale, Tensor{}, rq, Tensor{}, rv}, attrs, "d");
      },
      {"residual_scale 'rv' must be a scalar"}));
}

}  // namespace
}  // namespace tensoracle
