// copy_bytes: memcpy that takes an empty range, whose pointers may be null.
#pragma once

#include <cstddef>
#include <cstring>

namespace tensoracle {

// The C library declares memcpy's pointers never null, even for a size of 0 (UBSan's nonnull-attribute check stops on
// it). An empty vector's data(), a zero-size tensor at the end of a file or an empty section all give such a pointer,
// so every copy whose size comes from input goes through here.
inline void copy_bytes(void* destination, const void* source, std::size_t size) noexcept {
  if (size != 0) std::memcpy(destination, source, size);
}

}  // namespace tensoracle
