// Shape-inference and verifier tests of the normalization ops.
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

Tensor constant(Network& net, const std::string& name, const Dims& dims, DataType dtype = DataType::kF32) {
  return net.add_small_constant(std::vector<double>(static_cast<std::size_t>(dims.volume()), 1.0), dtype, dims, name);
}

Attributes norm_attrs(std::int64_t normalized_rank = 1, double epsilon = 1e-5) {
  return {{"normalized_rank", normalized_rank}, {"epsilon", epsilon}};
}

// ---- softmax / log_softmax ----

TEST(NormalizationOps, SoftmaxKeepsShapeAndDtype) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, Dims{2, 12, 7, 7});
  Tensor y = net.add_softmax(x, -1);
  Tensor z = net.add_softmax(x, 1, /*log=*/true);
  EXPECT_EQ(net.shape(y), (Dims{2, 12, 7, 7}));
  EXPECT_EQ(net.dtype(y), DataType::kF16);
  EXPECT_EQ(net.shape(z), (Dims{2, 12, 7, 7}));
}

TEST(NormalizationOps, SoftmaxDynamicShape) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, 12, -1, -1});
  Tensor y = net.add_softmax(x, -1);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), (Dims{-1, 12, -1, -1}));
  EXPECT_EQ(net.dim_expression(y, 3), "x.3");
  auto shapes = net.infer_shapes({{"x", Dims{3, 12, 5, 5}}});
  EXPECT_EQ(shapes.at("y"), (Dims{3, 12, 5, 5}));
}

TEST(NormalizationOps, SoftmaxOfScalarAcceptsAxisZeroAndMinusOne) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{});
  EXPECT_EQ(net.shape(net.add_softmax(x, 0)), Dims{});
  EXPECT_EQ(net.shape(net.add_softmax(x, -1)), Dims{});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("softmax", {x}, {{"axis", std::int64_t{1}}}, "s");
              }),
              HasSubstr("axis 1 is out of range"));
}

TEST(NormalizationOps, SoftmaxRejectsAxisOutOfRange) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("softmax", {x}, {{"axis", std::int64_t{2}}}, "sm");
              }),
              AllOf(HasSubstr("layer 'sm' (softmax)"), HasSubstr("axis 2 is out of range for tensor 'x' of rank 2")));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("log_softmax", {x}, {{"axis", std::int64_t{-3}}}, "lsm");
              }),
              AllOf(HasSubstr("layer 'lsm' (log_softmax)"), HasSubstr("axis -3 is out of range")));
}

TEST(NormalizationOps, SoftmaxRequiresAxis) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3});
  EXPECT_THAT(graph_error([&] { net.add_layer("softmax", {x}, {}, "sm"); }),
              AllOf(HasSubstr("layer 'sm' (softmax)"), HasSubstr("attribute 'axis' is required")));
}

TEST(NormalizationOps, SoftmaxRejectsIntegerInput) {
  Network net;
  Tensor x = net.add_input("x", DataType::kI32, Dims{2, 3});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("softmax", {x}, {{"axis", std::int64_t{1}}}, "sm");
              }),
              AllOf(HasSubstr("layer 'sm' (softmax)"), HasSubstr("input 'x' has dtype i32")));
}

TEST(NormalizationOps, SoftmaxRejectsUnknownAttribute) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("softmax", {x}, {{"axis", std::int64_t{1}}, {"dim", std::int64_t{1}}}, "sm");
              }),
              AllOf(HasSubstr("layer 'sm' (softmax)"), HasSubstr("unknown attribute 'dim'")));
}

// ---- layer_norm ----

TEST(NormalizationOps, LayerNormShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 5, 768});
  Tensor w = constant(net, "ln.weight", Dims{768});
  Tensor b = constant(net, "ln.bias", Dims{768});
  EXPECT_EQ(net.shape(net.add_layer_norm(x, w, b)), (Dims{2, 5, 768}));
  EXPECT_EQ(net.shape(net.add_layer_norm(x, {}, {})), (Dims{2, 5, 768}));
  EXPECT_EQ(net.shape(net.add_layer_norm(x, w, {})), (Dims{2, 5, 768}));
  Tensor w2 = constant(net, "ln2.weight", Dims{5, 768});
  EXPECT_EQ(net.shape(net.add_layer_norm(x, w2, {}, 1e-5, 2)), (Dims{2, 5, 768}));
  EXPECT_EQ(net.shape(net.add_layer_norm(x, {}, {}, 1e-5, 3)), (Dims{2, 5, 768}));
}

