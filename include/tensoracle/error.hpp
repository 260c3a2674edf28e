// The exception hierarchy of the public API, rooted at tensoracle::Error.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tensoracle {

// `text` with every byte that could garble a terminal or a log written as an escape: C0 control
// characters other than newline and tab, DEL, C1 control characters (U+0080..U+009F) and every
// byte that is not part of valid UTF-8 become \xNN (one per byte); the rest is kept as it is.
// Idempotent: the result is printable UTF-8, and escaping it again changes nothing.
std::string escape_unprintable(std::string_view text);

// Every error the library throws derives from Error. Messages say what failed, where (file,
// tensor, layer) and, where possible, what to do. Messages often quote input files (a header, a
// tensor name, a parser's "last read" token), so the message is stored escaped
// (escape_unprintable): what() is always printable UTF-8.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(escape_unprintable(message)) {}
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
