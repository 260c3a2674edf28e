// CUDA engine tests: results against the CPU reference, two contexts on two streams, an enqueue from a fresh thread,
// CUDA graph capture and replay, plugin layers as CUDA steps, calibration running the float network as a CUDA engine.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <regex>
#include <string>
#include <thread>

#include "backends/cuda/device_guard.hpp"
#include "gpu_test.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/calibrate.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/plugin_registry.hpp"
#include "tensoracle/reference_executor.hpp"
#include "tensoracle/system_info.hpp"
#include "tensoracle/target_memory.hpp"

namespace tensoracle {
namespace {

// Random f32 weights (uniform in ±0.3) of the given names and shapes, as one in-memory safetensors file.
struct RandomWeights {
  std::vector<std::vector<float>> data;
  std::vector<std::byte> bytes;
  std::shared_ptr<const SafetensorsFile> file;

  RandomWeights(std::mt19937& rng, const std::vector<std::pair<std::string, Dims>>& shapes) {
    std::uniform_real_distribution<float> dist(-0.3f, 0.3f);
    std::vector<TensorToWrite> tensors;
    for (const auto& [name, shape] : shapes) {
      auto& v = data.emplace_back(static_cast<std::size_t>(shape.volume()));
      for (auto& x : v) x = dist(rng);
      tensors.push_back({name, DataType::kF32, shape, v.data()});
    }
    bytes = serialize_safetensors(tensors);
    file = SafetensorsFile::from_bytes(bytes.data(), bytes.size(), "weights");
  }
};

struct Model {
  RandomWeights weights;
  std::shared_ptr<const SafetensorsFile> file;
  Network net;

  explicit Model(std::mt19937& rng)
      : weights(rng, {{"q", {64, 64}}, {"k", {64, 64}}, {"v", {64, 64}}, {"ln.w", {64}}, {"ln.b", {64}}}),
        file(weights.file) {
    Tensor x = net.add_input("x", DataType::kF32, {-1, -1, 64});
    auto heads = [&](const char* w) {
      Tensor t = net.add_linear(x, net.add_constant(file->get(w)));
      return net.add_transpose(net.add_reshape(t, {0, 0, 4, 16}), {0, 2, 1, 3});
    };
    Tensor a = net.add_attention(heads("q"), heads("k"), heads("v"));
    a = net.add_reshape(net.add_transpose(a, {0, 2, 1, 3}), {0, 0, 64});
    Tensor y = net.add_layer_norm(net.add_binary("add", x, a), net.add_constant(file->get("ln.w")),
                                  net.add_constant(file->get("ln.b")));
    net.mark_output(net.add_activation("gelu", y), "y");
  }
};

BuilderConfig config(Precision precision) {
  BuilderConfig c;
  c.target = Target::cuda(0);
  c.precision = precision;
  c.add_profile("x", {1, 1, 64}, {2, 16, 64}, {4, 64, 64});
  return c;
}

HostTensor random_input(const Dims& shape, std::mt19937& rng) {
  HostTensor t(DataType::kF32, shape);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (std::size_t i = 0; i < t.size(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

using cuda::gpu_test::rel_l2;

HostTensor read_back(const TargetBuffer& buffer, const Dims& shape) {
  HostTensor t(DataType::kF32, shape);
  buffer.copy_to_host(t.bytes.data(), t.bytes.size());
  return t;
}

// Sets x's shape, uploads x into a new buffer `xb` and binds it, binds a new output buffer `yb` poisoned with 0xFF;
// returns the output's shape.
Dims bind_new_buffers(ExecutionContext& ctx, const HostTensor& x, TargetBuffer& xb, TargetBuffer& yb) {
  ctx.set_input_shapes({{"x", x.shape}});
  const Dims y_shape = ctx.tensor_shape("y");
  xb = TargetBuffer(Target::cuda(0), x.bytes.size());
  yb = TargetBuffer(Target::cuda(0), HostTensor(DataType::kF32, y_shape).bytes.size());
  xb.copy_from_host(x.bytes.data(), x.bytes.size());
  yb.fill(0xFF);
  ctx.set_tensor_address("x", xb.data());
  ctx.set_tensor_address("y", yb.data());
  return y_shape;
}

// Runs one enqueue on `stream` and returns the output.
HostTensor run(ExecutionContext& ctx, const HostTensor& x, CUstream_st* stream, TargetBuffer& xb, TargetBuffer& yb) {
  const Dims y_shape = bind_new_buffers(ctx, x, xb, yb);
  ctx.enqueue(stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return read_back(yb, y_shape);
}

// Captures one enqueue of `ctx` on `stream` (the caller's own stream capture) and launches the graph `times` times.
void capture_and_replay(ExecutionContext& ctx, CUstream_st* stream, int times) {
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ctx.enqueue(stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int r = 0; r < times; ++r) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(CudaEngine, MatchesTheCpuReferenceAtEachPrecision) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  Model model(rng);
  const HostTensor x = random_input({3, 40, 64}, rng);
  const auto want = run_reference(model.net, {{"x", x}}).at("y");
  for (auto [precision, tolerance] : {std::pair{Precision::kFp32, 1e-5}, std::pair{Precision::kTf32, 5e-3},
                                      std::pair{Precision::kFp16, 1e-2}, std::pair{Precision::kBf16, 3e-2}}) {
    auto engine = Engine::deserialize(Builder(config(precision)).build(model.net));
    auto ctx = engine->create_execution_context();
    TargetStream stream(Target::cuda(0));
    TargetBuffer xb, yb;
    const HostTensor got = run(*ctx, x, stream.get(), xb, yb);
    EXPECT_LT(rel_l2(got, want), tolerance) << to_string(precision);
  }
}

TEST(CudaEngine, TwoContextsOnTwoStreamsAtOnce) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(2);
  Model model(rng);
  auto engine = Engine::deserialize(Builder(config(Precision::kFp32)).build(model.net));
  const HostTensor xa = random_input({2, 16, 64}, rng), xb = random_input({4, 64, 64}, rng);
  const auto want_a = run_reference(model.net, {{"x", xa}}).at("y");
  const auto want_b = run_reference(model.net, {{"x", xb}}).at("y");
  double err_a = 1, err_b = 1;
  std::thread ta([&] {
    auto ctx = engine->create_execution_context();
    TargetStream s(Target::cuda(0));
    TargetBuffer i, o;
    double worst = 0;
    for (int r = 0; r < 20; ++r) worst = std::max(worst, rel_l2(run(*ctx, xa, s.get(), i, o), want_a));
    err_a = worst;
  });
  std::thread tb([&] {
    auto ctx = engine->create_execution_context();
    TargetStream s(Target::cuda(0));
    TargetBuffer i, o;
    double worst = 0;
    for (int r = 0; r < 20; ++r) worst = std::max(worst, rel_l2(run(*ctx, xb, s.get(), i, o), want_b));
    err_b = worst;
  });
  ta.join();
  tb.join();
  EXPECT_LT(err_a, 1e-5);
  EXPECT_LT(err_b, 1e-5);
}

TEST(CudaEngine, CapturedGraphReplayEqualsEnqueue) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  Model model(rng);
  for (Precision precision : {Precision::kFp32, Precision::kFp16}) {
    auto engine = Engine::deserialize(Builder(config(precision)).build(model.net));
    auto ctx = engine->create_execution_context();
    TargetStream stream(Target::cuda(0));
    const HostTensor x = random_input({2, 33, 64}, rng);
    TargetBuffer xb, yb;
    const HostTensor plain = run(*ctx, x, stream.get(), xb, yb);  // un-captured first run, as documented

    yb.fill(0xFF);
    capture_and_replay(*ctx, stream.get(), 3);
    EXPECT_EQ(read_back(yb, plain.shape).bytes, plain.bytes) << to_string(precision);
  }
}

// cuCtxGetCurrent through the runtime's driver entry point (this test binary does not link libcuda).
using CtxGetCurrent = CUresult (*)(CUcontext*);
CtxGetCurrent driver_ctx_get_current() {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &entry, 4000, cudaEnableDefault, &found), cudaSuccess);
  EXPECT_EQ(found, cudaDriverEntryPointSuccess);
  return reinterpret_cast<CtxGetCurrent>(entry);
}

// A caller's fresh thread reports device 0 from cudaGetDevice while no context is current on it. The device guard of
// every engine call makes the context current there (cuBLASLt's handles and CUTLASS's driver calls need it), and an
// engine made on one thread enqueues on another that has made no CUDA call before.
TEST(CudaEngine, DeviceGuardMakesTheContextCurrentOnAFreshThread) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  const CtxGetCurrent get_current = driver_ctx_get_current();
  ASSERT_NE(get_current, nullptr);
  for (const bool nothrow : {false, true}) {  // the release paths' form (std::nothrow) switches the same way
    CUcontext before = nullptr, inside = nullptr, after = nullptr;
    int device_before = -1;
    std::thread fresh([&] {
      cudaGetDevice(&device_before);
      get_current(&before);
      {
        const auto guard =
            nothrow ? std::make_unique<cuda::DeviceGuard>(0, std::nothrow) : std::make_unique<cuda::DeviceGuard>(0);
        get_current(&inside);
      }
      get_current(&after);
    });
    fresh.join();
    EXPECT_EQ(device_before, 0);
    EXPECT_EQ(before, nullptr) << "the premise: a fresh thread has no current context";
    EXPECT_NE(inside, nullptr) << (nothrow ? "std::nothrow" : "throwing");
    EXPECT_NE(after, nullptr);  // the guard restores the device, and device 0's context stays current
  }