TEST(NormalizationOps, LayerNormDynamicShape) {
  Network net;
  Tensor x = net.add_input("x", DataType::kBF16, Dims{-1, -1, 64});
  Tensor w = constant(net, "ln.weight", Dims{64}, DataType::kBF16);
  Tensor y = net.add_layer_norm(x, w, {});
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), (Dims{-1, -1, 64}));
  EXPECT_EQ(net.dim_expression(y, 1), "x.1");
  EXPECT_EQ(net.infer_shapes({{"x", Dims{3, 9, 64}}}).at("y"), (Dims{3, 9, 64}));
}

TEST(NormalizationOps, LayerNormWeightOfDynamicInputIsCheckedWhenShapesAreKnown) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, -1});
  Tensor w = net.add_input("w", DataType::kF32, Dims{-1});
  Tensor y = net.add_layer("layer_norm", {x, w}, norm_attrs(), "ln").at(0);
  net.mark_output(y, "y");
  EXPECT_EQ(net.infer_shapes({{"x", Dims{2, 8}}, {"w", Dims{8}}}).at("y"), (Dims{2, 8}));
  EXPECT_THAT(graph_error([&] {
                net.infer_shapes({{"x", Dims{2, 8}}, {"w", Dims{7}}});
              }),
              AllOf(HasSubstr("layer 'ln' (layer_norm)"), HasSubstr("weight 'w' has shape [7], expected [8]")));
}

TEST(NormalizationOps, LayerNormRejectsWrongWeightShape) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 768});
  Tensor w = constant(net, "ln.weight", Dims{10});
  EXPECT_THAT(
      graph_error([&] {
        net.add_layer("layer_norm", {x, w}, norm_attrs(), "ln");
      }),
      AllOf(HasSubstr("layer 'ln' (layer_norm)"), HasSubstr("weight 'ln.weight' has shape [10], expected [768]"),
            HasSubstr("the normalized dims of x 'x' [2,768]")));
  Tensor w2 = constant(net, "ln.weight2", Dims{1, 768});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("layer_norm", {x, w2}, norm_attrs(), "ln");
              }),
              HasSubstr("weight 'ln.weight2' has shape [1,768], expected [768]"));
}

TEST(NormalizationOps, LayerNormRejectsWrongBiasShape) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 768});
  Tensor b = constant(net, "ln.bias", Dims{767});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("layer_norm", {x, Tensor{}, b}, norm_attrs(), "ln");
              }),
              AllOf(HasSubstr("layer 'ln' (layer_norm)"), HasSubstr("bias 'ln.bias' has shape [767], expected [768]")));
}

TEST(NormalizationOps, LayerNormRejectsWeightOfOtherDtype) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, Dims{2, 8});
  Tensor w = constant(net, "ln.weight", Dims{8});
  EXPECT_THAT(
      graph_error([&] {
        net.add_layer("layer_norm", {x, w}, norm_attrs(), "ln");
      }),
      AllOf(HasSubstr("layer 'ln' (layer_norm)"), HasSubstr("weight 'ln.weight' has dtype f32 but x 'x' has f16")));
}

TEST(NormalizationOps, LayerNormRejectsNormalizedRankOutOfRange) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 8});
  for (std::int64_t rank : {0, 3, -1}) {
    EXPECT_THAT(graph_error([&] { net.add_layer("layer_norm", {x}, norm_attrs(rank), "ln"); }),
                AllOf(HasSubstr("layer 'ln' (layer_norm)"), HasSubstr("'normalized_rank' is " + std::to_string(rank) +
                                                                      " but must be between 1 and the rank")));
  }
}

