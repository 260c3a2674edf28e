// Benchmark: a cache-hit open_engine of a >= 200 MB engine against reading and SHA-256-hashing the same file.
// Usage: cache_open_bench [WORK_DIR] [--runs N]. Prints one line per measurement and a JSON summary.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tensoracle/cache.hpp"
#include "tensoracle/safetensors.hpp"
#include "tensoracle/sha256.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The floor any cache hit must pay: read the whole file and hash it (what checking plan_sha256 needs).
double read_and_hash(const fs::path& path, std::vector<std::byte>& buffer) {
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string());
  const auto size = static_cast<std::size_t>(fs::file_size(path));
  buffer.resize(size);
  tensoracle::Sha256 hasher;
  std::size_t done = 0;
  while (done < size) {
    const ssize_t got = ::read(fd, buffer.data() + done, std::min<std::size_t>(std::size_t{8} << 20, size - done));
    if (got <= 0) break;
    hasher.update(buffer.data() + done, static_cast<std::size_t>(got));
    done += static_cast<std::size_t>(got);
  }
  ::close(fd);
  (void)hasher.finish_hex();
  return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tensoracle;
  fs::path work = fs::temp_directory_path() / fmt::format("tensoracle-cache-open-bench-{}", ::getpid());
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      work = arg;
    }
  }
  const bool remove_work = argc < 2;
  fs::create_directories(work);
  const fs::path weights_path = work / "weights.safetensors";
  const fs::path cache = work / "cache";

  // One linear layer with 4096 x 13000 f32 weights: 213 MB.
  constexpr std::int64_t kIn = 4096;
  constexpr std::int64_t kOut = 13000;
  {
    std::vector<float> w(static_cast<std::size_t>(kIn * kOut));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i % 251) - 125) / 128.0f;
    std::vector<float> b(static_cast<std::size_t>(kOut), 0.25f);
    write_safetensors(weights_path, {{"fc.weight", DataType::kF32, Dims{kOut, kIn}, w.data()},
                                     {"fc.bias", DataType::kF32, Dims{kOut}, b.data()}});
  }
  EngineDeclaration declaration;
  declaration.name = "bench-linear";
  declaration.graph_version = 1;
  declaration.inputs = {{"x", DataType::kF32, Dims{-1, kIn}}};
  declaration.outputs = {{"y", DataType::kF32, Dims{-1, kOut}}};
  declaration.builder.target = Target::cpu();
  declaration.builder.time_kernels = false;
  declaration.builder.add_profile("x", Dims{1, kIn}, Dims{1, kIn}, Dims{4, kIn});
  OpenEngineOptions options;
  options.cache_dir = cache;
  int graph_calls = 0;
  const GraphFunction graph = [&](const WeightStore& weights) {
    ++graph_calls;
    Network net;
    Tensor x = net.add_input("x", DataType::kF32, Dims{-1, kIn});
    net.mark_output(
        net.add_linear(x, net.add_constant(weights.get("fc.weight")), net.add_constant(weights.get("fc.bias"))), "y");
    return net;
  };

  auto start = Clock::now();
  const EngineHandle built = open_engine(declaration, {weights_path}, graph, options);
  const double build_seconds = seconds_since(start);
  const std::uint64_t engine_bytes = fs::file_size(built.path);
  std::printf("miss (hash weights, build, save): %.3f s, engine file %.1f MB\n", build_seconds,
              static_cast<double>(engine_bytes) / 1e6);

  std::vector<double> hit_times;
  std::vector<double> read_times;
  std::vector<std::byte> buffer;
  for (int r = 0; r < runs; ++r) {
    // Alternate, so both see the same page-cache state.
    start = Clock::now();
    const EngineHandle hit = open_engine(declaration, {weights_path}, graph, options);
    hit_times.push_back(seconds_since(start));
    if (hit.built) std::fprintf(stderr, "unexpected rebuild\n");
    read_times.push_back(read_and_hash(built.path, buffer));
  }
  const double hit = median(hit_times);
  const double floor = median(read_times);
  std::printf("hit open_engine (median of %d): %.3f s  (%.0f MB/s)\n", runs, hit,
              static_cast<double>(engine_bytes) / 1e6 / hit);
  std::printf("read + SHA-256 of the file (median of %d): %.3f s  (%.0f MB/s)\n", runs, floor,
              static_cast<double>(engine_bytes) / 1e6 / floor);
  std::printf("hit / (read + SHA-256): %.2f; graph function calls: %d\n", hit / floor, graph_calls);
  std::printf(
      "{\"engine_bytes\": %llu, \"miss_s\": %.4f, \"hit_s\": %.4f, \"read_sha256_s\": %.4f, \"ratio\": %.3f, "
      "\"runs\": %d}\n",
      static_cast<unsigned long long>(engine_bytes), build_seconds, hit, floor, hit / floor, runs);
  if (remove_work) fs::remove_all(work);
  return graph_calls == 1 ? 0 : 1;
}
