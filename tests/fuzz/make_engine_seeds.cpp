// Writes a few small, valid CPU engines (fp32 and fp16, fixed and ranged shapes) as seeds for fuzz_engine_plan.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tensoracle/builder.hpp"
#include "tensoracle/network.hpp"

namespace {

void write(const std::string& path, const std::vector<std::byte>& bytes) {
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
  return 0;
}
