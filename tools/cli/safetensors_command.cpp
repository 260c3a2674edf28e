// `tensoracle safetensors info`: validates safetensors files and prints their tensors and metadata as JSON.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/safetensors.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle::cli {
namespace {

struct InfoOptions {
  std::vector<std::string> files;
  bool sha256 = false;
};

// Hashes the tensor through its zero-copy view, with a progress line on a terminal for large files.
std::string tensor_sha256(const TensorView& view, bool show_progress, std::uint64_t& done, std::uint64_t total) {
  Sha256 hasher;
  constexpr std::uint64_t kChunk = std::uint64_t{64} << 20;
  for (std::uint64_t offset = 0; offset < view.byte_size(); offset += kChunk) {
    const std::uint64_t n = std::min(kChunk, view.byte_size() - offset);
    hasher.update(view.data + offset, n);
    done += n;
    if (show_progress) {
      std::fprintf(stderr, "\rhashing %s: %3.0f%%", view.file->path().c_str(),
                   100.0 * static_cast<double>(done) / static_cast<double>(total));
    }
  }
  return hasher.finish_hex();
}

nlohmann::ordered_json describe(const SafetensorsFile& file, bool with_sha256) {
  nlohmann::ordered_json out;
  out["path"] = file.path();
  out["file_size"] = file.file_size();
  out["header_size"] = file.header_size();
  out["metadata"] = file.has_metadata() ? nlohmann::ordered_json(file.metadata()) : nlohmann::ordered_json(nullptr);
  const bool show_progress = with_sha256 && ::isatty(STDERR_FILENO) && file.file_size() > (std::uint64_t{256} << 20);
  std::uint64_t done = 0;
  auto tensors = nlohmann::ordered_json::array();
  for (const TensorInfo& info : file.tensors()) {
    nlohmann::ordered_json t;
    t["name"] = info.name;
    t["dtype"] = std::string(safetensors_name(info.dtype));
    t["shape"] = info.shape.values();
    t["byte_size"] = info.byte_size();
    t["data_offsets"] = {info.data_begin, info.data_end};
    if (with_sha256) t["sha256"] = tensor_sha256(file.view(info), show_progress, done, file.file_size());
    tensors.push_back(std::move(t));
  }
  if (show_progress) std::fputs("\r\033[K", stderr);
  out["tensors"] = std::move(tensors);
  return out;
}

int run_info(const InfoOptions& options) {
  auto files = nlohmann::ordered_json::array();
  int failures = 0;
  for (const std::string& path : options.files) {
    try {
      auto file = SafetensorsFile::open(path);
      files.push_back(describe(*file, options.sha256));
    } catch (const Error& e) {
      std::cerr << "tensoracle: " << e.what() << "\n";
      ++failures;
    }
  }
  if (failures != 0) return kExitFailure;
  nlohmann::ordered_json out;
  out["files"] = std::move(files);
  std::cout << out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  return kExitOk;
}

}  // namespace

void add_safetensors_command(CLI::App& app, Action& action) {
  CLI::App* group = app.add_subcommand("safetensors", "Inspect safetensors weight files");
  group->require_subcommand(1);

  auto options = std::make_shared<InfoOptions>();
  CLI::App* info = group->add_subcommand(
      "info",
      "Validate safetensors files and print, as one JSON object, each file's metadata and tensors "
      "(name, dtype, shape, byte size, data offsets relative to the data section).");
  info->add_option("FILE", options->files, "safetensors files to describe")->required();
  info->add_flag("--sha256", options->sha256, "Also print the SHA-256 of each tensor's bytes");
  info->footer(
      "Every file is validated strictly (header length and JSON, dtypes, shapes, offsets without gaps or overlaps).\n"
      "Exit status: 0 all files valid; 1 a file could not be read or is invalid (the reason, naming the file, goes to\n"
      "stderr and nothing is printed on stdout); 2 invalid usage.");
  info->callback([&action, options] { action = [options] { return run_info(*options); }; });
}

}  // namespace tensoracle::cli
