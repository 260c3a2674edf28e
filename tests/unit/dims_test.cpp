// Tests for Dims: dynamic dimensions, volume, overflow and printing.
#include <gtest/gtest.h>

#include <limits>

#include "tensoracle/dims.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {
namespace {

TEST(Dims, ScalarHasRankZeroAndVolumeOne) {
  Dims scalar;
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_TRUE(scalar.is_static());
  EXPECT_EQ(scalar.volume(), 1);
  EXPECT_EQ(scalar.to_string(), "[]");
}

TEST(Dims, VolumeAndZeroSizedDims) {
  EXPECT_EQ(Dims({2, 3, 4}).volume(), 24);
  EXPECT_EQ(Dims({2, 0, 4}).volume(), 0);
  EXPECT_EQ(Dims({7}).to_string(), "[7]");
}

TEST(Dims, DynamicDimensions) {
  Dims d{-1, 768};
  EXPECT_FALSE(d.is_static());
  EXPECT_EQ(d.to_string(), "[-1,768]");
  EXPECT_THROW(d.volume(), InvalidArgumentError);
  d[0] = 8;
  EXPECT_TRUE(d.is_static());
  EXPECT_EQ(d.volume(), 8 * 768);
}

TEST(Dims, VolumeOverflowIsAnError) {
  const auto big = std::numeric_limits<std::int64_t>::max() / 2;
  EXPECT_THROW(Dims({big, 3}).volume(), InvalidArgumentError);
}

TEST(Dims, Equality) {
  EXPECT_EQ(Dims({1, 2}), Dims({1, 2}));
  EXPECT_NE(Dims({1, 2}), Dims({2, 1}));
  EXPECT_NE(Dims({1}), Dims({1, 1}));
}

TEST(Dims, IndexOutOfRangeThrows) {
  Dims d{1, 2};
  EXPECT_THROW(d[2], std::out_of_range);
}

}  // namespace
}  // namespace tensoracle
