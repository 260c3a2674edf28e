// ElementwiseProgram: the instruction list a fused_elementwise layer carries (JSON in its "program" attribute).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::graph {

// One elementwise op of a program. `args` index the values of the program: the layer's inputs
// first (0 .. num_inputs-1), then the results of the earlier instructions (num_inputs + k is the
// result of instruction k). `dtype` is the result's dtype as the op's shape function infers it.
struct ProgramInstruction {
  std::string op;
  std::vector<std::int32_t> args;
  Attributes attrs;
  DataType dtype = DataType::kF32;
};

// Instructions in SSA order; the last one's result is the layer's output. Every input and every
// result but the last is read at least once.
struct ElementwiseProgram {
  std::vector<ProgramInstruction> instructions;

  // Compact JSON: [{"op": "mul", "args": [0, 1], "attrs": {...}, "dtype": "f32"}, ...]. Non-finite
  // float attributes are written "inf", "-inf", "nan" (AttrReader::get_float reads them back).
  std::string to_json() const;
  // Parses and checks the structure (known ops the program may hold, argument indices in range
  // and earlier than the instruction, arity, allowed attribute names, every value used). Throws
  // GraphError "layer 'NAME' (fused_elementwise): ..." naming `layer_name`.
  static ElementwiseProgram parse(std::string_view json, std::size_t num_inputs, const std::string& layer_name);
};

// Ops a fused_elementwise program may hold: the elementwise family (arithmetic, comparisons,
// where, math functions, activations, not, cast).
bool is_program_op(std::string_view op);

// The name of the op ("fused_elementwise") and of its attribute ("program").
inline constexpr std::string_view kFusedElementwiseOp = "fused_elementwise";
inline constexpr std::string_view kProgramAttr = "program";

}  // namespace tensoracle::graph