  std::mt19937 rng(31);
  Model model(rng);
  const HostTensor x = random_input({2, 24, 64}, rng);
  const auto want = run_reference(model.net, {{"x", x}}).at("y");
  for (Precision precision : {Precision::kFp32, Precision::kFp16}) {
    auto engine = Engine::deserialize(Builder(config(precision)).build(model.net));
    auto ctx = engine->create_execution_context();
    TargetStream stream(Target::cuda(0));
    TargetBuffer xb, yb;
    const Dims y_shape = bind_new_buffers(*ctx, x, xb, yb);
    CUcontext enqueue_before = nullptr;
    std::thread caller([&] {
      get_current(&enqueue_before);
      ctx->enqueue(stream.get());  // the first CUDA call of this thread is the engine's
    });
    caller.join();
    EXPECT_EQ(enqueue_before, nullptr);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    EXPECT_LT(rel_l2(read_back(yb, y_shape), want), precision == Precision::kFp32 ? 1e-5 : 1e-2)
        << to_string(precision);
  }
}

// Whether the engine opened on this GPU launches its steps' kernels programmatically (its verbose open message says).
bool opens_with_programmatic_launches(const std::vector<std::byte>& plan) {
  std::string said;
  set_log_callback([&](LogSeverity, std::string_view message) {
    if (message.find("programmatic launches") != std::string_view::npos) said = std::string(message);
  });
  const LogSeverity level = log_level();
  set_log_level(LogSeverity::kVerbose);
  auto engine = Engine::deserialize(plan);
  set_log_level(level);
  set_log_callback(nullptr);
  return said.find("programmatic launches on") != std::string::npos;
}

// Programmatic dependent launch (sm_90: each step's kernel starts while the one before finishes and waits for it)
// changes no result: back-to-back enqueues, a captured graph and graph mode write exactly what the same engine
// writes with TENSORACLE_PROGRAMMATIC_LAUNCH=0, for the transformer block (products, attention, generated
// elementwise kernels, layer norm, copies). The conformance suite runs every op's kernels programmatically too.
TEST(CudaEngine, ProgrammaticLaunchesWriteWhatPlainLaunchesWrite) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  Model model(rng);
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  for (Precision precision : {Precision::kFp32, Precision::kFp16}) {
    const std::vector<std::byte> plan = Builder(config(precision)).build(model.net);
    const HostTensor x = random_input({4, 64, 64}, rng);
    auto outputs = [&](bool programmatic) {
      if (programmatic) {
        unsetenv("TENSORACLE_PROGRAMMATIC_LAUNCH");
      } else {
        setenv("TENSORACLE_PROGRAMMATIC_LAUNCH", "0", 1);
      }
      EXPECT_EQ(opens_with_programmatic_launches(plan), programmatic && major >= 9) << to_string(precision);
      auto engine = Engine::deserialize(plan);
      unsetenv("TENSORACLE_PROGRAMMATIC_LAUNCH");
      auto ctx = engine->create_execution_context();
      TargetStream stream(Target::cuda(0));
      TargetBuffer xb, yb;
      std::vector<std::vector<std::byte>> results{run(*ctx, x, stream.get(), xb, yb).bytes};
      // Twenty enqueues back to back, nothing between them on the stream.
      yb.fill(0xFF);
      for (int r = 0; r < 20; ++r) ctx->enqueue(stream.get());
      EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
      results.push_back(read_back(yb, x.shape).bytes);
      yb.fill(0xFF);
      capture_and_replay(*ctx, stream.get(), 5);
      results.push_back(read_back(yb, x.shape).bytes);
      yb.fill(0xFF);
      ctx->set_graph_mode(true);
      for (int r = 0; r < 5; ++r) ctx->enqueue(stream.get());
      EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
      results.push_back(read_back(yb, x.shape).bytes);
      return results;
    };
    const auto plain = outputs(false);
    const auto programmatic = outputs(true);
    for (std::size_t i = 0; i < plain.size(); ++i) {
      EXPECT_EQ(plain[i], plain[0]) << to_string(precision) << " plain run " << i;
      EXPECT_EQ(programmatic[i], plain[0]) << to_string(precision) << " programmatic run " << i;
    }
  }
}

