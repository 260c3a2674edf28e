// Tensor streaming: in-kernel copies for plain contiguous tensors, chunked read-transform-write otherwise.
#include "convert/tensor_stream.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "tensoracle/error.hpp"
#include "tensoracle/float_convert.hpp"

namespace tensoracle::convert {
namespace {

constexpr std::size_t kChunk = std::size_t{8} << 20;
// A non-contiguous view is read whole (its storage span) when that span exceeds the tensor by at most this much.
constexpr std::uint64_t kMaxSpanOverhead = std::uint64_t{128} << 20;

// One element of each floating type, read from and written to little-endian bytes. Narrowing from f64 goes through
// f32 first, as PyTorch's conversions do (c10's Half, BFloat16 and Float8 types are constructed from a float).
template <DataType T>
double load(const unsigned char* p) {
  if constexpr (T == DataType::kF64) {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  } else if constexpr (T == DataType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  } else if constexpr (T == DataType::kF16) {
    return f16_bits_to_f32(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
  } else if constexpr (T == DataType::kBF16) {
    return bf16_bits_to_f32(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
  } else if constexpr (T == DataType::kF8E4M3) {
    return f8e4m3_bits_to_f32(p[0]);
  } else {
    return f8e5m2_bits_to_f32(p[0]);
  }
}

template <DataType T>
void store(double value, unsigned char* p) {
  const float f = static_cast<float>(value);
  if constexpr (T == DataType::kF64) {
    std::memcpy(p, &value, 8);
  } else if constexpr (T == DataType::kF32) {
    std::memcpy(p, &f, 4);
  } else if constexpr (T == DataType::kF16 || T == DataType::kBF16) {
    const std::uint16_t b = T == DataType::kF16 ? f32_to_f16_bits(f) : f32_to_bf16_bits(f);
    p[0] = static_cast<unsigned char>(b), p[1] = static_cast<unsigned char>(b >> 8);
  } else if constexpr (T == DataType::kF8E4M3) {
    p[0] = f32_to_f8e4m3_bits(f);
  } else {
    p[0] = f32_to_f8e5m2_bits(f);
  }
}

using ConvertLoop = void (*)(const unsigned char*, unsigned char*, std::size_t);

template <DataType From, DataType To>
void convert_loop(const unsigned char* in, unsigned char* out, std::size_t count) {
  constexpr std::size_t si = From == DataType::kF64                                ? 8
                             : From == DataType::kF32                              ? 4
                             : (From == DataType::kF16 || From == DataType::kBF16) ? 2
                                                                                   : 1;
  constexpr std::size_t so = To == DataType::kF64                              ? 8
                             : To == DataType::kF32                            ? 4
                             : (To == DataType::kF16 || To == DataType::kBF16) ? 2
                                                                               : 1;
  for (std::size_t i = 0; i < count; ++i) store<To>(load<From>(in + i * si), out + i * so);
}

template <DataType From>
ConvertLoop loop_to(DataType to) {
  switch (to) {
    case DataType::kF64: return convert_loop<From, DataType::kF64>;
    case DataType::kF32: return convert_loop<From, DataType::kF32>;
    case DataType::kF16: return convert_loop<From, DataType::kF16>;
    case DataType::kBF16: return convert_loop<From, DataType::kBF16>;
    case DataType::kF8E4M3: return convert_loop<From, DataType::kF8E4M3>;
    case DataType::kF8E5M2: return convert_loop<From, DataType::kF8E5M2>;
    default: return nullptr;
  }
}

ConvertLoop loop_for(DataType from, DataType to) {
  switch (from) {
    case DataType::kF64: return loop_to<DataType::kF64>(to);
    case DataType::kF32: return loop_to<DataType::kF32>(to);
    case DataType::kF16: return loop_to<DataType::kF16>(to);
    case DataType::kBF16: return loop_to<DataType::kBF16>(to);
    case DataType::kF8E4M3: return loop_to<DataType::kF8E4M3>(to);
    case DataType::kF8E5M2: return loop_to<DataType::kF8E5M2>(to);
    default: return nullptr;
  }
}

void swap_elements(unsigned char* data, std::size_t element_size, std::size_t count) {
  if (element_size == 1) return;
  for (std::size_t i = 0; i < count; ++i) std::reverse(data + i * element_size, data + (i + 1) * element_size);
}

// Converts a chunk in place order: `source` (count elements of `from`, byte order fixed) into `out`.
class Transform {
 public:
  Transform(DataType from, DataType to, bool swap) : from_(from), to_(to), swap_(swap) {}
  bool identity() const { return !swap_ && from_ == to_; }
  // Returns the bytes to write for `count` elements at `data` (which may be modified).
  const unsigned char* apply(unsigned char* data, std::size_t count) {
    if (swap_) swap_elements(data, element_size(from_), count);
    if (from_ == to_) return data;
    out_.resize(count * element_size(to_));
    convert_elements(data, from_, out_.data(), to_, count);
    return out_.data();
  }

 private:
  DataType from_, to_;
  bool swap_;
  std::vector<unsigned char> out_;
};

// Copies `size` bytes at `offset` of the checkpoint to the output's current position, in the kernel when it can.
void copy_range(const ByteSource& source, std::uint64_t offset, std::uint64_t size, PosixFile& output,
                std::vector<unsigned char>& buffer) {
  if (source.fd() >= 0) {
    loff_t in = static_cast<loff_t>(offset);
    std::uint64_t left = size;
    while (left > 0) {
      const ssize_t n =
          ::copy_file_range(source.fd(), &in, output.fd(), nullptr, std::min<std::uint64_t>(left, 1u << 30), 0);
      if (n > 0) {
        left -= static_cast<std::uint64_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;  // not supported between these files (or an early end): copy the rest through memory
    }
    offset = static_cast<std::uint64_t>(in);
    size = left;
  }
  buffer.resize(kChunk);
  while (size > 0) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(size, kChunk));
    source.read(buffer.data(), n, offset, "tensor data");
    output.write_all(buffer.data(), n);
    offset += n;
    size -= n;
  }
}

}  // namespace

void convert_elements(const void* source, DataType from, void* destination, DataType to, std::size_t count) {
  const ConvertLoop loop = loop_for(from, to);
  if (!loop) {
    throw InvalidArgumentError(fmt::format("convert: can't cast {} to {}", to_string(from), to_string(to)));
  }
  loop(static_cast<const unsigned char*>(source), static_cast<unsigned char*>(destination), count);
}

void stream_tensor(const TorchCheckpoint& checkpoint, const TensorRef& tensor, DataType output_dtype, PosixFile& output,
                   const std::string& name) {
  const ByteSource& source = checkpoint.source();
  const StorageRef& storage = checkpoint.objects()[tensor.storage].storage;
  const StorageBytes bytes = checkpoint.storage_bytes(storage);
  const DataType dtype = *tensor.dtype;
  const std::size_t es = element_size(dtype);
  std::uint64_t numel = 1;
  for (std::int64_t d : tensor.shape) numel *= static_cast<std::uint64_t>(d);
  if (numel == 0) return;
  // The elements reached: [first, last], checked against the storage's bytes in the file.
  std::uint64_t last = tensor.storage_offset;
  for (std::size_t i = 0; i < tensor.shape.size(); ++i) {
    last += static_cast<std::uint64_t>(tensor.shape[i] - 1) * static_cast<std::uint64_t>(tensor.strides[i]);
  }
  if ((last + 1) > bytes.size / es) {
    throw FormatError(fmt::format("{}: tensor '{}' reaches past the end of its storage '{}' ({} bytes)", source.name(),
                                  name, storage.key, bytes.size));
  }
  bool contiguous = true;
  std::int64_t expected = 1;
  for (std::size_t i = tensor.shape.size(); i-- > 0;) {
    if (tensor.shape[i] != 1 && tensor.strides[i] != expected) contiguous = false;
    expected *= tensor.shape[i];
  }
  Transform transform(dtype, output_dtype, checkpoint.big_endian() && es > 1);
  std::vector<unsigned char> buffer;
  const std::uint64_t base = bytes.offset + tensor.storage_offset * es;
  if (contiguous) {
    if (transform.identity()) {
      copy_range(source, base, numel * es, output, buffer);
      return;
    }
    const std::size_t per_chunk = kChunk / es;
    buffer.resize(per_chunk * es);
    for (std::uint64_t done = 0; done < numel;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(per_chunk, numel - done));
      source.read(buffer.data(), n * es, base + done * es, "tensor data");
      const unsigned char* out = transform.apply(buffer.data(), n);
      output.write_all(out, n * element_size(output_dtype));
      done += n;
    }
    return;
  }

