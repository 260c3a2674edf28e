// Tests for open_engine: build once then reuse, conditions selecting files, errors, leftovers, threads, times.
#include <gtest/gtest.h>

#include <cstdlib>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensoracle/cache.hpp"
#include "tensoracle/safetensors.hpp"
#include "tensoracle/sha256.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kIn = 8;
constexpr std::int64_t kOut = 4;

class CacheOpen : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("tensoracle-cache-open-" + std::string(test->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    cache_ = root_ / "cache";
    weights_ = root_ / "model.safetensors";
    write_weights(1.0f);
    declaration_.name = "tiny-linear";
    declaration_.graph_version = 1;
    declaration_.inputs = {{"x", DataType::kF32, Dims{-1, kIn}}};
    declaration_.outputs = {{"y", DataType::kF32, Dims{-1, kOut}}};
    declaration_.builder.target = Target::cpu();
    declaration_.builder.time_kernels = false;
    declaration_.builder.add_profile("x", Dims{1, kIn}, Dims{2, kIn}, Dims{4, kIn});
    options_.cache_dir = cache_;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::permissions(cache_, fs::perms::owner_all, ignored);
    fs::remove_all(root_, ignored);
  }

  void write_weights(float scale) {
    std::vector<float> w(static_cast<std::size_t>(kOut * kIn));
    std::vector<float> b(static_cast<std::size_t>(kOut));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = scale * static_cast<float>(i % 7) - 2.0f;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.5f * static_cast<float>(i);
    write_safetensors(weights_, {{"fc.weight", DataType::kF32, Dims{kOut, kIn}, w.data()},
                                 {"fc.bias", DataType::kF32, Dims{kOut}, b.data()}});
  }

  GraphFunction graph() {
    return [this](const WeightStore& weights) {
      ++graph_calls_;
      Network net;
      Tensor x = net.add_input("x", DataType::kF32, Dims{-1, kIn});
      Tensor y =
          net.add_linear(x, net.add_constant(weights.get("fc.weight")), net.add_constant(weights.get("fc.bias")));
      net.mark_output(y, "y");
      return net;
    };
  }

  EngineHandle open(const EngineDeclaration& declaration, bool force = false) {
    OpenEngineOptions options = options_;
    options.force_rebuild = force;
    return open_engine(declaration, {weights_}, graph(), options);
  }
  EngineHandle open(bool force = false) { return open(declaration_, force); }

  // Runs the engine on a fixed input of two rows and returns y.
  static std::vector<float> run(const EngineHandle& handle) {
    std::vector<float> x(2 * kIn);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 1.0f;
    std::vector<float> y(2 * kOut, -1e30f);
    auto context = handle.create_execution_context();
    context->set_input_shapes({{"x", Dims{2, kIn}}});
    context->set_tensor_address("x", x.data());
    context->set_tensor_address("y", y.data());
    context->enqueue();
    return y;
  }

  std::vector<float> expected_output(float scale) const {
    std::vector<float> y(2 * kOut);
    for (std::int64_t r = 0; r < 2; ++r) {
      for (std::int64_t o = 0; o < kOut; ++o) {
        float sum = 0.5f * static_cast<float>(o);
        for (std::int64_t i = 0; i < kIn; ++i) {
          const float xv = static_cast<float>(r * kIn + i) * 0.25f - 1.0f;
          sum += xv * (scale * static_cast<float>((o * kIn + i) % 7) - 2.0f);
        }
        y[static_cast<std::size_t>(r * kOut + o)] = sum;
      }
    }
    return y;
  }

  std::vector<std::string> engine_files() const {
    std::vector<std::string> out;
    for (const auto& entry : fs::directory_iterator(cache_)) {
      if (entry.path().extension() == ".engine") out.push_back(entry.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  static std::int64_t mtime_ns(const fs::path& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }

  static void set_mtime_ns(const fs::path& path, std::int64_t ns) {
    const timespec times[2] = {{0, UTIME_OMIT},
                               {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }

  static void expect_near(const std::vector<float>& a, const std::vector<float>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4f) << i;
  }

  fs::path root_;
  fs::path cache_;
  fs::path weights_;
  EngineDeclaration declaration_;
  OpenEngineOptions options_;
  std::atomic<int> graph_calls_{0};
};

TEST_F(CacheOpen, BuildsOnceThenReusesWithoutCallingTheGraph) {
  const EngineHandle first = open();
  EXPECT_TRUE(first.built);
  EXPECT_EQ(graph_calls_, 1);
  ASSERT_TRUE(fs::exists(first.path));
  EXPECT_EQ(first.path.parent_path(), cache_);
  EXPECT_EQ(first.path.filename().string(), engine_file_name(declaration_.name, first.conditions_json));
  EXPECT_EQ(fs::status(first.path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(fs::status(cache_).permissions() & fs::perms::all, fs::perms::owner_all);
  expect_near(run(first), expected_output(1.0f));

  const EngineHeader header = read_engine_header(first.path);
  EXPECT_EQ(header.conditions_json, first.conditions_json);

  const EngineHandle second = open();
  EXPECT_FALSE(second.built);
  EXPECT_EQ(graph_calls_, 1);
  EXPECT_EQ(second.path, first.path);
  expect_near(run(second), expected_output(1.0f));
  EXPECT_EQ(engine_files().size(), 1u);
}

TEST_F(CacheOpen, ConditionsHoldEverythingTheReferenceKeys) {
  const nlohmann::json c = nlohmann::json::parse(open().conditions_json);
  for (const char* key : {"conditions_version", "name", "graph_version", "weights", "declaration", "builder", "plugins",
                          "target", "os", "cpu_architecture", "library_version", "engine_format_version"}) {
    EXPECT_TRUE(c.contains(key)) << key;
  }
  ASSERT_EQ(c["weights"].size(), 1u);
  EXPECT_EQ(c["weights"][0], sha256_file_hex(weights_));
  EXPECT_EQ(c["name"], "tiny-linear");
  EXPECT_EQ(c["target"]["kind"], "cpu");
  EXPECT_EQ(c["builder"]["target"], "cpu");
  EXPECT_EQ(c["declaration"]["inputs"][0]["dims"], (std::vector<std::int64_t>{-1, kIn}));
}

TEST_F(CacheOpen, ChangingAnyConditionSelectsAnotherFile) {
  std::set<fs::path> paths{open().path};
  const auto expect_new_file = [&](const EngineDeclaration& declaration, const char* what) {
    const EngineHandle handle = open(declaration);
    EXPECT_TRUE(handle.built) << what;
    EXPECT_TRUE(paths.insert(handle.path).second) << what;
  };
  EngineDeclaration d = declaration_;
  d.name = "tiny-linear-2";
  expect_new_file(d, "name");
  d = declaration_;
  d.graph_version = 2;
  expect_new_file(d, "graph_version");
  d = declaration_;
  d.builder.time_kernels = true;
  expect_new_file(d, "builder setting");
  d = declaration_;
  d.builder.add_profile("x", Dims{1, kIn}, Dims{3, kIn}, Dims{4, kIn});
  expect_new_file(d, "profile");
  d = declaration_;
  d.builder.max_scratch_bytes /= 2;
  expect_new_file(d, "scratch limit");
  d = declaration_;
  d.builder.precision = Precision::kTf32;
  expect_new_file(d, "precision");
  d = declaration_;
  // A plugin library (open_engine loads it; the network needs none of its plugins).
  const char* staged = std::getenv("TENSORACLE_TEST_PLUGIN");
  d.plugin_libraries = {staged != nullptr ? staged : TENSORACLE_TEST_PLUGIN};
  expect_new_file(d, "plugin library");
  // Its contents are part of the conditions: another file name for other bytes (computed without loading them, which
  // a process can do only once per library).
  const fs::path plugin = root_ / "plugin.so";
  std::ofstream(plugin) << "plugin v1";
  d.plugin_libraries = {plugin};
  const std::string v1 = engine_file_name(d.name, engine_conditions_json(d, {weights_}, cache_));
  std::ofstream(plugin) << "plugin v2, longer";
  EXPECT_NE(engine_file_name(d.name, engine_conditions_json(d, {weights_}, cache_)), v1) << "plugin library contents";
  write_weights(3.0f);
  const EngineHandle reweighted = open();
  EXPECT_TRUE(reweighted.built);
  EXPECT_TRUE(paths.insert(reweighted.path).second) << "weights";
  expect_near(run(reweighted), expected_output(3.0f));
  // Back to the first weights: the first file is reused.
  write_weights(1.0f);
  EXPECT_FALSE(open().built);
  EXPECT_EQ(engine_files().size(), paths.size());
}

TEST_F(CacheOpen, ForceRebuildRebuildsAndRehashesWeights) {
  const EngineHandle first = open();
  const EngineHandle forced = open(/*force=*/true);
  EXPECT_TRUE(forced.built);
  EXPECT_EQ(graph_calls_, 2);
  EXPECT_EQ(forced.path, first.path);
  // Change the weights without changing their identity (same size, time and inode): only a forced
  // open sees it.
  struct stat before {};
  ASSERT_EQ(::stat(weights_.c_str(), &before), 0);
  {
    std::vector<char> bytes;
    std::ifstream in(weights_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
    in.close();
    bytes[bytes.size() - 1] ^= 0x01;  // the last byte of the bias
    std::fstream out(weights_, std::ios::binary | std::ios::in | std::ios::out);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const timespec times[2] = {{0, UTIME_OMIT}, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, weights_.c_str(), times, 0), 0);
  EXPECT_EQ(open().path, first.path);  // trusted record
  const EngineHandle rehashed = open(/*force=*/true);
  EXPECT_NE(rehashed.path, first.path);
  EXPECT_TRUE(rehashed.built);
  EXPECT_EQ(open().path, rehashed.path);  // the record was rewritten
}

TEST_F(CacheOpen, SuccessfulReuseRecordsTheTimeFailedOnesDoNot) {
  const EngineHandle first = open();
  const std::int64_t old_time = 1'000'000'000'000'000'000;
  set_mtime_ns(first.path, old_time);
  open();
  const auto now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_GT(mtime_ns(first.path), now - 60'000'000'000LL);

  // A damaged plan: CorruptEngineError, time unchanged.
  set_mtime_ns(first.path, old_time);
  {
    std::fstream f(first.path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(-1, std::ios::end);
    f.write(&c, 1);
  }
  set_mtime_ns(first.path, old_time);
  try {
    open();
    FAIL() << "expected CorruptEngineError";
  } catch (const CorruptEngineError& e) {
    EXPECT_NE(std::string(e.what()).find(first.path.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(mtime_ns(first.path), old_time);
  EXPECT_EQ(graph_calls_, 1);
  // The caller chooses to rebuild.
  EXPECT_TRUE(open(/*force=*/true).built);
}

TEST_F(CacheOpen, UndeserializablePlanAsksToCheckPlugins) {
  const EngineHandle first = open();
  const std::string junk = "not an engine plan";
  write_engine_file(first.path, first.conditions_json, junk.data(), junk.size());
  try {
    open();
    FAIL() << "expected CorruptEngineError";
  } catch (const CorruptEngineError& e) {
    EXPECT_NE(std::string(e.what()).find("plugin_libraries"), std::string::npos) << e.what();
  }
}

TEST_F(CacheOpen, SignatureMismatchIsEngineIOError) {
  // At build time: nothing is saved.
  EngineDeclaration wrong = declaration_;
  wrong.outputs = {{"z", DataType::kF32, Dims{-1, kOut}}};
  EXPECT_THROW(open(wrong), EngineIOError);
  EXPECT_TRUE(engine_files().empty());
  wrong.outputs = {{"y", DataType::kF16, Dims{-1, kOut}}};
  EXPECT_THROW(open(wrong), EngineIOError);
  EXPECT_TRUE(engine_files().empty());

  // At reuse: a saved engine (of the right conditions) whose plan has another signature.
  const EngineHandle good = open();
  EngineDeclaration other = declaration_;
  other.outputs = {{"y", DataType::kF32, Dims{-1, kOut + 1}}};
  ensure_cache_directory(cache_);
  const std::string conditions = engine_conditions_json(other, {weights_}, cache_);
  std::vector<char> file;
  {
    std::ifstream in(good.path, std::ios::binary);
    file.assign(std::istreambuf_iterator<char>(in), {});
  }
  const EngineHeader header = read_engine_header(good.path);
  const std::string plan(file.begin() + static_cast<std::ptrdiff_t>(header.plan_offset), file.end());
  write_engine_file(cache_ / engine_file_name(other.name, conditions), conditions, plan.data(), plan.size());
  try {
    open(other);
    FAIL() << "expected EngineIOError";
  } catch (const EngineIOError& e) {
    EXPECT_NE(std::string(e.what()).find("output 'y'"), std::string::npos) << e.what();
  }
}

TEST_F(CacheOpen, OtherConditionsInTheHeaderAreEngineConditionError) {
  const EngineHandle first = open();
  const std::string plan = "whatever";
  write_engine_file(first.path, R"({"some":"other conditions"})", plan.data(), plan.size());
  EXPECT_THROW(open(), EngineConditionError);
}

TEST_F(CacheOpen, LeftoversOfACrashedBuildAreRecovered) {
  ensure_cache_directory(cache_);
  const std::string conditions = engine_conditions_json(declaration_, {weights_}, cache_);
  const fs::path path = cache_ / engine_file_name(declaration_.name, conditions);
  std::ofstream(path).close();  // empty marker, nobody holds its lock
  const fs::path temporary = cache_ / ("." + path.filename().string() + ".tmp-999999-deadbeef");
  std::ofstream(temporary) << "half-written engine";
  const EngineHandle handle = open();
  EXPECT_TRUE(handle.built);
  EXPECT_EQ(handle.path, path);
  EXPECT_FALSE(fs::exists(temporary));
  EXPECT_GT(fs::file_size(path), 0u);
  expect_near(run(handle), expected_output(1.0f));
}

TEST_F(CacheOpen, FailedGraphLeavesNothingBehind) {
  OpenEngineOptions options = options_;
  EXPECT_THROW(
      open_engine(
          declaration_, {weights_}, [](const WeightStore&) -> Network { throw InvalidArgumentError("boom"); }, options),
      InvalidArgumentError);
  EXPECT_TRUE(engine_files().empty());
  EXPECT_TRUE(open().built);
}

TEST_F(CacheOpen, ThreadsOpeningTheSameMissingEngineBuildOnce) {
  constexpr int kThreads = 8;
  std::vector<EngineHandle> handles(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready < kThreads) std::this_thread::yield();
      try {
        handles[static_cast<std::size_t>(t)] = open();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  int built = 0;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(errors[static_cast<std::size_t>(t)], "");
    built += handles[static_cast<std::size_t>(t)].built ? 1 : 0;
    expect_near(run(handles[static_cast<std::size_t>(t)]), expected_output(1.0f));
  }
  EXPECT_EQ(graph_calls_, 1);
  EXPECT_EQ(built, 1);
  EXPECT_EQ(engine_files().size(), 1u);
}

TEST_F(CacheOpen, ReadOnlyCacheWithAValidEngineStillOpens) {
  const EngineHandle first = open();
  const std::int64_t old_time = 1'000'000'000'000'000'000;
  set_mtime_ns(first.path, old_time);
  fs::permissions(cache_, fs::perms::owner_read | fs::perms::owner_exec);
  fs::permissions(first.path, fs::perms::owner_read);
  const EngineHandle again = open();
  EXPECT_FALSE(again.built);
  expect_near(run(again), expected_output(1.0f));
  fs::permissions(first.path, fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(cache_, fs::perms::owner_all);
}

TEST_F(CacheOpen, MissingWeightFileIsIoError) {
  fs::remove(weights_);
  EXPECT_THROW(open(), IoError);
}

TEST_F(CacheOpen, CudaTargetConditionsRecordTheDeviceProperties) {
  ensure_cache_directory(cache_);
  EngineDeclaration cuda = declaration_;
  cuda.builder.target = Target::cuda(999);
  EXPECT_THROW(engine_conditions_json(cuda, {weights_}, cache_), CudaError);
  const SystemInfo info = system_info();
  if (info.cuda_devices.empty()) GTEST_SKIP() << "no CUDA device: " << info.cuda_unavailable_reason;
  const CudaDeviceInfo& device = info.cuda_devices.front();
  cuda.builder.target = Target::cuda(device.index);
  const nlohmann::json c = nlohmann::json::parse(engine_conditions_json(cuda, {weights_}, cache_));
  const nlohmann::json& t = c["target"];
  EXPECT_EQ(t["kind"], "cuda");
  EXPECT_EQ(t["name"], device.name);
  EXPECT_EQ(t["compute_capability"],
            std::to_string(device.compute_capability_major) + "." + std::to_string(device.compute_capability_minor));
  EXPECT_EQ(t["multiprocessor_count"], device.multiprocessor_count);
  EXPECT_EQ(t["total_memory_bytes"], device.total_memory_bytes);
  EXPECT_GT(t["memory_bus_width_bits"].get<int>(), 0);
  EXPECT_GT(t["l2_cache_bytes"].get<int>(), 0);
  EXPECT_GT(t["shared_memory_per_block_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_GT(t["texture_alignment_bytes"].get<std::uint64_t>(), 0u);
  for (const char* key : {"shared_memory_per_block_optin_bytes", "shared_memory_per_multiprocessor_bytes", "integrated",
                          "ecc_enabled", "cuda_runtime_version"}) {
    EXPECT_TRUE(t.contains(key)) << key;
  }
  EXPECT_FALSE(t.contains("index"));
  EXPECT_EQ(c["builder"]["target"], "cuda");  // no device index: identical GPUs share engines
}

TEST(EngineFileName, SanitizesTheName) {
  const std::string conditions = R"({"a":1})";
  const std::string digest = sha256_hex(conditions.data(), conditions.size());
  EXPECT_EQ(engine_file_name("bert-base_v1.2", conditions), "bert-base_v1.2-" + digest + ".engine");
  EXPECT_EQ(engine_file_name("a/b c", R"({ "a" : 1 })"), "a_b_c-" + digest + ".engine");
  EXPECT_EQ(engine_file_name(".hidden", conditions), "_hidden-" + digest + ".engine");
  EXPECT_EQ(engine_file_name("", conditions), "engine-" + digest + ".engine");
  EXPECT_EQ(engine_file_name(std::string(100, 'n'), conditions), std::string(64, 'n') + "-" + digest + ".engine");
}

}  // namespace
}  // namespace tensoracle
