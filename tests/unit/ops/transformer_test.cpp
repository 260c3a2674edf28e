// Shape-inference and verifier tests of the transformer ops.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "tensoracle/network.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

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

// ---- attention ----

TEST(TransformerAttention, GroupedQueryShapes) {
  Network net;
  Tensor q = net.add_input("q", DataType::kF32, Dims{2, 8, 5, 16});
  Tensor k = net.add_input("k", DataType::kF32, Dims{2, 2, 7, 16});
  Tensor v = net.add_input("v", DataType::kF32, Dims{2, 2, 7, 9});
  Tensor y = net.add_attention(q, k, v);
  EXPECT_EQ(net.shape(y), (Dims{2, 8, 5, 9}));
  EXPECT_EQ(net.dtype(y), DataType::kF32);
  Tensor mask = net.add_input("mask", DataType::kBool, Dims{2, 1, 1, 7});
  EXPECT_EQ(net.shape(net.add_attention(q, k, v, mask, {true, 0.5})), (Dims{2, 8, 5, 9}));
  Tensor add_mask = net.add_input("add_mask", DataType::kF32, Dims{5, 7});
  EXPECT_EQ(net.shape(net.add_attention(q, k, v, add_mask)), (Dims{2, 8, 5, 9}));
  Tensor k1 = net.add_input("k1", DataType::kF32, Dims{2, 1, 7, 16});
  Tensor v1 = net.add_input("v1", DataType::kF32, Dims{2, 1, 7, 16});
  EXPECT_EQ(net.shape(net.add_attention(q, k1, v1)), (Dims{2, 8, 5, 16}));
}

TEST(TransformerAttention, DynamicSequenceLengths) {
  Network net;
  Tensor q = net.add_input("q", DataType::kBF16, Dims{-1, 4, -1, 8});
  Tensor k = net.add_input("k", DataType::kBF16, Dims{-1, 2, -1, 8});
  Tensor v = net.add_input("v", DataType::kBF16, Dims{1, 2, -1, 8});
  Tensor mask = net.add_input("mask", DataType::kBool, Dims{-1, 1, -1, -1});
  Tensor y = net.add_attention(q, k, v, mask, {true, std::nullopt});
  EXPECT_EQ(net.shape(y), (Dims{1, 4, -1, 8}));
  EXPECT_EQ(net.dim_expression(y, 2), "q.2");
  auto shapes = net.infer_shapes(
      {{"q", Dims{1, 4, 3, 8}}, {"k", Dims{1, 2, 6, 8}}, {"v", Dims{1, 2, 6, 8}}, {"mask", Dims{1, 1, 3, 6}}});
  EXPECT_EQ(shapes.at(net.name(y)), (Dims{1, 4, 3, 8}));
  EXPECT_THAT(
      infer_error(
          net, {{"q", Dims{1, 4, 3, 8}}, {"k", Dims{1, 2, 6, 8}}, {"v", Dims{1, 2, 5, 8}}, {"mask", Dims{1, 1, 3, 6}}}),
      AllOf(HasSubstr("attention_0"), HasSubstr("sequence lengths of k and v differ")));
  EXPECT_THAT(
      infer_error(
          net, {{"q", Dims{1, 4, 3, 8}}, {"k", Dims{1, 2, 6, 8}}, {"v", Dims{1, 2, 6, 8}}, {"mask", Dims{1, 1, 3, 5}}}),
      AllOf(HasSubstr("attention_0"), HasSubstr("mask 'mask' of shape [1,1,3,5]")));
  Tensor qh = net.add_input("qh", DataType::kF32, Dims{1, -1, 3, 8});
  Tensor kh = net.add_input("kh", DataType::kF32, Dims{1, 2, 3, 8});
  Tensor y2 = net.add_attention(qh, kh, kh);
  std::map<std::string, Dims> base{
      {"q", Dims{1, 4, 3, 8}}, {"k", Dims{1, 2, 6, 8}}, {"v", Dims{1, 2, 6, 8}}, {"mask", Dims{1, 1, 3, 6}}};
  base["qh"] = Dims{1, 6, 3, 8};
  base["kh"] = Dims{1, 2, 3, 8};
  EXPECT_EQ(net.infer_shapes(base).at(net.name(y2)), (Dims{1, 6, 3, 8}));
  base["qh"] = Dims{1, 5, 3, 8};
  EXPECT_THAT(infer_error(net, base),
              AllOf(HasSubstr("attention_1"), HasSubstr("5 heads are not a multiple of k's 2 heads")));
}

