// SafetensorsFile: maps a safetensors file and validates every rule of the format before use.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/bytes.hpp"
#include "core/posix_file.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {
namespace {

using Json = nlohmann::json;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw FormatError(fmt::format("{}: invalid safetensors file: {}", file, what));
}

[[noreturn]] void fail_tensor(const std::string& file, const std::string& tensor, const std::string& what) {
  throw FormatError(fmt::format("{}: invalid safetensors file: tensor '{}': {}", file, tensor, what));
}

// A valid header nests at most three levels (header, tensor entry, shape list); deeper input is
// rejected while parsing so that nothing recursive ever walks an attacker's nesting depth.
constexpr int kMaxHeaderDepth = 16;

// A short description of a JSON value for messages: scalars (cut to 64 characters) or the type name.
std::string describe(const Json& value) {
  if (value.is_array()) return "a list";
  if (value.is_object()) return "an object";
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

// Parses the header, rejecting duplicate keys in any object (nlohmann would keep the last one).
Json parse_header_json(std::string_view text, const std::string& file) {
  // nlohmann's lexer takes a NUL byte for the end of input; a raw NUL is never valid JSON.
  if (text.find('\0') != std::string_view::npos)
    fail(file, "the header is not valid UTF-8 JSON (it contains a NUL byte)");
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > kMaxHeaderDepth)
      fail(file, fmt::format("the header nests JSON more than {} levels deep", kMaxHeaderDepth));
    switch (event) {
      case Json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    fail(file, fmt::format("the header is not valid UTF-8 JSON ({})", e.what()));
  }
  if (!duplicate.empty()) fail(file, fmt::format("the header names '{}' more than once", duplicate));
  return header;
}

std::uint64_t get_unsigned(const Json& value, const std::string& file, const std::string& tensor, const char* field) {
  if (!value.is_number_unsigned()) {
    fail_tensor(file, tensor, fmt::format("{} must hold non-negative integers, found {}", field, describe(value)));
  }
  return value.get<std::uint64_t>();
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (mapped_ && base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  PosixFile posix = PosixFile::open_read(path);
  file->path_ = path.string();
  file->size_ = posix.size();
  if (file->size_ < 8) {
    fail(file->path_, fmt::format("the file has {} bytes, fewer than the 8-byte header length", file->size_));
  }
  void* map = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, posix.fd(), 0);
  if (map == MAP_FAILED) throw IoError(fmt::format("{}: cannot map the file: {}", file->path_, errno_message(errno)));
  file->base_ = static_cast<const std::byte*>(map);
  file->mapped_ = true;
  file->fd_ = ::dup(posix.fd());
  if (file->fd_ < 0)
    throw IoError(fmt::format("{}: cannot duplicate descriptor: {}", file->path_, errno_message(errno)));
  file->parse_header();
  return file;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::from_bytes(const void* data, std::size_t size,
                                                                   std::string display_name) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = std::move(display_name);
  file->base_ = static_cast<const std::byte*>(data);
  file->size_ = size;
  if (size < 8) fail(file->path_, fmt::format("the file has {} bytes, fewer than the 8-byte header length", size));
  file->parse_header();
  return file;
}

