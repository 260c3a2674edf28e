// Tests of fused elementwise code generation and its NVRTC compilation for sm_90 (NVRTC runs on the CPU: no GPU
// needed).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cuda/codegen/elementwise_codegen.hpp"
#include "backends/cuda/codegen/nvrtc_compiler.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "graph/elementwise_program.hpp"
#include "graph/graph.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle {
namespace {

using ::testing::HasSubstr;
namespace cg = cuda::codegen;

#define REQUIRE_CUDA_BACKEND()                                                                                    \
  do {                                                                                                            \
    if (!cuda::backend_built()) GTEST_SKIP() << "this build has no CUDA backend (TENSORACLE_CUDA=OFF): no NVRTC"; \
  } while (0)

// Builds a program one instruction at a time; every value is combined into the result so that each is read.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(std::vector<DataType> inputs) : dtypes_(std::move(inputs)) {
    unread_.assign(dtypes_.size(), true);
  }

  int add(const std::string& op, std::vector<int> args, DataType dtype, nlohmann::json attrs = nullptr) {
    nlohmann::json ins{{"op", op}, {"args", args}, {"dtype", std::string(to_string(dtype))}};
    if (!attrs.is_null()) ins["attrs"] = std::move(attrs);
    program_.push_back(std::move(ins));
    for (int a : args) unread_[static_cast<std::size_t>(a)] = false;
    dtypes_.push_back(dtype);
    unread_.push_back(true);
    return static_cast<int>(dtypes_.size()) - 1;
  }
  DataType dtype(int v) const { return dtypes_[static_cast<std::size_t>(v)]; }

  // Folds every unread value into one result of dtype `out`: values of another dtype are cast first; bool values
  // choose between the accumulator and itself (where).
  std::string finish(DataType out, int first_input) {
    int acc = first_input;
    for (std::size_t v = 0; v < unread_.size(); ++v) {
      if (!unread_[v] || static_cast<int>(v) == acc) continue;
      int value = static_cast<int>(v);
      if (dtype(value) == DataType::kBool && out != DataType::kBool) {
        acc = add("where", {value, acc, acc}, out);
        continue;
      }
      if (dtype(value) != out) value = add("cast", {value}, out, {{"to", std::string(to_string(out))}});
      acc = out == DataType::kBool ? add("equal", {acc, value}, out) : add("add", {acc, value}, out);
    }
    return program_.dump();
  }

 private:
  nlohmann::json program_ = nlohmann::json::array();
  std::vector<DataType> dtypes_;
  std::vector<bool> unread_;
};

const std::vector<DataType> kAll = {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64, DataType::kI64,
                                    DataType::kI32, DataType::kI16, DataType::kI8,   DataType::kU8,  DataType::kBool};

bool is_float(DataType t) { return is_floating_point(t); }

// Every op the generator supports on inputs (a, b: dtype `t`; c: bool), plus casts to every dtype and back.
std::string every_op_program(DataType t) {
  ProgramBuilder p({t, t, DataType::kBool});
  const int a = 0, b = 1, c = 2;
  if (t != DataType::kBool) {
    for (const char* op : {"add", "sub", "mul", "div", "pow", "max", "min"}) p.add(op, {a, b}, t);
    for (const char* op : {"less", "greater"}) p.add(op, {a, b}, DataType::kBool);
    for (const char* op : {"abs", "neg"}) p.add(op, {a}, t);
  }
  p.add("equal", {a, b}, DataType::kBool);
  p.add("where", {c, a, b}, t);
  if (t == DataType::kBool) p.add("not", {a}, t);
  if (is_float(t)) {
    for (const char* op : {"exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "erf", "floor", "ceil",
                           "relu", "silu", "sigmoid", "hard_sigmoid", "hard_swish"})
      p.add(op, {a}, t);
    p.add("leaky_relu", {a}, t, {{"alpha", 0.2}});
    p.add("gelu", {a}, t);
    p.add("gelu", {b}, t, {{"approximate", "tanh"}});
    p.add("softplus", {a}, t, {{"beta", 2.0}, {"threshold", 10}});
    p.add("clip", {a}, t, {{"min", "-inf"}, {"max", 1.5}});
    p.add("clip", {b}, t, {{"min", -0.5}});
  }
  for (DataType to : kAll) {
    if (to == t) continue;
    const int there = p.add("cast", {a}, to, {{"to", std::string(to_string(to))}});
    p.add("cast", {there}, t, {{"to", std::string(to_string(t))}});
  }
  return p.finish(t, a);
}

// A network holding one fused_elementwise layer (so the op's shape function checks the program).
struct FusedNetwork {
  Network net;
  const graph::Layer* layer = nullptr;
  FusedNetwork(const std::string& program, const std::vector<DataType>& dtypes, const std::vector<Dims>& shapes) {
    std::vector<Tensor> inputs;
    for (std::size_t i = 0; i < dtypes.size(); ++i)
      inputs.push_back(net.add_input("x" + std::to_string(i), dtypes[i], shapes[i]));
    net.mark_output(net.add_layer("fused_elementwise", inputs, {{"program", program}}, "fused")[0], "y");
    layer = &graph::graph_of(net).layers.at(0);
  }
};

bool holds(const std::vector<std::byte>& bytes, const std::string& text) {
  const auto* begin = reinterpret_cast<const char*>(bytes.data());
  return std::search(begin, begin + bytes.size(), text.begin(), text.end()) != begin + bytes.size();
}

