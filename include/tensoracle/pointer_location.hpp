// Where CUDA says an address points (host, pinned host, device or managed memory, and which device), for checking
// caller buffers that arrive without a device, such as __cuda_array_interface__ arrays.
#pragma once

namespace tensoracle {

enum class MemoryKind {
  kUnknown,     // no CUDA backend in this build, no usable driver, or CUDA could not tell
  kHost,        // host memory CUDA does not know (malloc, NumPy)
  kPinnedHost,  // page-locked host memory (cudaHostAlloc / cudaHostRegister)
  kDevice,      // device memory (cudaMalloc and the like)
  kManaged,     // managed memory (cudaMallocManaged)
};

struct PointerLocation {
  MemoryKind kind = MemoryKind::kUnknown;
  int device = -1;  // the device of device and managed memory; -1 otherwise
};

// Asks cudaPointerGetAttributes about `address`. Never throws, and clears the CUDA error it may leave.
PointerLocation locate_pointer(const void* address) noexcept;

}  // namespace tensoracle