// A small CNN: convolutions (cuDNN), relu, max pooling, global average pooling and a linear head.
struct ConvModel {
  RandomWeights weights;
  std::shared_ptr<const SafetensorsFile> file;
  Network net;

  explicit ConvModel(std::mt19937& rng)
      : weights(rng, {{"c1.w", {8, 3, 3, 3}},
                      {"c1.b", {8}},
                      {"c2.w", {8, 8, 3, 3}},
                      {"c2.b", {8}},
                      {"fc.w", {5, 8}},
                      {"fc.b", {5}}}),
        file(weights.file) {
    Tensor x = net.add_input("x", DataType::kF32, {-1, 3, 20, 20});
    ConvOptions same;
    same.padding = {1, 1};
    Tensor h = net.add_activation(
        "relu", net.add_convolution(x, net.add_constant(file->get("c1.w")), net.add_constant(file->get("c1.b")), same));
    PoolOptions pool;
    pool.kernel = {2, 2};
    h = net.add_pool2d(h, PoolType::kMax, pool);
    ConvOptions strided;
    strided.stride = {2, 2};
    strided.padding = {1, 1};
    h = net.add_activation("relu", net.add_convolution(h, net.add_constant(file->get("c2.w")),
                                                       net.add_constant(file->get("c2.b")), strided));
    h = net.add_reshape(net.add_global_average_pool(h), {0, -1});
    net.mark_output(net.add_linear(h, net.add_constant(file->get("fc.w")), net.add_constant(file->get("fc.b"))), "y");
  }
};

// set_input_shapes prepares every step (library descriptors and plans, the context's cuDNN handle), so the very first
// enqueue of a new context can be captured in a CUDA graph: replayed, it writes exactly what a plain enqueue of
// another context writes.
TEST(CudaEngine, FirstEnqueueAfterSetInputShapesCanBeCaptured) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  Model transformer(rng);
  ConvModel cnn(rng);
  BuilderConfig cnn_config;
  cnn_config.target = Target::cuda(0);
  cnn_config.add_profile("x", {1, 3, 20, 20}, {2, 3, 20, 20}, {4, 3, 20, 20});
  struct Case {
    const char* name;
    const Network* net;
    BuilderConfig config;
    Dims shape;
  };
  for (Precision precision : {Precision::kFp32, Precision::kFp16}) {
    cnn_config.precision = precision;
    for (const Case& c : {Case{"transformer", &transformer.net, config(precision), Dims{3, 17, 64}},
                          Case{"cnn", &cnn.net, cnn_config, Dims{3, 3, 20, 20}}}) {
      SCOPED_TRACE(std::string(c.name) + " " + to_string(precision));
      auto engine = Engine::deserialize(Builder(c.config).build(*c.net));
      const HostTensor x = random_input(c.shape, rng);
      TargetStream stream(Target::cuda(0));
      auto plain_ctx = engine->create_execution_context();
      TargetBuffer plain_x, plain_y;
      const HostTensor plain = run(*plain_ctx, x, stream.get(), plain_x, plain_y);

      auto ctx = engine->create_execution_context();  // never enqueued before the capture
      TargetBuffer xb, yb;
      bind_new_buffers(*ctx, x, xb, yb);
      capture_and_replay(*ctx, stream.get(), 2);
      EXPECT_EQ(read_back(yb, plain.shape).bytes, plain.bytes);
    }
  }
}

