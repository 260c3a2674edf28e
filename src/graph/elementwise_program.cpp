// ElementwiseProgram: JSON writing and strict parsing of a fused_elementwise layer's instruction list.
#include "graph/elementwise_program.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "graph/op_def.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::graph {

namespace {

using Json = nlohmann::ordered_json;

// Bounds that keep a damaged engine's program from asking for absurd work before it is rejected.
constexpr std::size_t kMaxInstructions = 1024;

constexpr std::array<std::string_view, 35> kProgramOps = {
    "add",     "sub",   "mul",     "div",          "pow",        "max",      "min",  "equal", "less",
    "greater", "where", "abs",     "neg",          "exp",        "log",      "sqrt", "rsqrt", "reciprocal",
    "sin",     "cos",   "tanh",    "erf",          "floor",      "ceil",     "not",  "relu",  "leaky_relu",
    "gelu",    "silu",  "sigmoid", "hard_sigmoid", "hard_swish", "softplus", "clip", "cast"};

Json attr_to_json(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> Json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          if (std::isnan(v)) return "nan";
          if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
          return v;
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          Json list = Json::array();
          for (double d : v) {
            if (std::isnan(d)) {
              list.push_back("nan");
            } else if (std::isinf(d)) {
              list.push_back(d > 0 ? "inf" : "-inf");
            } else {
              list.push_back(d);
            }
          }
          return list;
        } else {
          return v;
        }
      },
      value);
}

}  // namespace

bool is_program_op(std::string_view op) {
  return std::find(kProgramOps.begin(), kProgramOps.end(), op) != kProgramOps.end();
}

std::string ElementwiseProgram::to_json() const {
  Json list = Json::array();
  for (const auto& ins : instructions) {
    Json j = Json::object();
    j["op"] = ins.op;
    j["args"] = ins.args;
    if (!ins.attrs.empty()) {
      Json attrs = Json::object();
      for (const auto& [key, value] : ins.attrs) attrs[key] = attr_to_json(value);
      j["attrs"] = std::move(attrs);
    }
    j["dtype"] = std::string(to_string(ins.dtype));
    list.push_back(std::move(j));
  }
  return list.dump();
}

ElementwiseProgram ElementwiseProgram::parse(std::string_view json, std::size_t num_inputs,
                                             const std::string& layer_name) {
  auto fail = [&](const std::string& what) -> void {
    throw GraphError(
        fmt::format("layer '{}' ({}): attribute '{}': {}", layer_name, kFusedElementwiseOp, kProgramAttr, what));
  };
  Json doc;
  try {
    doc = Json::parse(json.begin(), json.end());
  } catch (const Json::exception& e) {
    fail(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!doc.is_array() || doc.empty()) fail("must be a non-empty list of instructions");
  if (doc.size() > kMaxInstructions) fail(fmt::format("more than {} instructions", kMaxInstructions));
  ElementwiseProgram program;
  std::vector<int> reads(num_inputs + doc.size(), 0);
  for (std::size_t k = 0; k < doc.size(); ++k) {
    const Json& j = doc[k];
    const std::string where = fmt::format("instruction {}", k);
    if (!j.is_object()) fail(where + " is not an object");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "op" && it.key() != "args" && it.key() != "attrs" && it.key() != "dtype")
        fail(fmt::format("{}: unknown key '{}'", where, it.key()));
    }
    ProgramInstruction ins;
    if (!j.contains("op") || !j["op"].is_string()) fail(where + ": 'op' must be a string");
    ins.op = j["op"].get<std::string>();
    const OpDef* def = find_op(ins.op);
    if (!is_program_op(ins.op) || def == nullptr)
      fail(fmt::format("{}: op '{}' can't be part of a fused elementwise program", where, ins.op));
    if (!j.contains("args") || !j["args"].is_array()) fail(where + ": 'args' must be a list");
    const Json& args = j["args"];
    if (static_cast<int>(args.size()) < def->min_inputs || static_cast<int>(args.size()) > def->max_inputs)
      fail(fmt::format("{}: op '{}' takes {} to {} arguments, {} given", where, ins.op, def->min_inputs,
                       def->max_inputs, args.size()));
    for (const auto& a : args) {
      if (!a.is_number_integer() || a.get<std::int64_t>() < 0 ||
          a.get<std::int64_t>() >= static_cast<std::int64_t>(num_inputs + k))
        fail(fmt::format("{}: argument {} is not an input or an earlier result", where, a.dump()));
      const auto index = a.get<std::int32_t>();
      ins.args.push_back(index);
      ++reads[static_cast<std::size_t>(index)];
    }
    if (j.contains("attrs")) {
      const Json& attrs = j["attrs"];
      if (!attrs.is_object()) fail(where + ": 'attrs' must be an object");
      for (auto it = attrs.begin(); it != attrs.end(); ++it) {
        if (std::find(def->attributes.begin(), def->attributes.end(), it.key()) == def->attributes.end())
          fail(fmt::format("{}: op '{}' has no attribute '{}'", where, ins.op, it.key()));
        const Json& v = it.value();
        if (v.is_number_integer()) {
          ins.attrs.emplace(it.key(), v.get<std::int64_t>());
        } else if (v.is_number_float()) {
          ins.attrs.emplace(it.key(), v.get<double>());
        } else if (v.is_string()) {
          ins.attrs.emplace(it.key(), v.get<std::string>());
        } else {
          fail(fmt::format("{}: attribute '{}' must be a number or a string", where, it.key()));
        }
      }
    }
    if (!j.contains("dtype") || !j["dtype"].is_string()) fail(where + ": 'dtype' must be a string");
    const auto dtype = data_type_from_string(j["dtype"].get<std::string>());
    if (!dtype) fail(fmt::format("{}: unknown dtype '{}'", where, j["dtype"].get<std::string>()));
    ins.dtype = *dtype;
    program.instructions.push_back(std::move(ins));
  }
  for (std::size_t v = 0; v + 1 < reads.size(); ++v) {
    if (reads[v] != 0) continue;
    if (v < num_inputs) fail(fmt::format("input {} is never read", v));
    fail(fmt::format("the result of instruction {} is never read", v - num_inputs));
  }
  return program;
}

}  // namespace tensoracle::graph
