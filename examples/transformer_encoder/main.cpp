// The main job, end to end: weights → engine for the best target through the cache (open_engine: built once, reused
// after) → run → compare with the CPU reference → time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "encoder_model.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

int run(int argc, char** argv) {
  std::filesystem::path dir = "encoder_example";
  std::string target_name = "auto", precision_name = "fp32";
  std::int64_t batch = 4, seq = 128;
  int iterations = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw tensoracle::InvalidArgumentError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--dir")
      dir = value();
    else if (a == "--target")
      target_name = value();
    else if (a == "--precision")
      precision_name = value();
    else if (a == "--batch")
      batch = std::stoll(value());
    else if (a == "--seq")
      seq = std::stoll(value());
    else if (a == "--iterations")
      iterations = std::stoi(value());
    else {
      std::fprintf(stderr,
                   "usage: %s [--dir DIR] [--target auto|cpu|cuda[:N]] [--precision fp32|tf32|fp16|bf16] [--batch N] "
                   "[--seq N] [--iterations N]\n",
                   argv[0]);
      return 2;
    }
  }
  std::filesystem::create_directories(dir);
  const encoder_example::EncoderConfig config;
  const auto weights_path = dir / "encoder.safetensors";
  if (!std::filesystem::exists(weights_path)) encoder_example::write_weights(weights_path, config);
  // The model package's declaration: what engine it wants, besides the weights.
  tensoracle::EngineDeclaration declaration;
  declaration.name = "transformer_encoder";
  declaration.graph_version = 1;
  declaration.inputs = {{"x", tensoracle::DataType::kF32, {-1, -1, config.hidden}}};
  declaration.outputs = {{"y", tensoracle::DataType::kF32, {-1, -1, config.hidden}}};
  declaration.builder.target = tensoracle::Target::parse(target_name);
  declaration.builder.precision = tensoracle::parse_precision(precision_name);
  declaration.builder.add_profile("x", {1, 1, config.hidden}, {batch, seq, config.hidden},
                                  {std::max<std::int64_t>(batch, 8), std::max<std::int64_t>(seq, 256), config.hidden});
  fmt::print("target {} precision {}; weights {}\n", declaration.builder.target.to_string(),
             tensoracle::to_string(declaration.builder.precision), weights_path.string());

  // Opens the saved engine when its conditions match; else calls the graph function, builds and saves.
  tensoracle::OpenEngineOptions options;
  options.cache_dir = dir / "cache";
  bool graph_called = false;
  auto start = Clock::now();
  const tensoracle::EngineHandle handle = tensoracle::open_engine(
      declaration, {weights_path},
      [&](const tensoracle::WeightStore& weights) {
        graph_called = true;
        return encoder_example::define_network(weights, config);
      },
      options);
  const double open_ms = ms_since(start);
  if (handle.built != graph_called) throw tensoracle::Error("open_engine called the graph function on a reuse");
  const auto& engine = handle.engine;
  start = Clock::now();
  auto ctx = handle.create_execution_context();
  const double context_ms = ms_since(start);

  // A random input; the CPU reference runs the original network on the same values.
  tensoracle::HostTensor x(tensoracle::DataType::kF32, {batch, seq, config.hidden});
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (std::size_t i = 0; i < x.size(); ++i) x.data<float>()[i] = dist(rng);
  ctx->set_input_shapes({{"x", x.shape}});
  tensoracle::HostTensor y(ctx->tensor_dtype("y"), ctx->tensor_shape("y"));
  const tensoracle::Target target = engine->target();
  tensoracle::TargetBuffer x_buf(target, x.bytes.size()), y_buf(target, y.bytes.size());
  x_buf.copy_from_host(x.bytes.data(), x.bytes.size());
  y_buf.fill(0xFF);
  ctx->set_tensor_address("x", x_buf.data());
  ctx->set_tensor_address("y", y_buf.data());
  tensoracle::TargetStream stream(target);
  ctx->enqueue(stream.get());
  stream.synchronize();
  y_buf.copy_to_host(y.bytes.data(), y.bytes.size());

  const auto weights = tensoracle::WeightStore::open({weights_path});
  const tensoracle::Network network = encoder_example::define_network(weights, config);
  start = Clock::now();
  const auto reference = tensoracle::run_reference(network, {{"x", x}});
  const double reference_ms = ms_since(start);
  tensoracle::CompareThresholds limits;
  const tensoracle::Precision precision = declaration.builder.precision;
  limits.rel_l2 = precision == tensoracle::Precision::kFp32   ? 1e-5
                  : precision == tensoracle::Precision::kTf32 ? 5e-3
                                                              : 3e-2;
  const auto cmp = tensoracle::compare_tensors("y", y, reference.at("y"), limits);

  std::vector<double> latency;
  for (int i = 0; i < iterations + 5; ++i) {
    const auto t0 = Clock::now();
    ctx->enqueue(stream.get());
    stream.synchronize();
    if (i >= 5) latency.push_back(ms_since(t0));
  }
  fmt::print("engine {} {} ({} bytes, weights on target {} bytes, context memory {} bytes)\n",
             handle.built ? "built and saved:" : "reused from the cache:", handle.path.string(),
             std::filesystem::file_size(handle.path), engine->weight_bytes(), engine->context_memory_bytes());
  fmt::print("open_engine {:.1f} ms, context {:.1f} ms, CPU reference run {:.1f} ms\n", open_ms, context_ms,
             reference_ms);
  fmt::print("latency over {} runs at batch {} seq {}: p50 {:.3f} ms, p90 {:.3f} ms, p99 {:.3f} ms\n", latency.size(),
             batch, seq, percentile(latency, 0.5), percentile(latency, 0.9), percentile(latency, 0.99));
  fmt::print("vs CPU reference: rel_l2 {:.3g}, max_abs {:.3g}, cosine {:.9f}, sqnr {:.1f} dB -> {}\n",
             cmp.rel_l2_error.value_or(-1), cmp.max_abs_error.value_or(-1), cmp.cosine_similarity.value_or(-1),
             cmp.sqnr_db.value_or(-1), cmp.passed ? "PASS" : "FAIL");
  for (const auto& f : cmp.failed_checks) fmt::print("  failed: {}\n", f);
  return cmp.passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transformer_encoder: %s\n", e.what());
    return 1;
  }
}