// Graph mode: enqueue launches a graph captured on first use; it captures again after set_input_shapes (a new shape)
// and for addresses it has no graph for, keeps the graphs of address sets used before, and leaves a caller's own
// stream capture to record the steps. Every result equals a plain enqueue of another context bit for bit.
TEST(CudaEngine, GraphModeCapturesAgainOnShapeAndAddressChanges) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(6);
  Model model(rng);
  for (Precision precision : {Precision::kFp32, Precision::kFp16}) {
    SCOPED_TRACE(to_string(precision));
    auto engine = Engine::deserialize(Builder(config(precision)).build(model.net));
    TargetStream stream(Target::cuda(0));
    const HostTensor xa = random_input({2, 17, 64}, rng), xb = random_input({4, 40, 64}, rng);
    auto plain_ctx = engine->create_execution_context();
    TargetBuffer px, py;
    const HostTensor want_a = run(*plain_ctx, xa, stream.get(), px, py);
    const HostTensor want_b = run(*plain_ctx, xb, stream.get(), px, py);

    auto ctx = engine->create_execution_context();
    EXPECT_FALSE(ctx->graph_mode());
    ctx->set_graph_mode(true);
    EXPECT_TRUE(ctx->graph_mode());
    TargetBuffer x1, y1;
    EXPECT_EQ(run(*ctx, xa, stream.get(), x1, y1).bytes, want_a.bytes);  // first capture
    EXPECT_EQ(ctx->graph_captures(), 1U);
    y1.fill(0xFF);
    for (int r = 0; r < 3; ++r) ctx->enqueue(stream.get());  // replays
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    EXPECT_EQ(read_back(y1, want_a.shape).bytes, want_a.bytes);
    EXPECT_EQ(ctx->graph_captures(), 1U);

    // Another output address: captured again, the first graph kept.
    TargetBuffer y2(Target::cuda(0), want_a.bytes.size());
    y2.fill(0xFF);
    ctx->set_tensor_address("y", y2.data());
    ctx->enqueue(stream.get());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    EXPECT_EQ(read_back(y2, want_a.shape).bytes, want_a.bytes);
    EXPECT_EQ(ctx->graph_captures(), 2U);
    y1.fill(0xFF);
    ctx->set_tensor_address("y", y1.data());
    ctx->enqueue(stream.get());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    EXPECT_EQ(read_back(y1, want_a.shape).bytes, want_a.bytes);
    EXPECT_EQ(ctx->graph_captures(), 2U);

    // A new shape (run() also binds new buffers): captured again.
    TargetBuffer x3, y3;
    EXPECT_EQ(run(*ctx, xb, stream.get(), x3, y3).bytes, want_b.bytes);
    EXPECT_EQ(ctx->graph_captures(), 3U);
    // The same shape set again with the same addresses: nothing is prepared again, so the graph replays.
    ctx->set_input_shapes({{"x", xb.shape}});
    y3.fill(0xFF);
    ctx->enqueue(stream.get());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    EXPECT_EQ(read_back(y3, want_b.shape).bytes, want_b.bytes);
    EXPECT_EQ(ctx->graph_captures(), 3U);
    // Back to the first shape: prepared again and captured again (the new buffers of run()).
    TargetBuffer x4, y4;
    EXPECT_EQ(run(*ctx, xa, stream.get(), x4, y4).bytes, want_a.bytes);
    EXPECT_EQ(ctx->graph_captures(), 4U);
    ctx->set_input_shapes({{"x", xb.shape}});
    ctx->set_tensor_address("x", x3.data());
    ctx->set_tensor_address("y", y3.data());

    // The caller captures the stream: the steps go into the caller's graph, graph mode captures nothing.
    y3.fill(0xFF);
    capture_and_replay(*ctx, stream.get(), 2);
    EXPECT_EQ(read_back(y3, want_b.shape).bytes, want_b.bytes);
    EXPECT_EQ(ctx->graph_captures(), 4U);

    // Off again: plain enqueue.
    ctx->set_graph_mode(false);
    y3.fill(0xFF);
    ctx->enqueue(stream.get());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    EXPECT_EQ(read_back(y3, want_b.shape).bytes, want_b.bytes);
    EXPECT_EQ(ctx->graph_captures(), 4U);
  }
}

// The kernels an engine's steps run, from its manifest (held in a variable: a range-for over a member of the parsed
// temporary would read it after its end).
std::vector<std::string> step_kernels(const std::vector<std::byte>& engine) {
  const nlohmann::json manifest = nlohmann::json::parse(Engine::inspect(engine));
  std::vector<std::string> kernels;
  for (const auto& step : manifest.at("steps")) kernels.push_back(step.at("kernel").get<std::string>());
  return kernels;
}

// A build with a timing cache file writes the choices; a rebuild of the same network with that file times nothing
// and makes the same choices. Identical layers are timed once per build either way.
TEST(CudaEngine, TimingCacheRebuildTimesNothingAndChoosesTheSameKernels) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  // Two identical blocks: the second's problems are those of the first.
  RandomWeights weights(rng, {{"w1", {64, 64}}, {"w2", {64, 64}}});
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 64});
  Tensor h = x;
  for (const char* w : {"w1", "w2"}) {
    h = net.add_activation("relu", net.add_linear(h, net.add_constant(weights.file->get(w))));
  }
  net.mark_output(h, "y");
  BuilderConfig c;
  c.target = Target::cuda(0);
  c.precision = Precision::kFp16;
  c.add_profile("x", {1, 64}, {32, 64}, {64, 64});
  const auto path = std::filesystem::temp_directory_path() / ("tensoracle_timing_cache_" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  c.timing_cache = path;
  std::vector<std::string> logs;
  set_log_callback([&](LogSeverity, std::string_view message) { logs.emplace_back(message); });
  set_log_level(LogSeverity::kInfo);
  auto timed_line = [&] {
    for (const auto& line : logs) {
      if (line.find("problems timed") != std::string::npos) return line;
    }
    return std::string("(no timing summary)");
  };
  const std::vector<std::byte> first = Builder(c).build(net);
  const std::string first_line = timed_line();
  logs.clear();
  ASSERT_TRUE(std::filesystem::exists(path));
  const std::vector<std::byte> second = Builder(c).build(net);
  const std::string second_line = timed_line();
  set_log_callback(nullptr);
  set_log_level(LogSeverity::kWarning);
  std::filesystem::remove(path);
  // "build: kernels chosen in S s: T problems timed, R choices reused (F from the timing cache file); the chosen
  // kernels' scratch queried in Q s"
  auto counts = [](const std::string& line) {
    std::smatch m;
    std::array<int, 3> n{-1, -1, -1};
    if (std::regex_search(line, m, std::regex(R"((\d+) problems timed, (\d+) choices reused \((\d+) from)"))) {
      for (int i = 0; i < 3; ++i) n[static_cast<std::size_t>(i)] = std::stoi(m[i + 1].str());
    }
    return n;
  };
  const auto a = counts(first_line), b = counts(second_line);
  EXPECT_GE(a[0], 1) << first_line;  // the first block's product (at least) was timed
  EXPECT_GE(a[1], 1) << first_line;  // the second block's was not: the same problem
  EXPECT_EQ(a[2], 0) << first_line;
  EXPECT_EQ(b[0], 0) << second_line;  // nothing timed again
  EXPECT_EQ(b[1], a[0] + a[1]) << second_line;
  EXPECT_EQ(b[2], b[1]) << second_line;  // every reused choice came from the file
  EXPECT_FALSE(step_kernels(first).empty());
  EXPECT_EQ(step_kernels(second), step_kernels(first));
}

