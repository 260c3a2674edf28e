// Shape-inference and verifier tests of the elementwise ops.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tensoracle/network.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kArithmetic = {"add", "sub", "mul", "div", "pow", "max", "min"};
const std::vector<std::string> kComparisons = {"equal", "less", "greater"};
const std::vector<std::string> kFloatUnary = {"exp",  "log",     "sqrt",         "rsqrt",     "reciprocal", "sin",
                                              "cos",  "tanh",    "erf",          "floor",     "ceil",       "relu",
                                              "silu", "sigmoid", "hard_sigmoid", "hard_swish"};
const std::vector<DataType> kIntegers = {DataType::kI64, DataType::kI32, DataType::kI16, DataType::kI8, DataType::kU8};
const std::vector<DataType> kFloats = {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64};

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

// ---- binary ops ----

TEST(ElementwiseOps, BinaryOpsBroadcastStaticShapes) {
  for (const auto& op : kArithmetic) {
    for (DataType dtype : {DataType::kF32, DataType::kBF16, DataType::kI32, DataType::kU8}) {
      Network net;
      auto a = net.add_input("a", dtype, {2, 1, 7});
      auto b = net.add_input("b", dtype, {3, 1});
      auto y = net.add_binary(op, a, b);
      EXPECT_EQ(net.dtype(y), dtype) << op;
      EXPECT_EQ(net.shape(y), Dims({2, 3, 7})) << op;
    }
  }
  for (const auto& op : kComparisons) {
    Network net;
    auto y = net.add_binary(op, net.add_input("a", DataType::kF16, {5, 1}), net.add_input("b", DataType::kF16, {}));
    EXPECT_EQ(net.dtype(y), DataType::kBool) << op;
    EXPECT_EQ(net.shape(y), Dims({5, 1})) << op;
  }
}

TEST(ElementwiseOps, BinaryOpsWithEmptyAndScalarInputs) {
  Network net;
  auto a = net.add_input("a", DataType::kF32, {0, 3});
  auto b = net.add_input("b", DataType::kF32, {1, 1});
  EXPECT_EQ(net.shape(net.add_binary("mul", a, b)), Dims({0, 3}));
  auto s = net.add_scalar(2.0, DataType::kF32);
  EXPECT_EQ(net.shape(net.add_binary("div", s, s)), Dims({}));
}

TEST(ElementwiseOps, BinaryOpsWithDynamicDims) {
  for (const auto& op : kArithmetic) {
    Network net;
    auto a = net.add_input("a", DataType::kI64, {-1, 1, 4});
    auto b = net.add_input("b", DataType::kI64, {3, -1});
    auto y = net.add_binary(op, a, b);
    EXPECT_EQ(net.shape(y), Dims({-1, 3, -1})) << op;
    EXPECT_EQ(net.dim_expression(y, 0), "a.0");
    EXPECT_EQ(net.dim_expression(y, 2), "broadcast(4, b.1)");
    net.mark_output(y, "y");
    EXPECT_EQ(net.infer_shapes({{"a", Dims{5, 1, 4}}, {"b", Dims{3, 1}}}).at("y"), Dims({5, 3, 4}));
    EXPECT_EQ(net.infer_shapes({{"a", Dims{0, 1, 4}}, {"b", Dims{3, 4}}}).at("y"), Dims({0, 3, 4}));
  }
  for (const auto& op : kComparisons) {
    Network net;
    auto y = net.add_binary(op, net.add_input("a", DataType::kF32, {-1}), net.add_input("b", DataType::kF32, {-1, 1}));
    EXPECT_EQ(net.shape(y), Dims({-1, -1}));
    net.mark_output(y, "y");
    EXPECT_EQ(net.infer_shapes({{"a", Dims{6}}, {"b", Dims{2, 1}}}).at("y"), Dims({2, 6}));
  }
}

