// Tests for DataType names, sizes and parsing.
#include <gtest/gtest.h>

#include "tensoracle/data_type.hpp"

namespace tensoracle {
namespace {

TEST(DataType, SizesAndNamesMatchSafetensors) {
  struct Expected {
    DataType type;
    std::size_t size;
    const char* name;
    const char* st_name;
  };
  const Expected expected[] = {
      {DataType::kF64, 8, "f64", "F64"},
      {DataType::kF32, 4, "f32", "F32"},
      {DataType::kF16, 2, "f16", "F16"},
      {DataType::kBF16, 2, "bf16", "BF16"},
      {DataType::kF8E4M3, 1, "f8e4m3", "F8_E4M3"},
      {DataType::kF8E5M2, 1, "f8e5m2", "F8_E5M2"},
      {DataType::kI64, 8, "i64", "I64"},
      {DataType::kI32, 4, "i32", "I32"},
      {DataType::kI16, 2, "i16", "I16"},
      {DataType::kI8, 1, "i8", "I8"},
      {DataType::kU8, 1, "u8", "U8"},
      {DataType::kBool, 1, "bool", "BOOL"},
  };
  ASSERT_EQ(std::size(expected), static_cast<std::size_t>(kNumDataTypes));
  for (const auto& e : expected) {
    EXPECT_EQ(element_size(e.type), e.size) << e.name;
    EXPECT_EQ(to_string(e.type), e.name);
    EXPECT_EQ(safetensors_name(e.type), e.st_name);
    EXPECT_EQ(data_type_from_string(e.name), e.type);
    EXPECT_EQ(data_type_from_safetensors_name(e.st_name), e.type);
  }
}

TEST(DataType, UnknownNamesAreRejected) {
  EXPECT_FALSE(data_type_from_safetensors_name("U16").has_value());
  EXPECT_FALSE(data_type_from_safetensors_name("f32").has_value());  // case matters
  EXPECT_FALSE(data_type_from_safetensors_name("").has_value());
  EXPECT_FALSE(data_type_from_string("F32").has_value());
  EXPECT_FALSE(data_type_from_string("float").has_value());
}

TEST(DataType, Categories) {
  EXPECT_TRUE(is_floating_point(DataType::kBF16));
  EXPECT_TRUE(is_floating_point(DataType::kF8E5M2));
  EXPECT_FALSE(is_floating_point(DataType::kI8));
  EXPECT_TRUE(is_integer(DataType::kU8));
  EXPECT_FALSE(is_integer(DataType::kBool));
  EXPECT_FALSE(is_integer(DataType::kF32));
}

}  // namespace
}  // namespace tensoracle
