// Numeric helpers of the CPU reference kernels: dtype conversions, strides and broadcast index maps.
#include "backends/cpu/kernels/numeric.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "tensoracle/float_convert.hpp"

namespace tensoracle::cpu {
namespace {

template <typename T>
T load(const TensorRef& t, std::size_t i) {
  T v;
  std::memcpy(&v, t.bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void store(const TensorRef& t, std::size_t i, T v) {
  std::memcpy(t.bytes.data() + i * sizeof(T), &v, sizeof(T));
}

double element_as_double(const TensorRef& t, std::size_t i) {
  switch (t.dtype) {
    case DataType::kF64: return load<double>(t, i);
    case DataType::kF32: return load<float>(t, i);
    case DataType::kF16: return f16_bits_to_f32(load<std::uint16_t>(t, i));
    case DataType::kBF16: return bf16_bits_to_f32(load<std::uint16_t>(t, i));
    case DataType::kF8E4M3: return f8e4m3_bits_to_f32(load<std::uint8_t>(t, i));
    case DataType::kF8E5M2: return f8e5m2_bits_to_f32(load<std::uint8_t>(t, i));
    case DataType::kI64: return static_cast<double>(load<std::int64_t>(t, i));
    case DataType::kI32: return load<std::int32_t>(t, i);
    case DataType::kI16: return load<std::int16_t>(t, i);
    case DataType::kI8: return load<std::int8_t>(t, i);
    case DataType::kU8: return load<std::uint8_t>(t, i);
    case DataType::kBool: return load<std::uint8_t>(t, i) != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

std::int64_t element_as_i64(const TensorRef& t, std::size_t i) {
  switch (t.dtype) {
    case DataType::kI64: return load<std::int64_t>(t, i);
    case DataType::kI32: return load<std::int32_t>(t, i);
    case DataType::kI16: return load<std::int16_t>(t, i);
    case DataType::kI8: return load<std::int8_t>(t, i);
    case DataType::kU8: return load<std::uint8_t>(t, i);
    case DataType::kBool: return load<std::uint8_t>(t, i) != 0 ? 1 : 0;
    default: {
      double d = element_as_double(t, i);
      if (std::isnan(d)) return 0;
      if (d >= 9.2233720368547758e18) return std::numeric_limits<std::int64_t>::max();
      if (d <= -9.2233720368547758e18) return std::numeric_limits<std::int64_t>::min();
      return static_cast<std::int64_t>(d);
    }
  }
}

template <typename T>
T saturate(double d) {
  if (std::isnan(d)) return 0;
  if (d >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  if (d <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  return static_cast<T>(d);
}

// double -> float rounding to nearest even, with values beyond the float range going to ±inf
// (a plain cast of such values is undefined behaviour).
float to_float(double v) {
  constexpr double kOverflow = 0x1.ffffffp127;  // FLT_MAX plus half an ulp: rounds up to infinity
  if (v >= kOverflow) return std::numeric_limits<float>::infinity();
  if (v <= -kOverflow) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

void store_double(const TensorRef& t, std::size_t i, double v) {
  switch (t.dtype) {
    case DataType::kF64: store<double>(t, i, v); break;
    case DataType::kF32: store<float>(t, i, to_float(v)); break;
    case DataType::kF16: store<std::uint16_t>(t, i, f32_to_f16_bits(to_float(v))); break;
    case DataType::kBF16: store<std::uint16_t>(t, i, f32_to_bf16_bits(to_float(v))); break;
    case DataType::kF8E4M3: store<std::uint8_t>(t, i, f32_to_f8e4m3_bits(to_float(v))); break;
    case DataType::kF8E5M2: store<std::uint8_t>(t, i, f32_to_f8e5m2_bits(to_float(v))); break;
    case DataType::kI64: {
      std::int64_t x = 0;
      if (!std::isnan(v)) {
        x = v >= 9.2233720368547758e18    ? std::numeric_limits<std::int64_t>::max()
            : v <= -9.2233720368547758e18 ? std::numeric_limits<std::int64_t>::min()
                                          : static_cast<std::int64_t>(v);
      }
      store<std::int64_t>(t, i, x);
      break;
    }
    case DataType::kI32: store<std::int32_t>(t, i, saturate<std::int32_t>(v)); break;
    case DataType::kI16: store<std::int16_t>(t, i, saturate<std::int16_t>(v)); break;
    case DataType::kI8: store<std::int8_t>(t, i, saturate<std::int8_t>(v)); break;
    case DataType::kU8: store<std::uint8_t>(t, i, saturate<std::uint8_t>(v)); break;
    case DataType::kBool: store<std::uint8_t>(t, i, v != 0.0 ? 1 : 0); break;
  }
}

}  // namespace

std::vector<double> to_f64(const TensorRef& t) {
  std::vector<double> out(t.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = element_as_double(t, i);
  return out;
}

std::vector<float> to_f32(const TensorRef& t) {
  std::vector<float> out(t.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_float(element_as_double(t, i));
  return out;
}

std::vector<std::int64_t> to_i64(const TensorRef& t) {
  std::vector<std::int64_t> out(t.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = element_as_i64(t, i);
  return out;
}

void from_f64(const TensorRef& t, const std::vector<double>& values) {
  for (std::size_t i = 0; i < values.size(); ++i) store_double(t, i, values[i]);
}

void from_f32(const TensorRef& t, const std::vector<float>& values) {
  for (std::size_t i = 0; i < values.size(); ++i) store_double(t, i, values[i]);
}

void from_i64(const TensorRef& t, const std::vector<std::int64_t>& values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::int64_t v = values[i];
    switch (t.dtype) {
      case DataType::kI64: store<std::int64_t>(t, i, v); break;
      case DataType::kI32: store<std::int32_t>(t, i, static_cast<std::int32_t>(v)); break;
      case DataType::kI16: store<std::int16_t>(t, i, static_cast<std::int16_t>(v)); break;
      case DataType::kI8: store<std::int8_t>(t, i, static_cast<std::int8_t>(v)); break;
      case DataType::kU8: store<std::uint8_t>(t, i, static_cast<std::uint8_t>(v)); break;
      case DataType::kBool: store<std::uint8_t>(t, i, v != 0 ? 1 : 0); break;
      default: store_double(t, i, static_cast<double>(v)); break;
    }
  }
}

double round_to(DataType dtype, double value) {
  HostTensor t(dtype, Dims{1});
  store_double(t, 0, value);
  return element_as_double(t, 0);
}

std::vector<std::int64_t> row_major_strides(const Dims& shape) {
  std::vector<std::int64_t> strides(static_cast<std::size_t>(shape.rank()), 1);
  for (int i = shape.rank() - 2; i >= 0; --i)
    strides[static_cast<std::size_t>(i)] = strides[static_cast<std::size_t>(i) + 1] * shape[i + 1];
  return strides;
}

std::vector<std::int64_t> broadcast_indices(const Dims& in_shape, const Dims& out_shape) {
  const int rank = out_shape.rank();
  const int offset = rank - in_shape.rank();
  std::vector<std::int64_t> in_strides = row_major_strides(in_shape);
  // Stride of each output axis in the input (0 where broadcast or absent).
  std::vector<std::int64_t> step(static_cast<std::size_t>(rank), 0);
  for (int a = 0; a < in_shape.rank(); ++a) {
    if (in_shape[a] != 1) step[static_cast<std::size_t>(a + offset)] = in_strides[static_cast<std::size_t>(a)];
  }
  const auto total = static_cast<std::size_t>(out_shape.volume());
  std::vector<std::int64_t> out(total);
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  std::int64_t position = 0;
  for (std::size_t i = 0; i < total; ++i) {
    out[i] = position;
    for (int a = rank - 1; a >= 0; --a) {
      auto ua = static_cast<std::size_t>(a);
      if (++index[ua] < out_shape[a]) {
        position += step[ua];
        break;
      }
      position -= step[ua] * (index[ua] - 1);
      index[ua] = 0;
    }
  }
  return out;
}

}  // namespace tensoracle::cpu
