// NumPy .npy reader: validates the magic, version, header literal, dtype, shape and data size before use.
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/bytes.hpp"
#include "core/posix_file.hpp"
#include "tensoracle/compare.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {
namespace {

// NumPy itself refuses headers over 10000 bytes unless told otherwise; a valid header for any
// shape we can hold is far smaller than this.
constexpr std::uint64_t kMaxHeaderLength = 1 << 20;
constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw FormatError(fmt::format("{}: invalid .npy file: {}", file, what));
}

// The descr strings NumPy writes for the supported dtypes (one-byte types also with '<' or '=').
std::optional<DataType> dtype_from_descr(std::string_view descr) {
  struct Entry {
    std::string_view code;
    DataType type;
  };
  static constexpr Entry kEntries[] = {{"f8", DataType::kF64}, {"f4", DataType::kF32}, {"f2", DataType::kF16},
                                       {"i8", DataType::kI64}, {"i4", DataType::kI32}, {"i2", DataType::kI16},
                                       {"i1", DataType::kI8},  {"u1", DataType::kU8},  {"b1", DataType::kBool}};
  if (descr.size() != 3) return std::nullopt;
  const char order = descr[0];
  const std::string_view code = descr.substr(1);
  for (const Entry& e : kEntries) {
    if (code != e.code) continue;
    if (order == '<') return e.type;
    if ((order == '|' || order == '=') && element_size(e.type) == 1) return e.type;
    return std::nullopt;
  }
  return std::nullopt;
}

// A parser for the one Python literal a .npy header holds:
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  void parse(std::string& descr, bool& fortran_order, std::vector<std::int64_t>& shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    skip_space();
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (have_descr) error("the header names 'descr' twice");
        if (peek() != '\'' && peek() != '"')
          fail(file_, "the dtype ('descr') is not a simple type string: structured arrays are not supported");
        descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_order) error("the header names 'fortran_order' twice");
        fortran_order = parse_bool();
        have_order = true;
      } else if (key == "shape") {
        if (have_shape) error("the header names 'shape' twice");
        shape = parse_shape();
        have_shape = true;
      } else {
        error(fmt::format("unexpected key '{}' in the header (only 'descr', 'fortran_order' and 'shape' are allowed)",
                          printable(key)));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') error("expected ',' or '}' in the header");
    }
    ++pos_;  // '}'
    skip_space();
    if (pos_ != text_.size()) error("unexpected characters after the header dictionary");
    if (!have_descr || !have_order || !have_shape)
      error("the header must hold the keys 'descr', 'fortran_order' and 'shape'");
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail(file_, fmt::format("malformed header at byte {} of the header: {}", pos_, what));
  }

  static std::string printable(std::string_view s) {
    std::string out;
    for (char ch : s.substr(0, 64)) out += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
    return out;
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void expect(char ch) {
    if (peek() != ch) error(fmt::format("expected '{}'", ch));
    ++pos_;
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }

  // A quoted string without escapes: that is all NumPy writes for keys and simple dtypes.
  std::string parse_string() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') error("expected a quoted string");
    ++pos_;
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\' || text_[pos_] == '\n') error("unsupported character in a string");
      ++pos_;
    }
    if (pos_ >= text_.size()) error("unterminated string");
    std::string value(text_.substr(begin, pos_ - begin));
    ++pos_;
    return value;
  }

  bool parse_bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    error("'fortran_order' must be True or False");
  }

  std::int64_t parse_int() {
    const std::size_t begin = pos_;
    std::int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_] - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) error("a dimension is too large");
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ == begin) error("expected a non-negative integer dimension");
    if (pos_ - begin > 1 && text_[begin] == '0') error("a dimension has a leading zero");
    return value;
  }

  // A Python tuple of ints: (), (3,), (2, 3) or (2, 3,). "(3)" is an int in Python, not a tuple.
  std::vector<std::int64_t> parse_shape() {
    std::vector<std::int64_t> dims;
    expect('(');
    bool trailing_comma = false;
    for (;;) {
      skip_space();
      if (peek() == ')') break;
      dims.push_back(parse_int());
      skip_space();
      trailing_comma = false;
      if (peek() == ',') {
        ++pos_;
        trailing_comma = true;
        continue;
      }
      if (peek() != ')') error("expected ',' or ')' in the shape");
    }
    ++pos_;
    if (dims.size() == 1 && !trailing_comma) error("the shape is not a tuple (a single dimension needs a comma)");
    if (dims.size() > 64) error("the shape has more than 64 dimensions");
    return dims;
  }

  std::string_view text_;
  const std::string& file_;
  std::size_t pos_ = 0;
};

