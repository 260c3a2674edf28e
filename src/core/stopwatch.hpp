// Stopwatch: milliseconds between laps, for the verbose messages that say where opening an engine spends its time.
#pragma once

#include <chrono>

namespace tensoracle {

class Stopwatch {
 public:
  // Milliseconds since the last lap (or construction), and starts the next lap.
  double lap_ms() {
    const Clock::time_point now = Clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    return ms;
  }

  // Milliseconds since the library was loaded (its static initialization, before the program's main): a common
  // origin for the verbose messages of work on several threads.
  static double since_library_load_ms();

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_ = Clock::now();
};

}  // namespace tensoracle
