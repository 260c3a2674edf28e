// Shape-inference and verifier tests of the data_movement ops.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "tensoracle/network.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

// The GraphError message of `f`, or a marker when it does not throw one.
template <typename F>
std::string graph_error(F&& f) {
  try {
    f();
  } catch (const GraphError& e) {
    return e.what();
  }
  return "<no GraphError>";
}

// The GraphError message of adding one layer, or a marker when it is accepted.
std::string add_error(Network& net, const std::string& op, const std::vector<Tensor>& inputs, const Attributes& attrs,
                      const std::string& name) {
  return graph_error([&] { net.add_layer(op, inputs, attrs, name); });
}

// The GraphError message of evaluating concrete shapes, or a marker when they fit.
std::string infer_error(const Network& net, const std::map<std::string, Dims>& shapes) {
  return graph_error([&] { net.infer_shapes(shapes); });
}

Dims inferred(const Network& net, Tensor t, const std::map<std::string, Dims>& inputs) {
  return net.infer_shapes(inputs).at(net.name(t));
}

// ---- reshape ----

TEST(DataMovementReshape, StaticShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3, 4});
  EXPECT_EQ(net.shape(net.add_reshape(x, {0, -1})), (Dims{2, 12}));
  EXPECT_EQ(net.shape(net.add_reshape(x, {-1})), (Dims{24}));
  EXPECT_EQ(net.shape(net.add_reshape(x, {4, 0, 2})), (Dims{4, 3, 2}));
  EXPECT_EQ(net.shape(net.add_reshape(x, {2, 1, 12, 1})), (Dims{2, 1, 12, 1}));
  Tensor one = net.add_input("one", DataType::kI32, Dims{1, 1});
  EXPECT_EQ(net.shape(net.add_reshape(one, {})), (Dims{}));
  Tensor empty = net.add_input("empty", DataType::kBool, Dims{0, 5});
  EXPECT_EQ(net.shape(net.add_reshape(empty, {5, -1})), (Dims{5, 0}));
}

TEST(DataMovementReshape, DynamicInferredDimCancelsFactors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, 12});
  Tensor y = net.add_reshape(x, {-1, 3, 4});
  EXPECT_EQ(net.shape(y), (Dims{-1, 3, 4}));
  EXPECT_EQ(net.dim_expression(y, 0), "x.0");
  Tensor z = net.add_reshape(x, {0, 2, -1});
  EXPECT_EQ(net.shape(z), (Dims{-1, 2, 6}));
  Tensor w = net.add_reshape(x, {-1, 6});
  EXPECT_EQ(net.dim_expression(w, 0), "x.0 * 2");
  EXPECT_EQ(inferred(net, w, {{"x", Dims{5, 12}}}), (Dims{10, 6}));
}

TEST(DataMovementReshape, DynamicInferredDimIsCheckedWhenKnown) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, 6});
  Tensor y = net.add_reshape(x, {-1, 4});
  EXPECT_EQ(net.shape(y), (Dims{-1, 4}));
  EXPECT_EQ(inferred(net, y, {{"x", Dims{2, 6}}}), (Dims{3, 4}));
  EXPECT_THAT(infer_error(net, {{"x", Dims{1, 6}}}), AllOf(HasSubstr("reshape_0"), HasSubstr("not divisible by 4")));
}

TEST(DataMovementReshape, TwoDynamicDims) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, Dims{-1, -1, 4});
  Tensor y = net.add_reshape(x, {0, -1});
  EXPECT_EQ(net.shape(y), (Dims{-1, -1}));
  EXPECT_EQ(net.dim_expression(y, 1), "x.1 * 4");
  Tensor z = net.add_reshape(x, {-1, 8});
  EXPECT_EQ(inferred(net, z, {{"x", Dims{3, 2, 4}}}), (Dims{3, 8}));
  // Without a -1 the volumes are compared once known.
  Tensor v = net.add_reshape(x, {0, 0, 2, 2});
  EXPECT_EQ(inferred(net, v, {{"x", Dims{3, 2, 4}}}), (Dims{3, 2, 2, 2}));
  Tensor u = net.add_reshape(x, {6, 4});
  EXPECT_EQ(inferred(net, u, {{"x", Dims{3, 2, 4}}}), (Dims{6, 4}));
  EXPECT_THAT(infer_error(net, {{"x", Dims{4, 2, 4}}}), AllOf(HasSubstr("reshape_3"), HasSubstr("volumes differ")));
}

