// Writes a few small, valid engines as seeds for fuzz_engine_plan, the same bytes on every run: CPU engines (fp32 and
// fp16, fixed and ranged shapes, a fused_elementwise layer) and a CUDA engine with a generated kernel in a kernels
// section.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/plan_format.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/network.hpp"

namespace {

// Writes an engine with its one run-dependent field, build_seconds, set to 0: the same commit writes the same seeds,
// so that CI's seeded fuzz runs (scripts/fuzz.sh) give the same result every time.
void write(const std::string& path, const std::vector<std::byte>& built) {
  const tensoracle::plan::ParsedPlan plan = tensoracle::plan::parse_plan(built, path);
  nlohmann::json manifest = plan.manifest;
  manifest.erase("sections");
  manifest["build_seconds"] = 0.0;
  const std::vector<std::byte> bytes = tensoracle::plan::write_plan(manifest, plan.sections);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  using namespace tensoracle;
  const std::string dir = argv[1];
  {
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {-1, 4});
    Tensor w = net.add_small_constant({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, DataType::kF32, {3, 4}, "w");
    net.mark_output(net.add_softmax(net.add_linear(x, w), -1), "y");
    BuilderConfig config;
    config.add_profile("x", {1, 4}, {2, 4}, {3, 4});
    write(dir + "/mlp_fp32.engine", Builder(config).build(net));
    config.precision = Precision::kFp16;
    write(dir + "/mlp_fp16.engine", Builder(config).build(net));
  }
  {
    Network net;
    Tensor a = net.add_input("a", DataType::kF32, {2, 3});
    Tensor b = net.add_input("b", DataType::kF32, {2, 3});
    Tensor s = net.add_binary("add", a, b);
    net.mark_output(net.add_transpose(net.add_activation("relu", s), {1, 0}), "t");
    net.mark_output(net.add_reduce("sum", s, {1}, false), "r");
    write(dir + "/binary.engine", Builder(BuilderConfig{}).build(net));
  }
  {
    // What the builder's fusion pass makes for CUDA targets, here run by the CPU reference kernel.
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {-1, 3});
    Tensor b = net.add_small_constant({1, 2, 3}, DataType::kF32, {3}, "b");
    const std::string program = R"([{"op":"mul","args":[0,1],"dtype":"f32"},)"
                                R"({"op":"gelu","args":[2],"attrs":{"approximate":"tanh"},"dtype":"f32"}])";
    net.mark_output(net.add_layer("fused_elementwise", {x, b}, {{"program", program}}, "fused")[0], "y");
    BuilderConfig config;
    config.add_profile("x", {1, 3}, {2, 3}, {4, 3});
    const std::vector<std::byte> cpu = Builder(config).build(net);
    write(dir + "/fused_cpu.engine", cpu);
    // The same as a CUDA engine with its generated kernel in a kernels section (an ELF stub: the fuzzer exercises
    // validation, which ends before any GPU is looked for).
    const plan::ParsedPlan plan = plan::parse_plan(cpu, "seed");
    nlohmann::json manifest = plan.manifest;
    manifest.erase("sections");
    manifest["target"] = {{"kind", "cuda"}, {"device_name", "seed GPU"}, {"compute_capability", "9.0"}};
    manifest["steps"][0]["kernel"] = "fused_elementwise_nvrtc";
    std::vector<std::byte> kernels(64, std::byte{0});
    std::memcpy(kernels.data(),
                "\x7F"
                "ELF",
                4);
    manifest["steps"][0]["binary"] = {
        {"offset", 0},
        {"size", kernels.size()},
        {"entries",
         {"fused_elementwise_contiguous", "fused_elementwise_broadcast_i32", "fused_elementwise_broadcast_i64"}}};
    write(dir + "/fused_cuda.engine",
          plan::write_plan(manifest, {{"weights", plan.section("weights", "seed")}, {"kernels", kernels}}));
  }
  return 0;
}