void expect_valid_cubin(const std::vector<std::byte>& cubin) {
  ASSERT_GT(cubin.size(), 64U);
  EXPECT_EQ(std::memcmp(cubin.data(),
                        "\x7F"
                        "ELF",
                        4),
            0);
  for (const auto& entry : cg::entry_names()) EXPECT_TRUE(holds(cubin, entry)) << entry;
  // The marker the runtime looks for before launching the kernels programmatically (they wait for the step before).
  EXPECT_TRUE(holds(cubin, cg::kWaitsMarker));
}

TEST(ElementwiseCodegen, EveryOpAndDtypeCompilesForSm90) {
  REQUIRE_CUDA_BACKEND();
  for (DataType t : kAll) {
    SCOPED_TRACE(to_string(t));
    const std::string program = every_op_program(t);
    FusedNetwork f(program, {t, t, DataType::kBool}, {Dims{4, 5}, Dims{5}, Dims{4, 1}});
    ASSERT_TRUE(cg::supports_fused_layer(graph::graph_of(f.net), *f.layer));
    const auto generated = cuda::generate_step_kernel(graph::graph_of(f.net), *f.layer, "fused_elementwise_nvrtc");
    ASSERT_TRUE(generated.has_value());
    EXPECT_EQ(generated->entries, cg::entry_names());
    EXPECT_THAT(generated->source, HasSubstr("#define TSR_RANK 2"));
    EXPECT_THAT(generated->source, HasSubstr("#define TSR_VEC 8"));  // the bool input is the narrowest
    EXPECT_THAT(generated->source, ::testing::Not(HasSubstr("#include")));
    const auto cubin = cuda::compile_generated_kernel(generated->source, 9, 0, "layer 'fused'");
    expect_valid_cubin(cubin);
  }
}

TEST(ElementwiseCodegen, VectorWidthFollowsTheNarrowestTensor) {
  EXPECT_EQ(cg::vector_width({DataType::kF16, DataType::kF16}, DataType::kF16), 8);
  EXPECT_EQ(cg::vector_width({DataType::kF32}, DataType::kF32), 4);
  EXPECT_EQ(cg::vector_width({DataType::kF32}, DataType::kBF16), 8);
  EXPECT_EQ(cg::vector_width({DataType::kF64}, DataType::kF64), 2);
  EXPECT_EQ(cg::vector_width({DataType::kF32}, DataType::kBool), 8);
}

TEST(ElementwiseCodegen, RanksZeroToEightAndSixteenInputsCompile) {
  REQUIRE_CUDA_BACKEND();
  for (int rank : {0, 1, 8}) {
    SCOPED_TRACE(rank);
    const std::string program = R"([{"op":"gelu","args":[0],"dtype":"bf16"}])";
    FusedNetwork f(program, {DataType::kBF16}, {Dims(std::vector<std::int64_t>(static_cast<std::size_t>(rank), 2))});
    const auto generated = cg::generate_fused_elementwise(graph::graph_of(f.net), *f.layer);
    EXPECT_THAT(generated.source, HasSubstr(fmt::format("#define TSR_RANK {}", rank)));
    expect_valid_cubin(cuda::compile_generated_kernel(generated.source, 9, 0, "layer 'fused'"));
  }
  ProgramBuilder p(std::vector<DataType>(16, DataType::kF16));
  const std::string program = p.finish(DataType::kF16, 0);
  FusedNetwork f(program, std::vector<DataType>(16, DataType::kF16), std::vector<Dims>(16, Dims{3, 7}));
  ASSERT_TRUE(cg::supports_fused_layer(graph::graph_of(f.net), *f.layer));
  expect_valid_cubin(cuda::compile_generated_kernel(
      cg::generate_fused_elementwise(graph::graph_of(f.net), *f.layer).source, 9, 0, "layer"));
}

TEST(ElementwiseCodegen, LayersTheGeneratorCannotHandle) {
  // f8 values, and more inputs than the kernels take.
  FusedNetwork f8(R"([{"op":"cast","args":[0],"attrs":{"to":"f32"},"dtype":"f32"}])", {DataType::kF8E4M3}, {Dims{4}});
  EXPECT_FALSE(cg::supports_fused_layer(graph::graph_of(f8.net), *f8.layer));
  EXPECT_FALSE(cg::supports_layer(graph::graph_of(f8.net), *f8.layer));  // not a program op itself
  ProgramBuilder p(std::vector<DataType>(17, DataType::kF32));
  FusedNetwork many(p.finish(DataType::kF32, 0), std::vector<DataType>(17, DataType::kF32),
                    std::vector<Dims>(17, Dims{2}));
  EXPECT_FALSE(cg::supports_fused_layer(graph::graph_of(many.net), *many.layer));
  EXPECT_FALSE(cuda::generate_step_kernel(graph::graph_of(many.net), *many.layer, "add_f32_broadcast").has_value());
}

TEST(ElementwiseCodegen, NvrtcFailuresNameTheLayerAndCarryTheLog) {
  REQUIRE_CUDA_BACKEND();
  try {
    cuda::compile_generated_kernel("extern \"C\" __global__ void k() { this is not C++; }", 9, 0, "layer 'broken'");
    ADD_FAILURE() << "compiled";
  } catch (const CudaError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer 'broken'"));
    EXPECT_THAT(e.what(), HasSubstr("sm_90"));
    EXPECT_THAT(e.what(), HasSubstr("error"));
  }
  EXPECT_THAT(cg::nvrtc_description(), HasSubstr("NVRTC"));
}

}  // namespace
}  // namespace tensoracle