TEST(DataMovementReshape, Errors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3, 4});
  EXPECT_THAT(add_error(net, "reshape", {x}, {{"shape", std::vector<std::int64_t>{-1, -1}}}, "r1"),
              AllOf(HasSubstr("layer 'r1' (reshape)"), HasSubstr("more than one -1")));
  EXPECT_THAT(add_error(net, "reshape", {x}, {{"shape", std::vector<std::int64_t>{-2, 12}}}, "r2"),
              AllOf(HasSubstr("layer 'r2'"), HasSubstr("invalid size -2")));
  EXPECT_THAT(add_error(net, "reshape", {x}, {{"shape", std::vector<std::int64_t>{6, 2, 2, 0}}}, "r3"),
              AllOf(HasSubstr("layer 'r3'"), HasSubstr("position 3"), HasSubstr("'x' has rank 3")));
  EXPECT_THAT(
      add_error(net, "reshape", {x}, {{"shape", std::vector<std::int64_t>{5, 5}}}, "r4"),
      AllOf(HasSubstr("layer 'r4'"), HasSubstr("'x' of shape [2,3,4]"), HasSubstr("volumes differ (24 vs 25)")));
  EXPECT_THAT(add_error(net, "reshape", {x}, {{"shape", std::vector<std::int64_t>{5, -1}}}, "r5"),
              AllOf(HasSubstr("layer 'r5'"), HasSubstr("not divisible by 5")));
  Tensor e = net.add_input("e", DataType::kF32, Dims{0, 3});
  EXPECT_THAT(add_error(net, "reshape", {e}, {{"shape", std::vector<std::int64_t>{0, -1}}}, "r6"),
              AllOf(HasSubstr("layer 'r6'"), HasSubstr("zero product")));
  EXPECT_THAT(add_error(net, "reshape", {x}, {}, "r7"),
              AllOf(HasSubstr("layer 'r7'"), HasSubstr("'shape' is required")));
  EXPECT_THAT(add_error(net, "reshape", {x}, {{"shape", std::vector<std::int64_t>{kMax, kMax, 0}}}, "r8"),
              AllOf(HasSubstr("layer 'r8'"), HasSubstr("overflow")));
  EXPECT_EQ(net.num_layers(), 0u);
}

TEST(DataMovementReshape, DynamicVolumeMismatchFoundAtBuild) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, 4});
  EXPECT_THAT(add_error(net, "reshape", {x}, {{"shape", std::vector<std::int64_t>{0, 8}}}, "r"),
              AllOf(HasSubstr("layer 'r'"), HasSubstr("volumes differ")));
}

// ---- transpose ----

TEST(DataMovementTranspose, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kI64, Dims{-1, 3, 4});
  Tensor y = net.add_transpose(x, {2, 0, 1});
  EXPECT_EQ(net.shape(y), (Dims{4, -1, 3}));
  EXPECT_EQ(net.dim_expression(y, 1), "x.0");
  EXPECT_EQ(net.shape(net.add_transpose(x, {-1, 1, 0})), (Dims{4, 3, -1}));
  EXPECT_EQ(inferred(net, y, {{"x", Dims{7, 3, 4}}}), (Dims{4, 7, 3}));
  Tensor s = net.add_input("s", DataType::kF32, Dims{});
  EXPECT_EQ(net.shape(net.add_transpose(s, {})), (Dims{}));
}

TEST(DataMovementTranspose, Errors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3, 4});
  EXPECT_THAT(add_error(net, "transpose", {x}, {{"perm", std::vector<std::int64_t>{1, 0}}}, "t1"),
              AllOf(HasSubstr("layer 't1' (transpose)"), HasSubstr("has 2 entries but 'x' has rank 3")));
  EXPECT_THAT(add_error(net, "transpose", {x}, {{"perm", std::vector<std::int64_t>{0, 1, 1}}}, "t2"),
              AllOf(HasSubstr("layer 't2'"), HasSubstr("more than once")));
  EXPECT_THAT(add_error(net, "transpose", {x}, {{"perm", std::vector<std::int64_t>{0, 1, 3}}}, "t3"),
              AllOf(HasSubstr("layer 't3'"), HasSubstr("axis 3, out of range")));
}

// ---- slice ----

TEST(DataMovementSlice, StaticShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{10, 7, 5});
  EXPECT_EQ(net.shape(net.add_slice(x, {2}, {8}, {0}, {2})), (Dims{3, 7, 5}));
  EXPECT_EQ(net.shape(net.add_slice(x, {-1}, {kMin}, {0}, {-1})), (Dims{10, 7, 5}));
  EXPECT_EQ(net.shape(net.add_slice(x, {-1}, {-11}, {0}, {-1})), (Dims{10, 7, 5}));
  EXPECT_EQ(net.shape(net.add_slice(x, {100}, {kMin}, {0}, {-3})), (Dims{4, 7, 5}));
  EXPECT_EQ(net.shape(net.add_slice(x, {1, -3}, {kMax, -1}, {-1, 1}, {})), (Dims{10, 2, 4}));
  EXPECT_EQ(net.shape(net.add_slice(x, {5}, {2}, {0}, {})), (Dims{0, 7, 5}));
  EXPECT_EQ(net.shape(net.add_slice(x, {2}, {5}, {2}, {-1})), (Dims{10, 7, 0}));
  EXPECT_EQ(net.shape(net.add_slice(x, {0, 0}, {3, 3}, {}, {})), (Dims{3, 3, 5}));
  EXPECT_EQ(net.shape(net.add_slice(x, {0}, {10}, {0}, {kMin})), (Dims{0, 7, 5}));
  EXPECT_EQ(net.shape(net.add_slice(x, {9}, {-100}, {0}, {kMin})), (Dims{1, 7, 5}));
  Tensor e = net.add_input("e", DataType::kF32, Dims{0});
  EXPECT_EQ(net.shape(net.add_slice(e, {-1}, {kMin}, {0}, {-1})), (Dims{0}));
  EXPECT_EQ(net.shape(net.add_slice(e, {0}, {kMax}, {0}, {1})), (Dims{0}));
}

