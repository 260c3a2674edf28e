// The |x| histogram of calibration and the clip each method chooses from it.
#include "calibrate/abs_histogram.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensoracle/error.hpp"
#include "tensoracle/float_convert.hpp"

namespace tensoracle::calibrate {

AbsHistogram::AbsHistogram(int bins) {
  if (bins < 128 || bins % 2 != 0) {
    throw InvalidArgumentError(fmt::format("calibration histogram: {} bins; give an even number, at least 128", bins));
  }
  counts_.assign(static_cast<std::size_t>(bins), 0);
}

void AbsHistogram::add(const float* values, std::size_t count, const char* what) {
  float batch_max = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const float v = std::fabs(values[i]);
    if (std::isinf(v)) {
      throw InvalidArgumentError(
          fmt::format("calibration: activation '{}' holds an infinity; a finite range cannot hold it", what));
    }
    if (v > batch_max) batch_max = v;  // NaN compares false
  }
  if (batch_max > 0 && range_ == 0) {
    range_ = batch_max;
    counts_[0] += zeros_before_range_;
    zeros_before_range_ = 0;
  }
  // Double the range, merging bin pairs, until the batch's largest magnitude fits.
  while (range_ > 0 && batch_max > range_) {
    const std::size_t half = counts_.size() / 2;
    for (std::size_t b = 0; b < half; ++b) counts_[b] = counts_[2 * b] + counts_[2 * b + 1];
    std::fill(counts_.begin() + static_cast<std::ptrdiff_t>(half), counts_.end(), 0);
    range_ *= 2;
  }
  max_abs_ = std::max(max_abs_, static_cast<double>(batch_max));
  const double per_bin = range_ > 0 ? static_cast<double>(counts_.size()) / range_ : 0;
  const std::size_t last = counts_.size() - 1;
  for (std::size_t i = 0; i < count; ++i) {
    const float v = std::fabs(values[i]);
    if (std::isnan(v)) {
      ++nans_;
      continue;
    }
    ++total_;
    if (range_ == 0) {
      ++zeros_before_range_;
      continue;
    }
    counts_[std::min(last, static_cast<std::size_t>(static_cast<double>(v) * per_bin))] += 1;
  }
}

double quantized_max(DataType quantized) { return quantized == DataType::kF8E4M3 ? 448.0 : 127.0; }

namespace {

double percentile_amax(const AbsHistogram& h, double percentile) {
  const double target = static_cast<double>(h.total()) * percentile / 100.0;
  double seen = 0;
  const auto& counts = h.counts();
  for (std::size_t b = 0; b < counts.size(); ++b) {
    seen += static_cast<double>(counts[b]);
    if (seen >= target) return std::min(h.max_abs(), static_cast<double>(b + 1) * h.bin_width());
  }
  return h.max_abs();
}

// KL divergence of the distribution of bins [0, i) (the counts above it folded into bin i - 1) from its quantization
// to 128 levels: level j covers bins [j·i/128, (j+1)·i/128) and its count is spread evenly over the bins of the
// level that held values (before the fold). A bin the reference holds and the quantization does not (only the folded
// last one can be) counts with a quantized probability of 1e-12.
double entropy_divergence(const std::vector<std::uint64_t>& counts, std::size_t i, double above) {
  constexpr std::size_t kLevels = 128;
  std::vector<double> p(i), q(i, 0.0);
  double p_total = 0;
  for (std::size_t b = 0; b < i; ++b) {
    p[b] = static_cast<double>(counts[b]);
    p_total += p[b];
  }
  p[i - 1] += above;
  p_total += above;
  double q_total = 0;
  for (std::size_t j = 0; j < kLevels; ++j) {
    const std::size_t begin = j * i / kLevels, end = (j + 1) * i / kLevels;
    double level = 0;
    std::size_t held = 0;
    for (std::size_t b = begin; b < end; ++b) {
      level += static_cast<double>(counts[b]);
      held += counts[b] != 0 ? 1 : 0;
    }
    for (std::size_t b = begin; b < end; ++b) {
      if (counts[b] != 0) q[b] = level / static_cast<double>(held);
    }
    q_total += level;
  }
  if (p_total == 0 || q_total == 0) return std::numeric_limits<double>::infinity();
  double divergence = 0;
  for (std::size_t b = 0; b < i; ++b) {
    if (p[b] == 0) continue;
    const double pb = p[b] / p_total;
    const double qb = q[b] > 0 ? q[b] / q_total : 1e-12;
    divergence += pb * std::log(pb / qb);
  }
  return divergence;
}

double entropy_amax(const AbsHistogram& h) {
  const auto& counts = h.counts();
  double above = 0;
  for (std::size_t b = 128; b < counts.size(); ++b) above += static_cast<double>(counts[b]);
  double best = std::numeric_limits<double>::infinity();
  std::size_t best_i = counts.size();
  for (std::size_t i = 128; i <= counts.size(); ++i) {
    const double divergence = entropy_divergence(counts, i, above);
    if (divergence < best) {
      best = divergence;
      best_i = i;
    }
    if (i < counts.size()) above -= static_cast<double>(counts[i]);
  }
  return std::min(h.max_abs(), static_cast<double>(best_i) * h.bin_width());
}

// |v| quantized with `scale` and dequantized: clipped to the largest magnitude, rounded to the type's grid (i8: half
// to even; f8 e4m3fn: its own rounding).
double quantize_dequantize(double v, double scale, DataType quantized) {
  const double q = std::min(v / scale, quantized_max(quantized));
  if (quantized == DataType::kF8E4M3) {
    return static_cast<double>(f8e4m3_bits_to_f32(f32_to_f8e4m3_bits(static_cast<float>(q)))) * scale;
  }
  return std::nearbyint(q) * scale;  // the default rounding mode: to nearest, ties to even
}

double mse_amax(const AbsHistogram& h, DataType quantized) {
  const auto& counts = h.counts();
  const double width = h.bin_width();
  double best = std::numeric_limits<double>::infinity();
  double best_amax = h.max_abs();
  for (std::size_t k = 1; k <= counts.size(); ++k) {
    const double amax = std::min(h.max_abs(), static_cast<double>(k) * width);
    const double scale = amax / quantized_max(quantized);
    double error = 0;
    for (std::size_t b = 0; b < counts.size(); ++b) {
      if (counts[b] == 0) continue;
      const double centre = (static_cast<double>(b) + 0.5) * width;
      const double d = centre - quantize_dequantize(centre, scale, quantized);
      error += static_cast<double>(counts[b]) * d * d;
    }
    if (error < best) {
      best = error;
      best_amax = amax;
    }
  }
  return best_amax;
}

}  // namespace

double choose_amax(const AbsHistogram& histogram, CalibrationMethod method, double percentile, DataType quantized) {
  if (histogram.max_abs() == 0) return 0;
  switch (method) {
    case CalibrationMethod::kMax: return histogram.max_abs();
    case CalibrationMethod::kPercentile: return percentile_amax(histogram, percentile);
    case CalibrationMethod::kEntropy: return entropy_amax(histogram);
    case CalibrationMethod::kMse: return mse_amax(histogram, quantized);
  }
  return histogram.max_abs();
}

}  // namespace tensoracle::calibrate
