// The erf-GELUs of the CUTLASS products' epilogues (backends/cuda/kernels/gelu_erf_fast.hpp): gelu_erf_fast (results
// quantized next) and gelu_erf_erfc (float results), their host forms against the exact x·(1 + erf(x/√2))/2 in double:
// the documented error bounds over a dense grid and at large magnitudes, f16 roundings, and NaN and infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cuda/kernels/gelu_erf_fast.hpp"
#include "tensoracle/float_convert.hpp"

namespace tensoracle::cuda::kernels {
namespace {

double exact_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST(GeluErfFast, WithinTheDocumentedBoundEverywhere) {
  double worst = 0;
  for (int i = -800000; i <= 800000; ++i) {  // ±8 in steps of 1e-5
    const float x = static_cast<float>(i * 1e-5);
    const double error = std::fabs(gelu_erf_fast(x) - exact_gelu(x));
    worst = std::max(worst, error);
    ASSERT_LE(error, 5e-6 + 2.4e-7 * std::fabs(x)) << "x = " << x;
  }
  EXPECT_LT(worst, 4e-6);
  EXPECT_GT(worst, 1e-7);  // an approximation, not erff: the bound is the one that matters
  for (float x : {10.0F, 300.0F, 1e6F, 3e38F, -10.0F, -300.0F, -1e6F, -3e38F}) {
    const double want = exact_gelu(x);
    EXPECT_LE(std::fabs(gelu_erf_fast(x) - want), 5e-6 + 2.4e-7 * std::fabs(x)) << "x = " << x;
  }
  EXPECT_EQ(gelu_erf_fast(0.0F), 0.0F);
}

TEST(GeluErfFast, NanAndInfinities) {
  EXPECT_TRUE(std::isnan(gelu_erf_fast(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(gelu_erf_fast(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  const float minus = gelu_erf_fast(-std::numeric_limits<float>::infinity());
  EXPECT_LE(minus, 0.0F);
  EXPECT_GT(minus, -1.2e-7F);
}

// The exact erf-GELU from erfc, which keeps its relative accuracy in the negative tail.
double exact_gelu_erfc(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

TEST(GeluErfErfc, RelativeErrorWithinTheDocumentedBoundAndF16RoundingsAgree) {
  double worst_relative = 0;
  std::int64_t values = 0, f16_differs = 0;
  for (int i = -1200000; i <= 1200000; ++i) {  // ±12 in steps of 1e-5
    const float x = static_cast<float>(i * 1e-5);
    const double want = exact_gelu_erfc(x);
    const float got = gelu_erf_erfc(x);
    if (std::fabs(want) > 1e-30) worst_relative = std::max(worst_relative, std::fabs(got - want) / std::fabs(want));
    ASSERT_LE(std::fabs(got - want), 4e-7 + 3e-5 * std::fabs(want)) << "x = " << x;
    ++values;
    if (f32_to_f16_bits(got) != f32_to_f16_bits(static_cast<float>(want))) ++f16_differs;
  }
  EXPECT_LT(worst_relative, 3e-5);
  // Rounded to f16, 0.02 % of the results differ from the exact erf-GELU's (by one unit); erff's form differs for 4.8
  // %.
  EXPECT_LT(static_cast<double>(f16_differs) / static_cast<double>(values), 5e-4);
  for (float x : {10.0F, 300.0F, 1e6F, 3e38F, -10.0F, -300.0F, -1e6F, -3e38F}) {
    EXPECT_LE(std::fabs(gelu_erf_erfc(x) - exact_gelu_erfc(x)), 1e-6 * std::fabs(x)) << "x = " << x;
  }
  EXPECT_EQ(gelu_erf_erfc(0.0F), 0.0F);
}

TEST(GeluErfErfc, NanAndInfinities) {
  EXPECT_TRUE(std::isnan(gelu_erf_erfc(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(gelu_erf_erfc(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(gelu_erf_erfc(-std::numeric_limits<float>::infinity())));  // -inf · 0, as erff's form
}

}  // namespace
}  // namespace tensoracle::cuda::kernels