TEST(DataMovementSlice, DynamicDimsClampWithMinMax) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, 4});
  Tensor tail = net.add_slice(x, {1}, {kMax}, {0});
  Tensor last2 = net.add_slice(x, {-2}, {kMax}, {0});
  Tensor rev = net.add_slice(x, {-1}, {kMin}, {0}, {-2});
  Tensor mid = net.add_slice(x, {1}, {-1}, {0}, {3});
  EXPECT_EQ(net.shape(tail), (Dims{-1, 4}));
  for (std::int64_t n : {0, 1, 2, 3, 7}) {
    auto shapes = net.infer_shapes({{"x", Dims{n, 4}}});
    EXPECT_EQ(shapes.at(net.name(tail)), (Dims{std::max<std::int64_t>(n - 1, 0), 4})) << n;
    EXPECT_EQ(shapes.at(net.name(last2)), (Dims{std::min<std::int64_t>(n, 2), 4})) << n;
    EXPECT_EQ(shapes.at(net.name(rev)), (Dims{(n + 1) / 2, 4})) << n;
    EXPECT_EQ(shapes.at(net.name(mid)), (Dims{n >= 2 ? (n - 2 + 2) / 3 : 0, 4})) << n;
  }
}

TEST(DataMovementSlice, Errors) {
  using L = std::vector<std::int64_t>;
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{4, 5});
  auto slice = [&](const Attributes& attrs, const std::string& name) {
    return add_error(net, "slice", {x}, attrs, name);
  };
  EXPECT_THAT(slice({{"starts", L{0}}, {"ends", L{2}}, {"axes", L{0}}, {"steps", L{0}}}, "s1"),
              AllOf(HasSubstr("layer 's1' (slice)"), HasSubstr("steps must be non-zero")));
  EXPECT_THAT(slice({{"starts", L{0, 0}}, {"ends", L{2, 2}}, {"axes", L{1, -1}}}, "s2"),
              AllOf(HasSubstr("layer 's2'"), HasSubstr("names axis 1 more than once")));
  EXPECT_THAT(slice({{"starts", L{0}}, {"ends", L{2, 2}}}, "s3"),
              AllOf(HasSubstr("layer 's3'"), HasSubstr("same length")));
  EXPECT_THAT(slice({{"starts", L{0}}, {"ends", L{2}}, {"axes", L{2}}}, "s4"),
              AllOf(HasSubstr("layer 's4'"), HasSubstr("axis 2, out of range for tensor 'x' of rank 2")));
  EXPECT_THAT(slice({{"starts", L{0}}, {"ends", L{2}}, {"axes", L{0, 1}}}, "s5"),
              AllOf(HasSubstr("layer 's5'"), HasSubstr("one entry per start")));
  EXPECT_THAT(slice({{"starts", L{0}}, {"ends", L{2}}, {"steps", L{1, 1}}}, "s6"),
              AllOf(HasSubstr("layer 's6'"), HasSubstr("steps [1,1] must have one entry per start")));
  EXPECT_THAT(slice({{"starts", L{0}}}, "s7"), AllOf(HasSubstr("layer 's7'"), HasSubstr("'ends' is required")));
}

// ---- concat ----

TEST(DataMovementConcat, Shapes) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, Dims{2, -1, 4});
  Tensor b = net.add_input("b", DataType::kF32, Dims{-1, 5, 4});
  Tensor c = net.add_input("c", DataType::kF32, Dims{2, 0, 4});
  Tensor y = net.add_concat({a, b, c}, 1);
  EXPECT_EQ(net.shape(y), (Dims{2, -1, 4}));
  EXPECT_EQ(net.dim_expression(y, 1), "a.1 + 5");
  EXPECT_EQ(inferred(net, y, {{"a", Dims{2, 3, 4}}, {"b", Dims{2, 5, 4}}, {"c", Dims{2, 0, 4}}}), (Dims{2, 8, 4}));
  EXPECT_THAT(infer_error(net, {{"a", Dims{2, 3, 4}}, {"b", Dims{3, 5, 4}}, {"c", Dims{2, 0, 4}}}),
              AllOf(HasSubstr("concat_0"), HasSubstr("at axis 0")));
  EXPECT_EQ(net.shape(net.add_concat({a}, -1)), (Dims{2, -1, 4}));
}

