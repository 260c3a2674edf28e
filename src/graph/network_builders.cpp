// The typed layer methods of Network: each names an op and its attributes, then calls add_layer.
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "graph/plugin_layer.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle {
namespace {

Tensor single(std::vector<Tensor> outputs) { return outputs.at(0); }

void require_one_of(const std::string& op, std::initializer_list<std::string_view> allowed, const char* method) {
  if (std::find(allowed.begin(), allowed.end(), op) == allowed.end()) {
    throw GraphError(fmt::format("{}: '{}' is not one of {}", method, op, fmt::join(allowed, ", ")));
  }
}

std::int64_t flag(bool b) { return b ? 1 : 0; }

void add_conv_attrs(Attributes& attrs, const ConvOptions& o, bool transposed) {
  if (!o.stride.empty()) attrs["stride"] = o.stride;
  if (!o.padding.empty()) attrs["padding"] = o.padding;
  if (!o.dilation.empty()) attrs["dilation"] = o.dilation;
  if (o.groups != 1) attrs["groups"] = o.groups;
  if (transposed && !o.output_padding.empty()) attrs["output_padding"] = o.output_padding;
  if (!transposed && !o.output_padding.empty())
    throw GraphError("add_convolution: output_padding applies to transposed convolution only");
}

}  // namespace

Tensor Network::add_matmul(Tensor a, Tensor b, bool transpose_a, bool transpose_b) {
  Attributes attrs;
  if (transpose_a) attrs["transpose_a"] = flag(true);
  if (transpose_b) attrs["transpose_b"] = flag(true);
  return single(add_layer("matmul", {a, b}, attrs));
}

Tensor Network::add_linear(Tensor x, Tensor weight, Tensor bias) {
  if (bias.valid()) return single(add_layer("linear", {x, weight, bias}));
  return single(add_layer("linear", {x, weight}));
}

Tensor Network::add_convolution(Tensor x, Tensor weight, Tensor bias, const ConvOptions& options) {
  Attributes attrs;
  add_conv_attrs(attrs, options, false);
  return single(add_layer("conv", {x, weight, bias}, attrs));
}

Tensor Network::add_conv_transpose2d(Tensor x, Tensor weight, Tensor bias, const ConvOptions& options) {
  Attributes attrs;
  add_conv_attrs(attrs, options, true);
  return single(add_layer("conv_transpose2d", {x, weight, bias}, attrs));
}

Tensor Network::add_pool2d(Tensor x, PoolType type, const PoolOptions& options) {
  Attributes attrs;
  attrs["kernel"] = options.kernel;
  if (!options.stride.empty()) attrs["stride"] = options.stride;
  if (!options.padding.empty()) attrs["padding"] = options.padding;
  if (options.ceil_mode) attrs["ceil_mode"] = flag(true);
  if (type == PoolType::kAverage && !options.count_include_pad) attrs["count_include_pad"] = flag(false);
  return single(add_layer(type == PoolType::kMax ? "max_pool2d" : "avg_pool2d", {x}, attrs));
}

Tensor Network::add_global_average_pool(Tensor x) { return single(add_layer("global_avg_pool", {x})); }

Tensor Network::add_resize(Tensor x, ResizeMode mode, const std::vector<std::int64_t>& size, bool align_corners) {
  Attributes attrs;
  attrs["mode"] = std::string(mode == ResizeMode::kNearest ? "nearest" : "bilinear");
  attrs["size"] = size;
  if (align_corners) attrs["align_corners"] = flag(true);
  return single(add_layer("resize", {x}, attrs));
}

Tensor Network::add_binary(const std::string& op, Tensor a, Tensor b) {
  require_one_of(op, {"add", "sub", "mul", "div", "pow", "max", "min", "equal", "less", "greater"}, "add_binary");
  return single(add_layer(op, {a, b}));
}

Tensor Network::add_where(Tensor condition, Tensor a, Tensor b) {
  return single(add_layer("where", {condition, a, b}));
}

