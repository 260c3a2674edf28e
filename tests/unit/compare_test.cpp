// Tests of output comparison: metric values on hand-checkable tensors, NaN/Inf rules, thresholds, files, JSON and .npy
// parsing.
#include "tensoracle/compare.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensoracle/error.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {
namespace {

namespace fs = std::filesystem;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
HostTensor make(DataType dtype, const Dims& shape, const std::vector<T>& values) {
  HostTensor t(dtype, shape);
  EXPECT_EQ(values.size() * sizeof(T), t.bytes.size());
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

HostTensor f32(const std::vector<float>& values) {
  return make(DataType::kF32, Dims{static_cast<std::int64_t>(values.size())}, values);
}
HostTensor f64(const std::vector<double>& values) {
  return make(DataType::kF64, Dims{static_cast<std::int64_t>(values.size())}, values);
}

CompareThresholds no_limits() { return {}; }

// ---- metric values ----

TEST(CompareTensors, IdenticalTensorsHaveZeroErrorAndPass) {
  const HostTensor a = f32({1.5f, -2.0f, 3.25f, 0.0f});
  const TensorComparison c = compare_tensors("x", a, a, CompareThresholds::for_dtype(DataType::kF32));
  EXPECT_TRUE(c.passed);
  EXPECT_TRUE(c.failed_checks.empty());
  EXPECT_TRUE(c.shape_match);
  EXPECT_TRUE(c.dtype_match);
  EXPECT_EQ(c.element_count, 4);
  EXPECT_EQ(c.compared_count, 4);
  EXPECT_EQ(c.max_abs_error, 0.0);
  EXPECT_EQ(c.max_rel_error, 0.0);
  EXPECT_EQ(c.mean_abs_error, 0.0);
  EXPECT_EQ(c.rmse, 0.0);
  EXPECT_EQ(c.rel_l2_error, 0.0);
  EXPECT_EQ(c.cosine_similarity, 1.0);
  EXPECT_EQ(c.sqnr_db, kInf);
  EXPECT_EQ(c.p99_abs_error, 0.0);
}

TEST(CompareTensors, HandComputedMetrics) {
  // d = c - r = [0, 0, 0, -1]; ||r||^2 = 1 + 4 + 9 + 25 = 39; ||c||^2 = 30; c.r = 34.
  const TensorComparison c = compare_tensors("x", f32({1, 2, 3, 4}), f32({1, 2, 3, 5}), no_limits());
  EXPECT_TRUE(c.passed);  // no limits set
  EXPECT_DOUBLE_EQ(*c.max_abs_error, 1.0);
  EXPECT_DOUBLE_EQ(*c.max_rel_error, 0.2);
  EXPECT_DOUBLE_EQ(*c.mean_abs_error, 0.25);
  EXPECT_DOUBLE_EQ(*c.rmse, 0.5);
  EXPECT_DOUBLE_EQ(*c.rel_l2_error, 1.0 / std::sqrt(39.0));
  EXPECT_DOUBLE_EQ(*c.cosine_similarity, 34.0 / std::sqrt(30.0 * 39.0));
  EXPECT_DOUBLE_EQ(*c.sqnr_db, 10.0 * std::log10(39.0));
  // Sorted |d| = [0, 0, 0, 1]; virtual index 0.99 * 3 = 2.97: 0 + 0.97 * (1 - 0).
  EXPECT_NEAR(*c.p99_abs_error, 0.97, 1e-15);
  EXPECT_EQ(c.max_abs_error_index, 3);
  EXPECT_EQ(c.max_abs_error_candidate, 4.0);
  EXPECT_EQ(c.max_abs_error_reference, 5.0);
}

TEST(CompareTensors, PercentileIsNumpyLinear) {
  // np.percentile(np.arange(10), 99) == 8.91; np.percentile(np.arange(101), 99) == 99.
  std::vector<double> ten(10), zeros10(10, 0.0), hundred_one(101), zeros101(101, 0.0);
  for (int i = 0; i < 10; ++i) ten[static_cast<std::size_t>(i)] = 9 - i;  // order must not matter
  for (int i = 0; i < 101; ++i) hundred_one[static_cast<std::size_t>(i)] = i;
  EXPECT_NEAR(*compare_tensors("a", f64(ten), f64(zeros10), no_limits()).p99_abs_error, 8.91, 1e-12);
  EXPECT_DOUBLE_EQ(*compare_tensors("b", f64(hundred_one), f64(zeros101), no_limits()).p99_abs_error, 99.0);
  EXPECT_DOUBLE_EQ(*compare_tensors("c", f64({7}), f64({2}), no_limits()).p99_abs_error, 5.0);
}

TEST(CompareTensors, MaxRelIgnoresZeroReferenceElements) {
  const TensorComparison c = compare_tensors("x", f32({5, 1.5}), f32({0, 1}), no_limits());
  EXPECT_DOUBLE_EQ(*c.max_rel_error, 0.5);
  EXPECT_DOUBLE_EQ(*c.max_abs_error, 5.0);
  EXPECT_EQ(c.max_abs_error_index, 0);
}

TEST(CompareTensors, ZeroReferenceCases) {
  // 0/0: both all zeros.
  const TensorComparison both = compare_tensors("z", f32({0, 0, 0}), f32({0, 0, 0}), no_limits());
  EXPECT_EQ(both.rel_l2_error, 0.0);
  EXPECT_EQ(both.cosine_similarity, 1.0);
  EXPECT_EQ(both.sqnr_db, kInf);
  EXPECT_EQ(both.max_rel_error, 0.0);
  // x/0: reference all zeros, candidate not.
  const TensorComparison ref_zero =
      compare_tensors("z", f32({0, 2, 0}), f32({0, 0, 0}), CompareThresholds::for_dtype(DataType::kF32));
  EXPECT_EQ(ref_zero.rel_l2_error, kInf);
  EXPECT_EQ(ref_zero.cosine_similarity, 0.0);
  EXPECT_EQ(ref_zero.sqnr_db, -kInf);
  EXPECT_FALSE(ref_zero.passed);
  // Candidate all zeros, reference not.
  const TensorComparison cand_zero = compare_tensors("z", f32({0, 0}), f32({3, 4}), no_limits());
  EXPECT_DOUBLE_EQ(*cand_zero.rel_l2_error, 1.0);
  EXPECT_EQ(cand_zero.cosine_similarity, 0.0);
  EXPECT_DOUBLE_EQ(*cand_zero.sqnr_db, 0.0);
  EXPECT_DOUBLE_EQ(*cand_zero.max_rel_error, 1.0);
}

TEST(CompareTensors, OppositeVectorsAndHugeF64ValuesDoNotOverflowTheRatios) {
  const TensorComparison c = compare_tensors("x", f64({1e308, -1e308}), f64({-1e308, 1e308}), no_limits());
  EXPECT_DOUBLE_EQ(*c.rel_l2_error, 2.0);
  EXPECT_DOUBLE_EQ(*c.cosine_similarity, -1.0);
  EXPECT_NEAR(*c.sqnr_db, 10.0 * std::log10(0.25), 1e-12);
  EXPECT_EQ(c.max_abs_error, kInf);  // |c - r| = 2e308 is beyond double
  EXPECT_DOUBLE_EQ(*c.max_rel_error, 2.0);
  EXPECT_EQ(c.nonfinite_mismatch_count, 0);
}

TEST(CompareTensors, EmptyTensorsPass) {
  const HostTensor e = make<float>(DataType::kF32, Dims{0, 3}, {});
  const TensorComparison c = compare_tensors("e", e, e, CompareThresholds::for_dtype(DataType::kF32));
  EXPECT_TRUE(c.passed);
  EXPECT_EQ(c.element_count, 0);
  EXPECT_EQ(c.compared_count, 0);
  EXPECT_EQ(c.max_abs_error, 0.0);
  EXPECT_EQ(c.p99_abs_error, 0.0);
  EXPECT_FALSE(c.max_abs_error_index.has_value());
}

// ---- NaN and infinities ----

TEST(CompareTensors, MatchingNaNAndInfinitiesAreEqualAndLeftOutOfTheMetrics) {
  const TensorComparison c =
      compare_tensors("x", f64({kNaN, kInf, -kInf, 1.0, 2.0}), f64({-kNaN, kInf, -kInf, 1.0, 2.5}), no_limits());
  EXPECT_TRUE(c.passed);
  EXPECT_EQ(c.compared_count, 2);
  EXPECT_EQ(c.nonfinite_mismatch_count, 0);
  EXPECT_EQ(c.candidate_nan_count, 1);
  EXPECT_EQ(c.candidate_inf_count, 2);
  EXPECT_EQ(c.reference_nan_count, 1);
  EXPECT_EQ(c.reference_inf_count, 2);
  EXPECT_DOUBLE_EQ(*c.max_abs_error, 0.5);
  EXPECT_DOUBLE_EQ(*c.mean_abs_error, 0.25);
}

TEST(CompareTensors, UnmatchedNonFiniteValuesFailWithoutAnyLimit) {
  struct Case {
    double c, r;
  };
  for (const Case& k : {Case{kNaN, 1.0}, Case{1.0, kNaN}, Case{kInf, 1.0}, Case{1.0, -kInf}, Case{kInf, -kInf},
                        Case{kNaN, kInf}, Case{-kInf, kNaN}}) {
    SCOPED_TRACE(std::to_string(k.c) + " vs " + std::to_string(k.r));
    const TensorComparison c = compare_tensors("x", f64({0.0, k.c}), f64({0.0, k.r}), no_limits());
    EXPECT_FALSE(c.passed);
    EXPECT_EQ(c.nonfinite_mismatch_count, 1);
    EXPECT_EQ(c.compared_count, 1);
    ASSERT_EQ(c.failed_checks.size(), 1u);
    EXPECT_NE(c.failed_checks[0].find("flat index 1"), std::string::npos) << c.failed_checks[0];
  }
}

// ---- dtypes ----

TEST(CompareTensors, HalfPrecisionValuesAreWidenedExactly) {
  const std::vector<std::uint16_t> c{f32_to_f16_bits(1.0f), f32_to_f16_bits(-2.0f)};
  const std::vector<std::uint16_t> r{f32_to_f16_bits(1.0f + 1.0f / 1024), f32_to_f16_bits(-2.0f)};
  const TensorComparison t = compare_tensors("h", make(DataType::kF16, Dims{2}, c), make(DataType::kF16, Dims{2}, r),
                                             CompareThresholds::for_dtype(DataType::kF16));
  EXPECT_EQ(t.max_abs_error, 1.0 / 1024);
  EXPECT_TRUE(t.passed);  // rel L2 (1/1024) / sqrt(1.0009765625^2 + 4) ~ 4.4e-4 < 2e-3

  const std::vector<std::uint16_t> bc{f32_to_bf16_bits(1.0f)}, br{f32_to_bf16_bits(1.0f + 1.0f / 128)};
  const TensorComparison b =
      compare_tensors("b", make(DataType::kBF16, Dims{1}, bc), make(DataType::kBF16, Dims{1}, br), no_limits());
  EXPECT_EQ(b.max_abs_error, 1.0 / 128);

  const std::vector<std::uint8_t> nan8{0x7F}, one8{f32_to_f8e4m3_bits(1.0f)};
  const TensorComparison f8 = compare_tensors("f8", make(DataType::kF8E4M3, Dims{1}, nan8),
                                              make(DataType::kF8E4M3, Dims{1}, one8), no_limits());
  EXPECT_EQ(f8.candidate_nan_count, 1);
  EXPECT_FALSE(f8.passed);
}

TEST(CompareTensors, IntegersAreExactEvenBeyondDoublePrecision) {
  const std::int64_t big = std::int64_t{1} << 62;
  const TensorComparison c = compare_tensors("i", make<std::int64_t>(DataType::kI64, Dims{2}, {big, -5}),
                                             make<std::int64_t>(DataType::kI64, Dims{2}, {big + 1, -5}),
                                             CompareThresholds::for_dtype(DataType::kI64));
  EXPECT_EQ(c.max_abs_error, 1.0);
  EXPECT_FALSE(c.passed);
  ASSERT_EQ(c.failed_checks.size(), 1u);
  EXPECT_EQ(c.failed_checks[0], "max_abs_error 1 > 0");

  const std::int64_t lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
  const TensorComparison extreme = compare_tensors("i", make<std::int64_t>(DataType::kI64, Dims{1}, {hi}),
                                                   make<std::int64_t>(DataType::kI64, Dims{1}, {lo}), no_limits());
  EXPECT_DOUBLE_EQ(*extreme.max_abs_error, 18446744073709551615.0);

  const TensorComparison u8 = compare_tensors("u", make<std::uint8_t>(DataType::kU8, Dims{2}, {0, 7}),
                                              make<std::uint8_t>(DataType::kU8, Dims{2}, {255, 7}), no_limits());
  EXPECT_EQ(u8.max_abs_error, 255.0);

  const TensorComparison same = compare_tensors("b", make<std::uint8_t>(DataType::kBool, Dims{3}, {0, 1, 1}),
                                                make<std::uint8_t>(DataType::kBool, Dims{3}, {0, 1, 1}),
                                                CompareThresholds::for_dtype(DataType::kBool));
  EXPECT_TRUE(same.passed);
  EXPECT_EQ(same.candidate_nan_count, 0);
}

TEST(CompareTensors, ShapeOrDtypeMismatchFailsWithoutMetrics) {
  const HostTensor a = make<float>(DataType::kF32, Dims{2, 3}, {1, 2, 3, 4, 5, 6});
  const HostTensor b = make<float>(DataType::kF32, Dims{3, 2}, {1, 2, 3, 4, 5, 6});
  const TensorComparison shape = compare_tensors("s", a, b, no_limits());
  EXPECT_FALSE(shape.passed);
  EXPECT_FALSE(shape.shape_match);
  EXPECT_TRUE(shape.dtype_match);
  EXPECT_FALSE(shape.max_abs_error.has_value());
  EXPECT_FALSE(shape.rel_l2_error.has_value());
  EXPECT_FALSE(shape.element_count.has_value());
  ASSERT_EQ(shape.failed_checks.size(), 1u);
  EXPECT_EQ(shape.failed_checks[0], "shape [2,3] != reference shape [3,2]");

  const HostTensor d = make<double>(DataType::kF64, Dims{2, 3}, {1, 2, 3, 4, 5, 6});
  const TensorComparison dtype = compare_tensors("d", a, d, no_limits());
  EXPECT_FALSE(dtype.passed);
  EXPECT_TRUE(dtype.shape_match);
  EXPECT_FALSE(dtype.dtype_match);
  EXPECT_FALSE(dtype.cosine_similarity.has_value());
  ASSERT_EQ(dtype.failed_checks.size(), 1u);
  EXPECT_EQ(dtype.failed_checks[0], "dtype f32 != reference dtype f64");
}

TEST(CompareTensors, RejectsInconsistentTensorsAndNaNLimits) {
  HostTensor bad = f32({1, 2});
  bad.bytes.pop_back();
  EXPECT_THROW(compare_tensors("x", bad, f32({1, 2}), no_limits()), InvalidArgumentError);
  CompareThresholds nan_limit;
  nan_limit.rel_l2 = kNaN;
  EXPECT_THROW(compare_tensors("x", f32({1}), f32({1}), nan_limit), InvalidArgumentError);
}

// ---- thresholds ----

TEST(CompareThresholds, DefaultsPerDtype) {
  EXPECT_EQ(CompareThresholds::for_dtype(DataType::kF64).rel_l2, 1e-12);
  EXPECT_EQ(CompareThresholds::for_dtype(DataType::kF32).rel_l2, 1e-5);
  EXPECT_EQ(CompareThresholds::for_dtype(DataType::kF16).rel_l2, 2e-3);
  EXPECT_EQ(CompareThresholds::for_dtype(DataType::kBF16).rel_l2, 1.6e-2);
  EXPECT_EQ(CompareThresholds::for_dtype(DataType::kF8E4M3).rel_l2, 1.3e-1);
  EXPECT_EQ(CompareThresholds::for_dtype(DataType::kF8E5M2).rel_l2, 1.3e-1);
  for (DataType t : {DataType::kI64, DataType::kI32, DataType::kI16, DataType::kI8, DataType::kU8, DataType::kBool}) {
    const CompareThresholds d = CompareThresholds::for_dtype(t);
    EXPECT_EQ(d.max_abs, 0.0) << to_string(t);
    EXPECT_FALSE(d.rel_l2.has_value()) << to_string(t);
  }
  EXPECT_FALSE(CompareThresholds::for_dtype(DataType::kF32).max_abs.has_value());
  EXPECT_FALSE(CompareThresholds::for_dtype(DataType::kF32).min_cosine.has_value());
}

TEST(CompareThresholds, OverridesReplaceOnlyTheLimitsTheySet) {
  CompareThresholds overrides;
  overrides.rel_l2 = 0.5;
  overrides.min_cosine = 0.9;
  const CompareThresholds t = CompareThresholds::for_dtype(DataType::kI32).with_overrides(overrides);
  EXPECT_EQ(t.max_abs, 0.0);
  EXPECT_EQ(t.rel_l2, 0.5);
  EXPECT_EQ(t.min_cosine, 0.9);
  EXPECT_FALSE(t.max_rel.has_value());
  EXPECT_EQ(CompareThresholds::for_dtype(DataType::kF16).with_overrides(overrides).rel_l2, 0.5);
}

TEST(CompareThresholds, EachLimitIsCheckedAndNamedInTheFailure) {
  // d = [0, 0, 0, -1] as in HandComputedMetrics.
  const HostTensor c = f32({1, 2, 3, 4}), r = f32({1, 2, 3, 5});
  auto failures = [&](CompareThresholds t) { return compare_tensors("x", c, r, t).failed_checks; };
  CompareThresholds t;
  t.max_abs = 0.5;
  EXPECT_EQ(failures(t), std::vector<std::string>{"max_abs_error 1 > 0.5"});
  t = {};
  t.max_abs = 1.0;  // the limit itself passes
  EXPECT_TRUE(failures(t).empty());
  t = {};
  t.max_rel = 0.1;
  EXPECT_EQ(failures(t), std::vector<std::string>{"max_rel_error 0.2 > 0.1"});
  t = {};
  t.rel_l2 = 0.1;
  EXPECT_EQ(failures(t), std::vector<std::string>{"rel_l2_error 0.160128 > 0.1"});
  t = {};
  t.min_cosine = 0.999;
  EXPECT_EQ(failures(t), std::vector<std::string>{"cosine_similarity 0.993999 < 0.999"});
  t = {};
  t.min_sqnr_db = 20;
  EXPECT_EQ(failures(t), std::vector<std::string>{"sqnr_db 15.9106 < 20"});
  t.min_sqnr_db = 15;
  EXPECT_TRUE(failures(t).empty());
  t = {};
  t.max_abs = 0;
  t.rel_l2 = 0;
  EXPECT_EQ(failures(t).size(), 2u);
}

// ---- files and JSON ----

class TempDir {
 public:
  TempDir() {
    std::random_device random;
    path_ = fs::temp_directory_path() /
            ("tensoracle-compare-test-" + std::to_string(::getpid()) + "-" + std::to_string(random()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A .npy file as NumPy writes it (version 1.0, header padded to 64 bytes).
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t n = header.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) {
    out += static_cast<char>((n >> 16) & 0xff);
    out += static_cast<char>((n >> 24) & 0xff);
  }
  return out + header + data;
}

std::string float_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

TEST(CompareFiles, SafetensorsTensorByTensorWithMissingNames) {
  TempDir dir;
  const std::vector<float> a{1, 2, 3, 4}, b{1, 2, 3, 5};
  const std::vector<std::int32_t> idx{3, 1};
  write_safetensors(dir / "c.safetensors", {{"x", DataType::kF32, Dims{2, 2}, a.data()},
                                            {"i", DataType::kI32, Dims{2}, idx.data()},
                                            {"only_c", DataType::kF32, Dims{4}, a.data()}});
  write_safetensors(dir / "r.safetensors", {{"x", DataType::kF32, Dims{2, 2}, b.data()},
                                            {"i", DataType::kI32, Dims{2}, idx.data()},
                                            {"only_r", DataType::kF32, Dims{1}, a.data()}});
  const std::vector<TensorComparison> results = compare_files(dir / "c.safetensors", dir / "r.safetensors");
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].name, "i");
  EXPECT_TRUE(results[0].passed);
  EXPECT_EQ(results[0].thresholds.max_abs, 0.0);
  EXPECT_EQ(results[1].name, "only_c");
  EXPECT_EQ(results[1].failed_checks, std::vector<std::string>{"missing in reference"});
  EXPECT_TRUE(results[1].candidate_shape.has_value());
  EXPECT_FALSE(results[1].reference_dtype.has_value());
  EXPECT_EQ(results[2].name, "only_r");
  EXPECT_EQ(results[2].failed_checks, std::vector<std::string>{"missing in candidate"});
  EXPECT_EQ(results[3].name, "x");
  EXPECT_FALSE(results[3].passed);  // default f32 rel_l2 1e-5
  EXPECT_DOUBLE_EQ(*results[3].max_abs_error, 1.0);

  CompareThresholds loose;
  loose.rel_l2 = 0.5;
  const std::vector<TensorComparison> relaxed = compare_files(dir / "c.safetensors", dir / "r.safetensors", loose);
  EXPECT_TRUE(relaxed[3].passed);
  EXPECT_TRUE(relaxed[0].passed);  // the integer tensor keeps max_abs 0
  EXPECT_EQ(relaxed[0].thresholds.max_abs, 0.0);

  const std::string json = to_json(results);
  EXPECT_NE(json.find("\"tensors\""), std::string::npos);
  EXPECT_NE(json.find("\"passed\": false"), std::string::npos);
  EXPECT_NE(json.find("\"reference\": null"), std::string::npos);
}

TEST(CompareFiles, NpyPairIsOneTensorNamedAfterTheCandidate) {
  TempDir dir;
  write_bytes(dir / "logits.npy",
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", float_bytes({1.0f, 2.0f})));
  write_bytes(dir / "ref.npy",
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", float_bytes({1.0f, 2.0f}), 2));
  const std::vector<TensorComparison> results = compare_files(dir / "logits.npy", dir / "ref.npy");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].name, "logits");
  EXPECT_TRUE(results[0].passed);
  EXPECT_NE(to_json(results).find("\"sqnr_db\": \"inf\""), std::string::npos);

  const std::vector<float> a{1, 2};
  write_safetensors(dir / "a.safetensors", {{"logits", DataType::kF32, Dims{2}, a.data()}});
  EXPECT_THROW(compare_files(dir / "logits.npy", dir / "a.safetensors"), InvalidArgumentError);
  write_bytes(dir / "broken.safetensors", "not a safetensors file");
  try {
    compare_files(dir / "broken.safetensors", dir / "a.safetensors");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compare_files(dir / "missing.npy", dir / "ref.npy"), IoError);
}

TEST(CompareJson, NonFiniteMetricsAreStringsAndMissingOnesNull) {
  const TensorComparison c = compare_tensors("z", f32({0, 2}), f32({0, 0}), no_limits());
  const std::string json = to_json({c});
  EXPECT_NE(json.find("\"rel_l2_error\": \"inf\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"sqnr_db\": \"-inf\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"passed\": true"), std::string::npos) << json;
  const TensorComparison m = compare_tensors("m", f32({0, 2}), f32({0}), no_limits());
  const std::string mj = to_json({m});
  EXPECT_NE(mj.find("\"rmse\": null"), std::string::npos) << mj;
  EXPECT_EQ(to_json(std::vector<TensorComparison>{}).find("\"passed\": true"),
            to_json(std::vector<TensorComparison>{}).rfind("\"passed\": true"));
}

// ---- .npy parsing ----

HostTensor parse(const std::string& bytes) { return parse_npy(bytes.data(), bytes.size(), "test.npy"); }

std::string format_error(const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "no FormatError";
}

TEST(Npy, ReadsEveryVersionAndSupportedDtype) {
  for (int major : {1, 2, 3}) {
    const HostTensor t = parse(
        npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }", float_bytes({1.5f, -2.0f}), major));
    EXPECT_EQ(t.dtype, DataType::kF32);
    EXPECT_EQ(t.shape, (Dims{1, 2}));
    EXPECT_EQ(t.data<float>()[1], -2.0f);
  }
  struct Case {
    const char* descr;
    DataType type;
  };
  for (const Case& k : {Case{"<f8", DataType::kF64}, Case{"<f2", DataType::kF16}, Case{"|i1", DataType::kI8},
                        Case{"<i2", DataType::kI16}, Case{"<i4", DataType::kI32}, Case{"<i8", DataType::kI64},
                        Case{"|u1", DataType::kU8}, Case{"|b1", DataType::kBool}}) {
    const std::string data(2 * element_size(k.type), '\x01');
    const HostTensor t = parse(
        npy_bytes(std::string("{\"descr\": \"") + k.descr + "\", \"shape\": (2,), \"fortran_order\": False}", data));
    EXPECT_EQ(t.dtype, k.type) << k.descr;
    EXPECT_EQ(t.bytes.size(), data.size());
  }
  const HostTensor scalar =
      parse(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", float_bytes({3})));
  EXPECT_EQ(scalar.shape.rank(), 0);
  const HostTensor empty = parse(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", ""));
  EXPECT_EQ(empty.size(), 0u);
}

TEST(Npy, RejectsDamagedAndUnsupportedFilesNamingThem) {
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string data = float_bytes({1, 2});
  const std::string good = npy_bytes(good_dict, data);
  struct Case {
    std::string bytes;
    std::string expected;
  };
  std::string bad_magic = good;
  bad_magic[1] = 'X';
  std::string bad_version = good;
  bad_version[6] = 4;
  std::string bad_minor = good;
  bad_minor[7] = 1;
  std::string long_header = good;
  long_header[8] = '\xff';
  long_header[9] = '\x7f';
  const std::vector<Case> cases = {
      {"", "shorter than"},
      {"\x93NUMPY\x01", "shorter than"},
      {bad_magic, "magic"},
      {bad_version, "version 4.0"},
      {bad_minor, "version 1.1"},
      {long_header, "past the end"},
      {good.substr(0, good.size() - 1), "needs 8 data bytes but the file holds 7"},
      {good + "x", "needs 8 data bytes but the file holds 9"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data), "Fortran"},
      {npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", data), "big-endian"},
      {npy_bytes("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", data), "object"},
      {npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", data), "'<c8'"},
      {npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", data), "structured"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", data), "not a tuple"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data), "non-negative"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", data), "too large"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", data),
       "more elements"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }", data),
       "more than 2^64"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False}", data), "must hold the keys"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data), "unexpected key"},
      {npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", data), "twice"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", data), "True or False"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", data), "after the header"},
      {npy_bytes("{'descr': '<f4", data), "string"},
      {npy_bytes("", data), "expected '{'"},
  };
  for (const Case& k : cases) {
    const std::string message = format_error(k.bytes);
    EXPECT_NE(message.find("test.npy: invalid .npy file"), std::string::npos) << message;
    EXPECT_NE(message.find(k.expected), std::string::npos) << "expected '" << k.expected << "' in: " << message;
  }
  EXPECT_NO_THROW(parse(good));
}

TEST(Npy, EveryTruncationOfAValidFileIsAFormatError) {
  const std::string good =
      npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", std::string(24, '\x02'));
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(parse(good.substr(0, n)), FormatError) << n;
  }
}

