// Test helper: opens one engine through open_engine in its own process, runs it, and prints what happened as JSON.
// Usage: cache_open_child CACHE_DIR WEIGHTS.safetensors GRAPH_LOG [--sleep-ms N] [--force]
// The weights hold "fc.weight" [out, in] and "fc.bias" [out] (f32); the engine computes y = x·Wᵀ + b for
// x [-1, in]. Each call of the graph function appends a line to GRAPH_LOG, then sleeps N ms.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tensoracle/cache.hpp"
#include "tensoracle/safetensors.hpp"

int main(int argc, char** argv) {
  using namespace tensoracle;
  if (argc < 4) {
    std::cerr << "usage: cache_open_child CACHE_DIR WEIGHTS GRAPH_LOG [--sleep-ms N] [--force]\n";
    return 2;
  }
  const std::string cache_dir = argv[1];
  const std::string weights_path = argv[2];
  const std::string graph_log = argv[3];
  int sleep_ms = 0;
  bool force = false;
  for (int i = 4; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--sleep-ms" && i + 1 < argc) {
      sleep_ms = std::atoi(argv[++i]);
    } else if (arg == "--force") {
      force = true;
    } else {
      std::cerr << "cache_open_child: unknown argument " << arg << "\n";
      return 2;
    }
  }
  try {
    const auto store = WeightStore::open({weights_path});
    const Dims w_shape = store.get("fc.weight").shape();
    const std::int64_t out = w_shape[0];
    const std::int64_t in = w_shape[1];

    EngineDeclaration declaration;
    declaration.name = "child-linear";
    declaration.graph_version = 1;
    declaration.inputs = {{"x", DataType::kF32, Dims{-1, in}}};
    declaration.outputs = {{"y", DataType::kF32, Dims{-1, out}}};
    declaration.builder.target = Target::cpu();
    declaration.builder.time_kernels = false;
    declaration.builder.add_profile("x", Dims{1, in}, Dims{2, in}, Dims{2, in});
    OpenEngineOptions options;
    options.cache_dir = cache_dir;
    options.force_rebuild = force;

    const GraphFunction graph = [&](const WeightStore& weights) {
      const int fd = ::open(graph_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        const std::string line = fmt::format("graph {}\n", ::getpid());
        (void)!::write(fd, line.data(), line.size());
        ::fsync(fd);
        ::close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      Network net;
      Tensor x = net.add_input("x", DataType::kF32, Dims{-1, in});
      Tensor y =
          net.add_linear(x, net.add_constant(weights.get("fc.weight")), net.add_constant(weights.get("fc.bias")));
      net.mark_output(y, "y");
      return net;
    };
    const EngineHandle handle = open_engine(declaration, {weights_path}, graph, options);

    std::vector<float> x(static_cast<std::size_t>(2 * in));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.125f - 1.0f;
    std::vector<float> y(static_cast<std::size_t>(2 * out), -1e30f);
    auto context = handle.create_execution_context();
    context->set_input_shapes({{"x", Dims{2, in}}});
    context->set_tensor_address("x", x.data());
    context->set_tensor_address("y", y.data());
    context->enqueue();
    std::cout << fmt::format("{{\"built\": {}, \"path\": \"{}\", \"output\": [{}]}}\n", handle.built ? "true" : "false",
                             handle.path.string(), fmt::join(y, ", "));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "cache_open_child: " << e.what() << "\n";
    return 1;
  }
}
