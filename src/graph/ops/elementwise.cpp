// Op definitions (inputs, attributes, dtype and shape inference) of the elementwise family.
#include <fmt/format.h>

#include <cmath>

#include "graph/elementwise_program.hpp"
#include "graph/op_def.hpp"

namespace tensoracle::graph {
namespace {

constexpr std::initializer_list<DataType> kNumericTypes = {DataType::kF32, DataType::kF16, DataType::kBF16,
                                                           DataType::kF64, DataType::kI64, DataType::kI32,
                                                           DataType::kI16, DataType::kI8,  DataType::kU8};
constexpr std::initializer_list<DataType> kEqualityTypes = {
    DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64, DataType::kI64,
    DataType::kI32, DataType::kI16, DataType::kI8,   DataType::kU8,  DataType::kBool};

// A float attribute that must be a finite number (NaN or infinity would make every output NaN or
// the op meaningless).
double finite_float(InferContext& ctx, std::string_view name, double fallback) {
  const double v = ctx.get_float(name, fallback);
  if (!std::isfinite(v)) ctx.fail(fmt::format("attribute '{}' must be a finite number, not {}", name, v));
  return v;
}

std::vector<OutputType> infer_arithmetic(InferContext& ctx) {
  const TensorType& a = ctx.input(0, "a");
  const TensorType& b = ctx.input(1, "b");
  ctx.require_dtype(a, kNumericTypes, "input");
  ctx.require_same_dtype(a, b);
  return {OutputType{a.dtype, ctx.broadcast_shapes({&a, &b})}};
}

std::vector<OutputType> infer_equal(InferContext& ctx) {
  const TensorType& a = ctx.input(0, "a");
  const TensorType& b = ctx.input(1, "b");
  ctx.require_dtype(a, kEqualityTypes, "input");
  ctx.require_same_dtype(a, b);
  return {OutputType{DataType::kBool, ctx.broadcast_shapes({&a, &b})}};
}

std::vector<OutputType> infer_ordering(InferContext& ctx) {
  const TensorType& a = ctx.input(0, "a");
  const TensorType& b = ctx.input(1, "b");
  ctx.require_dtype(a, kNumericTypes, "input");
  ctx.require_same_dtype(a, b);
  return {OutputType{DataType::kBool, ctx.broadcast_shapes({&a, &b})}};
}

std::vector<OutputType> infer_where(InferContext& ctx) {
  const TensorType& condition = ctx.input(0, "condition");
  const TensorType& a = ctx.input(1, "a");
  const TensorType& b = ctx.input(2, "b");
  ctx.require_dtype(condition, {DataType::kBool}, "condition");
  ctx.require_same_dtype(a, b);
  return {OutputType{a.dtype, ctx.broadcast_shapes({&condition, &a, &b})}};
}

std::vector<OutputType> infer_signed_unary(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  ctx.require_dtype(x, kNumericTypes, "input");
  return {OutputType{x.dtype, x.shape}};
}

std::vector<OutputType> infer_float_unary(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  ctx.require_dtype(x, kFloatTypes, "input");
  return {OutputType{x.dtype, x.shape}};
}

std::vector<OutputType> infer_not(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  ctx.require_dtype(x, {DataType::kBool}, "input");
  return {OutputType{DataType::kBool, x.shape}};
}

std::vector<OutputType> infer_leaky_relu(InferContext& ctx) {
  finite_float(ctx, "alpha", 0.01);
  return infer_float_unary(ctx);
}

std::vector<OutputType> infer_gelu(InferContext& ctx) {
  const std::string approximate = ctx.get_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") {
    ctx.fail(fmt::format("attribute 'approximate' must be \"none\" or \"tanh\", not \"{}\"", approximate));
  }
  return infer_float_unary(ctx);
}

std::vector<OutputType> infer_softplus(InferContext& ctx) {
  // beta divides the result, so it can't be 0.
  if (finite_float(ctx, "beta", 1.0) == 0.0) ctx.fail("attribute 'beta' must not be 0");
  finite_float(ctx, "threshold", 20.0);
  return infer_float_unary(ctx);
}

std::vector<OutputType> infer_clip(InferContext& ctx) {
  // Infinite bounds are the same as no bound; NaN would turn every output into NaN.
  for (std::string_view bound : {"min", "max"}) {
    if (ctx.has(bound) && std::isnan(ctx.get_float(bound)))
      ctx.fail(fmt::format("attribute '{}' must not be NaN", bound));
  }
  return infer_float_unary(ctx);
}

std::vector<OutputType> infer_cast(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  return {OutputType{ctx.get_dtype("to"), x.shape}};
}

// fused_elementwise: each instruction's own shape function runs on the values before it, so the result has exactly the
// dtype and shape the unfused chain had; every input must broadcast to that shape (the kernels index them that way).
std::vector<OutputType> infer_fused_elementwise(InferContext& ctx) {
  const ElementwiseProgram program =
      ElementwiseProgram::parse(ctx.get_string(kProgramAttr), ctx.num_inputs(), ctx.layer_name());
  std::vector<TensorType> values;
  values.reserve(ctx.num_inputs() + program.instructions.size());  // `inputs` points into it
  std::vector<const TensorType*> inputs;
  for (std::size_t i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(&values.emplace_back(ctx.input(i)));
  for (std::size_t k = 0; k < program.instructions.size(); ++k) {
    const ProgramInstruction& ins = program.instructions[k];
    std::vector<std::optional<TensorType>> args;
    for (auto a : ins.args) args.emplace_back(values[static_cast<std::size_t>(a)]);
    InferContext sub(ins.attrs, fmt::format("{}/{}:{}", ctx.layer_name(), k, ins.op), ins.op, std::move(args),
                     ctx.dims());
    std::vector<OutputType> out = find_op(ins.op)->infer(sub);
    if (out.size() != 1) ctx.fail(fmt::format("instruction {} ({}) has {} outputs", k, ins.op, out.size()));
    if (out[0].dtype != ins.dtype) {
      ctx.fail(fmt::format("instruction {} ({}) gives {}, the program records {}", k, ins.op, to_string(out[0].dtype),
                           to_string(ins.dtype)));
    }
    values.push_back(TensorType{fmt::format("%{}", k), out[0].dtype, std::move(out[0].shape)});
  }
  const TensorType& result = values.back();
  const std::vector<DimId> all = ctx.broadcast_shapes(inputs);
  if (all.size() != result.shape.size()) ctx.fail("the inputs do not broadcast to the program's result shape");
  for (std::size_t d = 0; d < all.size(); ++d) {
    ctx.require_equal(all[d], result.shape[d], fmt::format("the inputs broadcast to the result shape (dim {})", d));
  }
  return {OutputType{result.dtype, result.shape}};
}

}  // namespace

void register_elementwise_ops(std::vector<OpDef>& ops) {
  ops.push_back(OpDef{"add", 2, 2, {}, infer_arithmetic, "a + b with broadcasting"});
  ops.push_back(OpDef{"sub", 2, 2, {}, infer_arithmetic, "a - b with broadcasting"});
  ops.push_back(OpDef{"mul", 2, 2, {}, infer_arithmetic, "a * b with broadcasting"});
  ops.push_back(OpDef{"div", 2, 2, {}, infer_arithmetic, "a / b with broadcasting; integers truncate toward zero"});
  ops.push_back(OpDef{"pow", 2, 2, {}, infer_arithmetic, "a raised to the power b with broadcasting"});
  ops.push_back(OpDef{"max", 2, 2, {}, infer_arithmetic, "elementwise maximum with broadcasting (NaN propagates)"});
  ops.push_back(OpDef{"min", 2, 2, {}, infer_arithmetic, "elementwise minimum with broadcasting (NaN propagates)"});
  ops.push_back(OpDef{"equal", 2, 2, {}, infer_equal, "a == b with broadcasting, bool"});
  ops.push_back(OpDef{"less", 2, 2, {}, infer_ordering, "a < b with broadcasting, bool"});
  ops.push_back(OpDef{"greater", 2, 2, {}, infer_ordering, "a > b with broadcasting, bool"});
  ops.push_back(OpDef{"where", 3, 3, {}, infer_where, "condition ? a : b with broadcasting"});
  ops.push_back(OpDef{"abs", 1, 1, {}, infer_signed_unary, "|x|"});
  ops.push_back(OpDef{"neg", 1, 1, {}, infer_signed_unary, "-x"});
  ops.push_back(OpDef{"exp", 1, 1, {}, infer_float_unary, "e^x"});
  ops.push_back(OpDef{"log", 1, 1, {}, infer_float_unary, "natural logarithm"});
  ops.push_back(OpDef{"sqrt", 1, 1, {}, infer_float_unary, "square root"});
  ops.push_back(OpDef{"rsqrt", 1, 1, {}, infer_float_unary, "1 / sqrt(x)"});
  ops.push_back(OpDef{"reciprocal", 1, 1, {}, infer_float_unary, "1 / x"});
  ops.push_back(OpDef{"sin", 1, 1, {}, infer_float_unary, "sine"});
  ops.push_back(OpDef{"cos", 1, 1, {}, infer_float_unary, "cosine"});
  ops.push_back(OpDef{"tanh", 1, 1, {}, infer_float_unary, "hyperbolic tangent"});
  ops.push_back(OpDef{"erf", 1, 1, {}, infer_float_unary, "error function"});
  ops.push_back(OpDef{"floor", 1, 1, {}, infer_float_unary, "round toward -infinity"});
  ops.push_back(OpDef{"ceil", 1, 1, {}, infer_float_unary, "round toward +infinity"});
  ops.push_back(OpDef{"not", 1, 1, {}, infer_not, "logical not of a bool tensor"});
  ops.push_back(OpDef{"relu", 1, 1, {}, infer_float_unary, "max(x, 0)"});
  ops.push_back(OpDef{"leaky_relu", 1, 1, {"alpha"}, infer_leaky_relu, "x if x > 0 else alpha * x"});
  ops.push_back(OpDef{"gelu", 1, 1, {"approximate"}, infer_gelu, "x * Phi(x), exact (erf) or tanh approximation"});
  ops.push_back(OpDef{"silu", 1, 1, {}, infer_float_unary, "x * sigmoid(x)"});
  ops.push_back(OpDef{"sigmoid", 1, 1, {}, infer_float_unary, "1 / (1 + e^-x)"});
  ops.push_back(OpDef{"hard_sigmoid", 1, 1, {}, infer_float_unary, "relu6(x + 3) / 6"});
  ops.push_back(OpDef{"hard_swish", 1, 1, {}, infer_float_unary, "x * relu6(x + 3) / 6"});
  ops.push_back(OpDef{"softplus",
                      1,
                      1,
                      {"beta", "threshold"},
                      infer_softplus,
                      "log(1 + e^(beta x)) / beta, x where beta x > threshold"});
  ops.push_back(OpDef{"clip", 1, 1, {"min", "max"}, infer_clip, "min(max(x, min), max), each bound optional"});
  ops.push_back(OpDef{"cast", 1, 1, {"to"}, infer_cast, "converts to another dtype"});
  ops.push_back(OpDef{kFusedElementwiseOp,
                      1,
                      -1,
                      {kProgramAttr},
                      infer_fused_elementwise,
                      "internal (made by the builder): a chain of elementwise ops run as one layer"});
}

}  // namespace tensoracle::graph
