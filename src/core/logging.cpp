// The process-wide log callback and severity filter.
#include "tensoracle/logging.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

namespace tensoracle {
namespace {

std::atomic<int> g_level{static_cast<int>(LogSeverity::kWarning)};
std::mutex g_mutex;
std::shared_ptr<const LogCallback> g_callback;  // null: default stderr sink

void default_sink(LogSeverity severity, std::string_view message) {
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "tensoracle %.*s: %.*s\n", static_cast<int>(to_string(severity).size()),
               to_string(severity).data(), static_cast<int>(message.size()), message.data());
}

}  // namespace

std::string_view to_string(LogSeverity severity) noexcept {
  switch (severity) {
    case LogSeverity::kError: return "error";
    case LogSeverity::kWarning: return "warning";
    case LogSeverity::kInfo: return "info";
    case LogSeverity::kVerbose: return "verbose";
  }
  return "unknown";
}

void set_log_callback(LogCallback callback) {
  std::shared_ptr<const LogCallback> next;
  if (callback) next = std::make_shared<const LogCallback>(std::move(callback));
  std::lock_guard lock(g_mutex);
  g_callback = std::move(next);
}

void set_log_level(LogSeverity level) noexcept { g_level.store(static_cast<int>(level)); }
LogSeverity log_level() noexcept { return static_cast<LogSeverity>(g_level.load()); }
bool log_enabled(LogSeverity severity) noexcept { return static_cast<int>(severity) <= g_level.load(); }

void log(LogSeverity severity, std::string_view message) {
  if (!log_enabled(severity)) return;
  std::shared_ptr<const LogCallback> callback;
  {
    std::lock_guard lock(g_mutex);
    callback = g_callback;
  }
  if (callback) {
    (*callback)(severity, message);
  } else {
    default_sink(severity, message);
  }
}

}  // namespace tensoracle
