// Output comparison: per-tensor error metrics in double, threshold checks, file matching and the JSON report.
#include "tensoracle/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tensoracle/error.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- element access: one struct per storage type, chosen once per tensor ----

template <typename T>
T load(const std::byte* base, std::size_t i) {
  T value;
  std::memcpy(&value, base + i * sizeof(T), sizeof(T));
  return value;
}

// Floating-point types: the value widened exactly to double; the difference is taken in double.
template <typename Storage, float (*kWiden)(Storage)>
struct NarrowFloatAccess {
  static double value(const std::byte* base, std::size_t i) { return kWiden(load<Storage>(base, i)); }
  static double difference(const std::byte*, const std::byte*, std::size_t, double c, double r) { return c - r; }
};

template <typename T>
struct WideFloatAccess {
  static double value(const std::byte* base, std::size_t i) { return static_cast<double>(load<T>(base, i)); }
  static double difference(const std::byte*, const std::byte*, std::size_t, double c, double r) { return c - r; }
};

// Integers: values as double (rounded beyond 2^53), but the difference is exact before it is
// rounded, so two different i64 values never compare as equal.
template <typename T>
struct IntegerAccess {
  static double value(const std::byte* base, std::size_t i) { return static_cast<double>(load<T>(base, i)); }
  static double difference(const std::byte* c_base, const std::byte* r_base, std::size_t i, double, double) {
    const auto c = static_cast<std::int64_t>(load<T>(c_base, i));
    const auto r = static_cast<std::int64_t>(load<T>(r_base, i));
    if (c >= r) return static_cast<double>(static_cast<std::uint64_t>(c) - static_cast<std::uint64_t>(r));
    return -static_cast<double>(static_cast<std::uint64_t>(r) - static_cast<std::uint64_t>(c));
  }
};

// bool: any non-zero byte is true (1).
struct BoolAccess {
  static double value(const std::byte* base, std::size_t i) { return base[i] != std::byte{0} ? 1.0 : 0.0; }
  static double difference(const std::byte*, const std::byte*, std::size_t, double c, double r) { return c - r; }
};

float widen_f16(std::uint16_t bits) { return f16_bits_to_f32(bits); }
float widen_bf16(std::uint16_t bits) { return bf16_bits_to_f32(bits); }
float widen_f8e4m3(std::uint8_t bits) { return f8e4m3_bits_to_f32(bits); }
float widen_f8e5m2(std::uint8_t bits) { return f8e5m2_bits_to_f32(bits); }

// Calls fn(Access{}) with the access struct of `type`: the one switch on data type.
template <typename Fn>
void dispatch(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kF64: fn(WideFloatAccess<double>{}); return;
    case DataType::kF32: fn(WideFloatAccess<float>{}); return;
    case DataType::kF16: fn(NarrowFloatAccess<std::uint16_t, widen_f16>{}); return;
    case DataType::kBF16: fn(NarrowFloatAccess<std::uint16_t, widen_bf16>{}); return;
    case DataType::kF8E4M3: fn(NarrowFloatAccess<std::uint8_t, widen_f8e4m3>{}); return;
    case DataType::kF8E5M2: fn(NarrowFloatAccess<std::uint8_t, widen_f8e5m2>{}); return;
    case DataType::kI64: fn(IntegerAccess<std::int64_t>{}); return;
    case DataType::kI32: fn(IntegerAccess<std::int32_t>{}); return;
    case DataType::kI16: fn(IntegerAccess<std::int16_t>{}); return;
    case DataType::kI8: fn(IntegerAccess<std::int8_t>{}); return;
    case DataType::kU8: fn(IntegerAccess<std::uint8_t>{}); return;
    case DataType::kBool: fn(BoolAccess{}); return;
  }
  throw InvalidArgumentError(fmt::format("unknown data type {}", static_cast<int>(type)));
}

// ---- metrics ----

void count_nonfinite(const HostTensor& t, std::int64_t& nan_count, std::int64_t& inf_count) {
  nan_count = inf_count = 0;
  if (!is_floating_point(t.dtype)) return;
  dispatch(t.dtype, [&](auto access) {
    using Access = decltype(access);
    const std::size_t n = t.size();
    for (std::size_t i = 0; i < n; ++i) {
      const double v = Access::value(t.bytes.data(), i);
      nan_count += std::isnan(v) ? 1 : 0;
      inf_count += std::isinf(v) ? 1 : 0;
    }
  });
}