TEST(TransformerAttention, Errors) {
  Network net;
  Tensor q = net.add_input("q", DataType::kF32, Dims{2, 6, 5, 16});
  Tensor k = net.add_input("k", DataType::kF32, Dims{2, 4, 7, 16});
  Tensor v = net.add_input("v", DataType::kF32, Dims{2, 4, 7, 16});
  Tensor k2 = net.add_input("k2", DataType::kF32, Dims{2, 2, 7, 16});
  Tensor v2 = net.add_input("v2", DataType::kF32, Dims{2, 2, 7, 16});
  Tensor k_half = net.add_input("k_half", DataType::kF16, Dims{2, 2, 7, 16});
  Tensor k3 = net.add_input("k3", DataType::kF32, Dims{2, 7, 16});
  Tensor k_d = net.add_input("k_d", DataType::kF32, Dims{2, 2, 7, 8});
  Tensor v_s = net.add_input("v_s", DataType::kF32, Dims{2, 2, 6, 16});
  Tensor v_b = net.add_input("v_b", DataType::kF32, Dims{3, 2, 7, 16});
  Tensor v_h = net.add_input("v_h", DataType::kF32, Dims{2, 3, 7, 16});
  Tensor qi = net.add_input("qi", DataType::kI32, Dims{2, 6, 5, 16});
  Tensor mask_i = net.add_input("mask_i", DataType::kI64, Dims{5, 7});
  Tensor mask_h = net.add_input("mask_h", DataType::kF16, Dims{5, 7});
  Tensor mask_big = net.add_input("mask_big", DataType::kBool, Dims{2, 6, 5, 7, 1});
  Tensor mask_s = net.add_input("mask_s", DataType::kBool, Dims{1, 1, 4, 7});
  Tensor mask_b = net.add_input("mask_b", DataType::kBool, Dims{4, 1, 1, 7});
  auto attention = [&](std::vector<Tensor> in, const std::string& name, Attributes attrs = {}) {
    return add_error(net, "attention", in, attrs, name);
  };
  EXPECT_THAT(attention({q, k, v}, "a1"),
              AllOf(HasSubstr("layer 'a1' (attention)"), HasSubstr("q's 6 heads are not a multiple of k's 4 heads")));
  EXPECT_THAT(attention({q, k_half, v2}, "a2"),
              AllOf(HasSubstr("layer 'a2'"), HasSubstr("'k_half' (f16)"), HasSubstr("same dtype")));
  EXPECT_THAT(attention({q, k3, v2}, "a3"), AllOf(HasSubstr("layer 'a3'"), HasSubstr("'k3' must have rank 4")));
  EXPECT_THAT(attention({q, k_d, v2}, "a4"),
              AllOf(HasSubstr("layer 'a4'"), HasSubstr("head dims of q and k differ"), HasSubstr("16 != 8")));
  EXPECT_THAT(attention({q, k2, v_s}, "a5"),
              AllOf(HasSubstr("layer 'a5'"), HasSubstr("sequence lengths of k and v differ")));
  EXPECT_THAT(attention({q, k2, v_b}, "a6"),
              AllOf(HasSubstr("layer 'a6'"), HasSubstr("batch sizes of q and v differ")));
  EXPECT_THAT(attention({q, k2, v_h}, "a7"),
              AllOf(HasSubstr("layer 'a7'"), HasSubstr("head counts of k and v differ")));
  EXPECT_THAT(attention({qi, k2, v2}, "a8"), AllOf(HasSubstr("layer 'a8'"), HasSubstr("q 'qi' has dtype i32")));
  EXPECT_THAT(attention({q, k2, v2, mask_i}, "a9"),
              AllOf(HasSubstr("layer 'a9'"), HasSubstr("mask 'mask_i' has dtype i64")));
  EXPECT_THAT(attention({q, k2, v2, mask_h}, "a10"),
              AllOf(HasSubstr("layer 'a10'"), HasSubstr("mask 'mask_h' has dtype f16")));
  EXPECT_THAT(attention({q, k2, v2, mask_big}, "a11"),
              AllOf(HasSubstr("layer 'a11'"),
                    HasSubstr("can't be broadcast to the scores shape [B, Hq, Sq, Skv] = [2,6,5,7]")));
  EXPECT_THAT(attention({q, k2, v2, mask_s}, "a12"),
              AllOf(HasSubstr("layer 'a12'"), HasSubstr("mask 'mask_s' of shape [1,1,4,7]")));
  EXPECT_THAT(attention({q, k2, v2, mask_b}, "a13"),
              AllOf(HasSubstr("layer 'a13'"), HasSubstr("mask 'mask_b' of shape [4,1,1,7]")));
  EXPECT_THAT(attention({q, k2, v2}, "a14", {{"scale", std::numeric_limits<double>::infinity()}}),
              AllOf(HasSubstr("layer 'a14'"), HasSubstr("scale inf must be finite")));
  EXPECT_THAT(attention({q, k2, v2}, "a15", {{"causal", std::int64_t{2}}}),
              AllOf(HasSubstr("layer 'a15'"), HasSubstr("'causal' must be a boolean")));
  EXPECT_THAT(attention({q, k2}, "a16"), AllOf(HasSubstr("layer 'a16'"), HasSubstr("takes 3 to 4 inputs")));
  EXPECT_THAT(attention({q, k2, v2}, "a17", {{"window", std::int64_t{2}}}),
              AllOf(HasSubstr("layer 'a17'"), HasSubstr("unknown attribute 'window'")));
  EXPECT_EQ(net.num_layers(), 0u);
}

