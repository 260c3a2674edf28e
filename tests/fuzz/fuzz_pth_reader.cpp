// libFuzzer target for the PyTorch checkpoint reader (zip archive, legacy stream, restricted unpickler): arbitrary
// bytes must be rejected with tensoracle::Error or give a checkpoint whose tensors lie inside the input
// (check_pth_reader_input). CI runs it through scripts/fuzz.sh.
#include <cstdio>
#include <cstdlib>

#include "fuzz_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    tensoracle::fuzz::check_pth_reader_input(data, size);
  } catch (const tensoracle::fuzz::BrokenInvariant& e) {
    std::fprintf(stderr, "fuzz_pth_reader: %s\n", e.what());
    std::abort();
  }
  return 0;
}
