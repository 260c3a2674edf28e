// tensoracle::list_checkpoint and convert_checkpoint: choosing the entry, flattening names, listing as JSON,
// planning shards, and writing every output file under a temporary name until all are complete.
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <random>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "convert/converter.hpp"
#include "convert/tensor_stream.hpp"
#include "convert/torch_checkpoint.hpp"
#include "core/posix_file.hpp"
#include "io/safetensors_layout.hpp"
#include "tensoracle/convert.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {
namespace {

using convert::Kind;
using convert::PickleObjects;
using convert::Ref;
using convert::TorchCheckpoint;

constexpr const char* kDefaultKeys[] = {"state_dict", "model", "module"};

// Walks of the object tree are bounded in depth and in the nodes visited (shared references could otherwise make a
// small pickle an exponentially large tree).
class Walk {
 public:
  explicit Walk(const TorchCheckpoint& checkpoint)
      : checkpoint_(checkpoint), budget_(4 * checkpoint.objects().size() + 1000) {}
  void enter(std::size_t depth) {
    if (depth > convert::kMaxDepth) {
      throw FormatError(
          fmt::format("{}: the object tree is nested deeper than {}", checkpoint_.source().name(), convert::kMaxDepth));
    }
    if (budget_-- == 0) {
      throw FormatError(
          fmt::format("{}: shared references make the object tree too large to walk", checkpoint_.source().name()));
    }
  }

 private:
  const TorchCheckpoint& checkpoint_;
  std::uint64_t budget_;
};

// A dict key as a name part; nullopt for keys that are not str, int or bool.
std::optional<std::string> key_text(const PickleObjects& objects, Ref key) {
  const convert::Value& v = objects[key];
  switch (v.kind) {
    case Kind::kString: return v.text;
    case Kind::kInt: return std::to_string(v.integer);
    case Kind::kBool: return std::string(v.flag ? "True" : "False");
    default: return std::nullopt;
  }
}

bool is_container(Kind kind) {
  return kind == Kind::kDict || kind == Kind::kList || kind == Kind::kTuple || kind == Kind::kSet;
}

// Children of a container: (name part, value); entries whose key can't be a name get no name.
std::vector<std::pair<std::optional<std::string>, Ref>> children(const PickleObjects& objects, Ref ref) {
  std::vector<std::pair<std::optional<std::string>, Ref>> out;
  const convert::Value& v = objects[ref];
  if (v.kind == Kind::kDict) {
    for (const auto& [k, value] : v.entries) out.emplace_back(key_text(objects, k), value);
  } else if (v.kind == Kind::kList || v.kind == Kind::kTuple) {
    for (std::size_t i = 0; i < v.items.size(); ++i) out.emplace_back(std::to_string(i), v.items[i]);
  }
  return out;  // sets: no names
}

class TensorPresence {
 public:
  explicit TensorPresence(const PickleObjects& objects) : objects_(objects), state_(objects.size(), 0) {}
  // True when a tensor is reachable from `ref` through names (dicts, lists, tuples).
  bool contains(Ref ref, std::size_t depth = 0) {
    if (objects_[ref].kind == Kind::kTensor) return true;
    if (!is_container(objects_[ref].kind)) return false;
    if (depth > convert::kMaxDepth) {
      throw FormatError(fmt::format("the checkpoint's object tree is nested deeper than {}", convert::kMaxDepth));
    }
    if (state_[ref] != 0) return state_[ref] == 2;  // 1: being visited (a cycle), 2: yes, 3: no
    state_[ref] = 1;
    bool found = false;
    for (const auto& [name, child] : children(objects_, ref)) {
      if (name && contains(child, depth + 1)) {
        found = true;
        break;
      }
    }
    state_[ref] = found ? 2 : 3;
    return found;
  }

