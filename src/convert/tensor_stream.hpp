// Streaming one checkpoint tensor into an output file: contiguous bytes copied in place (copy_file_range), views
// gathered, byte order swapped and floating types cast, in bounded chunks.
#pragma once

#include <optional>

#include "convert/torch_checkpoint.hpp"
#include "core/posix_file.hpp"

namespace tensoracle::convert {

// Writes the tensor's elements, contiguous in row-major order and little-endian, as `output_dtype` (the tensor's
// own dtype, or a floating type when it is floating) at the output's current position. Memory: a few chunk buffers,
// plus the span of the storage a non-contiguous view covers when that span is not much larger than the tensor.
void stream_tensor(const TorchCheckpoint& checkpoint, const TensorRef& tensor, DataType output_dtype, PosixFile& output,
                   const std::string& name);

// The elements of `count` values of `from` (little-endian) converted to `to`, rounding as PyTorch's Tensor.to does
// (through f32 for every narrowing below f64, as c10's Half/BFloat16/Float8 constructors take a float).
void convert_elements(const void* source, DataType from, void* destination, DataType to, std::size_t count);

}  // namespace tensoracle::convert
