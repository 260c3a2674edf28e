// libFuzzer target for the safetensors reader: SafetensorsFile::from_bytes on arbitrary bytes must either throw
// tensoracle::Error or yield a file whose every view is safe to read (check_safetensors_reader_input).
//
// Anything other than tensoracle::Error escaping, a sanitizer report, or a broken invariant of a file that passed
// validation (abort() with a message) is a bug the fuzzer reports. CI runs it through scripts/fuzz.sh.
#include <cstdio>
#include <cstdlib>

#include "fuzz_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    tensoracle::fuzz::check_safetensors_reader_input(data, size);
  } catch (const tensoracle::fuzz::BrokenInvariant& e) {
    std::fprintf(stderr, "fuzz_safetensors_reader: %s\n", e.what());
    std::abort();
  }
  return 0;
}