TEST(NormalizationOps, LayerNormRejectsBadEpsilon) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 8});
  EXPECT_THAT(graph_error([&] { net.add_layer("layer_norm", {x}, norm_attrs(1, -1e-5), "ln"); }),
              AllOf(HasSubstr("layer 'ln' (layer_norm)"), HasSubstr("'epsilon' must be finite and >= 0")));
  EXPECT_THAT(graph_error([&] { net.add_layer("layer_norm", {x}, norm_attrs(1, std::nan("")), "ln"); }),
              HasSubstr("'epsilon' must be finite and >= 0"));
}

TEST(NormalizationOps, LayerNormRejectsTooManyInputs) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 8});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("layer_norm", {x, x, x, x, x}, norm_attrs(), "ln");
              }),
              AllOf(HasSubstr("layer 'ln' (layer_norm)"), HasSubstr("takes 1 to 4 inputs, 5 given")));
}

TEST(NormalizationOps, LayerNormQuantizedOutputNeedsItsAttributeAndAScalarF32Scale) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 8});
  Tensor scale = net.add_small_constant({0.05}, DataType::kF32, Dims{}, "s");
  Attributes quantized = norm_attrs();
  quantized["quantize_to"] = std::string("i8");
  const std::vector<Tensor> outs = net.add_layer("layer_norm", {x, Tensor{}, Tensor{}, scale}, quantized, "ln");
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(net.dtype(outs[0]), DataType::kF32);
  EXPECT_EQ(net.dtype(outs[1]), DataType::kI8);
  EXPECT_THAT(graph_error([&] {
                net.add_layer("layer_norm", {x, Tensor{}, Tensor{}, scale}, norm_attrs(), "a");
              }),
              HasSubstr("output_scale (input 3) is given but attribute 'quantize_to' is not"));
  EXPECT_THAT(graph_error([&] { net.add_layer("layer_norm", {x}, quantized, "b"); }), HasSubstr("output_scale"));
  Tensor vector_scale = net.add_small_constant({0.05, 0.1}, DataType::kF32, Dims{2}, "sv");
  EXPECT_THAT(graph_error([&] {
                net.add_layer("layer_norm", {x, Tensor{}, Tensor{}, vector_scale}, quantized, "c");
              }),
              HasSubstr("must be a scalar"));
  quantized["quantize_to"] = std::string("f16");
  EXPECT_THAT(graph_error([&] {
                net.add_layer("layer_norm", {x, Tensor{}, Tensor{}, scale}, quantized, "d");
              }),
              HasSubstr("'quantize_to' must be i8 or f8e4m3, not f16"));
}

// ---- rms_norm ----

TEST(NormalizationOps, RmsNormShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, Dims{-1, -1, 4096});
  Tensor w = constant(net, "norm.weight", Dims{4096}, DataType::kF16);
  Tensor y = net.add_rms_norm(x, w);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), (Dims{-1, -1, 4096}));
  EXPECT_EQ(net.dtype(y), DataType::kF16);
  EXPECT_EQ(net.infer_shapes({{"x", Dims{1, 3, 4096}}}).at("y"), (Dims{1, 3, 4096}));
  EXPECT_EQ(net.shape(net.add_rms_norm(x, {})), (Dims{-1, -1, 4096}));
}

TEST(NormalizationOps, RmsNormRejectsWrongWeightShape) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3, 8});
  Tensor w = constant(net, "norm.weight", Dims{8});
  EXPECT_THAT(
      graph_error([&] {
        net.add_layer("rms_norm", {x, w}, norm_attrs(2), "rms");
      }),
      AllOf(HasSubstr("layer 'rms' (rms_norm)"), HasSubstr("weight 'norm.weight' has shape [8], expected [3,8]")));
}

TEST(NormalizationOps, RmsNormChecksDynamicDimAgainstWeightWhenShapesAreKnown) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, -1});
  Tensor w = constant(net, "norm.weight", Dims{8});
  net.mark_output(net.add_layer("rms_norm", {x, w}, norm_attrs(), "rms").at(0), "y");
  EXPECT_THAT(
      graph_error([&] {
        net.infer_shapes({{"x", Dims{2, 9}}});
      }),
      AllOf(HasSubstr("layer 'rms' (rms_norm)"), HasSubstr("weight 'norm.weight' has shape [8], expected [9]")));
}