 private:
  const PickleObjects& objects_;
  std::vector<std::uint8_t> state_;
};

std::string join_name(const std::string& prefix, const std::string& part) {
  return prefix.empty() ? part : prefix + "." + part;
}

struct Selection {
  Ref ref = 0;
  std::string key;  // the dotted path chosen ("" for the object itself)
};

bool flat_tensor_mapping(const PickleObjects& objects, Ref ref) {
  if (objects[ref].kind != Kind::kDict) return false;
  for (const auto& [k, v] : objects[ref].entries) {
    if (objects[v].kind != Kind::kTensor) return false;
  }
  return true;
}

std::optional<Ref> dict_get(const PickleObjects& objects, Ref dict, std::string_view key) {
  if (objects[dict].kind != Kind::kDict) return std::nullopt;
  for (const auto& [k, v] : objects[dict].entries) {
    if (objects[k].kind == Kind::kString && objects[k].text == key) return v;
  }
  return std::nullopt;
}

Selection default_selection(const TorchCheckpoint& checkpoint) {
  const PickleObjects& objects = checkpoint.objects();
  const Ref root = checkpoint.root();
  if (flat_tensor_mapping(objects, root)) return {root, ""};
  for (const char* key : kDefaultKeys) {
    if (auto v = dict_get(objects, root, key); v && objects[*v].kind == Kind::kDict) return {*v, key};
  }
  return {root, ""};
}

// Follows a dotted path; keys may themselves hold dots ("encoder.layer.0.weight"), so at each level the longest key
// that matches the path's start wins.
Selection select_key(const TorchCheckpoint& checkpoint, const std::string& path) {
  const PickleObjects& objects = checkpoint.objects();
  Ref ref = checkpoint.root();
  std::string_view rest = path;
  for (std::size_t depth = 0; !rest.empty(); ++depth) {
    if (depth > convert::kMaxDepth) break;
    std::optional<Ref> next;
    std::size_t best = 0;
    for (const auto& [name, child] : children(objects, ref)) {
      if (!name) continue;
      if ((rest == *name ||
           (rest.size() > name->size() && rest.substr(0, name->size()) == *name && rest[name->size()] == '.')) &&
          name->size() >= best) {
        best = name->size();
        next = child;
      }
    }
    if (!next) {
      throw NotFoundError(fmt::format("{}: no entry '{}' (the part '{}' is not found; --list shows the tree)",
                                      checkpoint.source().name(), path, rest));
    }
    ref = *next;
    rest = rest.size() == best ? std::string_view() : rest.substr(best + 1);
  }
  return {ref, path};
}

struct NamedTensor {
  std::string name;
  const convert::TensorRef* tensor;
};

void flatten(const TorchCheckpoint& checkpoint, Ref ref, const std::string& name, std::size_t depth, Walk& walk,
             TensorPresence& presence, std::vector<NamedTensor>& tensors, std::vector<SkippedEntry>& skipped) {
  walk.enter(depth);
  const PickleObjects& objects = checkpoint.objects();
  const convert::Value& v = objects[ref];
  if (v.kind == Kind::kTensor) {
    tensors.push_back({name, &v.tensor});
    return;
  }
  if (!is_container(v.kind) || !presence.contains(ref)) {
    skipped.push_back({name.empty() ? std::string("(the selected entry)") : name, std::string(objects.type_name(ref))});
    return;
  }
  const convert::Value* dict = v.kind == Kind::kDict ? &v : nullptr;
  std::size_t i = 0;
  for (const auto& [part, child] : children(objects, ref)) {
    if (!part) {
      skipped.push_back({join_name(name, fmt::format("<key of type {}>", objects.type_name(dict->entries[i].first))),
                         std::string(objects.type_name(child))});
    } else {
      flatten(checkpoint, child, join_name(name, *part), depth + 1, walk, presence, tensors, skipped);
    }
    ++i;
  }
}

nlohmann::ordered_json tensor_json(const convert::TensorRef& t) {
  nlohmann::ordered_json j;
  j["type"] = "tensor";
  j["dtype"] =
      t.dtype ? nlohmann::ordered_json(std::string(safetensors_name(*t.dtype))) : nlohmann::ordered_json(nullptr);
  j["torch_dtype"] = t.dtype_name;
  j["shape"] = t.shape;
  std::uint64_t numel = 1;
  for (std::int64_t d : t.shape) numel *= static_cast<std::uint64_t>(d);
  j["bytes"] = t.dtype ? nlohmann::ordered_json(numel * element_size(*t.dtype)) : nlohmann::ordered_json(nullptr);
  j["parameter"] = t.parameter;
  return j;
}

nlohmann::ordered_json node_json(const TorchCheckpoint& checkpoint, Ref ref, std::size_t depth, Walk& walk) {
  walk.enter(depth);
  const PickleObjects& objects = checkpoint.objects();
  const convert::Value& v = objects[ref];
  nlohmann::ordered_json j;
  switch (v.kind) {
    case Kind::kTensor: return tensor_json(v.tensor);
    case Kind::kDict: {
      j["type"] = "dict";
      nlohmann::ordered_json entries = nlohmann::ordered_json::object();
      for (const auto& [k, value] : v.entries) {
        std::string key = key_text(objects, k).value_or(fmt::format("<key of type {}>", objects.type_name(k)));
        entries[key] = node_json(checkpoint, value, depth + 1, walk);
      }
      j["entries"] = std::move(entries);
      return j;
    }
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kSet: {
      j["type"] = std::string(objects.type_name(ref));
      nlohmann::ordered_json items = nlohmann::ordered_json::array();
      for (Ref item : v.items) items.push_back(node_json(checkpoint, item, depth + 1, walk));
      j["items"] = std::move(items);
      return j;
    }
    default: break;
  }
  j["type"] = std::string(objects.type_name(ref));
  switch (v.kind) {
    case Kind::kNone: j["value"] = nullptr; break;
    case Kind::kBool: j["value"] = v.flag; break;
    case Kind::kInt: j["value"] = v.integer; break;
    case Kind::kFloat:
      if (std::isfinite(v.real)) {
        j["value"] = v.real;
      } else {
        j["value"] = std::isnan(v.real) ? "nan" : (v.real > 0 ? "inf" : "-inf");
      }
      break;
    case Kind::kString: j["value"] = v.text.size() <= 256 ? v.text : v.text.substr(0, 256) + "..."; break;
    case Kind::kBytes: j["bytes"] = v.text.size(); break;
    case Kind::kGlobal:
    case Kind::kObject: j["value"] = v.text; break;
    default: break;
  }
  return j;
}

// Files written under temporary names in the output's folder and renamed into place together by commit(); until
// then (and whenever an error escapes) nothing but the temporaries exists, and they are removed.
class PendingFiles {
 public:
  ~PendingFiles() {
    for (const auto& p : pending_) ::unlink(p.first.c_str());
  }
  PosixFile create(const std::filesystem::path& final_path) {
    std::filesystem::path directory = final_path.parent_path();
    if (directory.empty()) directory = ".";
    std::random_device random;
    std::filesystem::path temporary =
        directory / fmt::format(".{}.tmp-{}-{:08x}", final_path.filename().string(), ::getpid(), random());
    PosixFile file = PosixFile::create_exclusive(temporary, 0644);
    pending_.emplace_back(temporary, final_path);
    return file;
  }
  void commit() {
    for (const auto& [temporary, final_path] : pending_) {
      if (::rename(temporary.c_str(), final_path.c_str()) != 0) {
        throw IoError(fmt::format("{}: cannot rename {} into place: {}", final_path.string(), temporary.string(),
                                  errno_message(errno)));
      }
    }
    pending_.clear();
  }

