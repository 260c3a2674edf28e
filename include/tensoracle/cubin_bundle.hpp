// The records of a cubin bundle as a plugin library embeds them: the declarations the generated bundle.cpp defines
// (kernels, their public argument ABI, compile-time constants and one cubin per architecture), read by the cubin
// plugin base (cubin_plugin.hpp). C++17, header-only, no tensoracle library needed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensoracle::cubin {

// The type of a public kernel argument, as the kernel's parameter list declares it.
enum class ArgType : std::int32_t {
  kPointer = 0,  // a device address (8 bytes)
  kI32 = 1,
  kI64 = 2,
  kU32 = 3,
  kU64 = 4,
  kF32 = 5,
  kF64 = 6,
};

// One public argument: `count` consecutive kernel parameters of `type` (1 for a scalar or a pointer) whose values
// (for pointers: addresses) must be divisible by `divisibility` (1: no rule; Triton's tt.divisibility=16 is 16).
struct ArgSpec {
  const char* name;
  ArgType type;
  std::int32_t count;
  std::int32_t divisibility;
};

// A compile-time constant the kernel was specialized with, as text ("BLOCK" = "128").
struct Constant {
  const char* name;
  const char* value;
};

// The kernel compiled for one architecture: `sm` is 10 * major + minor (86, 90, 120), as the cubin's ELF header says.
struct Image {
  std::int32_t sm;
  const unsigned char* data;
  std::size_t size;
  const char* sha256;          // lower-case hex of the cubin's bytes
  std::uint32_t shared_bytes;  // dynamic shared memory the launch needs
};

// One kernel of the bundle.
struct KernelRecord {
  const char* name;     // the bundle's name for it ("dot.specialized")
  const char* entry;    // the function's name in the cubins (mangled for CUDA C++ without extern "C")
  const ArgSpec* args;  // public arguments in order
  std::int32_t arg_count;
  std::int32_t
      scratch_pointers;  // trailing scratch pointers the launcher appends as nullptr: 0 (CUDA C++) or 2 (Triton)
  std::int32_t threads;  // threads per block the kernel was compiled for; 0: the caller chooses
  const Constant* constants;
  std::int32_t constant_count;
  const Image* images;
  std::int32_t image_count;
  const char* source_sha256;  // of the kernel's source text
};

// A whole bundle: what bundle.json records, with the cubins embedded.
struct Bundle {
  const char* digest;  // the bundle digest (bundle.json "digest")
  const KernelRecord* kernels;
  std::int32_t kernel_count;
};

// Defined by the generated bundle.cpp that a plugin library compiles in.
const Bundle& embedded_bundle() noexcept;

}  // namespace tensoracle::cubin