// NumPy's default percentile ("linear"): the value at virtual index q (n - 1) of the sorted data,
// interpolated as numpy's _lerp does it. Reorders `values`.
double percentile_linear(std::vector<double>& values, double q) {
  const std::size_t n = values.size();
  if (n == 0) return 0.0;
  const double virtual_index = static_cast<double>(n - 1) * q;
  if (virtual_index >= static_cast<double>(n - 1)) return *std::max_element(values.begin(), values.end());
  const double lower_index = std::floor(virtual_index);
  const auto lo = static_cast<std::size_t>(lower_index);
  const double t = virtual_index - lower_index;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(lo), values.end());
  const double a = values[lo];
  const double b = *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(lo) + 1, values.end());
  const double diff = b - a;
  return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
}

template <typename Access>
void compute_metrics(const HostTensor& candidate, const HostTensor& reference, TensorComparison& out) {
  const std::byte* cb = candidate.bytes.data();
  const std::byte* rb = reference.bytes.data();
  const std::size_t n = reference.size();

  // Pass 1: classify positions, find the largest magnitude among pairs finite on both sides.
  std::int64_t compared = 0, mismatches = 0;
  std::size_t first_mismatch = 0;
  double largest = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double c = Access::value(cb, i), r = Access::value(rb, i);
    if (std::isfinite(c) && std::isfinite(r)) {
      ++compared;
      largest = std::max(largest, std::max(std::fabs(c), std::fabs(r)));
    } else if (!((std::isnan(c) && std::isnan(r)) || (std::isinf(c) && c == r))) {
      if (mismatches++ == 0) first_mismatch = i;
    }
  }
  // Sums are taken over values divided by a power of two near the largest magnitude (exact), so
  // that squares of f64 values neither overflow nor lose the result.
  double scale = 1.0;
  if (largest > 0.0) {
    int exponent = 0;
    std::frexp(largest, &exponent);
    scale = std::ldexp(1.0, exponent - 1);
  }

  // Pass 2: the metrics over the compared pairs.
  std::vector<double> abs_errors;
  abs_errors.reserve(static_cast<std::size_t>(compared));
  double max_abs = 0.0, max_rel = 0.0;
  std::size_t max_index = 0;
  double max_c = 0.0, max_r = 0.0;
  bool have_max = false;
  double sum_abs = 0.0, sum_d2 = 0.0, sum_r2 = 0.0, sum_c2 = 0.0, sum_cr = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double c = Access::value(cb, i), r = Access::value(rb, i);
    if (!std::isfinite(c) || !std::isfinite(r)) continue;
    const double d = Access::difference(cb, rb, i, c, r);
    const double cs = c / scale, rs = r / scale;
    const double ds = std::isinf(d) ? cs - rs : d / scale;  // d is infinite only when c - r overflows
    const double abs_d = std::fabs(d);
    abs_errors.push_back(abs_d);
    if (!have_max || abs_d > max_abs) {
      max_abs = abs_d;
      max_index = i;
      max_c = c;
      max_r = r;
      have_max = true;
    }
    if (r != 0.0) {
      const double rel = std::isinf(abs_d) ? std::fabs(ds) / (std::fabs(r) / scale) : abs_d / std::fabs(r);
      max_rel = std::max(max_rel, rel);
    }
    sum_abs += std::fabs(ds);
    sum_d2 += ds * ds;
    sum_r2 += rs * rs;
    sum_c2 += cs * cs;
    sum_cr += cs * rs;
  }

  out.compared_count = compared;
  out.nonfinite_mismatch_count = mismatches;
  out.max_abs_error = max_abs;
  out.max_rel_error = max_rel;
  const double count = compared > 0 ? static_cast<double>(compared) : 1.0;
  out.mean_abs_error = scale * (sum_abs / count);
  out.rmse = scale * std::sqrt(sum_d2 / count);
  const double norm_d = std::sqrt(sum_d2), norm_r = std::sqrt(sum_r2), norm_c = std::sqrt(sum_c2);
  out.rel_l2_error = norm_d == 0.0 ? 0.0 : (norm_r == 0.0 ? kInf : norm_d / norm_r);
  if (norm_c == 0.0 && norm_r == 0.0)
    out.cosine_similarity = 1.0;
  else if (norm_c == 0.0 || norm_r == 0.0)
    out.cosine_similarity = 0.0;
  else
    out.cosine_similarity = std::clamp(sum_cr / std::sqrt(sum_c2 * sum_r2), -1.0, 1.0);  // exactly 1 when c == r
  out.sqnr_db = sum_d2 == 0.0 ? kInf : (sum_r2 == 0.0 ? -kInf : 10.0 * std::log10(sum_r2 / sum_d2));
  out.p99_abs_error = percentile_linear(abs_errors, 0.99);
  if (have_max) {
    out.max_abs_error_index = static_cast<std::int64_t>(max_index);
    out.max_abs_error_candidate = max_c;
    out.max_abs_error_reference = max_r;
  }
  if (mismatches > 0) {
    const double c = Access::value(cb, first_mismatch), r = Access::value(rb, first_mismatch);
    out.failed_checks.push_back(
        fmt::format("nonfinite_mismatch_count {} > 0: NaN or infinity not matched (first at flat index {}: "
                    "candidate {}, reference {})",
                    mismatches, first_mismatch, c, r));
  }
}

