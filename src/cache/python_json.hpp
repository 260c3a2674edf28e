// JSON text exactly as Python's json module writes it (canonical and indented forms), and a bounded parser.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tensoracle::cache_json {

// Nesting deeper than this is rejected by parse() (crafted headers must not exhaust the stack of
// the recursive writers below).
inline constexpr int kMaxDepth = 512;

// Byte-identical to Python's json.dumps(value, sort_keys=True, separators=(",", ":")): keys sorted
// by code point, ensure_ascii escapes (\uXXXX in lower-case hex, surrogate pairs above U+FFFF,
// undecodable bytes as \udcXX like the surrogateescape handler), floats as repr().
std::string dumps_canonical(const nlohmann::json& value);

// Python's json.dumps(value, indent=indent) for an ordered value: keys in their stored order,
// separators "," and ": ", the same escapes and float formatting.
std::string dumps_indented(const nlohmann::ordered_json& value, int indent);

// Parses JSON text; throws nlohmann::json::exception on a syntax error, invalid UTF-8 or nesting
// deeper than kMaxDepth. Later duplicate keys replace earlier ones, as in Python.
nlohmann::json parse(std::string_view text);
nlohmann::ordered_json parse_ordered(std::string_view text);

// Python's repr() of a float, e.g. 1.0, 1e+16, 1.5e-07, NaN/Infinity as json.dumps writes them.
std::string float_repr(double value);

}  // namespace tensoracle::cache_json