TEST(ElementwiseOps, ArithmeticAcceptsFloatsAndIntegersNotBool) {
  for (const auto& op : kArithmetic) {
    for (DataType dtype : kIntegers) {
      Network net;
      auto a = net.add_input("a", dtype, {2});
      EXPECT_EQ(net.dtype(net.add_binary(op, a, a)), dtype);
    }
    for (DataType dtype : kFloats) {
      Network net;
      auto a = net.add_input("a", dtype, {2});
      EXPECT_EQ(net.dtype(net.add_binary(op, a, a)), dtype);
    }
    for (DataType dtype : {DataType::kBool, DataType::kF8E4M3, DataType::kF8E5M2}) {
      Network net;
      auto a = net.add_input("a", dtype, {2});
      expect_graph_error(
          [&] {
            net.add_layer(op, {a, a}, {}, "bad");
          },
          {"layer 'bad' (" + op + ")", "input 'a' has dtype " + std::string(to_string(dtype)), "expected one of"});
    }
  }
}

TEST(ElementwiseOps, BinaryOpsRejectMixedDtypes) {
  for (const auto& op : kArithmetic) {
    Network net;
    auto a = net.add_input("a", DataType::kI32, {2});
    auto b = net.add_input("b", DataType::kI64, {2});
    expect_graph_error(
        [&] {
          net.add_layer(op, {a, b}, {}, "mix");
        },
        {"layer 'mix' (" + op + ")", "'a' (i32)", "'b' (i64)", "same dtype"});
  }
  Network net;
  auto a = net.add_input("a", DataType::kF32, {2});
  auto b = net.add_input("b", DataType::kF16, {2});
  expect_graph_error([&] { net.add_layer("less", {a, b}, {}, "cmp"); }, {"layer 'cmp' (less)", "same dtype"});
}

TEST(ElementwiseOps, BinaryOpsRejectShapesThatDontBroadcast) {
  for (const auto& op : kArithmetic) {
    Network net;
    auto a = net.add_input("a", DataType::kF32, {2, 3});
    auto b = net.add_input("b", DataType::kF32, {4});
    expect_graph_error(
        [&] {
          net.add_layer(op, {a, b}, {}, "bc");
        },
        {"layer 'bc' (" + op + ")", "can't be broadcast", "'a' [2,3]", "'b' [4]"});
  }
}

TEST(ElementwiseOps, DynamicBroadcastMismatchIsCaughtWithConcreteShapes) {
  Network net;
  auto a = net.add_input("a", DataType::kF32, {-1});
  auto b = net.add_input("b", DataType::kF32, {3});
  net.mark_output(net.add_layer("greater", {a, b}, {}, "gt").at(0), "y");
  EXPECT_EQ(net.infer_shapes({{"a", Dims{1}}, {"b", Dims{3}}}).at("y"), Dims({3}));
  expect_graph_error(
      [&] {
        net.infer_shapes({{"a", Dims{4}}, {"b", Dims{3}}});
      },
      {"layer 'gt' (greater)", "broadcast"});
}

TEST(ElementwiseOps, ComparisonDtypes) {
  for (const auto& op : kComparisons) {
    for (DataType dtype : kIntegers) {
      Network net;
      auto a = net.add_input("a", dtype, {2});
      EXPECT_EQ(net.dtype(net.add_binary(op, a, a)), DataType::kBool);
    }
  }
  Network net;
  auto p = net.add_input("p", DataType::kBool, {2});
  EXPECT_EQ(net.dtype(net.add_binary("equal", p, p)), DataType::kBool);
  expect_graph_error(
      [&] {
        net.add_layer("less", {p, p}, {}, "lt");
      },
      {"layer 'lt' (less)", "input 'p' has dtype bool"});
  expect_graph_error([&] { net.add_layer("greater", {p, p}, {}, "gt"); }, {"layer 'gt' (greater)", "dtype bool"});
  auto f8 = net.add_input("f8", DataType::kF8E4M3, {2});
  expect_graph_error([&] { net.add_layer("equal", {f8, f8}, {}, "eq"); }, {"layer 'eq' (equal)", "dtype f8e4m3"});
}

// ---- where ----

