// Tests of the host float conversions against numpy/ml_dtypes references, PyTorch and _Float16.
#include "tensoracle/float_convert.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace tensoracle {
namespace {

// ---- helpers ----

constexpr const char* kRefsEnv = "TENSORACLE_FLOAT_REFS_DIR";
constexpr std::size_t kMaxShownMismatches = 10;

std::uint32_t f32_bits(float value) { return std::bit_cast<std::uint32_t>(value); }
float f32_from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }
bool f32_bits_is_nan(std::uint32_t bits) { return (bits & 0x7FFFFFFFU) > 0x7F800000U; }

std::string hex(std::uint32_t value, int digits) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "0x%0*X", digits, static_cast<unsigned>(value));
  return buffer;
}

std::string describe_f32(std::uint32_t bits) {
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "0x%08X (%.9g)", static_cast<unsigned>(bits),
                static_cast<double>(std::bit_cast<float>(bits)));
  return buffer;
}

// Counts mismatches and keeps the first few descriptions.
class Mismatches {
 public:
  void add(const std::string& line) {
    if (lines_.size() < kMaxShownMismatches) {
      lines_.push_back(line);
    }
    ++count_;
  }
  // Counts mismatches that are not described.
  void add_unshown(std::uint64_t count) { count_ += count; }
  std::uint64_t count() const { return count_; }
  std::string report() const {
    std::string text = std::to_string(count_) + " mismatch(es); first ones:\n";
    for (const std::string& line : lines_) {
      text += "  " + line + "\n";
    }
    return text;
  }

 private:
  std::vector<std::string> lines_;
  std::uint64_t count_ = 0;
};

// Reads a reference file written by tests/python/gen_float_references.py: a headerless array of
// little-endian unsigned integers of type T.
template <typename T>
testing::AssertionResult load_reference(const char* file_name, std::vector<T>& out) {
  const char* dir = std::getenv(kRefsEnv);
  if (dir == nullptr || *dir == '\0') {
    return testing::AssertionFailure() << kRefsEnv << " is not set. Generate the reference files with\n"
                                       << "  python3 tests/python/gen_float_references.py DIR\n"
                                       << "and run the test with " << kRefsEnv << "=DIR.";
  }
  const std::filesystem::path path = std::filesystem::path(dir) / file_name;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return testing::AssertionFailure() << "cannot open reference file " << path << " (" << kRefsEnv << "=" << dir
                                       << "); regenerate it with tests/python/gen_float_references.py";
  }
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error || size == 0 || size % sizeof(T) != 0) {
    return testing::AssertionFailure() << "reference file " << path << " has " << size
                                       << " bytes, not a positive multiple of " << sizeof(T);
  }
  out.assign(static_cast<std::size_t>(size / sizeof(T)), T{0});
  if (!in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(size))) {
    return testing::AssertionFailure() << "cannot read " << path;
  }
  if constexpr (std::endian::native == std::endian::big) {
    for (T& value : out) {
      T swapped = 0;
      for (std::size_t b = 0; b < sizeof(T); ++b) {
        swapped = static_cast<T>((swapped << 8) | ((value >> (8 * b)) & 0xFFU));
      }
      value = swapped;
    }
  }
  return testing::AssertionSuccess();
}

// ---- the four small formats, described independently of the implementation ----

struct SmallFormat {
  const char* name;  // matches the reference file names
  int bits;          // 16 or 8
  std::uint32_t (*narrow)(float);
  float (*widen)(std::uint32_t);
  bool (*is_nan)(std::uint32_t);
  // PyTorch's result for a NaN input (and, for e4m3fn, for overflow) with the given sign bit.
  std::uint32_t (*pytorch_nan)(bool negative);
};

const SmallFormat kF16{"f16",
                       16,
                       [](float v) -> std::uint32_t { return f32_to_f16_bits(v); },
                       [](std::uint32_t b) { return f16_bits_to_f32(static_cast<std::uint16_t>(b)); },
                       [](std::uint32_t b) { return (b & 0x7FFFU) > 0x7C00U; },
                       [](bool negative) -> std::uint32_t { return negative ? 0xFE00U : 0x7E00U; }};
