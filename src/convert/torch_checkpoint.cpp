// Reading torch.save files: the zip archive (<top>/data.pkl, <top>/data/<key>, <top>/byteorder) and the legacy
// stream (magic number, protocol, sys info, object, storage keys, raw storages), storages located and checked.
#include "convert/torch_checkpoint.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "convert/zip_archive.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::convert {
namespace {

// The legacy format's magic number 0x1950a86a20f9469cfc6c, as pickle's LONG1 writes it (little-endian).
constexpr unsigned char kLegacyMagic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr std::int64_t kLegacyProtocol = 1001;

// Turns a persistent id ('storage', torch.<Type>Storage, key, location, numel[, view_metadata]) into a storage value.
Ref load_storage(PickleObjects& objects, Ref pid, const std::string& where, bool legacy) {
  const Value& tuple = objects[pid];
  if (tuple.kind != Kind::kTuple || tuple.items.size() < 5 || tuple.items.size() > 6 ||
      objects[tuple.items[0]].kind != Kind::kString || objects[tuple.items[0]].text != "storage") {
    throw FormatError(fmt::format("{}: a persistent id is not a storage reference", where));
  }
  const Value& type = objects[tuple.items[1]];
  const Value& key = objects[tuple.items[2]];
  const Value& numel = objects[tuple.items[4]];
  if (type.kind != Kind::kGlobal) throw FormatError(fmt::format("{}: a storage's type is not a class", where));
  const std::string_view type_name = std::string_view(type.text).substr(type.text.rfind('.') + 1);
  const StorageType* storage_type = find_storage_type(type_name);
  if (!storage_type) throw FormatError(fmt::format("{}: {} is not a storage type", where, type.text));
  if (key.kind != Kind::kString && key.kind != Kind::kInt)
    throw FormatError(fmt::format("{}: a storage key is not a string", where));
  if (numel.kind != Kind::kInt || numel.integer < 0) {
    throw FormatError(fmt::format("{}: a storage's size is not a non-negative int", where));
  }
  Value v;
  v.kind = Kind::kStorage;
  v.storage.key = key.kind == Kind::kString ? key.text : std::to_string(key.integer);
  v.storage.type_name = std::string(type_name);
  v.storage.element_size = storage_type->element_size;
  v.storage.dtype = storage_type->dtype;
  v.storage.numel = static_cast<std::uint64_t>(numel.integer);
  if (legacy && tuple.items.size() == 6 && objects[tuple.items[5]].kind == Kind::kTuple) {
    // A view of a root storage: (view_key, offset, view_size), in elements.
    const Value& view = objects[tuple.items[5]];
    if (view.items.size() != 3 || objects[view.items[0]].kind != Kind::kString ||
        objects[view.items[1]].kind != Kind::kInt || objects[view.items[2]].kind != Kind::kInt ||
        objects[view.items[1]].integer < 0 || objects[view.items[2]].integer < 0) {
      throw FormatError(fmt::format("{}: a storage view's metadata is damaged", where));
    }
    v.storage.view_offset = static_cast<std::uint64_t>(objects[view.items[1]].integer);
    v.storage.numel = static_cast<std::uint64_t>(objects[view.items[2]].integer);
  }
  if (v.storage.numel > (std::uint64_t{1} << 62) / v.storage.element_size) {
    throw FormatError(fmt::format("{}: storage '{}' claims {} elements", where, v.storage.key, v.storage.numel));
  }
  return objects.add(std::move(v));
}

}  // namespace

std::unique_ptr<TorchCheckpoint> TorchCheckpoint::read(const ByteSource& source) {
  std::unique_ptr<TorchCheckpoint> checkpoint(new TorchCheckpoint(source));
  unsigned char head[4] = {0, 0, 0, 0};
  if (source.size() >= 4) source.read(head, 4, 0, "file header");
  if (head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4) {
    checkpoint->read_zip();
  } else if (head[0] == 0x80) {
    checkpoint->read_legacy();
  } else {
    throw FormatError(fmt::format(
        "{}: not a PyTorch checkpoint (neither a torch.save zip archive nor the legacy pickle format)", source.name()));
  }
  checkpoint->check_tensors();
  return checkpoint;
}

