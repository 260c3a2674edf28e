// The plugin interface: the one C entry point a plugin library exports, and the creator and kernel objects the
// builder and the runtime call through it (C++17, header-only: a plugin library needs no tensoracle library).
#pragma once

#include <cstddef>
#include <cstdint>

// Symbols a plugin library exports (everything else should be hidden).
#if defined(_WIN32)
#define TENSORACLE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define TENSORACLE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

namespace tensoracle::plugin {

// The interface's version. A library built against another version is refused when it is loaded.
inline constexpr std::int32_t kAbiVersion = 1;
// The highest tensor rank a plugin layer sees.
inline constexpr std::int32_t kMaxRank = 8;
// The most outputs a plugin layer may have.
inline constexpr std::int32_t kMaxOutputs = 8;

// Element types, numbered as tensoracle::DataType (data_type.hpp).
enum class DType : std::int32_t {
  kF64 = 0,
  kF32 = 1,
  kF16 = 2,
  kBF16 = 3,
  kF8E4M3 = 4,
  kF8E5M2 = 5,
  kI64 = 6,
  kI32 = 7,
  kI16 = 8,
  kI8 = 9,
  kU8 = 10,
  kBool = 11,
};

// Memory layouts of a plugin layer's tensors. The engine gives plugin layers row-major, contiguous tensors only.
enum class Format : std::int32_t { kLinear = 0 };

// Where a kernel runs: the host (the CPU target; pointers are host memory, the stream is nullptr) or a CUDA device
// (pointers are device memory on the current device, the stream is a cudaStream_t).
enum class Device : std::int32_t { kHost = 0, kCuda = 1 };

// A field of a plugin layer: its typed parameters, as the network gives them (in the network's order).
enum class FieldType : std::int32_t {
  kInt64 = 0,     // one std::int64_t
  kFloat64 = 1,   // one double
  kString = 2,    // `count` chars, NUL-terminated as well
  kInt64s = 3,    // std::int64_t[count]
  kFloat64s = 4,  // double[count]
};

struct Field {
  const char* name;
  FieldType type;
  const void* data;
  std::int64_t count;  // 1 for kInt64 and kFloat64; the length of arrays and strings
};

struct Fields {
  const Field* items;
  std::int32_t count;
};

// A tensor as a plugin kernel sees it: dtype, layout and concrete dims.
struct TensorDesc {
  DType dtype;
  Format format;
  std::int32_t rank;
  std::int64_t dims[kMaxRank];
};

// Where a creator writes why it refuses (a field it can't take, an input it doesn't support, a failed launch). The
// message is copied; it should say what is wrong and what to do.
class ErrorSink {
 public:
  virtual void set(const char* message) noexcept = 0;

 protected:
  ~ErrorSink() = default;
};

// An output dimension as an expression of the inputs' dimensions, built through ShapeBuilder (the analogue of
// TensorRT's IExprBuilder): the builder evaluates it for every profile and every set of input shapes.
using DimExpr = std::int32_t;
enum class DimOperation : std::int32_t {
  kAdd = 0,
  kSub = 1,
  kMul = 2,
  kFloorDiv = 3,
  kCeilDiv = 4,
  kMax = 5,
  kMin = 6
};

class ShapeBuilder {
 public:
  virtual std::int32_t input_count() const noexcept = 0;
  // -1 for an input out of range.
  virtual std::int32_t input_rank(std::int32_t input) const noexcept = 0;
  virtual DType input_dtype(std::int32_t input) const noexcept = 0;
  // Dimension `axis` of input `input`; -1 when out of range.
  virtual DimExpr input_dim(std::int32_t input, std::int32_t axis) noexcept = 0;
  virtual DimExpr constant(std::int64_t value) noexcept = 0;
  // -1 for an invalid operand.
  virtual DimExpr operation(DimOperation op, DimExpr a, DimExpr b) noexcept = 0;
  // True (and *value set) when the expression is a constant.
  virtual bool constant_value(DimExpr expr, std::int64_t* value) const noexcept = 0;