const SmallFormat kBF16{"bf16",
                        16,
                        [](float v) -> std::uint32_t { return f32_to_bf16_bits(v); },
                        [](std::uint32_t b) { return bf16_bits_to_f32(static_cast<std::uint16_t>(b)); },
                        [](std::uint32_t b) { return (b & 0x7FFFU) > 0x7F80U; },
                        [](bool) -> std::uint32_t { return 0x7FC0U; }};
const SmallFormat kF8E4M3FN{"f8e4m3fn",
                            8,
                            [](float v) -> std::uint32_t { return f32_to_f8e4m3_bits(v); },
                            [](std::uint32_t b) { return f8e4m3_bits_to_f32(static_cast<std::uint8_t>(b)); },
                            [](std::uint32_t b) { return (b & 0x7FU) == 0x7FU; },
                            [](bool negative) -> std::uint32_t { return negative ? 0xFFU : 0x7FU; }};
const SmallFormat kF8E5M2{"f8e5m2",
                          8,
                          [](float v) -> std::uint32_t { return f32_to_f8e5m2_bits(v); },
                          [](std::uint32_t b) { return f8e5m2_bits_to_f32(static_cast<std::uint8_t>(b)); },
                          [](std::uint32_t b) { return (b & 0x7FU) > 0x7CU; },
                          [](bool negative) -> std::uint32_t { return negative ? 0xFFU : 0x7FU; }};

// ---- every bit pattern -> f32, against the reference tables ----

// Non-NaN results must match bit for bit. The references encode NaNs differently from PyTorch
// (see gen_float_references.py), so a NaN only has to be a NaN with the same sign here; the exact
// PyTorch NaN results are checked in FloatConvertPyTorch.
void check_widening(const SmallFormat& format) {
  std::vector<std::uint32_t> reference;
  ASSERT_TRUE(load_reference((std::string(format.name) + "_to_f32.bin").c_str(), reference));
  const std::size_t patterns = std::size_t{1} << format.bits;
  ASSERT_EQ(reference.size(), patterns) << format.name << "_to_f32.bin has the wrong length";
  Mismatches mismatches;
  for (std::size_t i = 0; i < patterns; ++i) {
    const auto pattern = static_cast<std::uint32_t>(i);
    const std::uint32_t want = reference[i];
    const std::uint32_t got = f32_bits(format.widen(pattern));
    const bool ok = f32_bits_is_nan(want) ? f32_bits_is_nan(got) && (got >> 31) == (want >> 31) : got == want;
    if (!ok) {
      mismatches.add(std::string(format.name) + " " + hex(pattern, format.bits / 4) + " -> " + hex(got, 8) +
                     ", reference " + hex(want, 8));
    }
  }
  EXPECT_EQ(mismatches.count(), 0U) << mismatches.report();
}

TEST(FloatConvertReference, F16PatternsToF32) { check_widening(kF16); }
TEST(FloatConvertReference, Bf16PatternsToF32) { check_widening(kBF16); }
TEST(FloatConvertReference, F8E4M3FnPatternsToF32) { check_widening(kF8E4M3FN); }
TEST(FloatConvertReference, F8E5M2PatternsToF32) { check_widening(kF8E5M2); }

// ---- f32 inputs -> each format, against the reference outputs ----

// Non-NaN results must match bit for bit. Where the reference is NaN, the result must be
// PyTorch's NaN encoding (which differs from the references' for f16, bf16 and e5m2).
template <typename Bits>
void check_narrowing(const SmallFormat& format) {
  std::vector<std::uint32_t> inputs;
  std::vector<Bits> reference;
  ASSERT_TRUE(load_reference("f32_inputs.bin", inputs));
  ASSERT_TRUE(load_reference(("f32_to_" + std::string(format.name) + ".bin").c_str(), reference));
  ASSERT_EQ(reference.size(), inputs.size()) << "f32_to_" << format.name << ".bin and f32_inputs.bin differ in length";
  ASSERT_GE(inputs.size(), 1'000'000U) << "suspiciously few f32 inputs";
  const int digits = format.bits / 4;
  Mismatches mismatches;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::uint32_t want = reference[i];
    const std::uint32_t got = format.narrow(f32_from_bits(inputs[i]));
    const std::uint32_t pytorch_nan = format.pytorch_nan((inputs[i] >> 31) != 0);
    const bool ok = format.is_nan(want) ? got == pytorch_nan : got == want;
    if (!ok) {
      const std::string nan_note = format.is_nan(want) ? " (NaN; PyTorch gives " + hex(pytorch_nan, digits) + ")" : "";
      mismatches.add("f32 " + describe_f32(inputs[i]) + " -> " + format.name + " " + hex(got, digits) + ", reference " +
                     hex(want, digits) + nan_note);
    }
  }
  EXPECT_EQ(mismatches.count(), 0U) << mismatches.report();
}