 private:
  std::vector<std::pair<std::filesystem::path, std::filesystem::path>> pending_;
};

struct PlannedTensor {
  std::string name;
  const convert::TensorRef* tensor;
  DataType dtype;  // as written
  Dims shape;
  std::uint64_t bytes;
};

void write_shard(const TorchCheckpoint& checkpoint, const std::vector<const PlannedTensor*>& shard,
                 const std::optional<std::map<std::string, std::string>>& metadata, PosixFile& out) {
  std::vector<io::LayoutTensor> entries;
  for (const PlannedTensor* t : shard) entries.push_back({t->name, t->dtype, t->shape});
  const io::SafetensorsLayout layout = io::safetensors_layout(entries, metadata);
  const auto prefix = io::safetensors_length_prefix(layout.header.size());
  out.write_all(prefix.data(), prefix.size());
  out.write_all(layout.header.data(), layout.header.size());
  for (std::size_t index : layout.order) {
    const PlannedTensor& t = *shard[index];
    convert::stream_tensor(checkpoint, *t.tensor, t.dtype, out, t.name);
  }
  out.sync();
  out.close();
}

}  // namespace

std::uint64_t parse_byte_size(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string number = text.substr(0, i), unit;
  for (char c : text.substr(i)) {
    if (c != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},      {"b", 1},        {"kb", 1e3},        {"mb", 1e6},           {"gb", 1e9},
      {"tb", 1e12}, {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
      {"k", 1e3},   {"m", 1e6},      {"g", 1e9}};
  double scale = 0;
  for (const auto& [name, value] : kUnits) {
    if (unit == name) scale = value;
  }
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale == 0 || number.empty() || end != number.c_str() + number.size() || !(value > 0) ||
      value * scale >= 1.8e19 || value * scale < 1) {
    throw InvalidArgumentError(fmt::format(
        "'{}' is not a size: give a positive number of bytes with an optional unit (kB, MB, GB, TB or KiB, MiB, GiB, "
        "TiB), e.g. 5GiB",
        text));
  }
  return static_cast<std::uint64_t>(value * scale);
}