TEST(NormalizationOps, RmsNormRejectsBadAttributes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 8});
  EXPECT_THAT(graph_error([&] { net.add_layer("rms_norm", {x}, norm_attrs(2, -1.0), "rms"); }),
              AllOf(HasSubstr("layer 'rms' (rms_norm)"), HasSubstr("'epsilon' must be finite and >= 0")));
  EXPECT_THAT(graph_error([&] { net.add_layer("rms_norm", {x}, norm_attrs(3), "rms"); }),
              HasSubstr("'normalized_rank' is 3 but must be between 1 and the rank of x 'x' [2,8] (2)"));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("rms_norm", {x, x, x, x}, {}, "rms");
              }),
              HasSubstr("takes 1 to 3 inputs"));
  // An output scale (input 2) needs `quantize_to`, and `quantize_to` an f32 scalar output scale.
  Tensor scale = net.add_small_constant({0.1}, DataType::kF32, Dims{}, "so");
  EXPECT_THAT(graph_error([&] {
                net.add_layer("rms_norm", {x, {}, scale}, {}, "rms");
              }),
              HasSubstr("output_scale (input 2) is given but attribute 'quantize_to' is not"));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("rms_norm", {x}, {{"quantize_to", std::string("i8")}}, "rms");
              }),
              HasSubstr("output_scale (needed with 'quantize_to')"));
  EXPECT_EQ(net.add_layer("rms_norm", {x, {}, scale}, {{"quantize_to", std::string("i8")}}, "rms").size(), 2u);
}

TEST(NormalizationOps, RmsNormRejectsIntegerInput) {
  Network net;
  Tensor x = net.add_input("x", DataType::kI64, Dims{2, 8});
  EXPECT_THAT(graph_error([&] { net.add_layer("rms_norm", {x}, {}, "rms"); }),
              AllOf(HasSubstr("layer 'rms' (rms_norm)"), HasSubstr("input 'x' has dtype i64")));
}

// ---- batch_norm ----

TEST(NormalizationOps, BatchNormShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, 64, -1, -1});
  Tensor mean = constant(net, "bn.mean", Dims{64});
  Tensor var = constant(net, "bn.var", Dims{64});
  Tensor w = constant(net, "bn.weight", Dims{64});
  Tensor b = constant(net, "bn.bias", Dims{64});
  Tensor y = net.add_batch_norm(x, mean, var, w, b);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), (Dims{-1, 64, -1, -1}));
  EXPECT_EQ(net.dim_expression(y, 2), "x.2");
  EXPECT_EQ(net.infer_shapes({{"x", Dims{2, 64, 7, 5}}}).at("y"), (Dims{2, 64, 7, 5}));
  EXPECT_EQ(net.shape(net.add_batch_norm(x, mean, var, {}, {})), (Dims{-1, 64, -1, -1}));
  Tensor x2 = net.add_input("x2", DataType::kF32, Dims{5, 64});
  EXPECT_EQ(net.shape(net.add_batch_norm(x2, mean, var, {}, b)), (Dims{5, 64}));
}

TEST(NormalizationOps, BatchNormRejectsRankBelowTwo) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{4});
  Tensor m = constant(net, "m", Dims{4});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("batch_norm", {x, m, m}, {}, "bn");
              }),
              AllOf(HasSubstr("layer 'bn' (batch_norm)"), HasSubstr("x 'x' has shape [4] but must have rank >= 2")));
}

TEST(NormalizationOps, BatchNormRequiresMeanAndVar) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 4});
  Tensor m = constant(net, "m", Dims{4});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("batch_norm", {x, m}, {}, "bn");
              }),
              AllOf(HasSubstr("layer 'bn' (batch_norm)"), HasSubstr("takes 3 to 5 inputs, 2 given")));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("batch_norm", {x, m, Tensor{}}, {}, "bn");
              }),
              AllOf(HasSubstr("layer 'bn' (batch_norm)"), HasSubstr("var (input 2) is required")));
}

