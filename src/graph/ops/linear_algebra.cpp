// Op definitions (inputs, attributes, dtype and shape inference) of the linear_algebra family.
#include <fmt/format.h>

#include <algorithm>

#include "graph/op_def.hpp"
#include "graph/ops/linear_checks.hpp"

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
  std::vector<DimId> shape = linear_output_shape(ctx, x, weight);
  if (ctx.has_input(2)) {
    const TensorType& bias = ctx.input(2, "bias");
    ctx.require_same_dtype(x, bias);
    require_per_feature(ctx, bias, "bias", weight);
  }
  // The fused epilogue (made by the builder): activation(x·Wᵀ + bias + residual).
  if (ctx.has_input(3)) ctx.require_same_dtype(x, ctx.input(3, "residual"));
  check_linear_epilogue(ctx, 3, shape);
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