 protected:
  ~ShapeBuilder() = default;
};

// One output's dtype and shape, as infer_outputs returns them.
struct OutputDesc {
  DType dtype;
  std::int32_t rank;
  DimExpr dims[kMaxRank];
};

// The runtime object of one plugin layer in one execution context (or, on the CPU, one engine context): it is used by
// one thread at a time and destroyed with the context.
class PluginKernel {
 public:
  // Called when the context's input shapes are set (host side, before any enqueue with these shapes; never while a
  // CUDA graph is being captured): load modules, plan launches. False (with a message in `error`) refuses the shapes.
  virtual bool configure(const TensorDesc* inputs, std::int32_t input_count, const TensorDesc* outputs,
                         std::int32_t output_count, ErrorSink& error) noexcept = 0;
  // Runs the layer: reads `inputs`, writes `outputs`, may use `workspace` (at least the creator's workspace_bytes for
  // the configured shapes). On a CUDA device it enqueues on `stream` and returns: no allocation, no synchronization,
  // no host copies (the enqueue may be captured in a CUDA graph). Absent optional inputs have a nullptr address.
  virtual bool enqueue(const TensorDesc* inputs, const void* const* input_data, std::int32_t input_count,
                       const TensorDesc* outputs, void* const* output_data, std::int32_t output_count, void* workspace,
                       std::size_t workspace_bytes, void* stream, ErrorSink& error) noexcept = 0;
  // Releases the object (it was allocated by the plugin library, so the library frees it).
  virtual void destroy() noexcept = 0;

 protected:
  ~PluginKernel() = default;
};

// What a plugin library provides per plugin type and version. Creators are owned by the library and live as long as
// the process (libraries are never unloaded); every function may be called from several threads at once.
class PluginCreator {
 public:
  // The plugin's name in networks ("bias") and its version ("1"). Both are recorded in engines.
  virtual const char* type() const noexcept = 0;
  virtual const char* version() const noexcept = 0;
  // Output count (1..max_outputs), dtypes and shapes for these fields and inputs. False (with a message) when the
  // fields or inputs are not what the plugin takes: the layer is refused when it is added to a network.
  virtual bool infer_outputs(const Fields& fields, ShapeBuilder& shapes, OutputDesc* outputs, std::int32_t max_outputs,
                             std::int32_t* output_count, ErrorSink& error) const noexcept = 0;
  // Whether a kernel on `device` runs this combination of input and output dtypes and formats (dims are -1 where they
  // vary). The builder asks before choosing the layer's kernel and, for precision-lowered networks, which dtypes to
  // give the layer; false for a device the plugin has no implementation for.
  virtual bool supports(const Fields& fields, Device device, const TensorDesc* inputs, std::int32_t input_count,
                        const TensorDesc* outputs, std::int32_t output_count) const noexcept = 0;
  // Scratch bytes a kernel needs at these concrete shapes (0 for none).
  virtual std::size_t workspace_bytes(const Fields& fields, Device device, const TensorDesc* inputs,
                                      std::int32_t input_count, const TensorDesc* outputs,
                                      std::int32_t output_count) const noexcept = 0;
  // A runtime object for one context; nullptr (with a message) on failure.
  virtual PluginKernel* create(const Fields& fields, Device device, ErrorSink& error) const noexcept = 0;

 protected:
  ~PluginCreator() = default;
};

}  // namespace tensoracle::plugin

// The entry point every plugin library exports (the analogue of TensorRT's getCreators). It sets *abi_version to the
// kAbiVersion the library was built with, and *creators / *count to the library's creators (an array the library
// owns). It returns 0, or nonzero when the library can't provide its creators.
#define TENSORACLE_PLUGIN_ENTRY_NAME "tensoracle_get_plugin_creators"
extern "C" {
typedef std::int32_t (*tensoracle_get_plugin_creators_fn)(std::int32_t* abi_version,
                                                          tensoracle::plugin::PluginCreator* const** creators,
                                                          std::int32_t* count);
}
