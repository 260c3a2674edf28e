// Shape-inference and verifier tests of the reduction ops.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tensoracle/network.hpp"

namespace tensoracle {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The message of the GraphError `f` throws, or a marker that makes HasSubstr checks fail.
std::string graph_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const GraphError& e) {
    return e.what();
  }
  return "<no GraphError thrown>";
}

Attributes reduce_attrs(std::vector<std::int64_t> axes, bool keep_dims = false) {
  return {{"axes", std::move(axes)}, {"keep_dims", std::int64_t{keep_dims ? 1 : 0}}};
}

Attributes arg_attrs(std::int64_t axis, bool keep_dims = false) {
  return {{"axis", axis}, {"keep_dims", std::int64_t{keep_dims ? 1 : 0}}};
}

// ---- reduce_* ----

TEST(ReductionOps, ReduceShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3, 5, 7});
  EXPECT_EQ(net.shape(net.add_reduce("sum", x, {1, 3}, false)), (Dims{2, 5}));
  EXPECT_EQ(net.shape(net.add_reduce("mean", x, {1, 3}, true)), (Dims{2, 1, 5, 1}));
  EXPECT_EQ(net.shape(net.add_reduce("max", x, {-1, 0}, false)), (Dims{3, 5}));
  EXPECT_EQ(net.shape(net.add_reduce("min", x, {}, false)), Dims{});
  EXPECT_EQ(net.shape(net.add_reduce("prod", x, {}, true)), (Dims{1, 1, 1, 1}));
  Tensor y = net.add_layer("reduce_sum", {x}, {}, "default_axes").at(0);
  EXPECT_EQ(net.shape(y), Dims{});
  EXPECT_EQ(net.dtype(y), DataType::kF32);
}

TEST(ReductionOps, ReduceDynamicShape) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, Dims{-1, 4, -1});
  Tensor y = net.add_reduce("sum", x, {1}, false);
  Tensor z = net.add_reduce("max", x, {0, 1}, true);
  net.mark_output(y, "y");
  net.mark_output(z, "z");
  EXPECT_EQ(net.shape(y), (Dims{-1, -1}));
  EXPECT_EQ(net.dim_expression(y, 1), "x.2");
  EXPECT_EQ(net.shape(z), (Dims{1, 1, -1}));
  auto shapes = net.infer_shapes({{"x", Dims{3, 4, 6}}});
  EXPECT_EQ(shapes.at("y"), (Dims{3, 6}));
  EXPECT_EQ(shapes.at("z"), (Dims{1, 1, 6}));
}

TEST(ReductionOps, ReduceKeepsIntegerDtype) {
  Network net;
  for (DataType t : {DataType::kI64, DataType::kI32, DataType::kI16, DataType::kI8, DataType::kU8}) {
    Tensor x = net.add_input(std::string("x_") + std::string(to_string(t)), t, Dims{2, 3});
    for (const char* op : {"sum", "max", "min", "prod"}) {
      Tensor y = net.add_reduce(op, x, {1}, false);
      EXPECT_EQ(net.dtype(y), t) << op;
      EXPECT_EQ(net.shape(y), Dims{2});
    }
  }
}

TEST(ReductionOps, ReduceOfScalar) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{});
  EXPECT_EQ(net.shape(net.add_reduce("sum", x, {}, true)), Dims{});
  EXPECT_EQ(net.shape(net.add_reduce("sum", x, {0}, false)), Dims{});
  EXPECT_EQ(net.shape(net.add_reduce("max", x, {-1}, true)), Dims{});
  EXPECT_THAT(graph_error([&] { net.add_layer("reduce_sum", {x}, reduce_attrs({1}), "r"); }),
              AllOf(HasSubstr("layer 'r' (reduce_sum)"), HasSubstr("axis 1 is out of range for tensor 'x' of rank 0")));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("reduce_sum", {x}, reduce_attrs({0, -1}), "r");
              }),
              HasSubstr("names axis 0 twice"));
}

