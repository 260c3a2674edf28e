// How the command's process ends: after GPU work, without CUDA's teardown (the driver frees what the process held).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string_view>

#include "commands.hpp"

namespace tensoracle::cli {
namespace {

bool gpu_started = false;

}  // namespace

void note_gpu_started() { gpu_started = true; }

int end_process(int status) {
  if (!gpu_started) return status;
  const char* teardown = std::getenv("TENSORACLE_EXIT_TEARDOWN");
  if (teardown != nullptr && std::string_view(teardown) == "1") return status;
  // Profilers and compute-sanitizer inject themselves through this variable and write their reports in the teardown.
  if (std::getenv("CUDA_INJECTION64_PATH") != nullptr) return status;
  // Every engine, context, buffer and file of the command was released and closed when its action returned; what is
  // left is CUDA's own teardown at exit (unloading modules, destroying the context: 9 ms of a BERT-base run's end on
  // an H100, docs/performance.md), which the driver does as well when the process ends. Only the standard streams may
  // still hold output.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(status);
}

}  // namespace tensoracle::cli
