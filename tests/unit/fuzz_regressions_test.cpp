// Replays every committed fuzzer regression input (tests/fuzz/regressions/<target>/) through the fuzz targets'
// own checks, one test per file, so that a fixed crash stays fixed in every build (the sanitizer build catches UB).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_checks.hpp"

namespace tensoracle {
namespace {

namespace fs = std::filesystem;

const fs::path kRegressions = TENSORACLE_FUZZ_REGRESSIONS_DIR;

// The committed inputs of one target, sorted by name (README.md in the folder says how each was found).
std::vector<std::string> inputs_of(const std::string& target) {
  std::vector<std::string> names;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(kRegressions / target, ignored)) {
    if (entry.is_regular_file()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::uint8_t> read_input(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// gtest parameter names allow only [A-Za-z0-9_].
std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

TEST(FuzzRegressions, EveryTargetHasItsCommittedInputs) {
  EXPECT_FALSE(inputs_of("safetensors").empty()) << kRegressions;
  EXPECT_FALSE(inputs_of("engine").empty()) << kRegressions;
}

class SafetensorsRegression : public ::testing::TestWithParam<std::string> {};

TEST_P(SafetensorsRegression, IsRejectedOrReadSafely) {
  const std::vector<std::uint8_t> bytes = read_input(kRegressions / "safetensors" / GetParam());
  EXPECT_NO_THROW(fuzz::check_safetensors_reader_input(bytes.data(), bytes.size())) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Committed, SafetensorsRegression, ::testing::ValuesIn(inputs_of("safetensors")), test_name);

class EnginePlanRegression : public ::testing::TestWithParam<std::string> {};

TEST_P(EnginePlanRegression, IsRejectedOrRunsSafely) {
  const std::vector<std::uint8_t> bytes = read_input(kRegressions / "engine" / GetParam());
  EXPECT_NO_THROW(fuzz::check_engine_plan_input(bytes.data(), bytes.size())) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Committed, EnginePlanRegression, ::testing::ValuesIn(inputs_of("engine")), test_name);

}  // namespace
}  // namespace tensoracle