TEST(ReductionOps, ReduceRejectsAxisOutOfRange) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3});
  EXPECT_THAT(graph_error([&] { net.add_layer("reduce_sum", {x}, reduce_attrs({2}), "r"); }),
              AllOf(HasSubstr("layer 'r' (reduce_sum)"), HasSubstr("axis 2 is out of range for tensor 'x' of rank 2")));
  EXPECT_THAT(graph_error([&] { net.add_layer("reduce_mean", {x}, reduce_attrs({-3}), "r"); }),
              AllOf(HasSubstr("layer 'r' (reduce_mean)"), HasSubstr("axis -3 is out of range")));
}

TEST(ReductionOps, ReduceRejectsDuplicateAxes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3, 4});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("reduce_sum", {x}, reduce_attrs({1, 1}), "r");
              }),
              AllOf(HasSubstr("layer 'r' (reduce_sum)"), HasSubstr("attribute 'axes' [1,1] names axis 1 twice")));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("reduce_max", {x}, reduce_attrs({2, -1}), "r");
              }),
              AllOf(HasSubstr("layer 'r' (reduce_max)"), HasSubstr("[2,-1] names axis 2 twice")));
}

TEST(ReductionOps, ReduceRejectsUnsupportedDtypes) {
  Network net;
  Tensor i = net.add_input("i", DataType::kI32, Dims{2, 3});
  Tensor b = net.add_input("b", DataType::kBool, Dims{2, 3});
  Tensor f8 = net.add_input("f8", DataType::kF8E4M3, Dims{2, 3});
  EXPECT_THAT(graph_error([&] { net.add_layer("reduce_mean", {i}, reduce_attrs({1}), "r"); }),
              AllOf(HasSubstr("layer 'r' (reduce_mean)"), HasSubstr("input 'i' has dtype i32, expected one of f32")));
  EXPECT_THAT(graph_error([&] { net.add_layer("reduce_sum", {b}, reduce_attrs({1}), "r"); }),
              AllOf(HasSubstr("layer 'r' (reduce_sum)"), HasSubstr("input 'b' has dtype bool")));
  EXPECT_THAT(graph_error([&] { net.add_layer("reduce_max", {f8}, reduce_attrs({1}), "r"); }),
              HasSubstr("input 'f8' has dtype f8e4m3"));
}

TEST(ReductionOps, ReduceRejectsBadAttributes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("reduce_sum", {x}, {{"axes", std::int64_t{1}}}, "r");
              }),
              AllOf(HasSubstr("layer 'r' (reduce_sum)"), HasSubstr("attribute 'axes' must be a list of integers")));
  EXPECT_THAT(
      graph_error([&] {
        net.add_layer("reduce_sum", {x}, {{"axes", std::vector<std::int64_t>{1}}, {"keep_dims", std::int64_t{2}}}, "r");
      }),
      HasSubstr("attribute 'keep_dims' must be a boolean (0 or 1), not 2"));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("reduce_sum", {x}, {{"axis", std::int64_t{1}}}, "r");
              }),
              HasSubstr("unknown attribute 'axis'"));
}

TEST(ReductionOps, ReduceMaxMinRejectEmptyAxis) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{3, 0, 4});
  EXPECT_THAT(graph_error([&] { net.add_layer("reduce_max", {x}, reduce_attrs({1}), "r"); }),
              AllOf(HasSubstr("layer 'r' (reduce_max)"), HasSubstr("axis 1 of x 'x' [3,0,4] is empty"),
                    HasSubstr("reduce_max of no elements is undefined")));
  EXPECT_THAT(graph_error([&] { net.add_layer("reduce_min", {x}, reduce_attrs({}), "r"); }),
              AllOf(HasSubstr("layer 'r' (reduce_min)"), HasSubstr("axis 1 of x 'x' [3,0,4] is empty")));
  // Empty axes not reduced are fine, and sum/mean/prod have an identity (or NaN).
  EXPECT_EQ(net.shape(net.add_reduce("max", x, {2}, false)), (Dims{3, 0}));
  EXPECT_EQ(net.shape(net.add_reduce("sum", x, {1}, false)), (Dims{3, 4}));
  EXPECT_EQ(net.shape(net.add_reduce("prod", x, {}, true)), (Dims{1, 1, 1}));
  EXPECT_EQ(net.shape(net.add_reduce("mean", x, {1}, true)), (Dims{3, 1, 4}));
}

