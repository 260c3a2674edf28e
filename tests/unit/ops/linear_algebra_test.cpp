// Shape-inference and verifier tests of the linear_algebra ops.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/network.hpp"

namespace tensoracle {
namespace {

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

Attributes flags(bool transpose_a, bool transpose_b) {
  return {{"transpose_a", std::int64_t{transpose_a}}, {"transpose_b", std::int64_t{transpose_b}}};
}

// ---- matmul ----

TEST(LinearAlgebraMatmul, BroadcastsBatchDims) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF16, {2, 1, 3, 4});
  Tensor b = net.add_input("b", DataType::kF16, {5, 4, 6});
  Tensor y = net.add_matmul(a, b);
  EXPECT_EQ(net.shape(y), Dims({2, 5, 3, 6}));
  EXPECT_EQ(net.dtype(y), DataType::kF16);
}

TEST(LinearAlgebraMatmul, TransposesSwapTheLastTwoDims) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {4, 3});
  Tensor b = net.add_input("b", DataType::kF32, {7, 6, 4});
  EXPECT_EQ(net.shape(net.add_matmul(a, b, true, true)), Dims({7, 3, 6}));
  Tensor c = net.add_input("c", DataType::kF32, {4, 6});
  EXPECT_EQ(net.shape(net.add_matmul(a, c, true, false)), Dims({3, 6}));
  Tensor d = net.add_input("d", DataType::kF32, {5, 4});
  EXPECT_EQ(net.shape(net.add_matmul(a, d, true, true)), Dims({3, 5}));
  Tensor e = net.add_input("e", DataType::kF32, {2, 5, 3});
  EXPECT_EQ(net.shape(net.add_matmul(e, a, false, true)), Dims({2, 5, 4}));
}

TEST(LinearAlgebraMatmul, EmptyAndUnitDims) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF64, {0, 5});
  Tensor b = net.add_input("b", DataType::kF64, {5, 0});
  EXPECT_EQ(net.shape(net.add_matmul(a, b)), Dims({0, 0}));
  Tensor k1a = net.add_input("k1a", DataType::kF64, {4, 1});
  Tensor k1b = net.add_input("k1b", DataType::kF64, {1, 6});
  EXPECT_EQ(net.shape(net.add_matmul(k1a, k1b)), Dims({4, 6}));
}

TEST(LinearAlgebraMatmul, DynamicDims) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {-1, -1, 8});
  Tensor b = net.add_input("b", DataType::kF32, {8, 6});
  Tensor y = net.add_matmul(a, b);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), Dims({-1, -1, 6}));
  EXPECT_EQ(net.dim_expression(y, 0), "a.0");
  EXPECT_EQ(net.dim_expression(y, 1), "a.1");
  auto shapes = net.infer_shapes({{"a", {2, 3, 8}}, {"b", {8, 6}}});
  EXPECT_EQ(shapes.at("y"), Dims({2, 3, 6}));
}

TEST(LinearAlgebraMatmul, DynamicBatchBroadcastIsCheckedForConcreteShapes) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {-1, 3, 4});
  Tensor b = net.add_input("b", DataType::kF32, {5, 4, 6});
  Tensor y = net.add_layer("matmul", {a, b}, {}, "mm").at(0);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), Dims({-1, 3, 6}));
  EXPECT_EQ(net.infer_shapes({{"a", {1, 3, 4}}, {"b", {5, 4, 6}}}).at("y"), Dims({5, 3, 6}));
  EXPECT_EQ(net.infer_shapes({{"a", {5, 3, 4}}, {"b", {5, 4, 6}}}).at("y"), Dims({5, 3, 6}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.infer_shapes({{"a", {2, 3, 4}}, {"b", {5, 4, 6}}});
      },
      {"layer 'mm' (matmul)", "batch dims", "can't be broadcast"}));
}

TEST(LinearAlgebraMatmul, DynamicKIsCheckedForConcreteShapes) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {3, -1});
  Tensor b = net.add_input("b", DataType::kF32, {-1, 2});
  Tensor y = net.add_layer("matmul", {a, b}, {}, "mm").at(0);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), Dims({3, 2}));
  EXPECT_EQ(net.infer_shapes({{"a", {3, 4}}, {"b", {4, 2}}}).at("y"), Dims({3, 2}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.infer_shapes({{"a", {3, 4}}, {"b", {5, 2}}});
      },
      {"layer 'mm' (matmul)", "K differs", "4 != 5"}));
}

TEST(LinearAlgebraMatmul, RejectsRankBelowTwo) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {4});
  Tensor b = net.add_input("b", DataType::kF32, {4, 2});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("matmul", {a, b}, {}, "mm");
      },
      {"layer 'mm' (matmul)", "a 'a' must have rank >= 2", "[4]"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("matmul", {b, a}, {}, "mm"); }, {"b 'a' must have rank >= 2"}));
  EXPECT_EQ(net.num_layers(), 0u);
}

TEST(LinearAlgebraMatmul, RejectsMismatchedK) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {3, 4});
  Tensor b = net.add_input("b", DataType::kF32, {5, 2});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("matmul", {a, b}, {}, "mm");
      },
      {"layer 'mm' (matmul)", "K differs between 'a' [3,4] and 'b' [5,2]", "4 != 5"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("matmul", {a, b}, flags(true, false), "mm");
      },
      {"'a' [3,4] (transposed)", "3 != 5"}));
}