TEST(DataMovementConcat, Errors) {
  Network net;
  Tensor a = net.add_input("a", DataType::kF32, Dims{2, 3});
  Tensor b = net.add_input("b", DataType::kF16, Dims{2, 3});
  Tensor c = net.add_input("c", DataType::kF32, Dims{2, 3, 1});
  Tensor d = net.add_input("d", DataType::kF32, Dims{4, 3});
  Tensor s = net.add_input("s", DataType::kF32, Dims{});
  EXPECT_THAT(add_error(net, "concat", {a, b}, {{"axis", std::int64_t{0}}}, "c1"),
              AllOf(HasSubstr("layer 'c1' (concat)"), HasSubstr("'b' has dtype f16")));
  EXPECT_THAT(add_error(net, "concat", {a, c}, {{"axis", std::int64_t{0}}}, "c2"),
              AllOf(HasSubstr("layer 'c2'"), HasSubstr("same rank")));
  EXPECT_THAT(add_error(net, "concat", {a, d}, {{"axis", std::int64_t{1}}}, "c3"),
              AllOf(HasSubstr("layer 'c3'"), HasSubstr("'d' of shape [4,3]"), HasSubstr("at axis 0")));
  EXPECT_THAT(add_error(net, "concat", {a, d}, {{"axis", std::int64_t{2}}}, "c4"),
              AllOf(HasSubstr("layer 'c4'"), HasSubstr("axis 2 is out of range")));
  EXPECT_THAT(add_error(net, "concat", {s, s}, {{"axis", std::int64_t{0}}}, "c5"),
              AllOf(HasSubstr("layer 'c5'"), HasSubstr("scalar")));
  EXPECT_THAT(add_error(net, "concat", {}, {{"axis", std::int64_t{0}}}, "c6"),
              AllOf(HasSubstr("layer 'c6'"), HasSubstr("at least 1")));
  EXPECT_THAT(add_error(net, "concat", {a, Tensor{}}, {{"axis", std::int64_t{0}}}, "c7"),
              AllOf(HasSubstr("layer 'c7'"), HasSubstr("x1 (input 1) is required")));
}

// ---- split ----

TEST(DataMovementSplit, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kBool, Dims{-1, 10});
  auto parts = net.add_split(x, {3, 0, 7}, -1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(net.shape(parts[0]), (Dims{-1, 3}));
  EXPECT_EQ(net.shape(parts[1]), (Dims{-1, 0}));
  EXPECT_EQ(net.shape(parts[2]), (Dims{-1, 7}));
  EXPECT_EQ(net.dtype(parts[2]), DataType::kBool);
  Tensor y = net.add_input("y", DataType::kF32, Dims{-1, 2});
  auto halves = net.add_split(y, {2, 3}, 0);
  EXPECT_EQ(inferred(net, halves[1], {{"x", Dims{1, 10}}, {"y", Dims{5, 2}}}), (Dims{3, 2}));
  EXPECT_THAT(infer_error(net, {{"x", Dims{1, 10}}, {"y", Dims{6, 2}}}),
              AllOf(HasSubstr("split_1"), HasSubstr("sum to 5"), HasSubstr("has size 6")));
}

TEST(DataMovementSplit, Errors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{4, 6});
  EXPECT_THAT(
      add_error(net, "split", {x}, {{"sizes", std::vector<std::int64_t>{2, 3}}, {"axis", std::int64_t{1}}}, "p1"),
      AllOf(HasSubstr("layer 'p1' (split)"), HasSubstr("sum to 5"), HasSubstr("'x' (shape [4,6]) has size 6")));
  EXPECT_THAT(
      add_error(net, "split", {x}, {{"sizes", std::vector<std::int64_t>{5, -1}}, {"axis", std::int64_t{0}}}, "p2"),
      AllOf(HasSubstr("layer 'p2'"), HasSubstr("negative size -1")));
  EXPECT_THAT(add_error(net, "split", {x}, {{"sizes", std::vector<std::int64_t>{}}, {"axis", std::int64_t{0}}}, "p3"),
              AllOf(HasSubstr("layer 'p3'"), HasSubstr("sizes is empty")));
  EXPECT_THAT(add_error(net, "split", {x}, {{"sizes", std::vector<std::int64_t>{4}}, {"axis", std::int64_t{2}}}, "p4"),
              AllOf(HasSubstr("layer 'p4'"), HasSubstr("axis 2 is out of range")));
  EXPECT_THAT(
      add_error(net, "split", {x}, {{"sizes", std::vector<std::int64_t>{kMax, kMax}}, {"axis", std::int64_t{0}}}, "p5"),
      AllOf(HasSubstr("layer 'p5'"), HasSubstr("overflow")));
}

// ---- gather ----