HostTensor f64_tensor(const Dims& dims, const std::vector<double>& values) {
  HostTensor t(DataType::kF64, dims);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// A fully masked row gives NaN (softmax over only -inf), as torch's math attention.
TEST(TransformerAttention, FullyMaskedRowIsNaN) {
  Network net;
  Tensor q = net.add_input("q", DataType::kF64, Dims{1, 1, 2, 1});
  Tensor k = net.add_input("k", DataType::kF64, Dims{1, 1, 2, 1});
  Tensor mask = net.add_input("mask", DataType::kBool, Dims{2, 2});
  net.mark_output(net.add_attention(q, k, k, mask), "y");
  HostTensor m(DataType::kBool, Dims{2, 2});
  m.bytes = {std::byte{0}, std::byte{0}, std::byte{1}, std::byte{0}};
  auto out = run_reference(
      net, {{"q", f64_tensor(Dims{1, 1, 2, 1}, {1, 2})}, {"k", f64_tensor(Dims{1, 1, 2, 1}, {3, 4})}, {"mask", m}});
  const double* y = out.at("y").data<double>();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_DOUBLE_EQ(y[1], 3.0);
}

// ---- rotary_embedding ----

TEST(TransformerRotary, Shapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, Dims{-1, 4, -1, 7});
  Tensor y = net.add_rotary_embedding(x, {10000.0, 6, true, 3});
  EXPECT_EQ(net.shape(y), (Dims{-1, 4, -1, 7}));
  EXPECT_EQ(net.dtype(y), DataType::kF16);
  EXPECT_EQ(net.dim_expression(y, 2), "x.2");
  EXPECT_EQ(net.infer_shapes({{"x", Dims{2, 4, 9, 7}}}).at(net.name(y)), (Dims{2, 4, 9, 7}));
  Tensor z = net.add_input("z", DataType::kF32, Dims{1, 2, 3, 8});
  EXPECT_EQ(net.shape(net.add_rotary_embedding(z)), (Dims{1, 2, 3, 8}));
}

TEST(TransformerRotary, DynamicHeadDimCheckedWhenKnown) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{1, 1, 4, -1});
  Tensor y = net.add_rotary_embedding(x);
  EXPECT_EQ(net.infer_shapes({{"x", Dims{1, 1, 4, 6}}}).at(net.name(y)), (Dims{1, 1, 4, 6}));
  EXPECT_THAT(infer_error(net, {{"x", Dims{1, 1, 4, 5}}}),
              AllOf(HasSubstr("rotary_embedding_0"), HasSubstr("is 5, which is odd")));
}

TEST(TransformerRotary, Errors) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{1, 2, 3, 8});
  Tensor odd = net.add_input("odd", DataType::kF32, Dims{1, 2, 3, 7});
  Tensor x3 = net.add_input("x3", DataType::kF32, Dims{2, 3, 8});
  Tensor xi = net.add_input("xi", DataType::kI64, Dims{1, 2, 3, 8});
  auto rope = [&](Tensor t, const std::string& name, Attributes attrs = {}) {
    return add_error(net, "rotary_embedding", {t}, attrs, name);
  };
  EXPECT_THAT(rope(odd, "r1"), AllOf(HasSubstr("layer 'r1' (rotary_embedding)"), HasSubstr("head dim of 'odd'"),
                                     HasSubstr("is 7, which is odd")));
  EXPECT_THAT(rope(x, "r2", {{"rotary_dim", std::int64_t{5}}}),
              AllOf(HasSubstr("layer 'r2'"), HasSubstr("rotary_dim 5 must be even")));
  EXPECT_THAT(rope(x, "r3", {{"rotary_dim", std::int64_t{10}}}),
              AllOf(HasSubstr("layer 'r3'"), HasSubstr("rotary_dim 10 is larger than the head dim 8 of 'x'")));
  EXPECT_THAT(rope(x, "r4", {{"rotary_dim", std::int64_t{-2}}}),
              AllOf(HasSubstr("layer 'r4'"), HasSubstr("rotary_dim -2 must be >= 0")));
  EXPECT_THAT(rope(x, "r5", {{"base", 0.0}}),
              AllOf(HasSubstr("layer 'r5'"), HasSubstr("base 0 must be a positive finite number")));
  EXPECT_THAT(rope(x, "r6", {{"position_offset", std::int64_t{-1}}}),
              AllOf(HasSubstr("layer 'r6'"), HasSubstr("position_offset -1 must be >= 0")));
  EXPECT_THAT(rope(x3, "r7"), AllOf(HasSubstr("layer 'r7'"), HasSubstr("'x3' must have rank 4")));
  EXPECT_THAT(rope(xi, "r8"), AllOf(HasSubstr("layer 'r8'"), HasSubstr("x 'xi' has dtype i64")));
  EXPECT_THAT(rope(x, "r9", {{"interleaved", std::string("yes")}}),
              AllOf(HasSubstr("layer 'r9'"), HasSubstr("'interleaved' must be an integer")));
  // An odd head dim is fine when an even rotary_dim leaves the rest to pass through.
  EXPECT_EQ(net.shape(net.add_rotary_embedding(odd, {10000.0, 6, false, 0})), (Dims{1, 2, 3, 7}));
}

}  // namespace
}  // namespace tensoracle
