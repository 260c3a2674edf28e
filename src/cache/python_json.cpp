// Writers that reproduce Python's json.dumps byte for byte, and a parser with a nesting limit.
#include "cache/python_json.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "core/utf8.hpp"

namespace tensoracle::cache_json {
namespace {

void append_u_escape(std::string& out, std::uint32_t unit) { out += fmt::format("\\u{:04x}", unit); }

void append_string(std::string& out, std::string_view s) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          // ensure_ascii escapes everything outside ' '..'~', DEL included.
          if (c < 0x20 || c == 0x7F) {
            append_u_escape(out, c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    std::uint32_t cp = 0;
    const std::size_t length = decode_utf8(s, i, cp);
    if (length == 0) {
      // What Python holds for an undecodable byte after os.fsdecode (surrogateescape).
      append_u_escape(out, 0xDC00u + c);
      ++i;
      continue;
    }
    if (cp >= 0x10000) {
      const std::uint32_t v = cp - 0x10000;
      append_u_escape(out, 0xD800u + (v >> 10));
      append_u_escape(out, 0xDC00u + (v & 0x3FFu));
    } else {
      append_u_escape(out, cp);
    }
    i += length;
  }
  out += '"';
}

template <typename Json>
void append_scalar(std::string& out, const Json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null: out += "null"; break;
    case nlohmann::json::value_t::boolean: out += value.template get<bool>() ? "true" : "false"; break;
    case nlohmann::json::value_t::number_integer: out += std::to_string(value.template get<std::int64_t>()); break;
    case nlohmann::json::value_t::number_unsigned: out += std::to_string(value.template get<std::uint64_t>()); break;
    case nlohmann::json::value_t::number_float: out += float_repr(value.template get<double>()); break;
    case nlohmann::json::value_t::string: append_string(out, value.template get_ref<const std::string&>()); break;
    default: out += "null"; break;  // binary / discarded never come from parse()
  }
}

void append_canonical(std::string& out, const nlohmann::json& value) {
  if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, item] : value.items()) {  // std::map: sorted by bytes == by code point
      if (!first) out += ',';
      first = false;
      append_string(out, key);
      out += ':';
      append_canonical(out, item);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& item : value) {
      if (!first) out += ',';
      first = false;
      append_canonical(out, item);
    }
    out += ']';
  } else {
    append_scalar(out, value);
  }
}

void append_indented(std::string& out, const nlohmann::ordered_json& value, int indent, int level) {
  const auto newline = [&](int depth) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(depth), ' ');
  };
  if (value.is_object()) {
    if (value.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      if (!first) out += ',';
      first = false;
      newline(level + 1);
      append_string(out, key);
      out += ": ";
      append_indented(out, item, indent, level + 1);
    }
    newline(level);
    out += '}';
  } else if (value.is_array()) {
    if (value.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    bool first = true;
    for (const auto& item : value) {
      if (!first) out += ',';
      first = false;
      newline(level + 1);
      append_indented(out, item, indent, level + 1);
    }
    newline(level);
    out += ']';
  } else {
    append_scalar(out, value);
  }
}

template <typename Json>
Json parse_bounded(std::string_view text) {
  typename Json::parser_callback_t limit_depth = [](int depth, typename Json::parse_event_t, Json&) {
    if (depth > kMaxDepth) {
      throw nlohmann::json::other_error::create(501, fmt::format("JSON nested deeper than {} levels", kMaxDepth),
                                                static_cast<const Json*>(nullptr));
    }
    return true;
  };
  return Json::parse(text.begin(), text.end(), limit_depth, /*allow_exceptions=*/true);
}

}  // namespace

std::string float_repr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  // The shortest digits that round-trip, in scientific form: [-]d[.ddd]e[+-]XX.
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  (void)ec;  // 64 bytes always suffice
  std::string_view text(buffer, static_cast<std::size_t>(end - buffer));
  std::string sign;
  if (!text.empty() && text.front() == '-') {
    sign = "-";
    text.remove_prefix(1);
  }
  const std::size_t e = text.find('e');
  std::string digits(text.substr(0, e));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());
  // Python (float_repr_style "short", mode 'r'): fixed notation when -4 <= exponent < 16.
  const int point = exponent + 1;  // digits before the decimal point
  std::string out = sign;
  if (exponent >= -4 && exponent < 16) {
    if (point <= 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-point), '0');
      out += digits;
    } else if (static_cast<std::size_t>(point) >= digits.size()) {
      out += digits;
      out.append(static_cast<std::size_t>(point) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(point));
      out += '.';
      out += digits.substr(static_cast<std::size_t>(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

std::string dumps_canonical(const nlohmann::json& value) {
  std::string out;
  append_canonical(out, value);
  return out;
}

std::string dumps_indented(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  append_indented(out, value, indent, 0);
  return out;
}

nlohmann::json parse(std::string_view text) { return parse_bounded<nlohmann::json>(text); }
nlohmann::ordered_json parse_ordered(std::string_view text) { return parse_bounded<nlohmann::ordered_json>(text); }

}  // namespace tensoracle::cache_json