TEST(DataMovementGather, Shapes) {
  Network net;
  Tensor data = net.add_input("data", DataType::kF16, Dims{5, -1, 3});
  Tensor idx = net.add_input("idx", DataType::kI32, Dims{2, -1});
  Tensor y = net.add_gather(data, idx, 1);
  EXPECT_EQ(net.shape(y), (Dims{5, 2, -1, 3}));
  EXPECT_EQ(net.dim_expression(y, 2), "idx.1");
  EXPECT_EQ(net.dtype(y), DataType::kF16);
  Tensor scalar = net.add_input("scalar", DataType::kI64, Dims{});
  EXPECT_EQ(net.shape(net.add_gather(data, scalar, -1)), (Dims{5, -1}));
  EXPECT_EQ(inferred(net, y, {{"data", Dims{5, 9, 3}}, {"idx", Dims{2, 4}}, {"scalar", Dims{}}}), (Dims{5, 2, 4, 3}));
}

TEST(DataMovementGather, Errors) {
  Network net;
  Tensor data = net.add_input("data", DataType::kF32, Dims{5, 3});
  Tensor fidx = net.add_input("fidx", DataType::kF32, Dims{2});
  Tensor idx = net.add_input("idx", DataType::kI64, Dims{2});
  Tensor s = net.add_input("s", DataType::kF32, Dims{});
  EXPECT_THAT(add_error(net, "gather", {data, fidx}, {}, "g1"),
              AllOf(HasSubstr("layer 'g1' (gather)"), HasSubstr("indices 'fidx' has dtype f32")));
  EXPECT_THAT(add_error(net, "gather", {data, idx}, {{"axis", std::int64_t{2}}}, "g2"),
              AllOf(HasSubstr("layer 'g2'"), HasSubstr("axis 2 is out of range for tensor 'data'")));
  EXPECT_THAT(add_error(net, "gather", {s, idx}, {}, "g3"), AllOf(HasSubstr("layer 'g3'"), HasSubstr("scalar")));
}

HostTensor i64_tensor(const Dims& dims, const std::vector<std::int64_t>& values) {
  HostTensor t(DataType::kI64, dims);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

TEST(DataMovementGather, OutOfRangeIndexFailsAtRunTime) {
  Network net;
  Tensor data = net.add_input("data", DataType::kI64, Dims{4});
  Tensor idx = net.add_input("idx", DataType::kI64, Dims{3});
  net.mark_output(net.add_layer("gather", {data, idx}, {}, "lookup").at(0), "y");
  auto ok =
      run_reference(net, {{"data", i64_tensor(Dims{4}, {10, 11, 12, 13})}, {"idx", i64_tensor(Dims{3}, {3, -4, -1})}});
  const auto* y = ok.at("y").data<std::int64_t>();
  EXPECT_EQ(y[0], 13);
  EXPECT_EQ(y[1], 10);
  EXPECT_EQ(y[2], 13);
  EXPECT_THAT(
      graph_error([&] {
        run_reference(net, {{"data", i64_tensor(Dims{4}, {1, 2, 3, 4})}, {"idx", i64_tensor(Dims{3}, {0, 4, 1})}});
      }),
      AllOf(HasSubstr("layer 'lookup' (gather)"), HasSubstr("index 4"), HasSubstr("size 4")));
  EXPECT_THAT(
      graph_error([&] {
        run_reference(net, {{"data", i64_tensor(Dims{4}, {1, 2, 3, 4})}, {"idx", i64_tensor(Dims{3}, {-5, 0, 1})}});
      }),
      AllOf(HasSubstr("layer 'lookup' (gather)"), HasSubstr("index -5")));
}

// ---- squeeze / unsqueeze ----

TEST(DataMovementSqueeze, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{1, 3, 1, 4});
  EXPECT_EQ(net.shape(net.add_squeeze(x, {})), (Dims{3, 4}));
  EXPECT_EQ(net.shape(net.add_squeeze(x, {-2})), (Dims{1, 3, 4}));
  Tensor d = net.add_input("d", DataType::kF32, Dims{-1, 1, -1});
  Tensor y = net.add_squeeze(d, {0, 1});
  EXPECT_EQ(net.shape(y), (Dims{-1}));
  EXPECT_EQ(net.dim_expression(y, 0), "d.2");
  EXPECT_EQ(inferred(net, y, {{"x", Dims{1, 3, 1, 4}}, {"d", Dims{1, 1, 6}}}), (Dims{6}));
  EXPECT_THAT(infer_error(net, {{"x", Dims{1, 3, 1, 4}}, {"d", Dims{2, 1, 6}}}),
              AllOf(HasSubstr("squeeze_2"), HasSubstr("axis 0 of 'd'"), HasSubstr("has size 2")));
}