// The builder times each candidate as the graph mode runs it: launches captured into a CUDA graph and replayed
// (kernel_timing.cu), every candidate of a model's usual layers capturable. The verbose log line of each timed layer
// says how each candidate was timed.
TEST(CudaEngine, KernelTimingReplaysEveryCandidateInACapturedGraph) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  RandomWeights weights(rng, {{"w1", {256, 128}}, {"w2", {128, 256}}});
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 128});
  Tensor h = net.add_activation("relu", net.add_linear(x, net.add_constant(weights.file->get("w1"))));
  h = net.add_softmax(net.add_linear(h, net.add_constant(weights.file->get("w2"))), -1);
  net.mark_output(h, "y");
  BuilderConfig c;
  c.target = Target::cuda(0);
  c.precision = Precision::kFp16;
  c.add_profile("x", {1, 128}, {128, 128}, {256, 128});
  std::vector<std::string> timed;
  set_log_callback([&](LogSeverity, std::string_view message) {
    if (message.find("build: timed '") != std::string_view::npos) timed.emplace_back(message);
  });
  const LogSeverity level = log_level();
  set_log_level(LogSeverity::kVerbose);
  const std::vector<std::byte> engine = Builder(c).build(net);
  set_log_level(level);
  set_log_callback(nullptr);
  ASSERT_FALSE(timed.empty()) << "no layer had two candidates to time";
  for (const std::string& line : timed) {
    EXPECT_NE(line.find("in a graph of"), std::string::npos) << line;
    EXPECT_NE(line.find("; prepared in "), std::string::npos) << line;  // each candidate's set-up time
    EXPECT_EQ(line.find("not capturable"), std::string::npos) << line;
    EXPECT_EQ(line.find("failed"), std::string::npos) << line;
  }
  EXPECT_FALSE(step_kernels(engine).empty());
}

TEST(CudaEngine, EngineForAnotherGpuModelIsRefused) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  Model model(rng);
  auto bytes = Builder(config(Precision::kFp32)).build(model.net);
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::string name = system_info().cuda_devices.front().name;
  const auto at = text.find("\"" + name + "\"");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = static_cast<std::byte>(text[at + 1] == 'X' ? 'Y' : 'X');
  EXPECT_THROW(Engine::deserialize(bytes), UnsupportedError);
}

// Runs every input through an engine on the GPU and returns every output (outputs poisoned first).
std::map<std::string, HostTensor> run_all(const Engine& engine, const std::map<std::string, HostTensor>& inputs) {
  auto ctx = engine.create_execution_context();
  std::map<std::string, Dims> shapes;
  for (const auto& [name, t] : inputs) shapes[name] = t.shape;
  ctx->set_input_shapes(shapes);
  TargetStream stream(Target::cuda(0));
  std::vector<TargetBuffer> buffers;
  buffers.reserve(inputs.size() + engine.outputs().size());
  for (const auto& [name, t] : inputs) {
    buffers.emplace_back(Target::cuda(0), t.bytes.size());
    buffers.back().copy_from_host(t.bytes.data(), t.bytes.size());
    ctx->set_tensor_address(name, buffers.back().data());
  }
  std::map<std::string, HostTensor> outputs;
  std::vector<TargetBuffer*> out_buffers;
  for (const auto& o : engine.outputs()) {
    HostTensor& h = outputs[o.name] = HostTensor(o.dtype, ctx->tensor_shape(o.name));
    buffers.emplace_back(Target::cuda(0), h.bytes.size());
    buffers.back().fill(0xFF);
    ctx->set_tensor_address(o.name, buffers.back().data());
    out_buffers.push_back(&buffers.back());
  }
  ctx->enqueue(stream.get());
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  std::size_t k = 0;
  for (const auto& o : engine.outputs()) {
    HostTensor& h = outputs[o.name];
    out_buffers[k++]->copy_to_host(h.bytes.data(), h.bytes.size());
  }
  return outputs;
}