TEST(FloatConvertReference, F32ToF16) { check_narrowing<std::uint16_t>(kF16); }
TEST(FloatConvertReference, F32ToBf16) { check_narrowing<std::uint16_t>(kBF16); }
TEST(FloatConvertReference, F32ToF8E4M3Fn) { check_narrowing<std::uint8_t>(kF8E4M3FN); }
TEST(FloatConvertReference, F32ToF8E5M2) { check_narrowing<std::uint8_t>(kF8E5M2); }

// ---- PyTorch-specific results, written out by hand (no files needed) ----

struct NarrowCase {
  std::uint32_t input;  // f32 bits
  std::uint32_t f16, bf16, e4m3fn, e5m2;
};

TEST(FloatConvertPyTorch, NarrowingEdgeCases) {
  const NarrowCase cases[] = {
      // zeros, one, infinities
      {0x00000000U, 0x0000U, 0x0000U, 0x00U, 0x00U},
      {0x80000000U, 0x8000U, 0x8000U, 0x80U, 0x80U},
      {0x3F800000U, 0x3C00U, 0x3F80U, 0x38U, 0x3CU},
      {0x7F800000U, 0x7C00U, 0x7F80U, 0x7FU, 0x7CU},  // e4m3fn has no infinity: NaN
      {0xFF800000U, 0xFC00U, 0xFF80U, 0xFFU, 0xFCU},
      // NaNs: f16 quiet NaN with sign, bf16 always 0x7FC0, float8 all ones with sign
      {0x7FC00000U, 0x7E00U, 0x7FC0U, 0x7FU, 0x7FU},
      {0xFFC00000U, 0xFE00U, 0x7FC0U, 0xFFU, 0xFFU},
      {0x7F800001U, 0x7E00U, 0x7FC0U, 0x7FU, 0x7FU},
      {0xFFFFFFFFU, 0xFE00U, 0x7FC0U, 0xFFU, 0xFFU},
      // e4m3fn top: 448 is the largest finite value; 464 ties 448 (even) with the NaN code
      {0x43E00000U, 0x5F00U, 0x43E0U, 0x7EU, 0x5FU},  // 448
      {0x43E80000U, 0x5F40U, 0x43E8U, 0x7EU, 0x5FU},  // 464
      {0x43E80001U, 0x5F40U, 0x43E8U, 0x7FU, 0x5FU},  // just above 464
      {0xC3E80001U, 0xDF40U, 0xC3E8U, 0xFFU, 0xDFU},
      {0x43F00000U, 0x5F80U, 0x43F0U, 0x7FU, 0x60U},  // 480
      // e5m2 top: 57344 largest; 61440 ties 57344 (odd) with infinity
      {0x47600000U, 0x7B00U, 0x4760U, 0x7FU, 0x7BU},  // 57344
      {0x476FFFFFU, 0x7B80U, 0x4770U, 0x7FU, 0x7BU},  // just below 61440
      {0x47700000U, 0x7B80U, 0x4770U, 0x7FU, 0x7CU},  // 61440
      // f16 top: 65504 largest; 65520 ties 65504 (odd) with infinity
      {0x477FE000U, 0x7BFFU, 0x4780U, 0x7FU, 0x7CU},  // 65504
      {0x477FEFFFU, 0x7BFFU, 0x4780U, 0x7FU, 0x7CU},  // just below 65520
      {0x477FF000U, 0x7C00U, 0x4780U, 0x7FU, 0x7CU},  // 65520
      // bf16 top: 0x7F7F8000 ties the largest bf16 (odd) with infinity
      {0x7F7F7FFFU, 0x7C00U, 0x7F7FU, 0x7FU, 0x7CU},
      {0x7F7F8000U, 0x7C00U, 0x7F80U, 0x7FU, 0x7CU},
      // f16 underflow: 2^-25 ties 0 and the smallest subnormal; 1.5 * 2^-24 ties 1 and 2 ulps
      {0x33000000U, 0x0000U, 0x3300U, 0x00U, 0x00U},
      {0x33000001U, 0x0001U, 0x3300U, 0x00U, 0x00U},
      {0x33C00000U, 0x0002U, 0x33C0U, 0x00U, 0x00U},
      // e4m3fn underflow: 2^-10 ties 0 and 2^-9; 3 * 2^-10 ties 1 and 2 ulps
      {0x3A800000U, 0x1400U, 0x3A80U, 0x00U, 0x14U},
      {0x3A800001U, 0x1400U, 0x3A80U, 0x01U, 0x14U},
      {0x3B400000U, 0x1A00U, 0x3B40U, 0x02U, 0x1AU},
      // e5m2 underflow: 2^-17 ties 0 and 2^-16
      {0x37000000U, 0x0080U, 0x3700U, 0x00U, 0x00U},
      {0x37000001U, 0x0080U, 0x3700U, 0x00U, 0x01U},
      // bf16 subnormals: the smallest is 2^-133; 2^-134 ties it with 0
      {0x00010000U, 0x0000U, 0x0001U, 0x00U, 0x00U},
      {0x00008000U, 0x0000U, 0x0000U, 0x00U, 0x00U},
      {0x00008001U, 0x0000U, 0x0001U, 0x00U, 0x00U},
      {0x00018000U, 0x0000U, 0x0002U, 0x00U, 0x00U},
      // rounding into the smallest normal from the largest subnormal
      {0x387FF000U, 0x0400U, 0x3880U, 0x00U, 0x04U},  // f16: (1023.5 / 1024) * 2^-14
      {0x3C7FFFFFU, 0x2400U, 0x3C80U, 0x08U, 0x24U},  // just below 2^-6
  };
  for (const NarrowCase& c : cases) {
    const float value = f32_from_bits(c.input);
    SCOPED_TRACE("f32 " + hex(c.input, 8));
    EXPECT_EQ(hex(f32_to_f16_bits(value), 4), hex(c.f16, 4));
    EXPECT_EQ(hex(f32_to_bf16_bits(value), 4), hex(c.bf16, 4));
    EXPECT_EQ(hex(f32_to_f8e4m3_bits(value), 2), hex(c.e4m3fn, 2));
    EXPECT_EQ(hex(f32_to_f8e5m2_bits(value), 2), hex(c.e5m2, 2));
  }
}