  // A view with strides: gather the elements in row-major order.
  const std::size_t rank = tensor.shape.size();
  const std::uint64_t span = (last - tensor.storage_offset + 1) * es;
  std::vector<unsigned char> span_bytes;
  const bool in_memory = span <= numel * es + kMaxSpanOverhead;
  if (in_memory) {
    span_bytes.resize(span);
    source.read(span_bytes.data(), span, base, "tensor data");
  }
  const std::size_t per_chunk = std::max<std::size_t>(1, kChunk / es);
  buffer.resize(per_chunk * es);
  std::vector<std::int64_t> index(rank, 0);
  std::size_t filled = 0;
  for (std::uint64_t done = 0; done < numel; ++done) {
    std::uint64_t element = 0;
    for (std::size_t i = 0; i < rank; ++i) element += static_cast<std::uint64_t>(index[i] * tensor.strides[i]);
    if (in_memory) {
      std::memcpy(buffer.data() + filled * es, span_bytes.data() + element * es, es);
    } else {
      source.read(buffer.data() + filled * es, es, base + element * es, "tensor data");
    }
    if (++filled == per_chunk || done + 1 == numel) {
      const unsigned char* out = transform.apply(buffer.data(), filled);
      output.write_all(out, filled * element_size(output_dtype));
      filled = 0;
    }
    for (std::size_t i = rank; i-- > 0;) {
      if (++index[i] < tensor.shape[i]) break;
      index[i] = 0;
    }
  }
}

}  // namespace tensoracle::convert
