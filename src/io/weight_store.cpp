// WeightStore: several safetensors files, and sharded checkpoints through their index JSON, as one set of named
// tensors.
#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tensoracle/error.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {
namespace {

bool is_index_file(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  return name.size() > 5 && name.ends_with(".json");
}

struct ShardIndex {
  std::vector<std::filesystem::path> shards;  // in first-mention order
  std::map<std::string, std::filesystem::path> weight_map;
};

ShardIndex read_index(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open the checkpoint index", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: the checkpoint index is not valid JSON ({})", path.string(), e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw FormatError(fmt::format("{}: the checkpoint index has no 'weight_map' object", path.string()));
  }
  ShardIndex result;
  const auto directory = path.parent_path();
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      throw FormatError(fmt::format("{}: weight_map entry '{}' must name a file", path.string(), it.key()));
    }
    const std::filesystem::path shard_name = it.value().get<std::string>();
    if (shard_name.empty() || shard_name.is_absolute() || shard_name.filename() != shard_name) {
      throw FormatError(fmt::format("{}: weight_map entry '{}' names '{}', which is not a file name beside the index",
                                    path.string(), it.key(), shard_name.string()));
    }
    auto shard = directory / shard_name;
    if (std::find(result.shards.begin(), result.shards.end(), shard) == result.shards.end())
      result.shards.push_back(shard);
    result.weight_map.emplace(it.key(), shard);
  }
  return result;
}

}  // namespace

WeightStore WeightStore::open(const std::vector<std::filesystem::path>& paths) {
  WeightStore store;
  std::vector<ShardIndex> indexes;
  std::vector<std::filesystem::path> files;
  for (const auto& path : paths) {
    if (is_index_file(path)) {
      indexes.push_back(read_index(path));
      for (const auto& shard : indexes.back().shards) files.push_back(shard);
    } else {
      files.push_back(path);
    }
  }
  for (const auto& path : files) {
    auto file = SafetensorsFile::open(path);
    const std::size_t file_index = store.files_.size();
    for (const TensorInfo& info : file->tensors()) {
      auto [it, inserted] = store.index_.emplace(info.name, std::make_pair(file_index, &info));
      if (!inserted) {
        throw FormatError(
            fmt::format("tensor '{}' is in both {} and {}; each tensor name must be unique across the weight files",
                        info.name, store.files_[it->second.first]->path(), file->path()));
      }
    }
    store.files_.push_back(std::move(file));
  }
  for (std::size_t i = 0; i < indexes.size(); ++i) {
    for (const auto& [name, shard] : indexes[i].weight_map) {
      auto it = store.index_.find(name);
      if (it == store.index_.end() || store.files_[it->second.first]->path() != shard.string()) {
        throw FormatError(fmt::format("{}: the index places tensor '{}' in it, but the file has no such tensor",
                                      shard.string(), name));
      }
    }
  }
  return store;
}

bool WeightStore::contains(std::string_view name) const noexcept { return index_.find(name) != index_.end(); }

TensorView WeightStore::get(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    std::vector<std::string> searched;
    for (const auto& f : files_) searched.push_back(f->path());
    throw NotFoundError(fmt::format("no tensor named '{}' in the weight files ({})", name, fmt::join(searched, ", ")));
  }
  return files_[it->second.first]->view(*it->second.second);
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, where] : index_) out.push_back(name);
  return out;
}

}  // namespace tensoracle