std::string convert::checkpoint_json(const TorchCheckpoint& checkpoint, const std::string& display) {
  Walk walk(checkpoint);
  const Selection selection = default_selection(checkpoint);
  nlohmann::ordered_json j;
  j["checkpoint"] = display;
  j["format"] = checkpoint.format();
  j["byteorder"] = checkpoint.big_endian() ? "big" : "little";
  j["default_key"] = selection.key;
  j["tree"] = node_json(checkpoint, checkpoint.root(), 0, walk);
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string list_checkpoint(const std::filesystem::path& path) {
  convert::FileSource source(path.string());
  return convert::checkpoint_json(*TorchCheckpoint::read(source), path.string());
}

ConvertSummary convert_checkpoint(const std::filesystem::path& path, const std::filesystem::path& output,
                                  const ConvertOptions& options) {
  if (options.dtype && *options.dtype != DataType::kF16 && *options.dtype != DataType::kBF16 &&
      *options.dtype != DataType::kF32) {
    throw InvalidArgumentError(
        fmt::format("convert: --dtype {} is not accepted (f16, bf16 or f32)", to_string(*options.dtype)));
  }
  if (output.filename().empty()) throw InvalidArgumentError("convert: the output path names no file");
  convert::FileSource source(path.string());
  auto checkpoint = TorchCheckpoint::read(source);
  const Selection selection =
      options.key.empty() ? default_selection(*checkpoint) : select_key(*checkpoint, options.key);

  ConvertSummary summary;
  std::vector<NamedTensor> named;
  Walk walk(*checkpoint);
  TensorPresence presence(checkpoint->objects());
  const bool lone_tensor = checkpoint->objects()[selection.ref].kind == Kind::kTensor;
  std::string base_name = lone_tensor ? (selection.key.empty() ? std::string("tensor") : selection.key) : std::string();
  flatten(*checkpoint, selection.ref, base_name, 0, walk, presence, named, summary.skipped);
  if (named.empty()) {
    throw InvalidArgumentError(
        fmt::format("{}: {} holds no tensors (--list shows the tree)", path.string(),
                    selection.key.empty() ? std::string("the checkpoint") : "'" + selection.key + "'"));
  }

  // Check everything before any file is created.
  std::vector<PlannedTensor> planned;
  std::map<std::string, std::string> storage_users;
  for (const NamedTensor& n : named) {
    const convert::TensorRef& t = *n.tensor;
    if (!t.dtype) {
      throw UnsupportedError(fmt::format("{}: tensor '{}' has dtype {}, which safetensors files can't hold here",
                                         path.string(), n.name, t.dtype_name));
    }
    const std::string& key = checkpoint->objects()[t.storage].storage.key;
    auto [it, first] = storage_users.emplace(key, n.name);
    if (!first && options.no_duplicates) {
      throw InvalidArgumentError(fmt::format(
          "{}: tensors '{}' and '{}' share storage '{}' (tied weights); without --no-duplicates each is written as "
          "its own copy",
          path.string(), it->second, n.name, key));
    }
    PlannedTensor p{n.name, &t, *t.dtype, Dims(t.shape), 0};
    if (options.dtype && is_floating_point(p.dtype)) p.dtype = *options.dtype;
    p.bytes = static_cast<std::uint64_t>(p.shape.volume()) * element_size(p.dtype);
    summary.total_bytes += p.bytes;
    planned.push_back(std::move(p));
  }
  {
    std::vector<io::LayoutTensor> all;
    for (const PlannedTensor& p : planned) all.push_back({p.name, p.dtype, p.shape});
    (void)io::safetensors_layout(all, options.metadata);  // names unique and valid before anything is written
  }

  // Shards as Hugging Face's split_torch_state_dict_into_shards makes them, in the checkpoint's order.
  std::vector<std::vector<const PlannedTensor*>> shards(1);
  std::uint64_t shard_size = 0;
  for (const PlannedTensor& p : planned) {
    if (options.max_shard_size != 0 && p.bytes > options.max_shard_size) {
      shards.insert(shards.end() - 1, std::vector<const PlannedTensor*>{&p});
      continue;
    }
    if (options.max_shard_size != 0 && shard_size + p.bytes > options.max_shard_size && !shards.back().empty()) {
      shards.emplace_back();
      shard_size = 0;
    }
    shards.back().push_back(&p);
    shard_size += p.bytes;
  }
  if (shards.back().empty()) shards.pop_back();

  PendingFiles pending;
  const std::filesystem::path directory = output.parent_path();
  std::string stem = output.filename().string();
  if (stem.size() > 12 && stem.substr(stem.size() - 12) == ".safetensors") stem.resize(stem.size() - 12);
  std::map<std::string, std::string> weight_map;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const std::string file_name = shards.size() == 1
                                      ? output.filename().string()
                                      : fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, s + 1, shards.size());
    const std::filesystem::path file_path = directory / file_name;
    PosixFile out = pending.create(file_path);
    write_shard(*checkpoint, shards[s], options.metadata, out);
    for (const PlannedTensor* p : shards[s]) weight_map[p->name] = file_name;
    summary.files.push_back(file_path);
  }
  if (shards.size() > 1) {
    nlohmann::json index;
    index["metadata"]["total_size"] = summary.total_bytes;
    index["weight_map"] = weight_map;
    const std::string text = index.dump(2, ' ', true) + "\n";
    const std::filesystem::path index_path = directory / (output.filename().string() + ".index.json");
    PosixFile out = pending.create(index_path);
    out.write_all(text.data(), text.size());
    out.sync();
    out.close();
    summary.files.push_back(index_path);
  }
  pending.commit();
  for (const PlannedTensor& p : planned) {
    summary.tensors.push_back({p.name, p.dtype, p.shape, p.bytes, weight_map[p.name]});
  }
  return summary;
}

}  // namespace tensoracle