TEST(LinearAlgebraMatmul, RejectsBatchDimsThatDontBroadcast) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {2, 3, 4});
  Tensor b = net.add_input("b", DataType::kF32, {3, 4, 2});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("matmul", {a, b}, {}, "mm");
      },
      {"layer 'mm' (matmul)", "batch dims of 'a' [2,3,4] and 'b' [3,4,2] can't be broadcast"}));
}

TEST(LinearAlgebraMatmul, RejectsMixedAndNonFloatDtypes) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {3, 4});
  Tensor b = net.add_input("b", DataType::kF16, {4, 2});
  Tensor i = net.add_input("i", DataType::kI32, {4, 2});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("matmul", {a, b}, {}, "mm");
      },
      {"layer 'mm' (matmul)", "'a' (f32) and 'b' (f16) must have the same dtype"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("matmul", {i, i}, {}, "mm"); }, {"a 'i' has dtype i32"}));
}

TEST(LinearAlgebraMatmul, RejectsBadAttributes) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, {3, 4});
  Tensor b = net.add_input("b", DataType::kF32, {4, 2});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("matmul", {a, b}, {{"transpose_a", std::int64_t{2}}}, "mm");
      },
      {"layer 'mm' (matmul)", "'transpose_a' must be a boolean"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("matmul", {a, b}, {{"transpose", std::int64_t{1}}}, "mm");
      },
      {"unknown attribute 'transpose'"}));
}

// ---- linear ----

TEST(LinearAlgebraLinear, StaticShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kBF16, {2, 3, 13});
  Tensor w = zeros(net, "w", {5, 13}, DataType::kBF16);
  Tensor b = zeros(net, "b", {5}, DataType::kBF16);
  EXPECT_EQ(net.shape(net.add_linear(x, w, b)), Dims({2, 3, 5}));
  EXPECT_EQ(net.shape(net.add_linear(x, w)), Dims({2, 3, 5}));
  Tensor v = net.add_input("v", DataType::kBF16, {13});
  EXPECT_EQ(net.shape(net.add_linear(v, w, b)), Dims({5}));
  Tensor empty = net.add_input("empty", DataType::kBF16, {0, 13});
  EXPECT_EQ(net.shape(net.add_linear(empty, w)), Dims({0, 5}));
}

TEST(LinearAlgebraLinear, DynamicShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, -1});
  Tensor w = zeros(net, "w", {10, 16});
  Tensor y = net.add_layer("linear", {x, w}, {}, "fc1").at(0);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), Dims({-1, 10}));
  EXPECT_EQ(net.dim_expression(y, 0), "x.0");
  EXPECT_EQ(net.infer_shapes({{"x", {7, 16}}}).at("y"), Dims({7, 10}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.infer_shapes({{"x", {7, 15}}});
      },
      {"layer 'fc1' (linear)", "weight 'w' has shape [10,16] but x 'x' has shape [7,15]", "16 != 15"}));
}

TEST(LinearAlgebraLinear, RejectsMismatchedInFeatures) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 64});
  Tensor w = zeros(net, "fc1.weight", {10, 32});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("linear", {x, w}, {}, "fc1");
      },
      {"layer 'fc1' (linear)", "weight 'fc1.weight' has shape [10,32] but x 'x' has shape [2,64]"}));
}

TEST(LinearAlgebraLinear, RejectsBadWeightAndBiasShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 8});
  Tensor w1 = zeros(net, "w1", {8});
  Tensor w = zeros(net, "w", {4, 8});
  Tensor b = zeros(net, "b", {5});
  Tensor b2 = zeros(net, "b2", {1, 4});
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("linear", {x, w1}, {}, "fc");
      },
      {"layer 'fc' (linear)", "weight 'w1' must have rank 2"}));
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("linear", {x, w, b}, {}, "fc");
      },
      {"layer 'fc' (linear)", "bias 'b' has shape [5] but weight 'w' has shape [4,8]", "5 != 4"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("linear", {x, w, b2}, {}, "fc"); }, {"bias 'b2' must have rank 1"}));
}

TEST(LinearAlgebraLinear, RejectsScalarXAndBadDtypes) {
  Network net;
  Tensor s = net.add_input("s", DataType::kF32, {});
  Tensor x = net.add_input("x", DataType::kF32, {2, 8});
  Tensor xi = net.add_input("xi", DataType::kI8, {2, 8});
  Tensor w = zeros(net, "w", {4, 8});
  Tensor wh = zeros(net, "wh", {4, 8}, DataType::kF16);
  Tensor bh = zeros(net, "bh", {4}, DataType::kF16);
  EXPECT_TRUE(FailsWith(
      [&] {
        net.add_layer("linear", {s, w}, {}, "fc");
      },
      {"layer 'fc' (linear)", "x 's' must have rank >= 1"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("linear", {x, wh}, {}, "fc"); }, {"'x' (f32) and 'wh' (f16)"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("linear", {x, w, bh}, {}, "fc"); }, {"'x' (f32) and 'bh' (f16)"}));
  EXPECT_TRUE(FailsWith([&] { net.add_layer("linear", {xi, w}, {}, "fc"); }, {"x 'xi' has dtype i8"}));
  EXPECT_TRUE(
      FailsWith([&] { net.add_layer("linear", {x}, {}, "fc"); }, {"layer 'fc' (linear)", "takes 2 to 4 inputs"}));
}

}  // namespace
}  // namespace tensoracle