void SafetensorsFile::parse_header() {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(base_[i]);
  if (n > kMaxHeaderSize) {
    fail(path_, fmt::format("the header length is {} bytes, over the limit of {} bytes", n, kMaxHeaderSize));
  }
  if (n > size_ - 8) {
    fail(path_, fmt::format("the header length {} runs past the end of the file ({} bytes after the length field)", n,
                            size_ - 8));
  }
  header_size_ = n;
  std::string_view text(reinterpret_cast<const char*>(base_ + 8), n);
  if (text.empty() || text.front() != '{') fail(path_, "the header does not start with '{' (not a JSON object)");
  Json header = parse_header_json(text, path_);
  if (!header.is_object()) fail(path_, "the header is not a JSON object");

  const std::uint64_t data_size = size_ - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) fail(path_, "__metadata__ must be an object mapping strings to strings");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string()) {
          fail(path_, fmt::format("__metadata__ must map strings to strings, but '{}' holds {}", m.key(),
                                  describe(m.value())));
        }
        metadata_.emplace(m.key(), m.value().get<std::string>());
      }
      has_metadata_ = true;
      continue;
    }
    if (!value.is_object()) fail_tensor(path_, name, "its entry is not an object");
    for (auto field = value.begin(); field != value.end(); ++field) {
      if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets") {
        fail_tensor(path_, name, fmt::format("unknown field '{}' (expected dtype, shape, data_offsets)", field.key()));
      }
    }
    for (const char* required : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(required)) fail_tensor(path_, name, fmt::format("missing field '{}'", required));
    }
    TensorInfo info;
    info.name = name;
    const Json& dtype = value["dtype"];
    if (!dtype.is_string()) fail_tensor(path_, name, "dtype must be a string");
    auto type = data_type_from_safetensors_name(dtype.get<std::string>());
    if (!type) {
      fail_tensor(
          path_, name,
          fmt::format("unknown or unsupported dtype '{}' (supported: F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, "
                      "I32, I16, I8, U8, BOOL)",
                      dtype.get<std::string>()));
    }
    info.dtype = *type;
    const Json& shape = value["shape"];
    if (!shape.is_array()) fail_tensor(path_, name, "shape must be an array");
    std::vector<std::int64_t> dims;
    std::uint64_t elements = 1;
    bool overflow = false;
    for (const Json& d : shape) {
      std::uint64_t dim = get_unsigned(d, path_, name, "shape");
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail_tensor(path_, name, fmt::format("shape dimension {} is too large", dim));
      }
      overflow = overflow || __builtin_mul_overflow(elements, dim, &elements);
      dims.push_back(static_cast<std::int64_t>(dim));
    }
    info.shape = Dims(std::move(dims));
    std::uint64_t bytes = 0;
    if (overflow || __builtin_mul_overflow(elements, element_size(info.dtype), &bytes)) {
      fail_tensor(path_, name, fmt::format("shape {} overflows the byte size", info.shape.to_string()));
    }
    const Json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2)
      fail_tensor(path_, name, "data_offsets must be an array of two integers");
    info.data_begin = get_unsigned(offsets[0], path_, name, "data_offsets");
    info.data_end = get_unsigned(offsets[1], path_, name, "data_offsets");
    if (info.data_end < info.data_begin) {
      fail_tensor(path_, name,
                  fmt::format("data_offsets [{},{}] end before they begin", info.data_begin, info.data_end));
    }
    if (info.data_end > data_size) {
      fail_tensor(path_, name,
                  fmt::format("data_offsets [{},{}] run past the end of the file (the data section has {} bytes)",
                              info.data_begin, info.data_end, data_size));
    }
    if (info.data_end - info.data_begin != bytes) {
      fail_tensor(path_, name,
                  fmt::format("data_offsets [{},{}] cover {} bytes but dtype {} and shape {} need {}", info.data_begin,
                              info.data_end, info.data_end - info.data_begin, dtype.get<std::string>(),
                              info.shape.to_string(), bytes));
    }
    tensors_.push_back(std::move(info));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.data_begin != b.data_begin) return a.data_begin < b.data_begin;
    if (a.data_end != b.data_end) return a.data_end < b.data_end;
    return a.name < b.name;
  });
  std::uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& info : tensors_) {
    if (info.data_begin > expected) {
      fail_tensor(
          path_, info.name,
          fmt::format("data_offsets [{},{}] leave a gap: the previous tensor{} ends at {}", info.data_begin,
                      info.data_end, previous ? fmt::format(" '{}'", previous->name) : std::string(), expected));
    }
    if (info.data_begin < expected) {
      fail_tensor(path_, info.name,
                  fmt::format("data_offsets [{},{}] overlap tensor '{}', which ends at {}", info.data_begin,
                              info.data_end, previous->name, expected));
    }
    expected = info.data_end;
    previous = &info;
  }
  if (expected != data_size) {
    fail(path_, fmt::format("the tensors cover {} bytes of data but the file holds {} bytes after the header", expected,
                            data_size));
  }
  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const noexcept {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

TensorView SafetensorsFile::get(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) throw NotFoundError(fmt::format("{}: no tensor named '{}'", path_, name));
  return view(*info);
}

TensorView SafetensorsFile::view(const TensorInfo& info) const {
  return TensorView{&info, base_ + data_start() + info.data_begin, shared_from_this()};
}

void SafetensorsFile::read(const TensorInfo& info, void* destination) const {
  if (fd_ < 0) {
    copy_bytes(destination, base_ + data_start() + info.data_begin, info.byte_size());
    return;
  }
  auto* out = static_cast<std::byte*>(destination);
  std::uint64_t done = 0;
  const std::uint64_t total = info.byte_size();
  while (done < total) {
    std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(total - done, std::uint64_t{1} << 30));
    ssize_t got = ::pread(fd_, out + done, chunk, static_cast<off_t>(data_start() + info.data_begin + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw IoError(fmt::format("{}: reading tensor '{}' failed: {}", path_, info.name,
                                got < 0 ? errno_message(errno) : std::string("the file was truncated")));
    }
    done += static_cast<std::uint64_t>(got);
  }
}

}  // namespace tensoracle
