// `cache list` and `cache prune`: listing engine files from metadata and headers only, choosing and removing files.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/engine_file.hpp"
#include "cache/python_json.hpp"
#include "core/posix_file.hpp"
#include "tensoracle/cache.hpp"

namespace tensoracle {
namespace {

constexpr std::string_view kEngineSuffix = ".engine";
constexpr std::string_view kRecordPrefix = "weight-";
constexpr std::string_view kRecordSuffix = ".json";
constexpr const char* kRebuildNotice = "Removed engines will be rebuilt the next time they are used.";

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// An open directory; names() lists its entries once.
class Directory {
 public:
  // Returns false when the directory does not exist; throws IoError for every other failure.
  bool open(const std::filesystem::path& path) {
    path_ = path.string();
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ >= 0) return true;
    if (errno == ENOENT) return false;
    if (errno == ENOTDIR) throw IoError(fmt::format("{}: the engine cache path is not a directory", path_));
    throw IoError(fmt::format("{}: cannot open the engine cache directory: {}", path_, errno_message(errno)));
  }
  ~Directory() {
    if (fd_ >= 0) ::close(fd_);
  }
  Directory() = default;
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  int fd() const noexcept { return fd_; }

  std::vector<std::string> names() const {
    const int copy = ::dup(fd_);  // fdopendir takes ownership
    if (copy < 0) throw IoError(fmt::format("{}: cannot read the directory: {}", path_, errno_message(errno)));
    DIR* dir = ::fdopendir(copy);
    if (dir == nullptr) {
      ::close(copy);
      throw IoError(fmt::format("{}: cannot read the directory: {}", path_, errno_message(errno)));
    }
    ::rewinddir(dir);
    std::vector<std::string> out;
    for (;;) {
      errno = 0;
      const dirent* entry = ::readdir(dir);
      if (entry == nullptr) {
        const int error = errno;
        ::closedir(dir);
        if (error != 0) throw IoError(fmt::format("{}: cannot read the directory: {}", path_, errno_message(error)));
        break;
      }
      out.emplace_back(entry->d_name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // lstat of a name; false when it no longer exists.
  bool stat_entry(const std::string& name, struct stat& st) const {
    if (::fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return true;
    if (errno == ENOENT) return false;
    throw IoError(fmt::format("{}/{}: cannot stat: {}", path_, name, errno_message(errno)));
  }

 private:
  int fd_ = -1;
  std::string path_;
};

bool is_lower_hex_digest(const std::string& text) {
  return text.size() == 64 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Reads a regular file's header without following a symlink swapped in since the stat, and without
// blocking on a FIFO.
void describe_engine(const Directory& dir, const std::filesystem::path& directory, CacheEntry& entry,
                     const std::map<std::string, std::set<std::string>>& paths_by_digest) {
  const std::string display = (directory / entry.file).string();
  const int fd = ::openat(dir.fd(), entry.file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    entry.status = CacheEntryStatus::kUnrecognized;
    entry.reason = fmt::format("cannot open: {}", errno_message(errno));
    return;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_ino != entry.inode || st.st_dev != entry.device) {
      entry.status = CacheEntryStatus::kUnrecognized;
      entry.reason = "the file was replaced while it was listed";
      return;
    }
    const cache_detail::ParsedHeader parsed =
        cache_detail::read_header(fd, static_cast<std::uint64_t>(st.st_size), display);
    entry.status = CacheEntryStatus::kRecognized;
    entry.conditions_json = parsed.conditions_in_order.dump();
    const auto weights = parsed.conditions.find("weights");
    if (weights != parsed.conditions.end() && weights->is_array()) {
      std::set<std::string> seen;
      for (const auto& digest : *weights) {
        if (!digest.is_string() || !is_lower_hex_digest(digest.get<std::string>())) continue;
        const std::string sha = digest.get<std::string>();
        if (!seen.insert(sha).second) continue;
        CacheWeightPaths item;
        item.sha256 = sha;
        const auto found = paths_by_digest.find(sha);
        if (found != paths_by_digest.end()) item.paths.assign(found->second.begin(), found->second.end());
        entry.weight_paths.push_back(std::move(item));
      }
    }
  } catch (const cache_detail::HeaderProblem& problem) {
    entry.status = CacheEntryStatus::kUnrecognized;
    entry.reason =
        fmt::format("{}: {}", problem.incomplete ? "incomplete engine file" : "invalid engine header", problem.detail);
  } catch (const Error& e) {
    entry.status = CacheEntryStatus::kUnrecognized;
    entry.reason = e.what();
  }
}

nlohmann::ordered_json time_fields(nlohmann::ordered_json out, const CacheEntry& entry) {
  out["recorded_at"] = format_utc_ns(entry.recorded_at_ns);
  out["recorded_at_ns"] = entry.recorded_at_ns;
  return out;
}

nlohmann::ordered_json brief_json(const CacheEntry& entry) {
  nlohmann::ordered_json out;
  out["file"] = entry.file;
  out["size_bytes"] = entry.size_bytes;
  return time_fields(std::move(out), entry);
}

nlohmann::ordered_json excluded_json(const CacheEntry& entry) {
  nlohmann::ordered_json out = brief_json(entry);
  out["status"] = to_string(entry.status);
  out["reason"] = entry.reason.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(entry.reason);
  return out;
}

nlohmann::ordered_json entries_json(const std::vector<CacheEntry>& entries,
                                    nlohmann::ordered_json (*describe)(const CacheEntry&)) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const CacheEntry& entry : entries) out.push_back(describe(entry));
  return out;
}

std::uint64_t sum_sizes(const std::vector<CacheEntry>& entries) {
  std::uint64_t total = 0;
  for (const CacheEntry& entry : entries) total += entry.size_bytes;
  return total;
}

bool is_decimal_number(std::string_view text) {
  // [+-]?(digits[.digits?] | .digits)([eE][+-]?digits)?
  std::size_t i = 0;
  const auto digits = [&] {
    const std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  std::size_t mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == text.size();
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

}  // namespace

const char* to_string(CacheEntryStatus status) noexcept {
  switch (status) {
    case CacheEntryStatus::kRecognized: return "recognized";
    case CacheEntryStatus::kBuildingOrLeftover: return "building or leftover";
    case CacheEntryStatus::kUnrecognized: return "unrecognized";
  }
  return "unrecognized";
}

std::string format_utc_ns(std::int64_t ns_since_epoch) {
  std::int64_t seconds = ns_since_epoch / 1000000000;
  std::int64_t nanoseconds = ns_since_epoch % 1000000000;
  if (nanoseconds < 0) {
    nanoseconds += 1000000000;
    seconds -= 1;
  }
  const auto time = static_cast<std::time_t>(seconds);
  std::tm utc{};
  ::gmtime_r(&time, &utc);
  return fmt::format("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:09d}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, nanoseconds);
}

CacheListing list_cache(const std::filesystem::path& directory) {
  CacheListing listing;
  listing.directory = directory;
  Directory dir;
  if (!dir.open(directory)) return listing;
  listing.directory_exists = true;
  const std::vector<std::string> names = dir.names();

  // Weight records first: digest -> paths of valid records.
  std::map<std::string, std::set<std::string>> paths_by_digest;
  for (const std::string& name : names) {
    if (name.size() <= kRecordPrefix.size() + kRecordSuffix.size() ||
        name.compare(0, kRecordPrefix.size(), kRecordPrefix) != 0 || !ends_with(name, kRecordSuffix)) {
      continue;
    }
    struct stat st {};
    if (!dir.stat_entry(name, st) || !S_ISREG(st.st_mode)) continue;
    if (const auto record = read_weight_record(directory / name))
      paths_by_digest[record->sha256].insert(record->identity.path);
  }

  for (const std::string& name : names) {
    if (!ends_with(name, kEngineSuffix)) continue;
    struct stat st {};
    if (!dir.stat_entry(name, st)) continue;  // vanished since the directory was read
    CacheEntry entry;
    entry.file = name;
    entry.size_bytes = static_cast<std::uint64_t>(st.st_size);
    entry.recorded_at_ns = mtime_ns(st);
    entry.device = static_cast<std::uint64_t>(st.st_dev);
    entry.inode = static_cast<std::uint64_t>(st.st_ino);
    if (!S_ISREG(st.st_mode)) {
      entry.status = CacheEntryStatus::kUnrecognized;
      entry.reason = "not a regular file";
    } else if (st.st_size == 0) {
      entry.status = CacheEntryStatus::kBuildingOrLeftover;
    } else {
      describe_engine(dir, directory, entry, paths_by_digest);
    }
    listing.total_size_bytes += entry.size_bytes;
    listing.entries.push_back(std::move(entry));
  }
  return listing;
}

double parse_prune_days(const std::string& text) {
  const std::string_view trimmed = trim(text);
  double days = 0;
  std::string_view number = trimmed;
  if (!number.empty() && number.front() == '+') number.remove_prefix(1);
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), days);
  if (!is_decimal_number(trimmed) || ec != std::errc() || end != number.data() + number.size() ||
      !std::isfinite(days) || days < 0) {
    throw InvalidArgumentError(fmt::format(
        "--unused-for: '{}' is not a number of days; give a finite non-negative number such as 30 or 0.5", text));
  }
  return days == 0 ? 0.0 : days;  // -0 counts as 0
}

std::uint64_t parse_prune_size(const std::string& text) {
  const auto invalid = [&] {
    return InvalidArgumentError(
        fmt::format("--max-size: '{}' is not a size; give non-negative bytes, optionally followed by B, KiB, MiB, GiB "
                    "or TiB (powers of 1024, any letter case), such as 10GiB or 1.5GiB",
                    text));
  };
  std::string_view rest = trim(text);
  std::size_t unit_start = rest.size();
  while (unit_start > 0 && std::isalpha(static_cast<unsigned char>(rest[unit_start - 1]))) --unit_start;
  std::string unit(rest.substr(unit_start));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view number = trim(rest.substr(0, unit_start));
  unsigned shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "kib") {
    shift = 10;
  } else if (unit == "mib") {
    shift = 20;
  } else if (unit == "gib") {
    shift = 30;
  } else if (unit == "tib") {
    shift = 40;
  } else {
    throw invalid();
  }
  if (!is_decimal_number(number) || number.front() == '-') throw invalid();
  if (number.front() == '+') number.remove_prefix(1);

  // Exact decimal arithmetic: value = digits * 10^exponent * 2^shift, rounded down.
  std::vector<std::uint32_t> digits;  // most significant first
  long long exponent = 0;
  std::size_t i = 0;
  bool after_point = false;
  for (; i < number.size() && number[i] != 'e' && number[i] != 'E'; ++i) {
    if (number[i] == '.') {
      after_point = true;
      continue;
    }
    if (digits.empty() && number[i] == '0') {
      if (after_point) --exponent;
      continue;
    }
    digits.push_back(static_cast<std::uint32_t>(number[i] - '0'));
    if (after_point) --exponent;
  }
  if (i < number.size()) {
    std::string_view e = number.substr(i + 1);
    const bool negative = !e.empty() && e.front() == '-';
    if (!e.empty() && (e.front() == '+' || e.front() == '-')) e.remove_prefix(1);
    long long value = 0;
    for (const char c : e) value = std::min<long long>(value * 10 + (c - '0'), 1000000000LL);
    exponent += negative ? -value : value;
  }
  if (digits.empty()) return 0;
  // Multiply by 2^shift.
  const std::uint64_t factor = std::uint64_t{1} << shift;
  std::uint64_t carry = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    const std::uint64_t v = std::uint64_t{*it} * factor + carry;
    *it = static_cast<std::uint32_t>(v % 10);
    carry = v / 10;
  }
  while (carry != 0) {
    digits.insert(digits.begin(), static_cast<std::uint32_t>(carry % 10));
    carry /= 10;
  }
  // Apply the decimal exponent, dropping fractional digits (rounding down).
  long long integer_digits = static_cast<long long>(digits.size()) + exponent;
  if (integer_digits <= 0) return 0;
  if (integer_digits > 20) return std::numeric_limits<std::uint64_t>::max();
  std::uint64_t value = 0;
  for (long long k = 0; k < integer_digits; ++k) {
    const std::uint32_t d = k < static_cast<long long>(digits.size()) ? digits[static_cast<std::size_t>(k)] : 0;
    if (value > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return std::numeric_limits<std::uint64_t>::max();
    value = value * 10 + d;
  }
  return value;
}

PrunePlan plan_prune(CacheListing listing, const PruneCriteria& criteria) {
  PrunePlan plan;
  plan.criteria = criteria;
  std::vector<CacheEntry> candidates;
  for (const CacheEntry& entry : listing.entries) {
    (entry.status == CacheEntryStatus::kRecognized ? candidates : plan.excluded).push_back(entry);
  }
  std::sort(candidates.begin(), candidates.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.recorded_at_ns != b.recorded_at_ns ? a.recorded_at_ns < b.recorded_at_ns : a.file < b.file;
  });
  std::uint64_t projected = listing.total_size_bytes;
  if (criteria.mode == PruneCriteria::Mode::kUnusedFor) {
    // Exact: the cutoff is now - days * 24 h; a time is selected when strictly earlier. Long double
    // holds every int64 nanosecond count exactly.
    const long double cutoff = static_cast<long double>(criteria.now_ns) -
                               static_cast<long double>(criteria.unused_for_days) * 86400.0L * 1e9L;
    const long double ceiling = std::ceil(cutoff);
    plan.cutoff_ns = ceiling <= static_cast<long double>(std::numeric_limits<std::int64_t>::min())
                         ? std::numeric_limits<std::int64_t>::min()
                         : static_cast<std::int64_t>(ceiling);
    for (const CacheEntry& entry : candidates) {
      if (entry.recorded_at_ns < plan.cutoff_ns) {
        plan.selected.push_back(entry);
        projected -= entry.size_bytes;
      }
    }
  } else {
    for (const CacheEntry& entry : candidates) {
      if (projected <= criteria.max_size_bytes) break;
      plan.selected.push_back(entry);
      projected -= entry.size_bytes;
    }
    plan.size_limit_attainable = projected <= criteria.max_size_bytes;
  }
  plan.selected_size_bytes = sum_sizes(plan.selected);
  plan.projected_total_size_bytes = projected;
  plan.listing = std::move(listing);
  return plan;
}

PruneResult execute_prune(const PrunePlan& plan, bool dry_run) {
  PruneResult result;
  result.dry_run = dry_run;
  result.excluded = plan.excluded;
  if (dry_run) {
    result.remaining_total_size_bytes = plan.listing.total_size_bytes;
    result.projected_total_size_bytes = plan.projected_total_size_bytes;
    result.size_limit_attainable = plan.size_limit_attainable;
    return result;
  }
  const std::filesystem::path& directory = plan.listing.directory;
  Directory dir;
  if (!plan.selected.empty() && !dir.open(directory)) {
    result.missing = plan.selected;  // the whole directory is gone
  } else if (!plan.selected.empty()) {
    for (const CacheEntry& entry : plan.selected) {
      struct stat st {};
      if (::fstatat(dir.fd(), entry.file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) {
          result.missing.push_back(entry);
        } else {
          result.failed.push_back({entry, fmt::format("cannot stat: {}", errno_message(errno))});
        }
        continue;
      }
      std::vector<std::string> changes;
      if (!S_ISREG(st.st_mode)) changes.emplace_back("it is no longer a regular file");
      if (static_cast<std::uint64_t>(st.st_size) != entry.size_bytes)
        changes.push_back(fmt::format("size {} -> {} bytes", entry.size_bytes, st.st_size));
      if (mtime_ns(st) != entry.recorded_at_ns)
        changes.push_back(
            fmt::format("recorded time {} -> {}", format_utc_ns(entry.recorded_at_ns), format_utc_ns(mtime_ns(st))));
      if (static_cast<std::uint64_t>(st.st_ino) != entry.inode || static_cast<std::uint64_t>(st.st_dev) != entry.device)
        changes.emplace_back("it was replaced by another file (inode differs)");
      if (!changes.empty()) {
        result.failed.push_back({entry, fmt::format("the file changed after the plan ({}); it was left in place",
                                                    fmt::join(changes, ", "))});
        continue;
      }
      if (::unlinkat(dir.fd(), entry.file.c_str(), 0) != 0) {
        if (errno == ENOENT) {
          result.missing.push_back(entry);
        } else {
          result.failed.push_back({entry, fmt::format("cannot remove: {}", errno_message(errno))});
        }
        continue;
      }
      result.removed.push_back(entry);
      result.removed_size_bytes += entry.size_bytes;
    }
  }
  // What is left, measured again (other processes may have changed the directory meanwhile).
  Directory again;
  if (again.open(directory)) {
    for (const std::string& name : again.names()) {
      struct stat st {};
      if (ends_with(name, kEngineSuffix) && again.stat_entry(name, st))
        result.remaining_total_size_bytes += static_cast<std::uint64_t>(st.st_size);
    }
  }
  result.size_limit_attainable = plan.criteria.mode != PruneCriteria::Mode::kMaxSize ||
                                 result.remaining_total_size_bytes <= plan.criteria.max_size_bytes;
  return result;
}

std::string to_json(const CacheListing& listing) {
  nlohmann::ordered_json out;
  out["directory"] = listing.directory.string();
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const CacheEntry& entry : listing.entries) {
    nlohmann::ordered_json item = brief_json(entry);
    item["status"] = to_string(entry.status);
    item["reason"] = entry.reason.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(entry.reason);
    item["conditions"] = entry.status == CacheEntryStatus::kRecognized
                             ? nlohmann::ordered_json::parse(entry.conditions_json)
                             : nlohmann::ordered_json(nullptr);
    nlohmann::ordered_json weights = nlohmann::ordered_json::array();
    for (const CacheWeightPaths& w : entry.weight_paths) {
      nlohmann::ordered_json pair;
      pair["sha256"] = w.sha256;
      pair["paths"] = w.paths;
      weights.push_back(std::move(pair));
    }
    item["weight_paths"] = std::move(weights);
    entries.push_back(std::move(item));
  }
  out["entries"] = std::move(entries);
  out["total_size_bytes"] = listing.total_size_bytes;
  return cache_json::dumps_indented(out, 2);
}