TEST(NormalizationOps, BatchNormRejectsWrongParameterShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 4, 3, 3});
  Tensor good = constant(net, "good", Dims{4});
  Tensor bad = constant(net, "bn.running_mean", Dims{5});
  Tensor bad2 = constant(net, "bn.w", Dims{4, 1});
  EXPECT_THAT(
      graph_error([&] {
        net.add_layer("batch_norm", {x, bad, good}, {}, "bn");
      }),
      AllOf(HasSubstr("layer 'bn' (batch_norm)"), HasSubstr("mean 'bn.running_mean' has shape [5], expected [4]"),
            HasSubstr("the channel dim of x 'x' [2,4,3,3]")));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("batch_norm", {x, good, bad}, {}, "bn");
              }),
              HasSubstr("var 'bn.running_mean'"));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("batch_norm", {x, good, good, bad2}, {}, "bn");
              }),
              HasSubstr("weight 'bn.w' has shape [4,1], expected [4]"));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("batch_norm", {x, good, good, good, bad}, {}, "bn");
              }),
              HasSubstr("bias 'bn.running_mean' has shape [5], expected [4]"));
}

TEST(NormalizationOps, BatchNormRejectsParameterOfOtherDtype) {
  Network net;
  Tensor x = net.add_input("x", DataType::kBF16, Dims{2, 4});
  Tensor m = constant(net, "m", Dims{4}, DataType::kBF16);
  Tensor v = constant(net, "v", Dims{4}, DataType::kF32);
  EXPECT_THAT(graph_error([&] {
                net.add_layer("batch_norm", {x, m, v}, {}, "bn");
              }),
              AllOf(HasSubstr("layer 'bn' (batch_norm)"), HasSubstr("var 'v' has dtype f32 but x 'x' has bf16")));
}

TEST(NormalizationOps, BatchNormChecksDynamicChannelsWhenShapesAreKnown) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, -1, 5});
  Tensor m = constant(net, "m", Dims{4});
  net.mark_output(net.add_layer("batch_norm", {x, m, m}, {}, "bn").at(0), "y");
  EXPECT_EQ(net.infer_shapes({{"x", Dims{2, 4, 5}}}).at("y"), (Dims{2, 4, 5}));
  EXPECT_THAT(graph_error([&] {
                net.infer_shapes({{"x", Dims{2, 3, 5}}});
              }),
              AllOf(HasSubstr("layer 'bn' (batch_norm)"), HasSubstr("mean 'm' has shape [4], expected [3]")));
}

TEST(NormalizationOps, BatchNormRejectsBadEpsilon) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 4});
  Tensor m = constant(net, "m", Dims{4});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("batch_norm", {x, m, m}, {{"epsilon", -0.5}}, "bn");
              }),
              AllOf(HasSubstr("layer 'bn' (batch_norm)"), HasSubstr("'epsilon' must be finite and >= 0, not -0.5")));
}

// ---- group_norm ----

TEST(NormalizationOps, GroupNormShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF16, Dims{-1, 64, -1, -1});
  Tensor w = constant(net, "gn.weight", Dims{64}, DataType::kF16);
  Tensor b = constant(net, "gn.bias", Dims{64}, DataType::kF16);
  Tensor y = net.add_group_norm(x, 32, w, b);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), (Dims{-1, 64, -1, -1}));
  EXPECT_EQ(net.dtype(y), DataType::kF16);
  EXPECT_EQ(net.infer_shapes({{"x", Dims{1, 64, 8, 8}}}).at("y"), (Dims{1, 64, 8, 8}));
  Tensor x2 = net.add_input("x2", DataType::kF16, Dims{3, 64});
  EXPECT_EQ(net.shape(net.add_group_norm(x2, 64, {}, {})), (Dims{3, 64}));
}

TEST(NormalizationOps, GroupNormRequiresNumGroups) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 8, 3});
  EXPECT_THAT(graph_error([&] { net.add_layer("group_norm", {x}, {}, "gn"); }),
              AllOf(HasSubstr("layer 'gn' (group_norm)"), HasSubstr("attribute 'num_groups' is required")));
}

TEST(NormalizationOps, GroupNormRejectsNonPositiveGroups) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 8, 3});
  for (std::int64_t g : {0, -2}) {
    EXPECT_THAT(
        graph_error([&] {
          net.add_layer("group_norm", {x}, {{"num_groups", g}}, "gn");
        }),
        AllOf(HasSubstr("layer 'gn' (group_norm)"), HasSubstr("'num_groups' must be >= 1, not " + std::to_string(g))));
  }
}

