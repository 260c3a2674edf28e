// Converting PyTorch checkpoints (.pt/.pth/.bin written by torch.save) to safetensors without PyTorch and without
// executing any of their pickle code: list_checkpoint and convert_checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"

namespace tensoracle {

// What to convert and how. The defaults convert the checkpoint's state dict as it is.
struct ConvertOptions {
  // A dotted path to the entry to convert ("model", "state_dict.encoder"); empty: the default choice (the object
  // itself when it is a flat mapping of tensors, else its `state_dict`, `model` or `module` entry, else everything).
  std::string key;
  // Casts every floating tensor (f64, f32, f16, bf16, f8) to this type (f16, bf16 or f32; rounding as PyTorch's
  // Tensor.to); integer and bool tensors are kept as they are.
  std::optional<DataType> dtype;
  // Added to the safetensors header's `__metadata__`; none: no `__metadata__`, as the official package writes.
  std::optional<std::map<std::string, std::string>> metadata;
  // When non-zero, tensors are split into shards of at most this many bytes (a larger tensor gets a shard of its
  // own), written as `<stem>-00001-of-0000N.safetensors` beside the output with `<output>.index.json`, in the order
  // and with the index of Hugging Face's save_pretrained. With one shard only the output file itself is written.
  std::uint64_t max_shard_size = 0;
  // Refuse (InvalidArgumentError) checkpoints in which two converted tensors share a storage (tied weights) instead
  // of writing each of them as its own copy.
  bool no_duplicates = false;
};

// One tensor written.
struct ConvertedTensor {
  std::string name;
  DataType dtype = DataType::kF32;  // as written (after --dtype)
  Dims shape;
  std::uint64_t byte_size = 0;
  std::string file;  // the file name it was written to (relative to the output's folder)
};

// One entry that was not a tensor and so was skipped (`type` as the listing names it: "int", "str", "list", ...).
struct SkippedEntry {
  std::string name;
  std::string type;
};

struct ConvertSummary {
  std::vector<ConvertedTensor> tensors;  // in the order of the checkpoint
  std::vector<SkippedEntry> skipped;
  std::vector<std::filesystem::path> files;  // every file written (shards, then the index)
  std::uint64_t total_bytes = 0;             // sum of the tensors' byte sizes
};

// The whole object tree of a checkpoint as JSON text (two-space indent): format ("zip" or "legacy"), byte order,
// the entry the default conversion takes, and every entry with its type; tensors with dtype, shape and byte size.
// Nothing but the pickle is read. Throws FormatError for damaged files or code in the pickle, IoError when the file
// can't be read, UnsupportedError for checkpoint features tensoracle does not convert.
std::string list_checkpoint(const std::filesystem::path& checkpoint);

// Converts the chosen entry of `checkpoint` to `output` (a .safetensors file, or its shards plus an index). The
// pickle is read and checked completely before anything is written; tensors are then streamed from the checkpoint
// to the output one at a time, so memory stays bounded by the largest tensor. Every file is written to a temporary
// name and renamed at the end: on any error nothing is left behind. Errors as list_checkpoint, plus
// InvalidArgumentError for bad options and IoError for the output.
ConvertSummary convert_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& output,
                                  const ConvertOptions& options = {});

// Parses a size such as "5GiB", "500MB", "1.5GB" or "4096" (bytes); decimal (kB, MB, GB, TB) and binary (KiB, MiB,
// GiB, TiB) units, case-insensitive, as Hugging Face's max_shard_size. InvalidArgumentError otherwise.
std::uint64_t parse_byte_size(const std::string& text);

}  // namespace tensoracle