// Reads a .npy from any source: `read_at(destination, size, offset)` reads exactly that range of a
// `file_size`-byte source (the caller has checked that it lies inside).
using ReadAt = std::function<void(void*, std::size_t, std::uint64_t)>;

HostTensor read_npy_from(const ReadAt& read_at, std::uint64_t file_size, const std::string& file) {
  if (file_size < 10) fail(file, fmt::format("the file is {} bytes, shorter than the 10-byte preamble", file_size));
  unsigned char preamble[12] = {};
  read_at(preamble, static_cast<std::size_t>(std::min<std::uint64_t>(file_size, 12)), 0);
  if (std::memcmp(preamble, kMagic, kMagicSize) != 0) fail(file, "the file does not start with the magic \\x93NUMPY");
  const unsigned major = preamble[6], minor = preamble[7];
  if ((major < 1 || major > 3) || minor != 0)
    fail(file, fmt::format("format version {}.{} is not supported (1.0, 2.0 and 3.0 are)", major, minor));
  std::uint64_t header_length = 0, header_start = 0;
  if (major == 1) {
    header_length = preamble[8] | (static_cast<std::uint64_t>(preamble[9]) << 8);
    header_start = 10;
  } else {
    if (file_size < 12) fail(file, fmt::format("the file is {} bytes, shorter than the 12-byte preamble", file_size));
    header_length = preamble[8] | (static_cast<std::uint64_t>(preamble[9]) << 8) |
                    (static_cast<std::uint64_t>(preamble[10]) << 16) | (static_cast<std::uint64_t>(preamble[11]) << 24);
    header_start = 12;
  }
  if (header_length > kMaxHeaderLength)
    fail(file, fmt::format("the header length {} is over the limit of {} bytes", header_length, kMaxHeaderLength));
  if (header_length > file_size - header_start)
    fail(file, fmt::format("the header length {} runs past the end of the file ({} bytes)", header_length, file_size));
  std::string header(static_cast<std::size_t>(header_length), '\0');
  read_at(header.data(), header.size(), header_start);

  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> dims;
  HeaderParser(header, file).parse(descr, fortran_order, dims);

  const std::optional<DataType> dtype = dtype_from_descr(descr);
  if (!dtype) {
    std::string why;
    if (!descr.empty() && descr[0] == '>')
      why = "big-endian data is not supported";
    else if (descr.find('O') != std::string::npos)
      why = "object arrays are not supported";
    else
      why = "only <f8 <f4 <f2 |i1 <i2 <i4 <i8 |u1 |b1 are supported";
    std::string shown;
    for (char ch : descr.substr(0, 32)) shown += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
    fail(file, fmt::format("dtype '{}': {}", shown, why));
  }
  if (fortran_order) fail(file, "Fortran-order arrays are not supported (save a C-contiguous array)");

  const Dims shape(dims);
  std::int64_t volume = 0;
  try {
    volume = shape.volume();
  } catch (const InvalidArgumentError&) {
    fail(file, fmt::format("shape {} has more elements than can be counted", shape.to_string()));
  }
  const std::uint64_t data_start = header_start + header_length;
  const std::uint64_t available = file_size - data_start;
  const std::uint64_t elem = element_size(*dtype);
  if (static_cast<std::uint64_t>(volume) > available / elem || static_cast<std::uint64_t>(volume) * elem != available) {
    fail(file,
         fmt::format("shape {} of {} needs {} data bytes but the file holds {}", shape.to_string(), to_string(*dtype),
                     static_cast<std::uint64_t>(volume) > std::numeric_limits<std::uint64_t>::max() / elem
                         ? std::string("more than 2^64")
                         : std::to_string(static_cast<std::uint64_t>(volume) * elem),
                     available));
  }
  HostTensor tensor;
  tensor.dtype = *dtype;
  tensor.shape = shape;
  tensor.bytes.resize(static_cast<std::size_t>(available));
  if (available > 0) read_at(tensor.bytes.data(), tensor.bytes.size(), data_start);
  return tensor;
}

}  // namespace

HostTensor read_npy(const std::filesystem::path& path) {
  const PosixFile file = PosixFile::open_read(path);
  return read_npy_from([&file](void* destination, std::size_t size,
                               std::uint64_t offset) { file.read_exact(destination, size, offset); },
                       file.size(), file.path());
}

HostTensor parse_npy(const void* data, std::size_t size, const std::string& display_name) {
  const auto* bytes = static_cast<const std::byte*>(data);
  return read_npy_from([bytes](void* destination, std::size_t count,
                               std::uint64_t offset) { copy_bytes(destination, bytes + offset, count); },
                       size, display_name);
}

}  // namespace tensoracle
