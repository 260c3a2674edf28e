// Test helper for the Python compatibility tests: reads a safetensors file with SafetensorsFile and writes it back with
// write_safetensors.
//
// Usage: safetensors_rewrite IN OUT [--drop-metadata]
// Every tensor of IN is written to OUT, with IN's metadata when it has some (an empty
// `__metadata__` stays an empty one) unless --drop-metadata is given. Exit 0 on success; 1 with a
// message on stderr for any error (wrong command line, IN unreadable or invalid, OUT unwritable).
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/error.hpp"
#include "tensoracle/safetensors.hpp"

namespace {

int usage() {
  std::cerr << "usage: safetensors_rewrite IN OUT [--drop-metadata]\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  bool drop_metadata = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--drop-metadata") {
      drop_metadata = true;
    } else if (arg.size() > 1 && arg.front() == '-') {
      std::cerr << "safetensors_rewrite: unknown option '" << arg << "'\n";
      return usage();
    } else {
      positional.emplace_back(arg);
    }
  }
  if (positional.size() != 2) return usage();

  try {
    std::shared_ptr<const tensoracle::SafetensorsFile> file = tensoracle::SafetensorsFile::open(positional[0]);
    std::vector<tensoracle::TensorToWrite> tensors;
    tensors.reserve(file->tensors().size());
    for (const tensoracle::TensorInfo& info : file->tensors()) {
      // The views keep pointing into the mapping, which `file` keeps alive until the write is done.
      tensors.push_back({info.name, info.dtype, info.shape, file->view(info).data});
    }
    std::optional<std::map<std::string, std::string>> metadata;
    if (file->has_metadata() && !drop_metadata) metadata = file->metadata();
    tensoracle::write_safetensors(positional[1], tensors, metadata);
  } catch (const std::exception& e) {
    std::cerr << "safetensors_rewrite: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
