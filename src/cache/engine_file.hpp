// Internal pieces of the engine file reader shared by open_engine and the cache listing.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tensoracle/cache.hpp"

namespace tensoracle::cache_detail {

// A header problem found by read_header(), without the file name: `incomplete` selects the
// reference's "incomplete engine file" over "invalid engine header".
struct HeaderProblem {
  bool incomplete = false;
  std::string detail;
};

// The result of read_header(): the public view, plus the conditions as parsed values.
struct ParsedHeader {
  EngineHeader header;
  nlohmann::json conditions;                   // for comparisons (key order irrelevant)
  nlohmann::ordered_json conditions_in_order;  // as stored, for listings
};

// Reads magic, length and header of an open file descriptor of `file_size` bytes; throws
// HeaderProblem for format problems and IoError (naming `path`) for read failures. Never reads the plan.
ParsedHeader read_header(int fd, std::uint64_t file_size, const std::string& path);

// pread until `size` bytes are read or the file ends; returns the count. IoError naming `path`.
std::size_t read_at(int fd, void* destination, std::size_t size, std::uint64_t offset, const std::string& path);

// The full checked read of an open engine file: header, conditions (EngineConditionError), plan
// and its SHA-256 (CorruptEngineError).
EngineFileContents read_engine_fd(int fd, std::uint64_t file_size, const std::string& path,
                                  const nlohmann::json& expected_conditions);

// "incomplete engine file: PATH: DETAIL. ..." / "invalid engine header: PATH: DETAIL. ..."
std::string header_problem_message(const HeaderProblem& problem, const std::string& path);

// The first top-level key whose value differs between two condition objects ("" when none).
std::string first_differing_key(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace tensoracle::cache_detail