void TorchCheckpoint::read_zip() {
  zip_ = true;
  const std::string& where = source_.name();
  ZipArchive archive(source_);
  // The top folder is whatever torch.save named it (the file's stem, "archive", ...): the one holding data.pkl.
  std::string top;
  int found = 0;
  for (const ZipEntry& e : archive.entries()) {
    const std::size_t slash = e.name.find('/');
    if (e.name == "data.pkl" || (slash != std::string::npos && e.name.substr(slash) == "/data.pkl")) {
      top = slash == std::string::npos ? std::string() : e.name.substr(0, slash + 1);
      ++found;
    }
  }
  if (found == 0)
    throw FormatError(fmt::format("{}: a zip archive without data.pkl is not a torch.save checkpoint", where));
  if (found > 1) throw FormatError(fmt::format("{}: the archive holds several data.pkl files", where));
  if (const ZipEntry* order = archive.find(top + "byteorder")) {
    std::string text = archive.read_small(*order, 64);
    if (text == "big") {
      big_endian_ = true;
    } else if (text != "little") {
      throw FormatError(fmt::format("{}: unknown byte order '{}'", where, text));
    }
  }
  const std::string pickle = archive.read_small(*archive.find(top + "data.pkl"), kMaxPickleSize);
  const std::string pickle_where = fmt::format("{} ({}data.pkl)", where, top);
  auto load = [&](PickleObjects& objects, Ref pid) {
    Ref r = load_storage(objects, pid, pickle_where, false);
    const StorageRef& s = objects[r].storage;
    const std::string entry_name = top + "data/" + s.key;
    const ZipEntry* entry = archive.find(entry_name);
    if (!entry) throw FormatError(fmt::format("{}: storage '{}' is missing (no entry {})", where, s.key, entry_name));
    if (entry->size < s.numel * s.element_size) {
      throw FormatError(fmt::format("{}: storage '{}' has {} bytes, fewer than its {} elements of {} need", where,
                                    s.key, entry->size, s.numel, s.type_name));
    }
    storages_[s.key] = {entry->data_offset, entry->size};
    return r;
  };
  std::size_t position = 0;
  root_ = read_pickle(pickle, &position, objects_, load, pickle_where);
}