TEST(ElementwiseOps, WhereBroadcastsAllThreeInputs) {
  Network net;
  auto c = net.add_input("c", DataType::kBool, {-1, 1});
  auto a = net.add_input("a", DataType::kF8E4M3, {1, 5});
  auto b = net.add_input("b", DataType::kF8E4M3, {2, 1, 1});
  auto y = net.add_where(c, a, b);
  EXPECT_EQ(net.dtype(y), DataType::kF8E4M3);
  EXPECT_EQ(net.shape(y), Dims({2, -1, 5}));
  EXPECT_EQ(net.dim_expression(y, 1), "c.0");
  net.mark_output(y, "y");
  EXPECT_EQ(net.infer_shapes({{"c", Dims{3, 1}}, {"a", Dims{1, 5}}, {"b", Dims{2, 1, 1}}}).at("y"), Dims({2, 3, 5}));
  for (DataType dtype : {DataType::kBool, DataType::kI64, DataType::kBF16}) {
    Network n;
    auto x = n.add_input("x", dtype, {4});
    EXPECT_EQ(n.dtype(n.add_where(n.add_input("c", DataType::kBool, {}), x, x)), dtype);
  }
}

TEST(ElementwiseOps, WhereErrors) {
  Network net;
  auto c = net.add_input("c", DataType::kBool, {3});
  auto m = net.add_input("m", DataType::kU8, {3});
  auto a = net.add_input("a", DataType::kF32, {3});
  auto h = net.add_input("h", DataType::kF16, {3});
  auto w = net.add_input("w", DataType::kF32, {4});
  expect_graph_error(
      [&] {
        net.add_layer("where", {m, a, a}, {}, "w1");
      },
      {"layer 'w1' (where)", "condition 'm' has dtype u8", "bool"});
  expect_graph_error(
      [&] {
        net.add_layer("where", {c, a, h}, {}, "w2");
      },
      {"layer 'w2' (where)", "'a' (f32)", "'h' (f16)"});
  expect_graph_error(
      [&] {
        net.add_layer("where", {c, a, w}, {}, "w3");
      },
      {"layer 'w3' (where)", "can't be broadcast", "'c' [3]", "'w' [4]"});
}

// ---- unary ops ----

TEST(ElementwiseOps, UnaryOpsKeepShapeAndDtype) {
  for (const auto& op : kFloatUnary) {
    for (DataType dtype : kFloats) {
      Network net;
      auto x = net.add_input("x", dtype, {-1, 7, 0});
      auto y = op == "relu" || op == "silu" || op == "sigmoid" || op == "hard_sigmoid" || op == "hard_swish"
                   ? net.add_activation(op, x)
                   : net.add_unary(op, x);
      EXPECT_EQ(net.dtype(y), dtype) << op;
      EXPECT_EQ(net.shape(y), Dims({-1, 7, 0})) << op;
      EXPECT_EQ(net.dim_expression(y, 0), "x.0");
      net.mark_output(y, "y");
      EXPECT_EQ(net.infer_shapes({{"x", Dims{3, 7, 0}}}).at("y"), Dims({3, 7, 0}));
    }
  }
  for (const std::string op : {"abs", "neg"}) {
    for (DataType dtype : {DataType::kF16, DataType::kI64, DataType::kI8, DataType::kU8}) {
      Network net;
      auto y = net.add_unary(op, net.add_input("x", dtype, {}));
      EXPECT_EQ(net.dtype(y), dtype);
      EXPECT_EQ(net.shape(y), Dims({}));
    }
  }
  Network net;
  auto y = net.add_unary("not", net.add_input("p", DataType::kBool, {2, -1}));
  EXPECT_EQ(net.dtype(y), DataType::kBool);
  EXPECT_EQ(net.shape(y), Dims({2, -1}));
}

TEST(ElementwiseOps, FloatUnaryOpsRejectIntegersAndBool) {
  for (const auto& op : kFloatUnary) {
    Network net;
    auto i = net.add_input("i", DataType::kI32, {2});
    auto p = net.add_input("p", DataType::kBool, {2});
    expect_graph_error([&] { net.add_layer(op, {i}, {}, "u1"); },
                       {"layer 'u1' (" + op + ")", "input 'i' has dtype i32", "f32, f16, bf16, f64"});
    expect_graph_error([&] { net.add_layer(op, {p}, {}, "u2"); }, {"layer 'u2' (" + op + ")", "dtype bool"});
  }
  for (const std::string op : {"leaky_relu", "gelu", "softplus", "clip"}) {
    Network net;
    auto i = net.add_input("i", DataType::kI64, {2});
    expect_graph_error([&] { net.add_layer(op, {i}, {}, "act"); },
                       {"layer 'act' (" + op + ")", "input 'i' has dtype i64"});
  }
}