std::string to_json(const PrunePlan& plan, bool dry_run) {
  nlohmann::ordered_json body;
  body["directory"] = plan.listing.directory.string();
  body["dry_run"] = dry_run;
  nlohmann::ordered_json criterion;
  if (plan.criteria.mode == PruneCriteria::Mode::kUnusedFor) {
    criterion["unused_for_days"] = plan.criteria.unused_for_days;
    criterion["cutoff"] = format_utc_ns(plan.cutoff_ns);
    criterion["cutoff_ns"] = plan.cutoff_ns;
  } else {
    criterion["max_size_bytes"] = plan.criteria.max_size_bytes;
  }
  body["criterion"] = std::move(criterion);
  body["total_size_bytes"] = plan.listing.total_size_bytes;
  body["selected"] = entries_json(plan.selected, brief_json);
  body["selected_size_bytes"] = plan.selected_size_bytes;
  body["excluded"] = entries_json(plan.excluded, excluded_json);
  body["projected_total_size_bytes"] = plan.projected_total_size_bytes;
  body["size_limit_attainable"] = plan.size_limit_attainable;
  body["notice"] = kRebuildNotice;
  nlohmann::ordered_json out;
  out["plan"] = std::move(body);
  return cache_json::dumps_indented(out, 2);
}

std::string to_json(const PruneResult& result) {
  nlohmann::ordered_json body;
  body["dry_run"] = result.dry_run;
  body["removed"] = entries_json(result.removed, brief_json);
  body["excluded"] = entries_json(result.excluded, excluded_json);
  nlohmann::ordered_json failed = nlohmann::ordered_json::array();
  for (const PruneFailure& failure : result.failed) {
    nlohmann::ordered_json item = brief_json(failure.entry);
    item["reason"] = failure.reason;
    failed.push_back(std::move(item));
  }
  body["failed"] = std::move(failed);
  body["missing"] = entries_json(result.missing, brief_json);
  body["removed_size_bytes"] = result.removed_size_bytes;
  body["remaining_total_size_bytes"] = result.remaining_total_size_bytes;
  if (result.dry_run) body["projected_total_size_bytes"] = result.projected_total_size_bytes;
  body["size_limit_attainable"] = result.size_limit_attainable;
  nlohmann::ordered_json out;
  out["result"] = std::move(body);
  return cache_json::dumps_indented(out, 2);
}

}  // namespace tensoracle
