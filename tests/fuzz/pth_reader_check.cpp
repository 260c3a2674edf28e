// The check behind fuzz_pth_reader: a checkpoint read from arbitrary bytes (zip or legacy, pickle included) is
// rejected with tensoracle::Error, or every tensor it describes lies inside the input and its listing can be made.
#include <algorithm>
#include <string>
#include <vector>

#include "convert/byte_source.hpp"
#include "convert/converter.hpp"
#include "convert/torch_checkpoint.hpp"
#include "fuzz_checks.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::fuzz {

void check_pth_reader_input(const std::uint8_t* data, std::size_t size) {
  convert::MemorySource source(data, size, "fuzz-input");
  std::unique_ptr<convert::TorchCheckpoint> checkpoint;
  try {
    checkpoint = convert::TorchCheckpoint::read(source);
    (void)convert::checkpoint_json(*checkpoint, "fuzz-input");
  } catch (const Error&) {
    return;
  }
  const convert::PickleObjects& objects = checkpoint->objects();
  std::vector<unsigned char> buffer;
  for (convert::Ref r = 0; r < objects.size(); ++r) {
    if (objects[r].kind != convert::Kind::kTensor) continue;
    const convert::TensorRef& t = objects[r].tensor;
    if (objects[t.storage].kind != convert::Kind::kStorage) throw BrokenInvariant("a tensor's storage is not one");
    const convert::StorageBytes bytes = checkpoint->storage_bytes(objects[t.storage].storage);
    if (!source.contains(bytes.offset, bytes.size)) throw BrokenInvariant("a storage lies outside the input");
    std::uint64_t numel = 1, last = t.storage_offset;
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      numel *= static_cast<std::uint64_t>(t.shape[i]);
      if (t.shape[i] > 0) last += static_cast<std::uint64_t>(t.shape[i] - 1) * static_cast<std::uint64_t>(t.strides[i]);
    }
    if (numel == 0 || !t.dtype) continue;
    const std::uint64_t es = element_size(*t.dtype);
    if ((last + 1) * es > bytes.size) throw BrokenInvariant("an accepted tensor reaches past its storage");
    // Read the first and last element the tensor reaches, as the converter would.
    buffer.resize(es);
    source.read(buffer.data(), es, bytes.offset + t.storage_offset * es, "first element");
    source.read(buffer.data(), es, bytes.offset + last * es, "last element");
  }
}

}  // namespace tensoracle::fuzz