TEST(DataMovementSqueeze, Errors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{1, 3});
  Tensor d = net.add_input("d", DataType::kF32, Dims{-1, 1});
  EXPECT_THAT(add_error(net, "squeeze", {x}, {{"axes", std::vector<std::int64_t>{1}}}, "q1"),
              AllOf(HasSubstr("layer 'q1' (squeeze)"), HasSubstr("axis 1 of 'x' (shape [1,3]) has size 3")));
  EXPECT_THAT(add_error(net, "squeeze", {x}, {{"axes", std::vector<std::int64_t>{0, -2}}}, "q2"),
              AllOf(HasSubstr("layer 'q2'"), HasSubstr("more than once")));
  EXPECT_THAT(add_error(net, "squeeze", {x}, {{"axes", std::vector<std::int64_t>{2}}}, "q3"),
              AllOf(HasSubstr("layer 'q3'"), HasSubstr("out of range")));
  EXPECT_THAT(add_error(net, "squeeze", {d}, {{"axes", std::vector<std::int64_t>{}}}, "q4"),
              AllOf(HasSubstr("layer 'q4'"), HasSubstr("dynamic shape"), HasSubstr("list the axes")));
}

TEST(DataMovementUnsqueeze, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kU8, Dims{-1, 4});
  Tensor y = net.add_unsqueeze(x, {0, -1});
  EXPECT_EQ(net.shape(y), (Dims{1, -1, 4, 1}));
  EXPECT_EQ(net.shape(net.add_unsqueeze(x, {3, 1})), (Dims{-1, 1, 4, 1}));
  EXPECT_EQ(net.shape(net.add_unsqueeze(x, {2})), (Dims{-1, 4, 1}));
  EXPECT_EQ(inferred(net, y, {{"x", Dims{3, 4}}}), (Dims{1, 3, 4, 1}));
  Tensor s = net.add_input("s", DataType::kF32, Dims{});
  EXPECT_EQ(net.shape(net.add_unsqueeze(s, {0})), (Dims{1}));
}

TEST(DataMovementUnsqueeze, Errors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3});
  EXPECT_THAT(add_error(net, "unsqueeze", {x}, {{"axes", std::vector<std::int64_t>{3}}}, "u1"),
              AllOf(HasSubstr("layer 'u1' (unsqueeze)"), HasSubstr("axis 3, out of range"), HasSubstr("rank 3")));
  EXPECT_THAT(add_error(net, "unsqueeze", {x}, {{"axes", std::vector<std::int64_t>{0, -4}}}, "u2"),
              AllOf(HasSubstr("layer 'u2'"), HasSubstr("more than once")));
  EXPECT_THAT(add_error(net, "unsqueeze", {x}, {{"axes", std::vector<std::int64_t>{}}}, "u3"),
              AllOf(HasSubstr("layer 'u3'"), HasSubstr("axes is empty")));
}

// ---- expand ----

TEST(DataMovementExpand, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{3, 1});
  EXPECT_EQ(net.shape(net.add_expand(x, {2, 3, 5})), (Dims{2, 3, 5}));
  EXPECT_EQ(net.shape(net.add_expand(x, {-1, 4})), (Dims{3, 4}));
  EXPECT_EQ(net.shape(net.add_expand(x, {3, 0})), (Dims{3, 0}));
  EXPECT_EQ(net.shape(net.add_expand(x, {0, 3, 1})), (Dims{0, 3, 1}));
  Tensor d = net.add_input("d", DataType::kI8, Dims{-1, -1});
  Tensor y = net.add_expand(d, {2, -1, 6});
  EXPECT_EQ(net.shape(y), (Dims{2, -1, 6}));
  EXPECT_EQ(net.dim_expression(y, 1), "d.0");
  EXPECT_EQ(inferred(net, y, {{"x", Dims{3, 1}}, {"d", Dims{4, 1}}}), (Dims{2, 4, 6}));
  EXPECT_EQ(inferred(net, y, {{"x", Dims{3, 1}}, {"d", Dims{4, 6}}}), (Dims{2, 4, 6}));
  EXPECT_THAT(infer_error(net, {{"x", Dims{3, 1}}, {"d", Dims{4, 5}}}),
              AllOf(HasSubstr("expand_4"), HasSubstr("axis 1 has size 5, which is neither 1 nor 6")));
}

TEST(DataMovementExpand, Errors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{3, 1});
  EXPECT_THAT(add_error(net, "expand", {x}, {{"shape", std::vector<std::int64_t>{4}}}, "e1"),
              AllOf(HasSubstr("layer 'e1' (expand)"), HasSubstr("fewer dims than 'x'")));
  EXPECT_THAT(add_error(net, "expand", {x}, {{"shape", std::vector<std::int64_t>{4, 5}}}, "e2"),
              AllOf(HasSubstr("layer 'e2'"), HasSubstr("axis 0 has size 3, which is neither 1 nor 4")));
  EXPECT_THAT(add_error(net, "expand", {x}, {{"shape", std::vector<std::int64_t>{-1, 3, 5}}}, "e3"),
              AllOf(HasSubstr("layer 'e3'"), HasSubstr("new leading dim")));
  EXPECT_THAT(add_error(net, "expand", {x}, {{"shape", std::vector<std::int64_t>{3, -2}}}, "e4"),
              AllOf(HasSubstr("layer 'e4'"), HasSubstr("invalid size -2")));
}