TEST(ElementwiseOps, AbsNegRejectBoolAndNotRequiresBool) {
  Network net;
  auto p = net.add_input("p", DataType::kBool, {2});
  auto x = net.add_input("x", DataType::kF32, {2});
  expect_graph_error([&] { net.add_layer("abs", {p}, {}, "a"); }, {"layer 'a' (abs)", "input 'p' has dtype bool"});
  expect_graph_error([&] { net.add_layer("neg", {p}, {}, "n"); }, {"layer 'n' (neg)", "input 'p' has dtype bool"});
  expect_graph_error([&] { net.add_layer("not", {x}, {}, "t"); },
                     {"layer 't' (not)", "input 'x' has dtype f32", "bool"});
}

// ---- activation attributes ----

TEST(ElementwiseOps, ActivationAttributesAreValidated) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {4});
  EXPECT_EQ(net.shape(net.add_activation("leaky_relu", x, {{"alpha", 0.2}})), Dims({4}));
  EXPECT_EQ(net.shape(net.add_activation("gelu", x, {{"approximate", std::string("tanh")}})), Dims({4}));
  EXPECT_EQ(net.shape(net.add_activation("softplus", x, {{"beta", 2.0}, {"threshold", std::int64_t{10}}})), Dims({4}));
  EXPECT_EQ(net.shape(net.add_activation("clip", x, {{"min", -1.0}})), Dims({4}));
  EXPECT_EQ(net.shape(net.add_activation("clip", x, {{"min", 2.0}, {"max", 1.0}})), Dims({4}));  // as torch.clamp

  expect_graph_error(
      [&] {
        net.add_layer("leaky_relu", {x}, {{"alpha", std::string("big")}}, "l1");
      },
      {"layer 'l1' (leaky_relu)", "attribute 'alpha' must be a number"});
  expect_graph_error(
      [&] {
        net.add_layer("leaky_relu", {x}, {{"alpha", NAN}}, "l2");
      },
      {"layer 'l2' (leaky_relu)", "attribute 'alpha' must be a finite number"});
  expect_graph_error(
      [&] {
        net.add_layer("gelu", {x}, {{"approximate", std::string("sigmoid")}}, "g1");
      },
      {"layer 'g1' (gelu)", "attribute 'approximate' must be \"none\" or \"tanh\"", "sigmoid"});
  expect_graph_error(
      [&] {
        net.add_layer("gelu", {x}, {{"approximate", std::int64_t{1}}}, "g2");
      },
      {"layer 'g2' (gelu)", "attribute 'approximate' must be a string"});
  expect_graph_error(
      [&] {
        net.add_layer("softplus", {x}, {{"beta", 0.0}}, "s1");
      },
      {"layer 's1' (softplus)", "attribute 'beta' must not be 0"});
  expect_graph_error(
      [&] {
        net.add_layer("softplus", {x}, {{"beta", INFINITY}}, "s2");
      },
      {"layer 's2' (softplus)", "attribute 'beta' must be a finite number"});
  expect_graph_error(
      [&] {
        net.add_layer("softplus", {x}, {{"threshold", NAN}}, "s3");
      },
      {"layer 's3' (softplus)", "attribute 'threshold' must be a finite number"});
  expect_graph_error(
      [&] {
        net.add_layer("clip", {x}, {{"max", NAN}}, "c1");
      },
      {"layer 'c1' (clip)", "attribute 'max' must not be NaN"});
  expect_graph_error(
      [&] {
        net.add_layer("clip", {x}, {{"min", std::vector<double>{1.0}}}, "c2");
      },
      {"layer 'c2' (clip)", "attribute 'min' must be a number"});
  expect_graph_error(
      [&] {
        net.add_layer("clip", {x}, {{"lo", 1.0}}, "c3");
      },
      {"layer 'c3' (clip)", "unknown attribute 'lo'", "min, max"});
  expect_graph_error(
      [&] {
        net.add_layer("relu", {x}, {{"alpha", 1.0}}, "r");
      },
      {"layer 'r' (relu)", "unknown attribute 'alpha'"});
}

