// Host copies of a graph's constants for builder passes: read a constant, permute its axes.
#include "builder/passes/constant_data.hpp"

#include <cstring>

#include "backends/cpu/kernels/numeric.hpp"
#include "backends/cpu/tensor_ref.hpp"
#include "core/bytes.hpp"

namespace tensoracle::builder {

HostTensor constant_tensor(const graph::Graph& g, std::int32_t id) {
  const auto& t = g.tensor(id);
  if (t.inline_constant) {
    HostTensor h(t.dtype, g.static_dims(id));
    cpu::from_f64(h, t.values);
    return h;
  }
  HostTensor h(t.dtype, t.weight->shape());
  copy_bytes(h.bytes.data(), t.weight->data, h.bytes.size());
  return h;
}

HostTensor permute(const HostTensor& t, const std::vector<int>& perm) {
  const int rank = t.shape.rank();
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
  for (int k = 0; k < rank; ++k) dims[static_cast<std::size_t>(k)] = t.shape[perm[static_cast<std::size_t>(k)]];
  HostTensor out(t.dtype, Dims(dims));
  std::vector<std::int64_t> in_strides(static_cast<std::size_t>(rank), 1);
  for (int k = rank - 1; k > 0; --k) {
    in_strides[static_cast<std::size_t>(k - 1)] = in_strides[static_cast<std::size_t>(k)] * t.shape[k];
  }
  const std::size_t e = element_size(t.dtype);
  const auto total = static_cast<std::size_t>(out.shape.volume());
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);  // out's multi-index
  for (std::size_t i = 0; i < total; ++i) {
    std::int64_t from = 0;
    for (int k = 0; k < rank; ++k) {
      from +=
          index[static_cast<std::size_t>(k)] * in_strides[static_cast<std::size_t>(perm[static_cast<std::size_t>(k)])];
    }
    std::memcpy(out.bytes.data() + i * e, t.bytes.data() + static_cast<std::size_t>(from) * e, e);
    for (int k = rank - 1; k >= 0; --k) {
      if (++index[static_cast<std::size_t>(k)] < dims[static_cast<std::size_t>(k)]) break;
      index[static_cast<std::size_t>(k)] = 0;
    }
  }
  return out;
}

}  // namespace tensoracle::builder
