// Tests for the logging callback and severity filter.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tensoracle/logging.hpp"

namespace tensoracle {
namespace {

class LoggingTest : public ::testing::Test {
 protected:
  void TearDown() override {
    set_log_callback({});
    set_log_level(LogSeverity::kWarning);
  }
};

TEST_F(LoggingTest, CallbackReceivesMessagesAtOrAboveLevel) {
  std::vector<std::pair<LogSeverity, std::string>> seen;
  set_log_callback([&](LogSeverity s, std::string_view m) { seen.emplace_back(s, std::string(m)); });
  set_log_level(LogSeverity::kInfo);
  log(LogSeverity::kError, "e");
  log(LogSeverity::kInfo, "i");
  log(LogSeverity::kVerbose, "v");
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, LogSeverity::kError);
  EXPECT_EQ(seen[0].second, "e");
  EXPECT_EQ(seen[1].second, "i");
  EXPECT_TRUE(log_enabled(LogSeverity::kInfo));
  EXPECT_FALSE(log_enabled(LogSeverity::kVerbose));
}

TEST_F(LoggingTest, DefaultLevelIsWarning) {
  EXPECT_EQ(log_level(), LogSeverity::kWarning);
  int calls = 0;
  set_log_callback([&](LogSeverity, std::string_view) { ++calls; });
  log(LogSeverity::kInfo, "dropped");
  log(LogSeverity::kWarning, "kept");
  EXPECT_EQ(calls, 1);
}

TEST_F(LoggingTest, EmptyCallbackRestoresDefaultSink) {
  int calls = 0;
  set_log_callback([&](LogSeverity, std::string_view) { ++calls; });
  set_log_callback({});
  testing::internal::CaptureStderr();
  log(LogSeverity::kError, "to stderr");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(calls, 0);
  EXPECT_NE(err.find("tensoracle error: to stderr"), std::string::npos) << err;
}

TEST_F(LoggingTest, ConcurrentLoggingAndReplacementIsSafe) {
  std::atomic<int> calls{0};
  set_log_callback([&](LogSeverity, std::string_view) { calls.fetch_add(1); });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 1000; ++i) log(LogSeverity::kError, "x");
    });
  }
  for (int i = 0; i < 100; ++i) set_log_callback([&](LogSeverity, std::string_view) { calls.fetch_add(1); });
  for (auto& th : threads) th.join();
  EXPECT_EQ(calls.load(), 4000);
}

}  // namespace
}  // namespace tensoracle