TEST(FloatConvertPyTorch, WideningSpecialValues) {
  // NaNs keep their sign and payload; PyTorch sets the quiet bit except for bf16.
  EXPECT_EQ(hex(f32_bits(f16_bits_to_f32(0x7C01U)), 8), "0x7FC02000");
  EXPECT_EQ(hex(f32_bits(f16_bits_to_f32(0xFE00U)), 8), "0xFFC00000");
  EXPECT_EQ(hex(f32_bits(f16_bits_to_f32(0x7FFFU)), 8), "0x7FFFE000");
  EXPECT_EQ(hex(f32_bits(bf16_bits_to_f32(0x7F81U)), 8), "0x7F810000");
  EXPECT_EQ(hex(f32_bits(bf16_bits_to_f32(0xFFC0U)), 8), "0xFFC00000");
  EXPECT_EQ(hex(f32_bits(f8e4m3_bits_to_f32(0x7FU)), 8), "0x7FF00000");
  EXPECT_EQ(hex(f32_bits(f8e4m3_bits_to_f32(0xFFU)), 8), "0xFFF00000");
  EXPECT_EQ(hex(f32_bits(f8e5m2_bits_to_f32(0x7DU)), 8), "0x7FE00000");
  EXPECT_EQ(hex(f32_bits(f8e5m2_bits_to_f32(0xFEU)), 8), "0xFFC00000");
  // Infinities, the largest values and the smallest subnormals.
  EXPECT_EQ(f16_bits_to_f32(0xFC00U), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(f8e5m2_bits_to_f32(0x7CU), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_bits_to_f32(0x7BFFU), 65504.0F);
  EXPECT_EQ(f8e4m3_bits_to_f32(0x7EU), 448.0F);
  EXPECT_EQ(f8e4m3_bits_to_f32(0xF8U), -256.0F);  // e4m3fn's top binade is finite
  EXPECT_EQ(f8e5m2_bits_to_f32(0x7BU), 57344.0F);
  EXPECT_EQ(f16_bits_to_f32(0x0001U), 0x1p-24F);
  EXPECT_EQ(bf16_bits_to_f32(0x0001U), 0x1p-133F);
  EXPECT_EQ(f8e4m3_bits_to_f32(0x01U), 0x1p-9F);
  EXPECT_EQ(f8e5m2_bits_to_f32(0x83U), -0x3p-16F);
  EXPECT_EQ(hex(f32_bits(f8e5m2_bits_to_f32(0x80U)), 8), "0x80000000");
}

// Every non-NaN pattern survives widening and narrowing again (no files needed).
TEST(FloatConvertRoundTrip, EveryNonNanPatternSurvives) {
  for (const SmallFormat* format : {&kF16, &kBF16, &kF8E4M3FN, &kF8E5M2}) {
    Mismatches mismatches;
    for (std::uint32_t pattern = 0; pattern < (1U << format->bits); ++pattern) {
      if (format->is_nan(pattern)) {
        continue;
      }
      const std::uint32_t back = format->narrow(format->widen(pattern));
      if (back != pattern) {
        mismatches.add(std::string(format->name) + " " + hex(pattern, format->bits / 4) + " -> " +
                       hex(f32_bits(format->widen(pattern)), 8) + " -> " + hex(back, format->bits / 4));
      }
    }
    EXPECT_EQ(mismatches.count(), 0U) << mismatches.report();
  }
}

// ---- f32 -> f16 against the compiler's _Float16 conversion (IEEE round to nearest even) ----

#if defined(__FLT16_MANT_DIG__)

// The compiler's f32 -> _Float16 conversion over a block. Without F16C, g++ calls libgcc's
// soft-float routine (about 60 ns a value); compiled for F16C it uses vcvtps2ph (rounding from
// MXCSR, i.e. to nearest even), about 1 ns.
using CompilerF16Block = void (*)(const float* in, std::uint16_t* out, std::size_t count);

void compiler_f16_block(const float* in, std::uint16_t* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    out[i] = std::bit_cast<std::uint16_t>(static_cast<_Float16>(in[i]));
  }
}
// The full sweep is only attempted in optimised builds without AddressSanitizer.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TENSORACLE_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TENSORACLE_TEST_ASAN 1
#endif
#if (defined(__x86_64__) || defined(__i386__)) && defined(__OPTIMIZE__) && !defined(TENSORACLE_TEST_ASAN)
#define TENSORACLE_F16_FULL_SWEEP 1
__attribute__((target("f16c"))) void compiler_f16_block_f16c(const float* in, std::uint16_t* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    out[i] = std::bit_cast<std::uint16_t>(static_cast<_Float16>(in[i]));
  }
}
#endif

