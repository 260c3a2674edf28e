// Output comparison: error metrics and pass/fail checks between a candidate tensor and a reference (docs/compare.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"
#include "tensoracle/host_tensor.hpp"

namespace tensoracle {

// Ownership and threading: everything here works on values. The functions keep no state, take
// their inputs by const reference, return new objects and are safe to call from several threads
// at once. Files are read completely before the call returns; nothing stays open or mapped.

// Limits a comparison checks; an unset limit is not checked. A tensor passes when every set limit
// holds (the maxima as value <= limit, the minima as value >= limit) and, whatever the limits, the
// shapes and dtypes match and NaN and infinities are in the same places (docs/compare.md).
struct CompareThresholds {
  std::optional<double> max_abs;      // max_abs_error <= max_abs
  std::optional<double> max_rel;      // max_rel_error <= max_rel
  std::optional<double> rel_l2;       // rel_l2_error <= rel_l2
  std::optional<double> min_cosine;   // cosine_similarity >= min_cosine
  std::optional<double> min_sqnr_db;  // sqnr_db >= min_sqnr_db

  // The default limits for a tensor of this dtype: the relative L2 error a single op may have
  // when its output is rounded once to the dtype (the op-conformance tolerances,
  // docs/testing.md): f64 1e-12, f32 1e-5, f16 2e-3, bf16 1.6e-2, f8 e4m3fn and e5m2 1.3e-1.
  // Integers and bool must be exact: max_abs 0. Every other limit is unset.
  static CompareThresholds for_dtype(DataType type) noexcept;

  // This set with each limit that `overrides` sets replaced by the value there.
  CompareThresholds with_overrides(const CompareThresholds& overrides) const noexcept;
};

// The result of comparing one named tensor. Metrics are computed in double over the elements
// that are finite on both sides (docs/compare.md gives every formula); they are nullopt when no
// metrics were computed (a tensor missing on one side, or shapes or dtypes that differ).
struct TensorComparison {
  std::string name;

  // Each side's dtype and shape; nullopt when the tensor is missing on that side.
  std::optional<DataType> candidate_dtype;
  std::optional<Dims> candidate_shape;
  std::optional<DataType> reference_dtype;
  std::optional<Dims> reference_shape;
  bool shape_match = false;
  bool dtype_match = false;

  // Elements in each tensor (when the shapes match), and how many of them are finite on both
  // sides and so enter the metrics.
  std::optional<std::int64_t> element_count;
  std::optional<std::int64_t> compared_count;

  // NaN and infinities on each side (0 for integer and bool tensors).
  std::int64_t candidate_nan_count = 0;
  std::int64_t candidate_inf_count = 0;
  std::int64_t reference_nan_count = 0;
  std::int64_t reference_inf_count = 0;
  // Positions where the two sides are not equally non-finite: NaN against a non-NaN, an infinity
  // against anything but the same infinity. Any is a failure.
  std::optional<std::int64_t> nonfinite_mismatch_count;

  std::optional<double> max_abs_error;      // max |c - r|
  std::optional<double> max_rel_error;      // max |c - r| / |r| over elements with r != 0
  std::optional<double> mean_abs_error;     // mean |c - r|
  std::optional<double> rmse;               // sqrt(mean (c - r)^2)
  std::optional<double> rel_l2_error;       // ||c - r|| / ||r||; 0 when both are 0, +inf when only ||r|| is 0
  std::optional<double> cosine_similarity;  // c.r / (||c|| ||r||); 1 when both norms are 0, 0 when one is
  std::optional<double> sqnr_db;            // 10 log10(||r||^2 / ||c - r||^2); +inf when c == r
  std::optional<double> p99_abs_error;      // 99th percentile of |c - r|, NumPy's default (linear) method
  // Flat (C-order) index of the first element with the largest |c - r|, and the two values there.
  std::optional<std::int64_t> max_abs_error_index;
  std::optional<double> max_abs_error_candidate;
  std::optional<double> max_abs_error_reference;

  // The limits applied, whether the tensor passed, and one line per failed check naming the
  // metric, its value and the limit ("rel_l2_error 3.2e-04 > 1e-05").
  CompareThresholds thresholds;
  bool passed = false;
  std::vector<std::string> failed_checks;
};

// Compares two tensors. Different shapes or dtypes give a failed comparison with no metrics (not
// an exception). Throws InvalidArgumentError for a NaN limit or a tensor whose byte size does not
// match its dtype and shape.
TensorComparison compare_tensors(const std::string& name, const HostTensor& candidate, const HostTensor& reference,
                                 const CompareThresholds& thresholds);

// Compares two files tensor by tensor. Two `.npy` files hold one tensor each, named after the
// candidate file (its name without `.npy`); otherwise both must be safetensors files, whose
// tensors are matched by name and reported sorted by name; a name found on one side only is a
// failed entry ("missing in candidate" / "missing in reference"). Each tensor is checked against
// CompareThresholds::for_dtype(its reference dtype, else its candidate dtype).with_overrides(overrides).
// Throws IoError or FormatError naming the file when a file can't be read or is invalid, and
// InvalidArgumentError when one file is .npy and the other is not.
std::vector<TensorComparison> compare_files(const std::filesystem::path& candidate,
                                            const std::filesystem::path& reference,
                                            const CompareThresholds& overrides = {});

// One JSON object: {"tensors": [...], "passed": true when every comparison passed}. Metrics that
// were not computed are null; metrics or limits that are not finite are the strings "inf", "-inf"
// or "nan", so the output stays valid JSON (docs/compare.md shows the layout).
std::string to_json(const std::vector<TensorComparison>& comparisons);

// Reads a NumPy .npy file (format 1.0, 2.0 or 3.0; little-endian <f8 <f4 <f2 |i1 <i2 <i4 <i8 |u1 |b1;
// C order). Throws IoError when it can't be read and FormatError naming the file for anything
// else: a damaged or truncated file, Fortran order, big-endian or object arrays, other dtypes.
HostTensor read_npy(const std::filesystem::path& path);
// The same for a file held in memory; `display_name` names it in error messages.
HostTensor parse_npy(const void* data, std::size_t size, const std::string& display_name);

}  // namespace tensoracle
