// The erf-GELU that products with a quantized result use on the GPU (backends/cuda/kernels/gelu_erf_fast.hpp), its
// host form against the exact x·(1 + erf(x/√2))/2 in double: the documented error bound over a dense grid and at large
// magnitudes, and NaN and infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/cuda/kernels/gelu_erf_fast.hpp"

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

}  // namespace
}  // namespace tensoracle::cuda::kernels