// ---- cast ----

TEST(ElementwiseOps, CastChangesOnlyTheDtype) {
  for (DataType to :
       {DataType::kF64, DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF8E4M3, DataType::kF8E5M2,
        DataType::kI64, DataType::kI32, DataType::kI16, DataType::kI8, DataType::kU8, DataType::kBool}) {
    Network net;
    auto x = net.add_input("x", DataType::kBF16, {-1, 3});
    auto y = net.add_cast(x, to);
    EXPECT_EQ(net.dtype(y), to);
    EXPECT_EQ(net.shape(y), Dims({-1, 3}));
    EXPECT_EQ(net.dtype(net.add_cast(y, DataType::kF32)), DataType::kF32);  // and back, from any dtype
    net.mark_output(y, "y");
    EXPECT_EQ(net.infer_shapes({{"x", Dims{0, 3}}}).at("y"), Dims({0, 3}));
  }
}

TEST(ElementwiseOps, CastNeedsAValidTarget) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2});
  expect_graph_error([&] { net.add_layer("cast", {x}, {}, "c1"); },
                     {"layer 'c1' (cast)", "attribute 'to' is required"});
  expect_graph_error(
      [&] {
        net.add_layer("cast", {x}, {{"to", std::string("f128")}}, "c2");
      },
      {"layer 'c2' (cast)", "attribute 'to' must name a data type"});
  expect_graph_error(
      [&] {
        net.add_layer("cast", {x}, {{"to", std::int64_t{3}}}, "c3");
      },
      {"layer 'c3' (cast)", "attribute 'to' must name a data type"});
}

// ---- a few kernel results that the PyTorch conformance cases can't express ----

HostTensor tensor_i32(const std::vector<std::int32_t>& values) {
  HostTensor t(DataType::kI32, Dims{static_cast<std::int64_t>(values.size())});
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

TEST(ElementwiseOps, IntegerDivisionByZeroGivesZero) {
  Network net;
  auto a = net.add_input("a", DataType::kI32, {4});
  auto b = net.add_input("b", DataType::kI32, {4});
  net.mark_output(net.add_binary("div", a, b), "y");
  auto y = run_reference(net, {{"a", tensor_i32({7, -7, 0, std::numeric_limits<std::int32_t>::min()})},
                               {"b", tensor_i32({0, 2, 0, -1})}})
               .at("y");
  EXPECT_EQ(y.data<std::int32_t>()[0], 0);
  EXPECT_EQ(y.data<std::int32_t>()[1], -3);  // toward zero
  EXPECT_EQ(y.data<std::int32_t>()[2], 0);
  EXPECT_EQ(y.data<std::int32_t>()[3], std::numeric_limits<std::int32_t>::min());  // wraps
}

TEST(ElementwiseOps, CastToF8UsesTheConversionRules) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {4});
  net.mark_output(net.add_cast(x, DataType::kF8E4M3), "e4m3");
  net.mark_output(net.add_cast(x, DataType::kF8E5M2), "e5m2");
  HostTensor in(DataType::kF32, Dims{4});
  const float values[4] = {1.0f, 500.0f, -INFINITY, 0.1f};
  std::memcpy(in.bytes.data(), values, sizeof(values));
  auto out = run_reference(net, {{"x", in}});
  const auto* e4m3 = out.at("e4m3").data<std::uint8_t>();
  const auto* e5m2 = out.at("e5m2").data<std::uint8_t>();
  EXPECT_EQ(e4m3[0], 0x38);  // 1.0
  EXPECT_EQ(e4m3[1], 0x7F);  // overflow is NaN: a cast does not saturate
  EXPECT_EQ(e4m3[2], 0xFF);
  EXPECT_EQ(e4m3[3], 0x1D);  // 0.1 -> 0.1015625
  EXPECT_EQ(e5m2[1], 0x60);  // 512
  EXPECT_EQ(e5m2[2], 0xFC);  // -inf
}

}  // namespace
}  // namespace tensoracle