TEST(ReductionOps, ReduceMaxRejectsEmptyDynamicAxisWhenShapesAreKnown) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, -1});
  net.mark_output(net.add_layer("reduce_max", {x}, reduce_attrs({1}), "r").at(0), "y");
  EXPECT_EQ(net.infer_shapes({{"x", Dims{2, 5}}}).at("y"), Dims{2});
  EXPECT_THAT(graph_error([&] {
                net.infer_shapes({{"x", Dims{2, 0}}});
              }),
              AllOf(HasSubstr("layer 'r' (reduce_max)"), HasSubstr("axis 1 of x 'x' [2,0] is empty")));
}

// ---- argmax / argmin ----

TEST(ReductionOps, ArgReduceShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kBF16, Dims{4, 13, 3});
  Tensor a = net.add_arg_reduce(true, x, 1, false);
  EXPECT_EQ(net.shape(a), (Dims{4, 3}));
  EXPECT_EQ(net.dtype(a), DataType::kI64);
  EXPECT_EQ(net.shape(net.add_arg_reduce(false, x, -1, true)), (Dims{4, 13, 1}));
  Tensor i = net.add_input("i", DataType::kI32, Dims{5});
  EXPECT_EQ(net.shape(net.add_arg_reduce(true, i, 0, false)), Dims{});
  Tensor s = net.add_input("s", DataType::kF32, Dims{});
  EXPECT_EQ(net.shape(net.add_arg_reduce(true, s, -1, true)), Dims{});
}

TEST(ReductionOps, ArgReduceDynamicShape) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, -1, 8});
  Tensor y = net.add_arg_reduce(true, x, 1, true);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), (Dims{-1, 1, 8}));
  EXPECT_EQ(net.dim_expression(y, 0), "x.0");
  EXPECT_EQ(net.infer_shapes({{"x", Dims{2, 7, 8}}}).at("y"), (Dims{2, 1, 8}));
  EXPECT_THAT(graph_error([&] {
                net.infer_shapes({{"x", Dims{2, 0, 8}}});
              }),
              AllOf(HasSubstr("(argmax)"), HasSubstr("axis 1 of x 'x' [2,0,8] is empty")));
}

TEST(ReductionOps, ArgReduceRejectsBadAxis) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3});
  EXPECT_THAT(graph_error([&] { net.add_layer("argmax", {x}, arg_attrs(2), "am"); }),
              AllOf(HasSubstr("layer 'am' (argmax)"), HasSubstr("axis 2 is out of range for tensor 'x' of rank 2")));
  EXPECT_THAT(graph_error([&] { net.add_layer("argmin", {x}, {}, "am"); }),
              AllOf(HasSubstr("layer 'am' (argmin)"), HasSubstr("attribute 'axis' is required")));
}

TEST(ReductionOps, ArgReduceRejectsEmptyAxis) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{0, 3});
  EXPECT_THAT(graph_error([&] { net.add_layer("argmin", {x}, arg_attrs(0), "am"); }),
              AllOf(HasSubstr("layer 'am' (argmin)"), HasSubstr("axis 0 of x 'x' [0,3] is empty")));
  EXPECT_EQ(net.shape(net.add_arg_reduce(true, x, 1, false)), Dims{0});
}

TEST(ReductionOps, ArgReduceRejectsBool) {
  Network net;
  Tensor x = net.add_input("x", DataType::kBool, Dims{2, 3});
  EXPECT_THAT(graph_error([&] { net.add_layer("argmax", {x}, arg_attrs(1), "am"); }),
              AllOf(HasSubstr("layer 'am' (argmax)"), HasSubstr("input 'x' has dtype bool")));
}

// ---- top_k ----

