// Host memory a loaded engine holds: resident set size before and after Engine::load of a ~300 MB engine.
//
// Usage: engine_host_memory [WORK_DIR] [--target cuda|cpu]
// Builds a network of six 4096x3072 f32 linear layers (302 MB of weights) for the target, writes the engine to
// WORK_DIR, frees everything, then reads VmRSS (/proc/self/status) before and after Engine::load, and after the engine
// is released. CUDA is initialized first (a small buffer), so the numbers hold the engine, not the CUDA runtime.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tensoracle/builder.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/safetensors.hpp"
#include "tensoracle/target_memory.hpp"

namespace {

// Resident set size of this process in MiB.
double rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tensoracle;  // NOLINT(google-build-using-namespace): a benchmark program
  std::filesystem::path dir = "/tmp/engine_host_memory";
  Target target = Target::cuda(0);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--target" && i + 1 < argc) {
      target = std::string(argv[++i]) == "cpu" ? Target::cpu() : Target::cuda(0);
    } else {
      dir = arg;
    }
  }
  std::filesystem::create_directories(dir);
  const std::filesystem::path engine_path = dir / "engine.trt";
  constexpr int kLayers = 6;
  constexpr std::int64_t kIn = 4096, kOut = 3072;
  {
    std::vector<std::vector<float>> data(kLayers, std::vector<float>(static_cast<std::size_t>(kIn * kOut)));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-0.01f, 0.01f);
    std::vector<TensorToWrite> tensors;
    for (int l = 0; l < kLayers; ++l) {
      for (auto& v : data[static_cast<std::size_t>(l)]) v = dist(rng);
      const bool square = l % 2 == 0;
      tensors.push_back({fmt::format("w{}", l), DataType::kF32, square ? Dims{kOut, kIn} : Dims{kIn, kOut},
                         data[static_cast<std::size_t>(l)].data()});
    }
    const std::vector<std::byte> weights = serialize_safetensors(tensors);
    auto file = SafetensorsFile::from_bytes(weights.data(), weights.size(), "weights");
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, {1, kIn});
    for (int l = 0; l < kLayers; ++l) x = net.add_linear(x, net.add_constant(file->get(fmt::format("w{}", l))));
    net.mark_output(x, "y");
    BuilderConfig config;
    config.target = target;
    config.time_kernels = false;
    const std::vector<std::byte> bytes = Builder(config).build(net);
    std::ofstream(engine_path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  TargetBuffer warm(target, 256);  // the CUDA runtime and context come up here, before the first reading
  const double engine_mib = static_cast<double>(std::filesystem::file_size(engine_path)) / (1024.0 * 1024.0);
  const double before = rss_mib();
  double loaded = 0;
  {
    auto engine = Engine::load(engine_path);
    loaded = rss_mib();
    std::printf("target %s: engine file %.1f MiB, weights on the target %.1f MiB\n", target.to_string().c_str(),
                engine_mib, static_cast<double>(engine->weight_bytes()) / (1024.0 * 1024.0));
  }
  const double after = rss_mib();
  std::printf("RSS before load %.1f MiB, with the engine loaded %.1f MiB (+%.1f), after releasing it %.1f MiB\n",
              before, loaded, loaded - before, after);
  std::filesystem::remove(engine_path);
  return 0;
}