TEST(Npy, RandomDamageIsAFormatErrorOrAValidTensor) {
  // A poor man's fuzzer (the libFuzzer targets cover safetensors): flip, insert and delete bytes of
  // valid files; the parser must either accept the result consistently or throw FormatError.
  const std::vector<std::string> seeds = {
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", std::string(24, '\x01')),
      npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (), }", std::string(1, '\x01'), 2),
      npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 4), }", "", 3)};
  std::mt19937 random(12345);
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string bytes = seeds[static_cast<std::size_t>(iteration) % seeds.size()];
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const std::size_t at = random() % bytes.size();
      switch (random() % 3) {
        case 0: bytes[at] = static_cast<char>(random() % 256); break;
        case 1: bytes.insert(at, 1, static_cast<char>(random() % 256)); break;
        default: bytes.erase(at, 1); break;
      }
    }
    try {
      const HostTensor t = parse(bytes);
      EXPECT_EQ(t.bytes.size(), t.size() * element_size(t.dtype));
    } catch (const FormatError&) {
    }
  }
}

TEST(Npy, ReadsFilesAndReportsMissingOnes) {
  TempDir dir;
  write_bytes(dir / "x.npy",
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", float_bytes({4.0f, 5.0f})));
  const HostTensor t = read_npy(dir / "x.npy");
  EXPECT_EQ(t.data<float>()[0], 4.0f);
  try {
    read_npy(dir / "nope.npy");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.npy"), std::string::npos);
  }
}

}  // namespace
}  // namespace tensoracle