struct SweepResult {
  std::uint64_t checked = 0;
  std::uint64_t bad = 0;
  std::vector<std::uint32_t> first_bad;
};

// Checks f32 patterns begin, begin + stride, ... below end. NaN inputs are not compared with
// _Float16 (NaN payload rules differ); they must give PyTorch's 0x7E00 | sign.
void sweep_f16(std::uint64_t begin, std::uint64_t end, std::uint64_t stride, CompilerF16Block reference,
               SweepResult& result) {
  constexpr std::size_t kBlock = 4096;
  std::vector<float> values(kBlock);
  std::vector<std::uint16_t> wanted(kBlock);
  std::uint64_t checked = 0;  // local counters: results of different threads share cache lines
  std::uint64_t bad = 0;
  for (std::uint64_t next = begin; next < end;) {
    std::size_t count = 0;
    for (; count < kBlock && next < end; ++count, next += stride) {
      values[count] = f32_from_bits(static_cast<std::uint32_t>(next));
    }
    reference(values.data(), wanted.data(), count);
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint32_t bits = f32_bits(values[i]);
      const std::uint16_t want =
          f32_bits_is_nan(bits) ? static_cast<std::uint16_t>((bits >> 31) != 0 ? 0xFE00U : 0x7E00U) : wanted[i];
      if (f32_to_f16_bits(values[i]) != want) {
        if (result.first_bad.size() < kMaxShownMismatches) {
          result.first_bad.push_back(bits);
        }
        ++bad;
      }
    }
    checked += count;
  }
  result.checked += checked;
  result.bad += bad;
}