// ---- pad ----

TEST(DataMovementPad, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, 4, 5});
  Tensor y = net.add_pad(x, {1, 0, 2, 2, 3, 0});
  EXPECT_EQ(net.shape(y), (Dims{-1, 7, 7}));
  EXPECT_EQ(net.dim_expression(y, 0), "x.0 + 3");
  EXPECT_EQ(net.shape(net.add_pad(x, {0, 3, 4, 0, 0, 0}, PadMode::kReflect)), (Dims{-1, 7, 9}));
  EXPECT_EQ(net.shape(net.add_pad(x, {2, 9, 9, 0, 9, 9}, PadMode::kEdge, 1.5)), (Dims{-1, 22, 23}));
  EXPECT_EQ(inferred(net, y, {{"x", Dims{2, 4, 5}}}), (Dims{5, 7, 7}));
  Tensor s = net.add_input("s", DataType::kF32, Dims{});
  EXPECT_EQ(net.shape(net.add_pad(s, {})), (Dims{}));
}

TEST(DataMovementPad, DynamicReflectCheckedWhenKnown) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1});
  Tensor y = net.add_pad(x, {2, 1}, PadMode::kReflect);
  EXPECT_EQ(inferred(net, y, {{"x", Dims{3}}}), (Dims{6}));
  EXPECT_THAT(infer_error(net, {{"x", Dims{2}}}), AllOf(HasSubstr("pad_0"), HasSubstr("smaller than its size 2")));
}

TEST(DataMovementPad, Errors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3});
  Tensor e = net.add_input("e", DataType::kF32, Dims{0, 3});
  auto pad = [&](Tensor t, std::vector<std::int64_t> pads, std::string mode, const std::string& name) {
    return add_error(net, "pad", {t}, {{"pads", pads}, {"mode", mode}}, name);
  };
  EXPECT_THAT(pad(x, {1, 1}, "constant", "d1"),
              AllOf(HasSubstr("layer 'd1' (pad)"), HasSubstr("has 2 entries"), HasSubstr("needs 4")));
  EXPECT_THAT(pad(x, {0, -1, 0, 0}, "constant", "d2"), AllOf(HasSubstr("layer 'd2'"), HasSubstr("negative pad -1")));
  EXPECT_THAT(pad(x, {0, 0, 2, 0}, "reflect", "d3"),
              AllOf(HasSubstr("layer 'd3'"), HasSubstr("reflect padding of axis 0 by (0, 2)"), HasSubstr("size 2")));
  EXPECT_THAT(pad(x, {0, 0, 0, 0}, "wrap", "d4"), AllOf(HasSubstr("layer 'd4'"), HasSubstr("mode 'wrap'")));
  EXPECT_THAT(pad(e, {1, 0, 0, 0}, "edge", "d5"),
              AllOf(HasSubstr("layer 'd5'"), HasSubstr("edge padding of axis 0 needs a non-empty dim")));
  EXPECT_THAT(pad(x, {kMax, 0, kMax, 0}, "constant", "d6"), AllOf(HasSubstr("layer 'd6'"), HasSubstr("overflow")));
  EXPECT_THAT(
      add_error(net, "pad", {x}, {{"pads", std::vector<std::int64_t>{0, 0, 0, 0}}, {"value", std::string("x")}}, "d7"),
      AllOf(HasSubstr("layer 'd7'"), HasSubstr("'value' must be a number")));
  // Constant padding of an empty dim is fine.
  EXPECT_EQ(net.shape(net.add_pad(e, {1, 0, 1, 0})), (Dims{2, 3}));
}

TEST(DataMovementSpaceToDepth, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, Dims{-1, 3, 15, 18});
  Tensor y = net.add_input("y", DataType::kI8, Dims{2, -1, 6, -1});
  using Ints = std::vector<std::int64_t>;
  Tensor stem = net.add_layer("space_to_depth", {x},
                              {{"block_size", std::int64_t{2}},
                               {"pads", Ints{3, 3, 4, 3}},
                               {"output_layout", std::string("nhwc")},
                               {"channels", std::int64_t{16}}})[0];
  EXPECT_EQ(net.shape(stem), (Dims{-1, 11, 12, 16}));
  const Dims image{5, 3, 15, 18};
  EXPECT_EQ(inferred(net, stem, {{"x", image}, {"y", Dims{2, 4, 6, 9}}}), (Dims{5, 11, 12, 16}));
  Tensor onnx = net.add_layer("space_to_depth", {y}, {{"block_size", std::int64_t{3}}})[0];
  EXPECT_EQ(net.shape(onnx), (Dims{2, -1, 2, -1}));
  EXPECT_EQ(inferred(net, onnx, {{"x", image}, {"y", Dims{2, 4, 6, 9}}}), (Dims{2, 36, 2, 3}));
  // A dynamic width that is no multiple of the block is found when it is known.
  EXPECT_THAT(infer_error(net, {{"x", Dims{1, 3, 15, 18}}, {"y", Dims{2, 4, 6, 10}}}),
              AllOf(HasSubstr("padded width"), HasSubstr("is 10, not a multiple of block_size 3")));
}

