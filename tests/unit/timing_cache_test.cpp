// The builder's timing cache: problem keys, the file's round trip, merging, and files that must not be used (another
// target, damaged, not a cache), which are ignored with a warning and rewritten.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "builder/timing_cache.hpp"
#include "graph/graph.hpp"
#include "graph/shape_eval.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle {
namespace {

using builder::TimingCache;

nlohmann::json h200() {
  return {{"kind", "cuda"}, {"device_name", "NVIDIA H200"}, {"compute_capability", "9.0"}, {"cudnn_version", 91400}};
}

// The tests' files, in a directory of this process that is removed when the tests end.
std::filesystem::path scratch_dir() {
  return std::filesystem::temp_directory_path() / ("tensoracle_timing_cache_test_" + std::to_string(::getpid()));
}

class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_dir(), ignored);
  }
};
[[maybe_unused]] ::testing::Environment* const kScratchCleanup =
    ::testing::AddGlobalTestEnvironment(new ScratchCleanup);  // NOLINT(cppcoreguidelines-owning-memory): gtest owns it

std::filesystem::path temp_file(const std::string& name) {
  const auto dir = scratch_dir();
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::filesystem::remove(path);
  return path;
}

// Collects warnings while alive.
struct Warnings {
  std::vector<std::string> messages;
  Warnings() {
    set_log_callback([this](LogSeverity severity, std::string_view message) {
      if (severity == LogSeverity::kWarning) messages.emplace_back(message);
    });
  }
  ~Warnings() { set_log_callback(nullptr); }
};

// Two linear layers of the same shapes and one of another K, at concrete shapes.
struct Problems {
  Network net;
  std::vector<Dims> shapes;
  Problems() {
    Tensor x = net.add_input("x", DataType::kF16, {8, 64});
    Tensor w1 = net.add_small_constant(std::vector<double>(64 * 64, 0.5), DataType::kF16, {64, 64}, "w1");
    Tensor w2 = net.add_small_constant(std::vector<double>(64 * 64, 0.25), DataType::kF16, {64, 64}, "w2");
    Tensor w3 = net.add_small_constant(std::vector<double>(32 * 64, 0.25), DataType::kF16, {32, 64}, "w3");
    net.mark_output(net.add_linear(x, w1), "a");
    net.mark_output(net.add_linear(x, w2), "b");
    net.mark_output(net.add_linear(x, w3), "c");
    shapes = graph::evaluate_shapes(graph::graph_of(net), {Dims{8, 64}});
  }
  std::string key(std::size_t layer, const std::vector<std::string>& candidates = {"k1", "k2"},
                  Precision precision = Precision::kFp16) const {
    const graph::Graph& g = graph::graph_of(net);
    return TimingCache::problem_key(g, g.layers.at(layer), shapes, candidates, precision);
  }
};

TEST(TimingCache, KeysTellProblemsApartAndMatchIdenticalOnes) {
  const Problems p;
  EXPECT_EQ(p.key(0), p.key(1));  // same op, attributes, dtypes and shapes: the weights' values don't matter
  EXPECT_NE(p.key(0), p.key(2));  // another N
  EXPECT_NE(p.key(0), p.key(0, {"k2", "k1"}));
  EXPECT_NE(p.key(0), p.key(0, {"k1", "k2"}, Precision::kBf16));
}

TEST(TimingCache, SavedChoicesAreFoundByTheNextBuildAndMerged) {
  const Problems p;
  const auto path = temp_file("roundtrip.json");
  {
    TimingCache cache(h200());
    cache.load(path);  // missing: empty, no warning
    EXPECT_EQ(cache.size(), 0U);
    cache.insert(p.key(0), "k2");
    cache.save(path);
  }
  {
    TimingCache other(h200());  // another build adds a problem to the same file
    other.insert(p.key(2), "k1");
    other.save(path);
  }
  TimingCache cache(h200());
  Warnings warnings;
  cache.load(path);
  EXPECT_TRUE(warnings.messages.empty());
  ASSERT_TRUE(cache.find(p.key(0)).has_value());
  EXPECT_EQ(cache.find(p.key(0))->kernel, "k2");
  EXPECT_TRUE(cache.find(p.key(0))->from_file);
  ASSERT_TRUE(cache.find(p.key(2)).has_value());
  EXPECT_EQ(cache.find(p.key(2))->kernel, "k1");
  EXPECT_FALSE(cache.find(p.key(0, {"k1"})).has_value());
  // No temporary file is left beside it.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(path.parent_path())) {
    if (entry.path().filename().string().find("roundtrip") != std::string::npos) ++files;
  }
  EXPECT_EQ(files, 1U);
}

TEST(TimingCache, AFileOfAnotherGpuOrLibraryIsIgnoredWithAWarningAndRewritten) {
  const Problems p;
  const auto path = temp_file("other_gpu.json");
  {
    TimingCache cache(h200());
    cache.insert(p.key(0), "k2");
    cache.save(path);
  }
  nlohmann::json other = h200();
  other["cudnn_version"] = 91900;
  TimingCache cache(other);
  {
    Warnings warnings;
    cache.load(path);
    ASSERT_EQ(warnings.messages.size(), 1U);
    EXPECT_NE(warnings.messages[0].find(path.string()), std::string::npos);
    EXPECT_NE(warnings.messages[0].find("91900"), std::string::npos) << warnings.messages[0];
  }
  EXPECT_FALSE(cache.find(p.key(0)).has_value());
  cache.insert(p.key(1), "k1");
  cache.save(path);  // replaces the other target's entries
  TimingCache again(other);
  Warnings warnings;
  again.load(path);
  EXPECT_TRUE(warnings.messages.empty());
  ASSERT_TRUE(again.find(p.key(1)).has_value());
  EXPECT_EQ(again.size(), 1U);
}

TEST(TimingCache, DamagedOrForeignFilesAreIgnoredWithAWarning) {
  const Problems p;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"not_json.json", "{\"format\": \"tensoracle-timing-cache\", "},
      {"foreign.json", "{\"format\": \"something else\", \"version\": 1}"},
      {"version.json", "{\"format\": \"tensoracle-timing-cache\", \"version\": 99}"},
      {"entries.json", ""},
  };
  for (const auto& [name, text] : files) {
    SCOPED_TRACE(name);
    const auto path = temp_file(name);
    if (name == "entries.json") {  // right identity, an entry without a kernel
      TimingCache writer(h200());
      writer.insert(p.key(0), "k1");
      writer.save(path);
      std::ifstream in(path);
      std::string saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto at = saved.find("\"kernel\"");
      ASSERT_NE(at, std::string::npos);
      saved.replace(at, 8, "\"kernal\"");
      std::ofstream(path) << saved;
    } else {
      std::ofstream(path) << text;
    }
    TimingCache cache(h200());
    Warnings warnings;
    cache.load(path);
    EXPECT_EQ(cache.size(), 0U);
    ASSERT_EQ(warnings.messages.size(), 1U);
    EXPECT_NE(warnings.messages[0].find("not used"), std::string::npos) << warnings.messages[0];
  }
}

}  // namespace
}  // namespace tensoracle
