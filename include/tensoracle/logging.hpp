// Logging: one process-wide callback that receives the library's messages, with a severity filter.
#pragma once

#include <functional>
#include <string_view>

namespace tensoracle {

enum class LogSeverity { kError = 0, kWarning = 1, kInfo = 2, kVerbose = 3 };

std::string_view to_string(LogSeverity severity) noexcept;

// Receives each message at or above the configured severity. It may be called from any thread
// the library runs on, so it must be thread-safe; it must not throw.
using LogCallback = std::function<void(LogSeverity, std::string_view message)>;

// Replaces the callback; an empty function restores the default (messages to stderr). Thread-safe.
void set_log_callback(LogCallback callback);
// Messages less severe than `level` are dropped before formatting reaches the callback.
// The default is kWarning.
void set_log_level(LogSeverity level) noexcept;
LogSeverity log_level() noexcept;
// True when a message of this severity would be delivered.
bool log_enabled(LogSeverity severity) noexcept;
// Sends a message to the callback if its severity passes the filter.
void log(LogSeverity severity, std::string_view message);

}  // namespace tensoracle