// Elementwise chains become fused_elementwise layers whose kernels are generated and compiled with NVRTC at build
// time: contiguous (with a scalar input, odd sizes for the vector tail) and broadcast ([N, 63] with [63] and [N, 1])
// programs, f16 lowering, an integer chain (exact), several shapes of one engine.
TEST(CudaEngine, FusedElementwiseChainsMatchTheCpuReference) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 63});
  Tensor m = net.add_input("m", DataType::kF32, {-1, 1});
  Tensor i = net.add_input("i", DataType::kI32, {-1, 63});
  std::vector<double> bias_values(63);
  for (std::size_t k = 0; k < bias_values.size(); ++k) bias_values[k] = 0.05 * static_cast<double>(k) - 1.5;
  Tensor bias = net.add_small_constant(bias_values, DataType::kF32, {63}, "bias");
  Tensor scale = net.add_small_constant({1.25}, DataType::kF32, {}, "scale");
  Tensor h = net.add_activation("gelu", net.add_binary("add", net.add_binary("mul", x, scale), bias));
  Tensor y = net.add_binary("mul", h, net.add_activation("sigmoid", m));
  // Compared with 0, so f16 rounding of x never flips the choice.
  Tensor zero = net.add_small_constant({0.0}, DataType::kF32, {}, "zero");
  Tensor z = net.add_where(net.add_binary("greater", x, zero), y, net.add_unary("neg", y));
  net.mark_output(z, "z");  // broadcast program
  net.mark_output(net.add_binary("add", net.add_binary("mul", net.add_activation("relu", x), scale), x), "u");
  Tensor half = net.add_cast(net.add_activation("silu", x), DataType::kF16);
  net.mark_output(
      net.add_cast(net.add_activation("gelu", half, {{"approximate", std::string("tanh")}}), DataType::kF32),
      "w");  // an explicit f16 chain
  Tensor three = net.add_small_constant({3}, DataType::kI32, {}, "three");
  Tensor seven = net.add_small_constant({7}, DataType::kI32, {}, "seven");
  Tensor two = net.add_small_constant({2}, DataType::kI32, {}, "two");
  net.mark_output(net.add_binary("div", net.add_binary("add", net.add_binary("mul", i, three), seven), two), "q");

  std::mt19937 rng(5);
  for (auto [precision, tolerance] : {std::pair{Precision::kFp32, 1e-5}, std::pair{Precision::kFp16, 1e-2}}) {
    BuilderConfig c;
    c.target = Target::cuda(0);
    c.precision = precision;
    c.add_profile("x", {1, 63}, {64, 63}, {300, 63});
    c.add_profile("m", {1, 1}, {64, 1}, {300, 1});
    c.add_profile("i", {1, 63}, {64, 63}, {300, 63});
    auto engine = Engine::deserialize(Builder(c).build(net));
    // The network is all elementwise: every step runs generated code.
    const auto manifest = nlohmann::json::parse(engine->manifest_json());
    for (const auto& step : manifest["steps"]) {
      EXPECT_EQ(step["op"], "fused_elementwise") << step.dump();
      EXPECT_EQ(step["kernel"], "fused_elementwise_nvrtc") << step.dump();
      EXPECT_EQ(step["binary"]["entries"].size(), 3U) << step.dump();
    }
    for (std::int64_t rows : {1, 5, 300}) {
      std::map<std::string, HostTensor> inputs{{"x", random_input({rows, 63}, rng)},
                                               {"m", random_input({rows, 1}, rng)}};
      HostTensor ints(DataType::kI32, {rows, 63});
      for (std::size_t k = 0; k < ints.size(); ++k)
        ints.data<std::int32_t>()[k] = static_cast<std::int32_t>(k % 97) - 48;
      inputs["i"] = ints;
      const auto want = run_reference(net, inputs);
      const auto got = run_all(*engine, inputs);
      for (const char* name : {"z", "u", "w"}) {
        // f16 results of the unfused chain round every intermediate; the generated code rounds once (docs).
        const double limit = std::string(name) == "w" ? std::max(tolerance, 1e-2) : tolerance;
        EXPECT_LT(rel_l2(got.at(name), want.at(name)), limit)
            << name << " " << to_string(precision) << " rows " << rows;
      }
      EXPECT_EQ(got.at("q").bytes, want.at("q").bytes) << to_string(precision) << " rows " << rows;
    }
  }
}

// Broadcast programs whose innermost axis is whole vectors move vectors: a [1, 5, 64] constant added to [N, 5, 64]
// (a position embedding), a per-row [N, 1, 1] factor (one value a vector) and a [64] bias (f32: 4 elements a vector;
// f16: 8); and one whose innermost axis (36 = 4 x 9) is whole f32 vectors but not f16 ones.
TEST(CudaEngine, FusedElementwiseBroadcastVectorsMatchTheCpuReference) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, 5, 64});
  Tensor m = net.add_input("m", DataType::kF32, {-1, 1, 1});
  Tensor y = net.add_input("y", DataType::kF32, {-1, 36});
  std::vector<double> pos_values(5 * 64), bias_values(64), row_values(36);
  for (std::size_t k = 0; k < pos_values.size(); ++k) pos_values[k] = 0.01 * static_cast<double>(k % 97) - 0.4;
  for (std::size_t k = 0; k < bias_values.size(); ++k) bias_values[k] = 0.03 * static_cast<double>(k) - 1.0;
  for (std::size_t k = 0; k < row_values.size(); ++k) row_values[k] = 0.5 - 0.02 * static_cast<double>(k);
  Tensor pos = net.add_small_constant(pos_values, DataType::kF32, {1, 5, 64}, "pos");
  Tensor bias = net.add_small_constant(bias_values, DataType::kF32, {64}, "bias");
  Tensor row = net.add_small_constant(row_values, DataType::kF32, {36}, "row");
  net.mark_output(net.add_binary("add", net.add_binary("mul", net.add_binary("add", x, pos), m), bias), "z");
  net.mark_output(net.add_activation("gelu", net.add_binary("mul", y, row)), "w");

  std::mt19937 rng(11);
  for (auto [precision, tolerance] : {std::pair{Precision::kFp32, 1e-5}, std::pair{Precision::kFp16, 1e-2}}) {
    BuilderConfig c;
    c.target = Target::cuda(0);
    c.precision = precision;
    c.add_profile("x", {1, 5, 64}, {64, 5, 64}, {300, 5, 64});
    c.add_profile("m", {1, 1, 1}, {64, 1, 1}, {300, 1, 1});
    c.add_profile("y", {1, 36}, {64, 36}, {300, 36});
    auto engine = Engine::deserialize(Builder(c).build(net));
    for (std::int64_t rows : {1, 7, 300}) {
      const std::map<std::string, HostTensor> inputs{{"x", random_input({rows, 5, 64}, rng)},
                                                     {"m", random_input({rows, 1, 1}, rng)},
                                                     {"y", random_input({rows, 36}, rng)}};
      const auto want = run_reference(net, inputs);
      const auto got = run_all(*engine, inputs);
      for (const char* name : {"z", "w"}) {
        EXPECT_LT(rel_l2(got.at(name), want.at(name)), tolerance)
            << name << " " << to_string(precision) << " rows " << rows;
      }
    }
  }
}

