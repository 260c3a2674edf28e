// A histogram of |x| over calibration batches whose range grows by doubling, and the clipping value (amax) that each
// calibration method chooses from it.
#pragma once

#include <cstdint>
#include <vector>

#include "tensoracle/calibrate.hpp"

namespace tensoracle::calibrate {

// `bins` equal bins over [0, range). The first values with a non-zero magnitude set the range to their largest
// magnitude; a later largest magnitude beyond it doubles the range (merging pairs of bins, so no count moves between
// bins other than by the merge) until it fits. A value equal to the range falls in the last bin. NaNs are counted
// apart and ignored; infinities are refused by add().
class AbsHistogram {
 public:
  explicit AbsHistogram(int bins);

  // Adds |v| of each value. Throws InvalidArgumentError on an infinity (no finite range holds it), naming `what`.
  void add(const float* values, std::size_t count, const char* what);

  int bins() const noexcept { return static_cast<int>(counts_.size()); }
  double range() const noexcept { return range_; }  // 0 while only zeros were seen
  double bin_width() const noexcept { return range_ / static_cast<double>(counts_.size()); }
  double max_abs() const noexcept { return max_abs_; }
  std::uint64_t total() const noexcept { return total_; }
  std::uint64_t nans() const noexcept { return nans_; }
  const std::vector<std::uint64_t>& counts() const noexcept { return counts_; }

 private:
  std::vector<std::uint64_t> counts_;
  double range_ = 0;
  double max_abs_ = 0;
  std::uint64_t total_ = 0;
  std::uint64_t zeros_before_range_ = 0;  // zeros seen while the range was still 0 (go to bin 0 once it is set)
  std::uint64_t nans_ = 0;
};

// The largest representable magnitude of the quantized type: 127 (i8; symmetric, -128 unused) or 448 (f8 e4m3fn).
double quantized_max(DataType quantized);

// The clip the method chooses: kMax the largest |x|; kPercentile the upper edge of the bin where the cumulative count
// reaches `percentile` % (at most max_abs); kEntropy (i8 only) the threshold whose 128-level quantization of the
// distribution below it (the counts above it added to its last bin) has the least KL divergence from it, as TensorRT's
// entropy calibrator chooses (thresholds from 128 bins up); kMse the threshold, among the upper edges of bins 1 to all,
// whose quantize-dequantize of every bin's centre (clipped to it, rounded to the quantized type's grid) has the least
// count-weighted squared error. 0 when every value was zero.
double choose_amax(const AbsHistogram& histogram, CalibrationMethod method, double percentile, DataType quantized);

}  // namespace tensoracle::calibrate