// quantize_to: a float x's values written quantized (i8 or f8e4m3) by output_scale (input 1, an f32 scalar).
TEST(DataMovementSpaceToDepth, Quantized) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, 3, 20, 24});
  Tensor q = net.add_input("q", DataType::kI8, Dims{1, 3, 8, 8});
  Tensor s = net.add_small_constant({0.02}, DataType::kF32, Dims{}, "s");
  Tensor s16 = net.add_small_constant({0.02}, DataType::kF16, Dims{}, "s16");
  using Ints = std::vector<std::int64_t>;
  Attributes attrs = {{"block_size", std::int64_t{4}},
                      {"pads", Ints{3, 3, 5, 5}},
                      {"output_layout", std::string("nhwc")},
                      {"channels", std::int64_t{64}},
                      {"quantize_to", std::string("i8")}};
  Tensor y = net.add_layer("space_to_depth", {x, s}, attrs)[0];
  EXPECT_EQ(net.shape(y), (Dims{-1, 7, 8, 64}));
  EXPECT_EQ(net.dtype(y), DataType::kI8);
  EXPECT_THAT(add_error(net, "space_to_depth", {x}, attrs, "e1"),
              HasSubstr("output_scale (needed with 'quantize_to')"));
  EXPECT_THAT(add_error(net, "space_to_depth", {x, s16}, attrs, "e2"), HasSubstr("output_scale 's16' has dtype f16"));
  EXPECT_THAT(add_error(net, "space_to_depth", {q, s},
                        {{"block_size", std::int64_t{2}}, {"quantize_to", std::string("i8")}}, "e3"),
              HasSubstr("x 'q' has dtype i8"));
  attrs.erase("quantize_to");
  EXPECT_THAT(add_error(net, "space_to_depth", {x, s}, attrs, "e4"),
              HasSubstr("output_scale (input 1) is given but attribute 'quantize_to' is not"));
}

TEST(DataMovementSpaceToDepth, Errors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3, 8, 8});
  Tensor c = net.add_input("c", DataType::kF32, Dims{2, -1, 8, 8});
  Tensor v = net.add_input("v", DataType::kF32, Dims{2, 3, 8});
  using Ints = std::vector<std::int64_t>;
  auto s2d = [&](Tensor t, Attributes attrs, const std::string& name) {
    return add_error(net, "space_to_depth", {t}, attrs, name);
  };
  const AttrValue two = std::int64_t{2};
  EXPECT_THAT(s2d(v, {{"block_size", two}}, "e1"),
              AllOf(HasSubstr("layer 'e1' (space_to_depth)"), HasSubstr("takes an image [N, C, H, W]")));
  EXPECT_THAT(s2d(x, {{"block_size", std::int64_t{0}}}, "e2"), HasSubstr("block_size 0 is not in [1, 64]"));
  EXPECT_THAT(s2d(x, {{"block_size", two}, {"pads", Ints{1, 1}}}, "e3"),
              HasSubstr("it takes [top, left, bottom, right]"));
  EXPECT_THAT(s2d(x, {{"block_size", two}, {"pads", Ints{1, -1, 1, 1}}}, "e4"), HasSubstr("has the pad -1"));
  EXPECT_THAT(s2d(x, {{"block_size", two}, {"pads", Ints{1, 0, 0, 0}}}, "e5"),
              AllOf(HasSubstr("the padded height of 'x'"), HasSubstr("is 9, not a multiple of block_size 2")));
  EXPECT_THAT(s2d(x, {{"block_size", two}, {"output_layout", std::string("nc")}}, "e6"),
              HasSubstr("output_layout 'nc' is not nchw or nhwc"));
  EXPECT_THAT(s2d(x, {{"block_size", two}, {"channels", std::int64_t{11}}}, "e7"),
              HasSubstr("channels 11 is below the 12 that 3 channels in 2x2 blocks fill"));
  EXPECT_THAT(s2d(c, {{"block_size", two}, {"channels", std::int64_t{16}}}, "e8"),
              HasSubstr("'channels' needs the channels of 'c'"));
  EXPECT_THAT(s2d(x, {}, "e9"), AllOf(HasSubstr("layer 'e9'"), HasSubstr("block_size")));
  EXPECT_THAT(s2d(x, {{"block_size", two}, {"channels", std::int64_t{1} << 41}}, "e10"),
              HasSubstr("channels 2199023255552 is above 2^40"));
}

}  // namespace
}  // namespace tensoracle