// The build's test plugin, or where TENSORACLE_TEST_PLUGIN says (a staged copy of the build).
std::string test_plugin() {
  const char* staged = std::getenv("TENSORACLE_TEST_PLUGIN");
  return staged != nullptr ? staged : TENSORACLE_TEST_PLUGIN;
}

// y = relu(scale_bias(x [-1, 64], b, alpha = 1.5)) with the test plugin's CUDA kernel (f32, and f16 under fp16).
struct PluginModel {
  RandomWeights weights;
  Network net;
  explicit PluginModel(std::mt19937& rng) : weights(rng, {{"b", {64}}}) {
    load_plugin_library(test_plugin());
    Tensor x = net.add_input("x", DataType::kF32, {-1, 64});
    Tensor b = net.add_constant(weights.file->get("b"));
    Tensor y = net.add_plugin("test.scale_bias", "1", {x, b}, {{"alpha", 1.5}}, "scaled")[0];
    net.mark_output(net.add_activation("relu", y), "y");
  }
  BuilderConfig config(Precision precision) const {
    BuilderConfig c;
    c.target = Target::cuda(0);
    c.precision = precision;
    c.add_profile("x", {1, 64}, {8, 64}, {32, 64});
    return c;
  }
  // The plugin's math on the host, in double.
  HostTensor expected(const HostTensor& x) const {
    HostTensor y(DataType::kF32, x.shape);
    for (std::size_t i = 0; i < x.size(); ++i)
      y.data<float>()[i] = static_cast<float>(std::max(0.0, 1.5 * x.data<float>()[i] + weights.data[0][i % 64]));
    return y;
  }
};

TEST(CudaPlugins, PluginStepsMatchTheirMathAtEachPrecision) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  PluginModel model(rng);
  for (Precision precision : {Precision::kFp32, Precision::kFp16}) {
    auto engine = Engine::deserialize(Builder(model.config(precision)).build(model.net));
    const auto manifest = nlohmann::json::parse(engine->manifest_json());
    std::string kernel, dtype;
    for (const auto& step : manifest["steps"]) {
      if (step["layer"] == "scaled") {
        kernel = step["kernel"];
        dtype = step["outputs"][0]["dtype"];
      }
    }
    EXPECT_EQ(kernel, "plugin_cuda");
    EXPECT_EQ(dtype, precision == Precision::kFp16 ? "f16" : "f32");  // the plugin's CUDA kernel takes f16
    auto ctx = engine->create_execution_context();
    TargetStream stream(Target::cuda(0));
    const HostTensor x = random_input({5, 64}, rng);
    TargetBuffer xb, yb;
    const HostTensor y = run(*ctx, x, stream.get(), xb, yb);
    EXPECT_LT(rel_l2(y, model.expected(x)), precision == Precision::kFp16 ? 2e-3 : 1e-6) << to_string(precision);
  }
}

TEST(CudaPlugins, PluginStepsReplayInCapturedGraphsAndGraphMode) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  PluginModel model(rng);
  auto engine = Engine::deserialize(Builder(model.config(Precision::kFp32)).build(model.net));
  auto ctx = engine->create_execution_context();
  TargetStream stream(Target::cuda(0));
  const HostTensor x = random_input({7, 64}, rng);
  TargetBuffer xb, yb;
  const HostTensor plain = run(*ctx, x, stream.get(), xb, yb);
  EXPECT_LT(rel_l2(plain, model.expected(x)), 1e-6);
  yb.fill(0xFF);
  capture_and_replay(*ctx, stream.get(), 3);
  EXPECT_EQ(read_back(yb, plain.shape).bytes, plain.bytes);
  ctx->set_graph_mode(true);
  for (int i = 0; i < 3; ++i) {
    yb.fill(0xFF);
    ctx->enqueue(stream.get());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    EXPECT_EQ(read_back(yb, plain.shape).bytes, plain.bytes);
  }
  EXPECT_EQ(ctx->graph_captures(), 1u);
}