void check_max(TensorComparison& out, const char* metric, const std::optional<double>& value,
               const std::optional<double>& limit) {
  if (!limit || !value) return;
  if (!(*value <= *limit)) out.failed_checks.push_back(fmt::format("{} {:.6g} > {:.6g}", metric, *value, *limit));
}

void check_min(TensorComparison& out, const char* metric, const std::optional<double>& value,
               const std::optional<double>& limit) {
  if (!limit || !value) return;
  if (!(*value >= *limit)) out.failed_checks.push_back(fmt::format("{} {:.6g} < {:.6g}", metric, *value, *limit));
}

void validate(const CompareThresholds& t) {
  for (const auto& [name, value] :
       {std::pair{"max_abs", t.max_abs}, std::pair{"max_rel", t.max_rel}, std::pair{"rel_l2", t.rel_l2},
        std::pair{"min_cosine", t.min_cosine}, std::pair{"min_sqnr_db", t.min_sqnr_db}}) {
    if (value && std::isnan(*value)) throw InvalidArgumentError(fmt::format("compare: the {} limit is NaN", name));
  }
}

void validate(const std::string& name, const char* side, const HostTensor& t) {
  const std::uint64_t expected = static_cast<std::uint64_t>(t.shape.volume()) * element_size(t.dtype);
  if (t.bytes.size() != expected) {
    throw InvalidArgumentError(fmt::format("compare: {} tensor '{}' ({} {}) holds {} bytes, expected {}", side, name,
                                           to_string(t.dtype), t.shape.to_string(), t.bytes.size(), expected));
  }
}

// ---- files ----

bool is_npy(const std::filesystem::path& path) { return path.extension() == ".npy"; }

HostTensor read_tensor(const SafetensorsFile& file, const TensorInfo& info) {
  HostTensor t(info.dtype, info.shape);
  if (!t.bytes.empty()) file.read(info, t.bytes.data());
  return t;
}

TensorComparison missing(const std::string& name, const char* side, const TensorInfo& present, bool candidate_present,
                         const CompareThresholds& overrides, const SafetensorsFile& file) {
  TensorComparison out;
  out.name = name;
  out.thresholds = CompareThresholds::for_dtype(present.dtype).with_overrides(overrides);
  const HostTensor t = read_tensor(file, present);
  std::int64_t nan_count = 0, inf_count = 0;
  count_nonfinite(t, nan_count, inf_count);
  if (candidate_present) {
    out.candidate_dtype = present.dtype;
    out.candidate_shape = present.shape;
    out.candidate_nan_count = nan_count;
    out.candidate_inf_count = inf_count;
  } else {
    out.reference_dtype = present.dtype;
    out.reference_shape = present.shape;
    out.reference_nan_count = nan_count;
    out.reference_inf_count = inf_count;
  }
  out.failed_checks.push_back(fmt::format("missing in {}", side));
  return out;
}