TEST(NormalizationOps, GroupNormRejectsGroupsThatDoNotDivideChannels) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 12, 3});
  EXPECT_THAT(
      graph_error([&] {
        net.add_layer("group_norm", {x}, {{"num_groups", std::int64_t{5}}}, "gn");
      }),
      AllOf(HasSubstr("layer 'gn' (group_norm)"), HasSubstr("num_groups 5 does not divide the 12 channels of x 'x'")));
}

TEST(NormalizationOps, GroupNormChecksDynamicChannelsWhenShapesAreKnown) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, -1, 3});
  net.mark_output(net.add_layer("group_norm", {x}, {{"num_groups", std::int64_t{4}}}, "gn").at(0), "y");
  EXPECT_EQ(net.infer_shapes({{"x", Dims{2, 8, 3}}}).at("y"), (Dims{2, 8, 3}));
  EXPECT_THAT(graph_error([&] {
                net.infer_shapes({{"x", Dims{2, 6, 3}}});
              }),
              AllOf(HasSubstr("layer 'gn' (group_norm)"), HasSubstr("num_groups 4 does not divide the 6 channels")));
}

TEST(NormalizationOps, GroupNormRejectsWrongParameterShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 8, 3});
  Tensor w = constant(net, "gn.weight", Dims{4});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("group_norm", {x, w}, {{"num_groups", std::int64_t{4}}}, "gn");
              }),
              AllOf(HasSubstr("layer 'gn' (group_norm)"), HasSubstr("weight 'gn.weight' has shape [4], expected [8]")));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("group_norm", {x, Tensor{}, w}, {{"num_groups", std::int64_t{4}}}, "gn");
              }),
              HasSubstr("bias 'gn.weight' has shape [4], expected [8]"));
}

TEST(NormalizationOps, GroupNormRejectsRankBelowTwo) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{8});
  EXPECT_THAT(graph_error([&] {
                net.add_layer("group_norm", {x}, {{"num_groups", std::int64_t{2}}}, "gn");
              }),
              AllOf(HasSubstr("layer 'gn' (group_norm)"), HasSubstr("must have rank >= 2")));
}

// ---- instance_norm ----

TEST(NormalizationOps, InstanceNormShapes) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{-1, 3, -1});
  Tensor w = constant(net, "in.weight", Dims{3});
  Tensor y = net.add_instance_norm(x, w, w);
  net.mark_output(y, "y");
  EXPECT_EQ(net.shape(y), (Dims{-1, 3, -1}));
  EXPECT_EQ(net.infer_shapes({{"x", Dims{2, 3, 17}}}).at("y"), (Dims{2, 3, 17}));
  Tensor x4 = net.add_input("x4", DataType::kF32, Dims{2, 3, 4, 5});
  EXPECT_EQ(net.shape(net.add_instance_norm(x4, {}, {})), (Dims{2, 3, 4, 5}));
}

TEST(NormalizationOps, InstanceNormRejectsRankBelowThree) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3});
  EXPECT_THAT(
      graph_error([&] { net.add_layer("instance_norm", {x}, {}, "inorm"); }),
      AllOf(HasSubstr("layer 'inorm' (instance_norm)"), HasSubstr("x 'x' has shape [2,3] but must have rank >= 3")));
}

TEST(NormalizationOps, InstanceNormRejectsWrongParameterShape) {
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, Dims{2, 3, 5});
  Tensor w = constant(net, "in.weight", Dims{5});
  EXPECT_THAT(
      graph_error([&] {
        net.add_layer("instance_norm", {x, w}, {}, "inorm");
      }),
      AllOf(HasSubstr("layer 'inorm' (instance_norm)"), HasSubstr("weight 'in.weight' has shape [5], expected [3]")));
  EXPECT_THAT(graph_error([&] {
                net.add_layer("instance_norm", {x}, {{"epsilon", std::string("big")}}, "inorm");
              }),
              HasSubstr("attribute 'epsilon' must be a number"));
}

}  // namespace
}  // namespace tensoracle