TEST(CudaPlugins, TwoContextsRunPluginStepsConcurrently) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(13);
  PluginModel model(rng);
  auto engine = Engine::deserialize(Builder(model.config(Precision::kFp32)).build(model.net));
  const HostTensor x1 = random_input({32, 64}, rng), x2 = random_input({3, 64}, rng);
  HostTensor y1, y2;
  std::string failure;  // an exception leaving the thread would end the process
  std::thread other([&] {
    try {
      auto ctx = engine->create_execution_context();
      TargetStream stream(Target::cuda(0));
      TargetBuffer xb, yb;
      for (int i = 0; i < 20; ++i) y1 = run(*ctx, x1, stream.get(), xb, yb);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  {
    auto ctx = engine->create_execution_context();
    TargetStream stream(Target::cuda(0));
    TargetBuffer xb, yb;
    for (int i = 0; i < 20; ++i) y2 = run(*ctx, x2, stream.get(), xb, yb);
  }
  other.join();
  ASSERT_EQ(failure, "");
  EXPECT_LT(rel_l2(y1, model.expected(x1)), 1e-6);
  EXPECT_LT(rel_l2(y2, model.expected(x2)), 1e-6);
}

TEST(CudaPlugins, ComputedShapesAndHostOnlyPluginsOnCuda) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  load_plugin_library(test_plugin());
  Network net;
  Tensor u = net.add_input("u", DataType::kF32, {-1});
  Tensor v = net.add_input("v", DataType::kF32, {3});
  const auto outs = net.add_plugin("test.outer", "1", {u, v}, {}, "outer");
  net.mark_output(outs[0], "product");
  net.mark_output(outs[1], "joined");
  BuilderConfig c;
  c.target = Target::cuda(0);
  c.add_profile("u", {1}, {2}, {6});
  auto engine = Engine::deserialize(Builder(c).build(net));
  auto ctx = engine->create_execution_context();
  ctx->set_input_shapes({{"u", {2}}});
  EXPECT_EQ(ctx->tensor_shape("product"), (Dims{2, 3}));
  const std::vector<float> hu{2, -3}, hv{1, 10, 100};
  TargetBuffer ub(Target::cuda(0), 8), vb(Target::cuda(0), 12), pb(Target::cuda(0), 24), jb(Target::cuda(0), 20);
  ub.copy_from_host(hu.data(), 8);
  vb.copy_from_host(hv.data(), 12);
  ctx->set_tensor_address("u", ub.data());
  ctx->set_tensor_address("v", vb.data());
  ctx->set_tensor_address("product", pb.data());
  ctx->set_tensor_address("joined", jb.data());
  ctx->enqueue(nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> product(6), joined(5);
  pb.copy_to_host(product.data(), 24);
  jb.copy_to_host(joined.data(), 20);
  EXPECT_EQ(product, (std::vector<float>{2, 20, 200, -3, -30, -300}));
  EXPECT_EQ(joined, (std::vector<float>{2, -3, 1, 10, 100}));

  Network host_only;
  Tensor x = host_only.add_input("x", DataType::kF32, {4});
  host_only.mark_output(host_only.add_plugin("test.host_only", "1", {x}, {}, "cpu_copy")[0], "y");
  BuilderConfig cuda;
  cuda.target = Target::cuda(0);
  try {
    Builder(cuda).build(host_only);
    ADD_FAILURE() << "a host-only plugin was built for CUDA";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("has no CUDA implementation"), std::string::npos) << e.what();
  }
}

// Calibration on the GPU (CalibrationOptions::target): the ranges over batches of two shapes (the probe engine is built
// again for the second) against a double-precision computation of the activations, and the same clips as the CPU
// reference's calibration up to a bin of the histogram.
TEST(CudaEngine, CalibrationOnTheGpuSeesTheActivationsOfEveryBatch) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  constexpr std::int64_t kIn = 24, kHidden = 48, kOut = 8;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  const auto draw = [&](std::size_t n, float scale) {
    std::vector<float> v(n);
    for (float& e : v) e = normal(rng) * scale;
    return v;
  };
  const std::vector<float> w1 = draw(kHidden * kIn, 0.3F), b1 = draw(kHidden, 0.1F), w2 = draw(kOut * kHidden, 0.3F);
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {-1, kIn});
  Tensor h = net.add_linear(x, net.add_constant_copy(DataType::kF32, {kHidden, kIn}, w1.data(), "w1"),
                            net.add_constant_copy(DataType::kF32, {kHidden}, b1.data(), "b1"));
  Tensor a = net.add_activation("gelu", h);
  net.mark_output(net.add_linear(a, net.add_constant_copy(DataType::kF32, {kOut, kHidden}, w2.data(), "w2")), "y");
  std::vector<std::map<std::string, HostTensor>> batches;
  double x_max = 0, a_max = 0;
  for (std::int64_t rows : {5, 5, 9}) {
    HostTensor t(DataType::kF32, Dims{rows, kIn});
    const std::vector<float> v = draw(static_cast<std::size_t>(rows * kIn), 1.0F);
    std::copy(v.begin(), v.end(), t.data<float>());
    t.data<float>()[3] *= 12.0F;  // an outlier in every batch
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t j = 0; j < kIn; ++j) x_max = std::max(x_max, std::fabs(double{t.data<float>()[r * kIn + j]}));
      for (std::int64_t o = 0; o < kHidden; ++o) {
        double sum = b1[static_cast<std::size_t>(o)];
        for (std::int64_t j = 0; j < kIn; ++j) {
          sum += double{t.data<float>()[r * kIn + j]} * w1[static_cast<std::size_t>(o * kIn + j)];
        }
        a_max = std::max(a_max, std::fabs(0.5 * sum * (1.0 + std::erf(sum / std::sqrt(2.0)))));
      }
    }
    batches.push_back({{"x", std::move(t)}});
  }
  CalibrationOptions on_gpu;
  on_gpu.method = CalibrationMethod::kPercentile;
  on_gpu.percentile = 99.0;
  on_gpu.target = Target::cuda(0);
  CalibrationOptions on_cpu = on_gpu;
  on_cpu.target = Target::cpu();
  Calibrator gpu(net, on_gpu), cpu(net, on_cpu);
  for (const auto& batch : batches) {
    gpu.add_batch(batch);
    cpu.add_batch(batch);
  }
  const std::vector<ActivationRange> got = gpu.activation_ranges(), want = cpu.activation_ranges();
  ASSERT_EQ(got.size(), 2U);
  ASSERT_EQ(want.size(), 2U);
  EXPECT_EQ(got[0].tensor, "x");
  EXPECT_EQ(got[0].max_abs, x_max);  // the inputs come back unchanged
  EXPECT_NEAR(got[1].max_abs, a_max, 1e-5 * a_max);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].tensor, want[i].tensor);
    EXPECT_EQ(got[i].values, want[i].values);
    EXPECT_EQ(got[i].values, static_cast<std::uint64_t>(19 * (i == 0 ? kIn : kHidden)));
    // A bin of the 2048-bin histogram over a range below 2·max|x|.
    EXPECT_NEAR(got[i].amax, want[i].amax, 2.0 * 2 * got[i].max_abs / 2048) << got[i].tensor;
  }
}

}  // namespace
}  // namespace tensoracle
