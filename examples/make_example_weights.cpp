// Example: writes a small, reproducible two-layer MLP checkpoint in safetensors with tensoracle's writer.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <tensoracle/tensoracle.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.safetensors\n", argv[0]);
    return 2;
  }
  // Deterministic values (no random generator): the same file on every machine.
  auto fill = [](std::size_t n, float scale, float phase) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i) + phase);
    return v;
  };
  const std::int64_t in = 64, hidden = 256, out = 10;
  auto w1 = fill(static_cast<std::size_t>(hidden * in), 0.125f, 0.0f);
  auto b1 = fill(static_cast<std::size_t>(hidden), 0.01f, 1.0f);
  auto w2 = fill(static_cast<std::size_t>(out * hidden), 0.0625f, 2.0f);
  auto b2 = fill(static_cast<std::size_t>(out), 0.01f, 3.0f);
  std::vector<std::uint16_t> w2_bf16(w2.size());
  for (std::size_t i = 0; i < w2.size(); ++i) w2_bf16[i] = tensoracle::f32_to_bf16_bits(w2[i]);
  try {
    tensoracle::write_safetensors(argv[1],
                                  {
                                      {"fc1.weight", tensoracle::DataType::kF32, {hidden, in}, w1.data()},
                                      {"fc1.bias", tensoracle::DataType::kF32, {hidden}, b1.data()},
                                      {"fc2.weight", tensoracle::DataType::kBF16, {out, hidden}, w2_bf16.data()},
                                      {"fc2.bias", tensoracle::DataType::kF32, {out}, b2.data()},
                                  },
                                  std::map<std::string, std::string>{{"format", "pt"}, {"model", "tiny-mlp"}});
  } catch (const tensoracle::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s\n", argv[1]);
  return 0;
}