TEST(ReductionOps, TopKShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, Dims{4, 17});
  auto [values, indices] = net.add_top_k(x, 5);
  EXPECT_EQ(net.shape(values), (Dims{4, 5}));
  EXPECT_EQ(net.dtype(values), DataType::kF16);
  EXPECT_EQ(net.shape(indices), (Dims{4, 5}));
  EXPECT_EQ(net.dtype(indices), DataType::kI64);
  auto [v0, i0] = net.add_top_k(x, 3, 0, false);
  EXPECT_EQ(net.shape(v0), (Dims{3, 17}));
  EXPECT_EQ(net.shape(net.add_top_k(x, 0).first), (Dims{4, 0}));
  EXPECT_EQ(net.shape(net.add_top_k(x, 17).second), (Dims{4, 17}));
  Tensor i = net.add_input("i", DataType::kI8, Dims{3, 9});
  EXPECT_EQ(net.dtype(net.add_top_k(i, 2).first), DataType::kI8);
}

TEST(ReductionOps, TopKDynamicShape) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, -1});
  auto out = net.add_layer("top_k", {x}, {{"k", std::int64_t{4}}}, "tk");
  net.mark_output(out.at(0), "values");
  net.mark_output(out.at(1), "indices");
  EXPECT_EQ(net.shape(out.at(0)), (Dims{-1, 4}));
  EXPECT_EQ(net.dim_expression(out.at(1), 0), "x.0");
  auto shapes = net.infer_shapes({{"x", Dims{3, 12}}});
  EXPECT_EQ(shapes.at("values"), (Dims{3, 4}));
  EXPECT_EQ(shapes.at("indices"), (Dims{3, 4}));
  EXPECT_THAT(
      graph_error([&] {
        net.infer_shapes({{"x", Dims{3, 3}}});
      }),
      AllOf(HasSubstr("layer 'tk' (top_k)"), HasSubstr("k 4 is larger than axis 1 of x 'x' [3,3] (3 elements)")));
}

TEST(ReductionOps, TopKRejectsKLargerThanAxis) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{4, 17});
  EXPECT_THAT(
      graph_error([&] {
        net.add_layer("top_k", {x}, {{"k", std::int64_t{18}}}, "tk");
      }),
      AllOf(HasSubstr("layer 'tk' (top_k)"), HasSubstr("k 18 is larger than axis 1 of x 'x' [4,17] (17 elements)")));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("top_k", {x}, {{"k", std::int64_t{5}}, {"axis", std::int64_t{0}}}, "tk");
              }),
              HasSubstr("k 5 is larger than axis 0"));
}

TEST(ReductionOps, TopKRejectsBadAttributes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{4, 17});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("top_k", {x}, {{"k", std::int64_t{-1}}}, "tk");
              }),
              AllOf(HasSubstr("layer 'tk' (top_k)"), HasSubstr("attribute 'k' must be >= 0, not -1")));
  EXPECT_THAT(graph_error([&] { net.add_layer("top_k", {x}, {}, "tk"); }), HasSubstr("attribute 'k' is required"));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("top_k", {x}, {{"k", std::int64_t{1}}, {"axis", std::int64_t{2}}}, "tk");
              }),
              HasSubstr("axis 2 is out of range for tensor 'x' of rank 2"));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("top_k", {x}, {{"k", std::int64_t{1}}, {"largest", std::int64_t{2}}}, "tk");
              }),
              HasSubstr("attribute 'largest' must be a boolean (0 or 1), not 2"));
}

TEST(ReductionOps, TopKRejectsScalarAndBool) {
  Network net;
  Tensor s = net.add_input("s", DataType::kF32, Dims{});
  Tensor b = net.add_input("b", DataType::kBool, Dims{3});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("top_k", {s}, {{"k", std::int64_t{1}}}, "tk");
              }),
              AllOf(HasSubstr("layer 'tk' (top_k)"), HasSubstr("x 's' is a scalar; top_k needs rank >= 1")));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("top_k", {b}, {{"k", std::int64_t{1}}}, "tk");
              }),
              HasSubstr("input 'b' has dtype bool"));
}

}  // namespace
}  // namespace tensoracle