// ---- JSON ----

using Json = nlohmann::ordered_json;

Json number(const std::optional<double>& value) {
  if (!value) return nullptr;
  if (std::isnan(*value)) return "nan";
  if (std::isinf(*value)) return *value > 0 ? "inf" : "-inf";
  return *value;
}

template <typename T>
Json optional_value(const std::optional<T>& value) {
  if (!value) return nullptr;
  return *value;
}

Json side_json(const std::optional<DataType>& dtype, const std::optional<Dims>& shape, std::int64_t nan_count,
               std::int64_t inf_count) {
  if (!dtype || !shape) return nullptr;
  Json side;
  side["dtype"] = std::string(to_string(*dtype));
  side["shape"] = shape->values();
  side["nan_count"] = nan_count;
  side["inf_count"] = inf_count;
  return side;
}

}  // namespace

CompareThresholds CompareThresholds::for_dtype(DataType type) noexcept {
  CompareThresholds t;
  switch (type) {
    case DataType::kF64: t.rel_l2 = 1e-12; break;
    case DataType::kF32: t.rel_l2 = 1e-5; break;
    case DataType::kF16: t.rel_l2 = 2e-3; break;
    case DataType::kBF16: t.rel_l2 = 1.6e-2; break;
    case DataType::kF8E4M3:
    case DataType::kF8E5M2: t.rel_l2 = 1.3e-1; break;
    case DataType::kI64:
    case DataType::kI32:
    case DataType::kI16:
    case DataType::kI8:
    case DataType::kU8:
    case DataType::kBool: t.max_abs = 0.0; break;
  }
  return t;
}

CompareThresholds CompareThresholds::with_overrides(const CompareThresholds& overrides) const noexcept {
  CompareThresholds t = *this;
  if (overrides.max_abs) t.max_abs = overrides.max_abs;
  if (overrides.max_rel) t.max_rel = overrides.max_rel;
  if (overrides.rel_l2) t.rel_l2 = overrides.rel_l2;
  if (overrides.min_cosine) t.min_cosine = overrides.min_cosine;
  if (overrides.min_sqnr_db) t.min_sqnr_db = overrides.min_sqnr_db;
  return t;
}

TensorComparison compare_tensors(const std::string& name, const HostTensor& candidate, const HostTensor& reference,
                                 const CompareThresholds& thresholds) {
  validate(thresholds);
  validate(name, "candidate", candidate);
  validate(name, "reference", reference);
  TensorComparison out;
  out.name = name;
  out.thresholds = thresholds;
  out.candidate_dtype = candidate.dtype;
  out.candidate_shape = candidate.shape;
  out.reference_dtype = reference.dtype;
  out.reference_shape = reference.shape;
  out.shape_match = candidate.shape == reference.shape;
  out.dtype_match = candidate.dtype == reference.dtype;
  count_nonfinite(candidate, out.candidate_nan_count, out.candidate_inf_count);
  count_nonfinite(reference, out.reference_nan_count, out.reference_inf_count);
  if (!out.shape_match) {
    out.failed_checks.push_back(
        fmt::format("shape {} != reference shape {}", candidate.shape.to_string(), reference.shape.to_string()));
  }
  if (!out.dtype_match) {
    out.failed_checks.push_back(
        fmt::format("dtype {} != reference dtype {}", to_string(candidate.dtype), to_string(reference.dtype)));
  }
  if (!out.shape_match || !out.dtype_match) return out;

  out.element_count = reference.shape.volume();
  dispatch(reference.dtype, [&](auto access) { compute_metrics<decltype(access)>(candidate, reference, out); });
  check_max(out, "max_abs_error", out.max_abs_error, thresholds.max_abs);
  check_max(out, "max_rel_error", out.max_rel_error, thresholds.max_rel);
  check_max(out, "rel_l2_error", out.rel_l2_error, thresholds.rel_l2);
  check_min(out, "cosine_similarity", out.cosine_similarity, thresholds.min_cosine);
  check_min(out, "sqnr_db", out.sqnr_db, thresholds.min_sqnr_db);
  out.passed = out.failed_checks.empty();
  return out;
}

