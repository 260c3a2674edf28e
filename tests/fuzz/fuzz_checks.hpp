// The checks behind the libFuzzer targets, shared with the unit tests that replay committed regression inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tensoracle::fuzz {

// A file that passed validation broke a promise the reader makes (a bug, not a rejected input).
class BrokenInvariant : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// SafetensorsFile::from_bytes on arbitrary bytes must throw tensoracle::Error or give a file whose views and read()
// agree and stay inside the input. Throws BrokenInvariant otherwise; any other exception escaping is a bug too.
void check_safetensors_reader_input(const std::uint8_t* data, std::size_t size);

// Engine::deserialize on arbitrary bytes must throw tensoracle::Error or give an engine whose contexts run (CPU
// engines, small ones). Any exception other than tensoracle::Error escaping is a bug.
void check_engine_plan_input(const std::uint8_t* data, std::size_t size);

// A PyTorch checkpoint read from arbitrary bytes (convert::TorchCheckpoint over memory) must throw tensoracle::Error
// or describe only tensors inside the input, and list as JSON.
void check_pth_reader_input(const std::uint8_t* data, std::size_t size);

}  // namespace tensoracle::fuzz
