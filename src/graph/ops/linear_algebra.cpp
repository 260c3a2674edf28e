// Op definitions (inputs, attributes, dtype and shape inference) of the linear_algebra family.
#include <fmt/format.h>

#include <algorithm>

#include "graph/op_def.hpp"

namespace tensoracle::graph {
namespace {

std::size_t index(int i) { return static_cast<std::size_t>(i); }

// a [..., M, K] · b [..., K, N] (after the optional swaps of the last two dims); batch dims broadcast.
std::vector<OutputType> infer_matmul(InferContext& ctx) {
  const TensorType& a = ctx.input(0, "a");
  const TensorType& b = ctx.input(1, "b");
  const bool transpose_a = ctx.get_bool("transpose_a", false);
  const bool transpose_b = ctx.get_bool("transpose_b", false);
  ctx.require_dtype(a, kFloatTypes, "a");
  ctx.require_same_dtype(a, b);
  for (const TensorType* t : {&a, &b}) {
    if (t->rank() < 2) {
      ctx.fail(fmt::format("{} '{}' must have rank >= 2 (unsqueeze a vector to a matrix), but has shape {}",
                           t == &a ? "a" : "b", t->name, ctx.shape_string(t->shape)));
    }
  }
  const int ra = a.rank(), rb = b.rank();
  const DimId m = a.shape[index(transpose_a ? ra - 1 : ra - 2)];
  const DimId k_a = a.shape[index(transpose_a ? ra - 2 : ra - 1)];
  const DimId k_b = b.shape[index(transpose_b ? rb - 1 : rb - 2)];
  const DimId n = b.shape[index(transpose_b ? rb - 2 : rb - 1)];
  ctx.require_equal(
      k_a, k_b,
      fmt::format("K differs between 'a' {}{} and 'b' {}{}", ctx.shape_string(a.shape),
                  transpose_a ? " (transposed)" : "", ctx.shape_string(b.shape), transpose_b ? " (transposed)" : ""));

  // Batch dims: NumPy broadcasting of everything before the last two dims.
  const int batch_rank = std::max(ra, rb) - 2;
  std::vector<DimId> shape(index(batch_rank), ctx.constant(1));
  for (const TensorType* t : {&a, &b}) {
    const int offset = batch_rank - (t->rank() - 2);
    for (int i = 0; i < t->rank() - 2; ++i) {
      auto merged = ctx.dims().broadcast(shape[index(offset + i)], t->shape[index(i)]);
      if (!merged) {
        ctx.fail(fmt::format("the batch dims of 'a' {} and 'b' {} can't be broadcast together",
                             ctx.shape_string(a.shape), ctx.shape_string(b.shape)));
      }
      shape[index(offset + i)] = *merged;
    }
  }
  shape.push_back(m);
  shape.push_back(n);
  return {OutputType{a.dtype, std::move(shape)}};
}

// x [..., in] · weight[out, in]ᵀ + bias[out].
std::vector<OutputType> infer_linear(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const TensorType& weight = ctx.input(1, "weight");
  ctx.require_dtype(x, kFloatTypes, "x");
  ctx.require_same_dtype(x, weight);
  if (x.rank() < 1) ctx.fail(fmt::format("x '{}' must have rank >= 1, but is a scalar", x.name));
  ctx.require_rank(weight, 2, "weight");
  const DimId in = x.shape.back();
  const DimId out = weight.shape[0];
  ctx.require_equal(
      weight.shape[1], in,
      fmt::format("weight '{}' has shape {} but x '{}' has shape {} (weight's dim 1 must equal x's last dim)",
                  weight.name, ctx.shape_string(weight.shape), x.name, ctx.shape_string(x.shape)));
  if (ctx.has_input(2)) {
    const TensorType& bias = ctx.input(2, "bias");
    ctx.require_same_dtype(x, bias);
    ctx.require_rank(bias, 1, "bias");
    ctx.require_equal(
        bias.shape[0], out,
        fmt::format("bias '{}' has shape {} but weight '{}' has shape {} (bias's size must equal weight's dim 0)",
                    bias.name, ctx.shape_string(bias.shape), weight.name, ctx.shape_string(weight.shape)));
  }
  std::vector<DimId> shape = x.shape;
  shape.back() = out;
  // The fused epilogue (made by the builder): activation(x·Wᵀ + bias + residual).
  const std::string activation = ctx.get_string("activation", "none");
  if (activation != "none" && activation != "relu" && activation != "gelu_tanh" && activation != "gelu_erf") {
    ctx.fail(fmt::format("attribute 'activation' must be \"none\", \"relu\", \"gelu_tanh\" or \"gelu_erf\", not \"{}\"",
                         activation));
  }
  if (ctx.has_input(3)) {
    const TensorType& residual = ctx.input(3, "residual");
    ctx.require_same_dtype(x, residual);
    const std::string what = fmt::format("residual '{}' has shape {} but the output has shape {}", residual.name,
                                         ctx.shape_string(residual.shape), ctx.shape_string(shape));
    if (residual.rank() != static_cast<int>(shape.size())) ctx.fail(what);
    for (std::size_t i = 0; i < shape.size(); ++i) ctx.require_equal(residual.shape[i], shape[i], what);
  }
  return {OutputType{x.dtype, std::move(shape)}};
}

}  // namespace

void register_linear_algebra_ops(std::vector<OpDef>& ops) {
  ops.push_back(OpDef{"matmul",
                      2,
                      2,
                      {"transpose_a", "transpose_b"},
                      infer_matmul,
                      "a [..., M, K] · b [..., K, N] with broadcast batch dims"});
  ops.push_back(OpDef{"linear",
                      2,
                      4,
                      {"activation"},
                      infer_linear,
                      "activation(x [..., in] · weight[out, in]ᵀ + bias[out] + residual)"});
}

}  // namespace tensoracle::graph
