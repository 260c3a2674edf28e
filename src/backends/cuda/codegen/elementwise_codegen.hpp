// Code generation for fused_elementwise layers: which ops and dtypes it handles, the kernels' parameter layout, and
// the CUDA C++ source of one program specialised to its dtypes and rank (compiled by NVRTC at build time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/elementwise_program.hpp"
#include "graph/graph.hpp"

namespace tensoracle::cuda::codegen {

// Limits of the generated kernels (the fusion pass keeps groups within them).
inline constexpr int kMaxInputs = 16;
inline constexpr int kMaxRank = 8;
inline constexpr int kThreads = 256;

// The parameters of the generated entries. The generated source declares the same structs (same member types and
// order, so the same layout on the host and the device: both are LP64 with natural alignment); the launch fills them.
struct FusedPointers {
  void* out;
  const void* in[kMaxInputs];
};
// Entry 0, "..._contiguous": every input has the output's element count or is a single element (bit i of
// scalar_mask). With `vectorized` every non-scalar pointer is aligned to min(16, vector width x element size) bytes
// and each thread moves `vector width` elements per access.
struct FusedContiguousArgs {
  std::int64_t n;
  std::uint32_t scalar_mask;
  std::int32_t vectorized;
};
// Entries 1 and 2, "..._broadcast_i32" / "..._broadcast_i64": per-input element strides over the output dims (0 where
// an input is broadcast). Dims are right-aligned in the kernel's rank; axes before `skip` are unused. With
// `vectorized` each thread moves `vector width` elements per access: the innermost dim is a multiple of the width,
// every input's innermost stride is 0 or 1, and those with 1 have every stride a multiple of the width and a pointer
// aligned as the contiguous entry's. (Last, so that binaries generated before it read the members before it and
// ignore it: they take every launch one element at a time.)
template <typename Index>
struct FusedBroadcastArgs {
  Index n;
  Index skip;
  Index dims[kMaxRank];
  Index strides[kMaxInputs][kMaxRank];
  Index vectorized;
};

// Entry names, in the order the engine lists them for a step.
inline constexpr const char* kEntryContiguous = "fused_elementwise_contiguous";
inline constexpr const char* kEntryBroadcast32 = "fused_elementwise_broadcast_i32";
inline constexpr const char* kEntryBroadcast64 = "fused_elementwise_broadcast_i64";
std::vector<std::string> entry_names();
// A __device__ int every generated binary defines: its kernels begin by waiting for the preceding kernel in the
// stream, so the runtime may launch them programmatically (binaries of older engines lack it and launch plainly).
inline constexpr const char* kWaitsMarker = "tensoracle_waits_for_preceding_steps";

// Whether the generator computes `op` with these argument dtypes and result dtype (and attributes).
bool supports_instruction(const std::string& op, const std::vector<DataType>& arg_dtypes, DataType result);
// Whether a layer of the graph can become (part of) a generated kernel: a program op with supported dtypes whose
// output has at most kMaxRank axes.
bool supports_layer(const graph::Graph& graph, const graph::Layer& layer);
// Whether a fused_elementwise layer can be generated: at most kMaxInputs inputs, rank <= kMaxRank, every instruction
// supported.
bool supports_fused_layer(const graph::Graph& graph, const graph::Layer& layer);

// Elements per thread and access of the contiguous entry: 16 bytes of the narrowest tensor, at most 8 (8 for 16-bit
// data, 4 for 32-bit, 2 for 64-bit).
int vector_width(const std::vector<DataType>& input_dtypes, DataType output_dtype);

struct GeneratedSource {
  std::string source;  // self-contained CUDA C++ (no headers), for NVRTC
  std::vector<std::string> entries;
};

// The CUDA C++ of a fused_elementwise program: compute in f32 (f64 when any value is f64), integers in int64 wrapped
// to their width after every instruction, bool as 0/1; casts round to their dtype; the output is rounded once.
GeneratedSource generate_fused_elementwise(const graph::ElementwiseProgram& program,
                                           const std::vector<DataType>& input_dtypes, int rank,
                                           const std::string& layer_name);
// The same for a layer of a graph (its program attribute, its inputs' dtypes and its output's rank).
GeneratedSource generate_fused_elementwise(const graph::Graph& graph, const graph::Layer& layer);

}  // namespace tensoracle::cuda::codegen
