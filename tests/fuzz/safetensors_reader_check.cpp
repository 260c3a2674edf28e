// check_safetensors_reader_input: what fuzz_safetensors_reader and the regression tests assert of the reader.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fuzz_checks.hpp"
#include "tensoracle/data_type.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle::fuzz {
namespace {

[[noreturn]] void invariant_broken(const char* what, const std::string& tensor) {
  throw BrokenInvariant(std::string("a validated safetensors file breaks an invariant: ") + what + " (tensor '" +
                        tensor + "')");
}

// Keeps the compiler from dropping the reads.
volatile std::uint64_t g_sink = 0;

}  // namespace

void check_safetensors_reader_input(const std::uint8_t* data, std::size_t size) {
  std::shared_ptr<const SafetensorsFile> file;
  try {
    file = SafetensorsFile::from_bytes(data, size, "fuzz-input");
  } catch (const Error&) {
    return;  // rejected cleanly
  }

  std::uint64_t checksum = file->header_size();
  if (file->data_start() > size) invariant_broken("data_start() past the end of the input", "");
  const std::uint64_t data_size = size - file->data_start();
  std::uint64_t expected_begin = 0;
  std::set<std::string> names;
  std::vector<std::byte> buffer;
  for (const TensorInfo& info : file->tensors()) {
    // What validation promises: contiguous, in-bounds byte ranges of the size dtype x shape needs.
    if (!names.insert(info.name).second) invariant_broken("duplicate name", info.name);
    if (info.data_begin != expected_begin) invariant_broken("gap or overlap", info.name);
    if (info.data_end < info.data_begin || info.data_end > data_size)
      invariant_broken("out-of-bounds offsets", info.name);
    expected_begin = info.data_end;
    if (!info.shape.is_static()) invariant_broken("dynamic shape", info.name);
    std::uint64_t elements = 1;
    bool overflow = false;
    for (std::int64_t d : info.shape)
      overflow = overflow || __builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements);
    if (!overflow && elements != 0 && info.byte_size() / element_size(info.dtype) != elements) {
      invariant_broken("byte size disagrees with dtype x shape", info.name);
    }
    if (file->find(info.name) != &info) invariant_broken("find() doesn't return the tensor", info.name);

    // Touch every byte through the view and through read(); both must agree. A zero-size tensor reads into an
    // empty vector, whose data() is null: read() must accept that.
    const TensorView view = file->get(info.name);
    if (view.data != reinterpret_cast<const std::byte*>(data) + file->data_start() + info.data_begin) {
      invariant_broken("view outside the input", info.name);
    }
    buffer.assign(static_cast<std::size_t>(info.byte_size()), std::byte{0});
    file->read(info, buffer.data());
    if (!buffer.empty() && std::memcmp(buffer.data(), view.data, buffer.size()) != 0)
      invariant_broken("read() differs from the view", info.name);
    for (std::byte b : buffer) checksum = checksum * 31 + static_cast<std::uint8_t>(b);
    checksum += static_cast<std::uint64_t>(info.dtype) + static_cast<std::uint64_t>(info.shape.rank());
  }
  if (expected_begin != data_size) invariant_broken("the tensors don't cover the data section", "");
  for (const auto& [key, value] : file->metadata()) checksum += key.size() * 7 + value.size();
  if (!file->has_metadata() && !file->metadata().empty()) invariant_broken("metadata without has_metadata()", "");
  g_sink = checksum;
}

}  // namespace tensoracle::fuzz
