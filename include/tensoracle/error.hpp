// The exception hierarchy of the public API, rooted at tensoracle::Error.
#pragma once

#include <stdexcept>
#include <string>

namespace tensoracle {

// Every error the library throws derives from Error. Messages say what failed, where (file,
// tensor, layer) and, where possible, what to do.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A caller passed a value the API cannot accept (bad shape, unknown name, out-of-range option).
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// A name that was asked for does not exist (tensor, input, file entry).
class NotFoundError : public Error {
 public:
  using Error::Error;
};

// The operating system refused a file operation (open, read, write, rename, mmap).
class IoError : public Error {
 public:
  using Error::Error;
};

// A file's contents are invalid (safetensors, engine, checkpoint): damaged, truncated or not of
// the expected format.
class FormatError : public Error {
 public:
  using Error::Error;
};

// A valid request that this build or this machine does not support.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// A CUDA runtime, driver or CUDA library call failed; the message names the call.
class CudaError : public Error {
 public:
  using Error::Error;
};

}  // namespace tensoracle