Tensor Network::add_unary(const std::string& op, Tensor x) {
  require_one_of(
      op,
      {"abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "erf", "floor", "ceil", "not"},
      "add_unary");
  return single(add_layer(op, {x}));
}

Tensor Network::add_activation(const std::string& op, Tensor x, const Attributes& attrs) {
  require_one_of(op,
                 {"relu", "leaky_relu", "gelu", "silu", "sigmoid", "hard_sigmoid", "hard_swish", "softplus", "clip"},
                 "add_activation");
  return single(add_layer(op, {x}, attrs));
}

Tensor Network::add_cast(Tensor x, DataType to) {
  return single(add_layer("cast", {x}, {{"to", std::string(to_string(to))}}));
}

Tensor Network::add_softmax(Tensor x, std::int64_t axis, bool log) {
  return single(add_layer(log ? "log_softmax" : "softmax", {x}, {{"axis", axis}}));
}

Tensor Network::add_layer_norm(Tensor x, Tensor weight, Tensor bias, double epsilon, std::int64_t normalized_rank) {
  return single(
      add_layer("layer_norm", {x, weight, bias}, {{"epsilon", epsilon}, {"normalized_rank", normalized_rank}}));
}

Tensor Network::add_rms_norm(Tensor x, Tensor weight, double epsilon, std::int64_t normalized_rank) {
  return single(add_layer("rms_norm", {x, weight}, {{"epsilon", epsilon}, {"normalized_rank", normalized_rank}}));
}

Tensor Network::add_batch_norm(Tensor x, Tensor mean, Tensor var, Tensor weight, Tensor bias, double epsilon) {
  return single(add_layer("batch_norm", {x, mean, var, weight, bias}, {{"epsilon", epsilon}}));
}

Tensor Network::add_group_norm(Tensor x, std::int64_t num_groups, Tensor weight, Tensor bias, double epsilon) {
  return single(add_layer("group_norm", {x, weight, bias}, {{"num_groups", num_groups}, {"epsilon", epsilon}}));
}

Tensor Network::add_instance_norm(Tensor x, Tensor weight, Tensor bias, double epsilon) {
  return single(add_layer("instance_norm", {x, weight, bias}, {{"epsilon", epsilon}}));
}

Tensor Network::add_reduce(const std::string& op, Tensor x, const std::vector<std::int64_t>& axes, bool keep_dims) {
  require_one_of(op, {"sum", "mean", "max", "min", "prod"}, "add_reduce");
  return single(add_layer("reduce_" + op, {x}, {{"axes", axes}, {"keep_dims", flag(keep_dims)}}));
}

Tensor Network::add_arg_reduce(bool max, Tensor x, std::int64_t axis, bool keep_dims) {
  return single(add_layer(max ? "argmax" : "argmin", {x}, {{"axis", axis}, {"keep_dims", flag(keep_dims)}}));
}

std::pair<Tensor, Tensor> Network::add_top_k(Tensor x, std::int64_t k, std::int64_t axis, bool largest) {
  auto out = add_layer("top_k", {x}, {{"k", k}, {"axis", axis}, {"largest", flag(largest)}});
  return {out.at(0), out.at(1)};
}

Tensor Network::add_reshape(Tensor x, const std::vector<std::int64_t>& shape) {
  return single(add_layer("reshape", {x}, {{"shape", shape}}));
}

Tensor Network::add_transpose(Tensor x, const std::vector<std::int64_t>& perm) {
  return single(add_layer("transpose", {x}, {{"perm", perm}}));
}

Tensor Network::add_slice(Tensor x, const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& ends,
                          const std::vector<std::int64_t>& axes, const std::vector<std::int64_t>& steps) {
  Attributes attrs{{"starts", starts}, {"ends", ends}, {"axes", axes}};
  if (!steps.empty()) attrs["steps"] = steps;
  return single(add_layer("slice", {x}, attrs));
}

Tensor Network::add_concat(const std::vector<Tensor>& xs, std::int64_t axis) {
  return single(add_layer("concat", xs, {{"axis", axis}}));
}

std::vector<Tensor> Network::add_split(Tensor x, const std::vector<std::int64_t>& sizes, std::int64_t axis) {
  return add_layer("split", {x}, {{"sizes", sizes}, {"axis", axis}});
}

Tensor Network::add_gather(Tensor data, Tensor indices, std::int64_t axis) {
  return single(add_layer("gather", {data, indices}, {{"axis", axis}}));
}

Tensor Network::add_squeeze(Tensor x, const std::vector<std::int64_t>& axes) {
  return single(add_layer("squeeze", {x}, {{"axes", axes}}));
}

Tensor Network::add_unsqueeze(Tensor x, const std::vector<std::int64_t>& axes) {
  return single(add_layer("unsqueeze", {x}, {{"axes", axes}}));
}

Tensor Network::add_expand(Tensor x, const std::vector<std::int64_t>& shape) {
  return single(add_layer("expand", {x}, {{"shape", shape}}));
}

Tensor Network::add_pad(Tensor x, const std::vector<std::int64_t>& pads, PadMode mode, double value) {
  static constexpr std::array<const char*, 3> kModes{"constant", "reflect", "edge"};
  Attributes attrs{{"pads", pads}, {"mode", std::string(kModes[static_cast<std::size_t>(mode)])}};
  if (value != 0.0) attrs["value"] = value;
  return single(add_layer("pad", {x}, attrs));
}

Tensor Network::add_attention(Tensor q, Tensor k, Tensor v, Tensor mask, const AttentionOptions& options) {
  Attributes attrs;
  if (options.causal) attrs["causal"] = flag(true);
  if (options.scale) attrs["scale"] = *options.scale;
  if (mask.valid()) return single(add_layer("attention", {q, k, v, mask}, attrs));
  return single(add_layer("attention", {q, k, v}, attrs));
}

Tensor Network::add_rotary_embedding(Tensor x, const RotaryOptions& options) {
  Attributes attrs{{"base", options.base}};
  if (options.rotary_dim != 0) attrs["rotary_dim"] = options.rotary_dim;
  if (options.interleaved) attrs["interleaved"] = flag(true);
  if (options.position_offset != 0) attrs["position_offset"] = options.position_offset;
  return single(add_layer("rotary_embedding", {x}, attrs));
}

Tensor Network::add_quantize(Tensor x, Tensor scale, DataType to, std::int64_t axis) {
  return single(add_layer("quantize", {x, scale}, {{"to", std::string(to_string(to))}, {"axis", axis}}));
}

Tensor Network::add_dequantize(Tensor x, Tensor scale, DataType to, std::int64_t axis) {
  return single(add_layer("dequantize", {x, scale}, {{"to", std::string(to_string(to))}, {"axis", axis}}));
}

std::vector<Tensor> Network::add_plugin(const std::string& type, const std::string& version,
                                        const std::vector<Tensor>& inputs, const std::vector<PluginField>& fields,
                                        const std::string& name) {
  for (const Tensor& t : inputs) {
    if (!t.valid()) throw GraphError(fmt::format("add_plugin '{}': every input of a plugin layer must be given", type));
  }
  return add_layer("plugin", inputs, graph::plugin_attributes(type, version, fields), name);
}

}  // namespace tensoracle
