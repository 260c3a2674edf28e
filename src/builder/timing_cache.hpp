// The builder's timing cache: the kernel each timed problem chose, kept for one build (identical layers are timed
// once) and, with BuilderConfig::timing_cache, in a JSON file shared by builds and machines with the same GPU model,
// library versions and tensoracle version (docs/building.md).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/graph.hpp"
#include "tensoracle/builder.hpp"

namespace tensoracle::builder {

class TimingCache {
 public:
  // An empty cache for a target as the backend describes it (describe_target: GPU model, compute capability,
  // library versions).
  explicit TimingCache(nlohmann::json target);

  // Adds the entries of the file at `path`; a missing file adds nothing. A file that is not a timing cache, is
  // damaged, or was written for another GPU model or other library or tensoracle versions adds nothing either: a
  // warning names the file and what differs (save() then replaces it).
  void load(const std::filesystem::path& path);
  // Writes every entry, merged with what the file holds by then (when it is valid for the same target), atomically:
  // readers see the old file or the new one. IoError when it can't be written.
  void save(const std::filesystem::path& path) const;

  // What identifies one timing: the op, its attributes, every input's and output's dtype and shape at the timed
  // shapes, the precision and the candidates in order.
  static std::string problem_key(const graph::Graph& graph, const graph::Layer& layer, const std::vector<Dims>& shapes,
                                 const std::vector<std::string>& candidates, Precision precision);

  // The kernel a problem chose, if known, and whether that choice came from the file.
  struct Choice {
    std::string kernel;
    bool from_file = false;
  };
  std::optional<Choice> find(const std::string& key) const;
  void insert(const std::string& key, const std::string& kernel);
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  // The target identity a file must match, and the entries of a valid file; nullopt (with `why`) otherwise.
  nlohmann::json identity() const;
  std::optional<std::map<std::string, std::string>> read_entries(const std::filesystem::path& path,
                                                                 std::string* why) const;

  nlohmann::json target_;
  std::map<std::string, Choice> entries_;  // problem key -> chosen kernel
};

}  // namespace tensoracle::builder