void TorchCheckpoint::read_legacy() {
  const std::string& where = source_.name();
  // The pickles come first and their length is only known by reading them: read from a window of the file that
  // grows while a pickle runs past its end.
  std::uint64_t window = std::min<std::uint64_t>(source_.size(), std::uint64_t{1} << 20);
  for (;;) {
    std::string bytes(window, '\0');
    source_.read(bytes.data(), bytes.size(), 0, "legacy pickles");
    objects_ = PickleObjects();
    storages_.clear();
    try {
      std::size_t position = 0;
      auto no_storage = [&](PickleObjects&, Ref) -> Ref {
        throw FormatError(fmt::format("{}: a storage reference in the legacy header", where));
      };
      Ref magic = read_pickle(bytes, &position, objects_, no_storage, where);
      if (objects_[magic].kind != Kind::kBigInt || objects_[magic].text.size() != sizeof kLegacyMagic ||
          std::memcmp(objects_[magic].text.data(), kLegacyMagic, sizeof kLegacyMagic) != 0) {
        throw FormatError(fmt::format("{}: not a PyTorch checkpoint (no legacy magic number)", where));
      }
      Ref protocol = read_pickle(bytes, &position, objects_, no_storage, where);
      if (objects_[protocol].kind != Kind::kInt || objects_[protocol].integer != kLegacyProtocol) {
        throw FormatError(fmt::format("{}: unknown legacy protocol version", where));
      }
      Ref sys_info = read_pickle(bytes, &position, objects_, no_storage, where);
      if (objects_[sys_info].kind != Kind::kDict) throw FormatError(fmt::format("{}: damaged legacy sys info", where));
      auto load = [&](PickleObjects& objects, Ref pid) { return load_storage(objects, pid, where, true); };
      root_ = read_pickle(bytes, &position, objects_, load, where);
      Ref keys = read_pickle(bytes, &position, objects_, no_storage, where);
      if (objects_[keys].kind != Kind::kList)
        throw FormatError(fmt::format("{}: damaged legacy storage key list", where));
      // Element sizes of the storages by key, from the references in the object.
      std::map<std::string, std::size_t, std::less<>> element_sizes;
      for (Ref r = 0; r < objects_.size(); ++r) {
        if (objects_[r].kind == Kind::kStorage)
          element_sizes[objects_[r].storage.key] = objects_[r].storage.element_size;
      }
      // Then, for each key in order: the element count (8 bytes, little-endian, as torch writes and reads it) and the
      // raw elements, little-endian (torch converts on big-endian machines).
      std::uint64_t offset = position;
      for (Ref k : std::vector<Ref>(objects_[keys].items)) {
        if (objects_[k].kind != Kind::kString)
          throw FormatError(fmt::format("{}: a storage key is not a string", where));
        const std::string key = objects_[k].text;
        auto size_it = element_sizes.find(key);
        if (size_it == element_sizes.end()) {
          throw FormatError(fmt::format("{}: storage '{}' is listed but no tensor uses it", where, key));
        }
        unsigned char count_bytes[8];
        source_.read(count_bytes, 8, offset, "a legacy storage's size");
        std::uint64_t count = 0;
        for (int i = 7; i >= 0; --i) count = (count << 8) | count_bytes[i];
        offset += 8;
        if (count > source_.size() / size_it->second || !source_.contains(offset, count * size_it->second)) {
          throw FormatError(
              fmt::format("{}: storage '{}' ({} elements) runs past the end of the file", where, key, count));
        }
        if (!storages_.emplace(key, StorageBytes{offset, count * size_it->second}).second) {
          throw FormatError(fmt::format("{}: storage '{}' is listed twice", where, key));
        }
        offset += count * size_it->second;
      }
      big_endian_ = false;
      return;
    } catch (const PickleTruncatedError&) {
      const std::uint64_t limit = std::min<std::uint64_t>(source_.size(), kMaxPickleSize);
      if (window >= limit) throw;
      window = std::min(limit, window * 8);  // the pickle may have run past the window: read more and again
    }
  }
}

StorageBytes TorchCheckpoint::storage_bytes(const StorageRef& storage) const {
  auto it = storages_.find(storage.key);
  if (it == storages_.end()) {
    throw FormatError(fmt::format("{}: storage '{}' is missing", source_.name(), storage.key));
  }
  StorageBytes bytes = it->second;
  const std::uint64_t skip = storage.view_offset * storage.element_size;
  if (skip > bytes.size)
    throw FormatError(fmt::format("{}: storage view '{}' lies outside its storage", source_.name(), storage.key));
  bytes.offset += skip;
  bytes.size -= skip;
  return bytes;
}

void TorchCheckpoint::check_tensors() const {
  // Every storage referenced must exist and hold the elements its reference claims; the tensors were checked
  // against those counts when they were rebuilt.
  for (Ref r = 0; r < objects_.size(); ++r) {
    if (objects_[r].kind != Kind::kStorage) continue;
    const StorageRef& s = objects_[r].storage;
    const StorageBytes bytes = storage_bytes(s);
    if (bytes.size / s.element_size < s.numel) {
      throw FormatError(fmt::format("{}: storage '{}' has {} bytes, fewer than its {} elements of {} need",
                                    source_.name(), s.key, bytes.size, s.numel, s.type_name));
    }
  }
}

}  // namespace tensoracle::convert