std::vector<TensorComparison> compare_files(const std::filesystem::path& candidate,
                                            const std::filesystem::path& reference,
                                            const CompareThresholds& overrides) {
  validate(overrides);
  std::vector<TensorComparison> results;
  if (is_npy(candidate) != is_npy(reference)) {
    throw InvalidArgumentError(fmt::format("compare: {} and {}: both files must be .npy, or both safetensors",
                                           candidate.string(), reference.string()));
  }
  if (is_npy(candidate)) {
    const HostTensor c = read_npy(candidate);
    const HostTensor r = read_npy(reference);
    results.push_back(compare_tensors(candidate.stem().string(), c, r,
                                      CompareThresholds::for_dtype(r.dtype).with_overrides(overrides)));
    return results;
  }
  const auto c_file = SafetensorsFile::open(candidate);
  const auto r_file = SafetensorsFile::open(reference);
  std::set<std::string> names;
  for (const TensorInfo& info : c_file->tensors()) names.insert(info.name);
  for (const TensorInfo& info : r_file->tensors()) names.insert(info.name);
  for (const std::string& name : names) {
    const TensorInfo* c_info = c_file->find(name);
    const TensorInfo* r_info = r_file->find(name);
    if (c_info == nullptr) {
      results.push_back(missing(name, "candidate", *r_info, false, overrides, *r_file));
    } else if (r_info == nullptr) {
      results.push_back(missing(name, "reference", *c_info, true, overrides, *c_file));
    } else {
      results.push_back(compare_tensors(name, read_tensor(*c_file, *c_info), read_tensor(*r_file, *r_info),
                                        CompareThresholds::for_dtype(r_info->dtype).with_overrides(overrides)));
    }
  }
  return results;
}

std::string to_json(const std::vector<TensorComparison>& comparisons) {
  Json tensors = Json::array();
  bool all_passed = true;
  for (const TensorComparison& c : comparisons) {
    all_passed = all_passed && c.passed;
    Json t;
    t["name"] = c.name;
    t["passed"] = c.passed;
    t["failed_checks"] = c.failed_checks;
    t["candidate"] = side_json(c.candidate_dtype, c.candidate_shape, c.candidate_nan_count, c.candidate_inf_count);
    t["reference"] = side_json(c.reference_dtype, c.reference_shape, c.reference_nan_count, c.reference_inf_count);
    t["shape_match"] = c.shape_match;
    t["dtype_match"] = c.dtype_match;
    t["element_count"] = optional_value(c.element_count);
    t["compared_count"] = optional_value(c.compared_count);
    t["nonfinite_mismatch_count"] = optional_value(c.nonfinite_mismatch_count);
    t["max_abs_error"] = number(c.max_abs_error);
    t["max_rel_error"] = number(c.max_rel_error);
    t["mean_abs_error"] = number(c.mean_abs_error);
    t["rmse"] = number(c.rmse);
    t["rel_l2_error"] = number(c.rel_l2_error);
    t["cosine_similarity"] = number(c.cosine_similarity);
    t["sqnr_db"] = number(c.sqnr_db);
    t["p99_abs_error"] = number(c.p99_abs_error);
    if (c.max_abs_error_index) {
      t["max_abs_error_at"] = {{"index", *c.max_abs_error_index},
                               {"candidate", number(c.max_abs_error_candidate)},
                               {"reference", number(c.max_abs_error_reference)}};
    } else {
      t["max_abs_error_at"] = nullptr;
    }
    t["thresholds"] = {{"max_abs", number(c.thresholds.max_abs)},
                       {"max_rel", number(c.thresholds.max_rel)},
                       {"rel_l2", number(c.thresholds.rel_l2)},
                       {"min_cosine", number(c.thresholds.min_cosine)},
                       {"min_sqnr_db", number(c.thresholds.min_sqnr_db)}};
    tensors.push_back(std::move(t));
  }
  Json root;
  root["tensors"] = std::move(tensors);
  root["passed"] = all_passed;
  return root.dump(2);
}

}  // namespace tensoracle