// All 2^32 f32 patterns when the build is optimised, not under AddressSanitizer and the CPU has
// F16C: about 25 CPU seconds, split over all cores (about 13 s on 2 idle cores). Otherwise (the
// soft-float conversion would take minutes) a sample of about 12.5 million patterns: every 997th
// pattern plus the 65 patterns around every f16 value and around every midpoint between
// neighbouring f16 values (the rounding boundaries), both signs.
TEST(FloatConvertExhaustive, F32ToF16MatchesCompilerFloat16) {
  CompilerF16Block reference = compiler_f16_block;
  bool full_sweep = false;
#if defined(TENSORACLE_F16_FULL_SWEEP)
  if (__builtin_cpu_supports("f16c")) {
    reference = compiler_f16_block_f16c;
    full_sweep = true;
  }
#endif
  constexpr std::uint64_t kAllPatterns = std::uint64_t{1} << 32;
  std::vector<SweepResult> results;
  if (full_sweep) {
    const unsigned threads = std::max(1U, std::min(64U, std::thread::hardware_concurrency()));
    results.resize(threads);
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t) {
      workers.emplace_back([t, threads, reference, &results] {
        sweep_f16(kAllPatterns * t / threads, kAllPatterns * (t + 1) / threads, 1, reference, results[t]);
      });
    }
    for (std::thread& worker : workers) {
      worker.join();
    }
    std::uint64_t checked = 0;
    for (const SweepResult& r : results) {
      checked += r.checked;
    }
    EXPECT_EQ(checked, kAllPatterns);
  } else {
    results.resize(1);
    sweep_f16(0, kAllPatterns, 997, reference, results[0]);
    constexpr std::uint32_t kHalfWindow = 32;
    for (std::uint32_t pattern = 0; pattern < 0x7C00U; ++pattern) {  // non-negative finite f16
      const auto f16_value = [](std::uint32_t bits) {
        return static_cast<float>(std::bit_cast<_Float16>(static_cast<std::uint16_t>(bits)));
      };
      const float here = f16_value(pattern);
      // One step beyond the largest f16 (65504) is 65536.
      const float next = pattern == 0x7BFFU ? 65536.0F : f16_value(pattern + 1);
      const float midpoint = here + (next - here) * 0.5F;  // exact in f32
      for (const std::uint32_t center : {f32_bits(here), f32_bits(midpoint)}) {
        for (const std::uint32_t sign : {0U, 0x80000000U}) {
          const std::uint64_t low = center >= kHalfWindow ? center - kHalfWindow : 0;
          sweep_f16(low | sign, (std::uint64_t{center} + kHalfWindow + 1) | sign, 1, reference, results[0]);
        }
      }
    }
    std::printf(
        "[          ] sampled %llu f32 patterns (full 2^32 sweep needs an optimised, "
        "non-ASan build on a CPU with F16C)\n",
        static_cast<unsigned long long>(results[0].checked));
  }
  Mismatches mismatches;
  for (const SweepResult& r : results) {
    for (const std::uint32_t bits : r.first_bad) {
      const float value = f32_from_bits(bits);
      std::uint16_t want = 0;
      reference(&value, &want, 1);
      mismatches.add("f32 " + describe_f32(bits) + " -> " + hex(f32_to_f16_bits(value), 4) + ", _Float16 " +
                     hex(want, 4));
    }
    mismatches.add_unshown(r.bad - r.first_bad.size());
  }
  EXPECT_EQ(mismatches.count(), 0U) << mismatches.report();
}

#else  // no _Float16

TEST(FloatConvertExhaustive, F32ToF16MatchesCompilerFloat16) { GTEST_SKIP() << "this compiler has no _Float16"; }

#endif  // __FLT16_MANT_DIG__

}  // namespace
}  // namespace tensoracle
