// libFuzzer target for engine bytes: Engine::deserialize on arbitrary bytes must throw tensoracle::Error or yield an
// engine whose contexts run (CPU engines) — never crash, hang or trip a sanitizer (check_engine_plan_input).
#include "fuzz_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensoracle::fuzz::check_engine_plan_input(data, size);
  return 0;
}
