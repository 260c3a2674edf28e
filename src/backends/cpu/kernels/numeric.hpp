// Numeric helpers shared by the CPU reference kernels: dtype conversion to/from double and int64, strides,
// broadcasting.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/tensor_ref.hpp"

namespace tensoracle::cpu {

// Every element as double (floats exactly, integers and bools by value).
std::vector<double> to_f64(const TensorRef& t);
// Every element as float (for BLAS); f64 tensors are rounded.
std::vector<float> to_f32(const TensorRef& t);
// Every element as int64 (integers and bools; floats truncated toward zero, NaN to 0).
std::vector<std::int64_t> to_i64(const TensorRef& t);

// Stores values rounded to t.dtype: f32 rounds once; f16/bf16/f8 round the f32 value to nearest
// even (the result of computing in f32, as PyTorch does); integers truncate toward zero with
// NaN → 0 and out-of-range values saturated; bool is value != 0. values.size() must equal t.size().
void from_f64(const TensorRef& t, const std::vector<double>& values);
void from_f32(const TensorRef& t, const std::vector<float>& values);
// Integers wrap to the dtype's width; floats convert by value; bool is value != 0.
void from_i64(const TensorRef& t, const std::vector<std::int64_t>& values);

// Rounds a double as storing it in `dtype` would (for computing "in the dtype").
double round_to(DataType dtype, double value);

// Row-major strides in elements.
std::vector<std::int64_t> row_major_strides(const Dims& shape);

// For each element of `out_shape` (row-major order), the element index in a tensor of `in_shape`
// broadcast to it (NumPy rules; in_shape aligned to the right).
std::vector<std::int64_t> broadcast_indices(const Dims& in_shape, const Dims& out_shape);

}  // namespace tensoracle::cpu
