// The cubin plugin base: plugin types written on the plugin interface (plugin.hpp) that launch the kernels of an
// embedded cubin bundle (cubin_bundle.hpp). Compiled into each plugin library with src/cubin_plugin/cubin_plugin.cpp
// by tensoracle_add_cubin_plugin; needs no tensoracle library and no CUDA header. docs/cubin-plugins.md explains it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensoracle/cubin_bundle.hpp"
#include "tensoracle/plugin.hpp"

namespace tensoracle::cubin {

// The dtype and format of one plugin tensor.
struct TensorSpec {
  plugin::DType type = plugin::DType::kF32;
  plugin::Format format = plugin::Format::kLinear;
};

// What a single-output plugin type takes and gives: one TensorSpec per input in network order, the output's spec, and
// the input whose shape the output copies. The default is one f32 linear input and output shaped like input 0.
// (Formats: the engine gives plugin layers linear tensors only, so `format` is checked but has one value today.)
struct PluginIO {
  std::vector<TensorSpec> inputs{TensorSpec{}};
  TensorSpec output{};
  int shape_input_index = 0;
};

// Thrown by the typed field accessors and by plugin constructors that refuse their fields. The creator turns it into an
// ErrorSink message (and a refused layer): it never crosses the plugin interface.
class FieldError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One field of a layer, copied out of plugin::Fields (which only lives for the call).
struct FieldValue {
  std::string name;
  plugin::FieldType type;
  std::int64_t int_value = 0;      // kInt64
  double float_value = 0;          // kFloat64
  std::string string_value;        // kString
  std::vector<std::int64_t> ints;  // kInt64s
  std::vector<double> floats;      // kFloat64s
};

// A layer's fields in the network's order with typed access. Accessors throw FieldError naming the field, its type and
// the plugin when a field is absent or of another type; the forms with a default return it for an absent field.
class FieldList {
 public:
  FieldList() = default;
  // Copies `fields`; throws FieldError for a malformed entry (no name, a repeated name, a negative count).
  FieldList(std::string plugin_name, const plugin::Fields& fields);

  const std::vector<FieldValue>& items() const noexcept { return items_; }
  bool has(const char* name) const noexcept { return find(name) != nullptr; }
  std::int64_t get_int(const char* name) const;
  std::int64_t get_int(const char* name, std::int64_t fallback) const;
  double get_float(const char* name) const;  // a kInt64 field is accepted too
  double get_float(const char* name, double fallback) const;
  const std::string& get_string(const char* name) const;
  std::string get_string(const char* name, const std::string& fallback) const;
  const std::vector<std::int64_t>& get_ints(const char* name) const;
  const std::vector<double>& get_floats(const char* name) const;
  // Throws FieldError naming the first field that is not one of `known` (a misspelled field should not pass silently).
  void check_known(const std::vector<std::string>& known) const;

 private:
  const FieldValue* find(const char* name) const noexcept;
  const FieldValue& require(const char* name, plugin::FieldType type) const;

  std::string plugin_name_;
  std::vector<FieldValue> items_;
};

// A launch geometry (grid in blocks, block in threads).
struct Dim3 {
  std::uint32_t x = 1, y = 1, z = 1;
};

class ModuleCache;

// A handle to one kernel of the bundle: checks a call's arguments against the generated record and launches the
// function loaded for the current CUDA context and device. Cheap to copy; valid as long as the PluginBase (or
// ModuleCache) it came from. `args` are the kernel's public parameters as cuLaunchKernel takes them: args[i] points
// at the value of parameter i (for pointers, at the void* holding the address), `count` of them.
class Kernel {
 public:
  // Takes the dynamic shared memory of the loaded image (Image::shared_bytes).
  static constexpr std::uint32_t kImageSharedBytes = 0xffffffffu;

  Kernel() = default;
  Kernel(const KernelRecord* record, ModuleCache* modules) noexcept : record_(record), modules_(modules) {}

  bool valid() const noexcept { return record_ != nullptr && modules_ != nullptr; }
  const KernelRecord* record() const noexcept { return record_; }
  const char* name() const noexcept { return record_ ? record_->name : "(no kernel)"; }
  // Kernel parameters the record declares (the sum of its ArgSpec counts), without the appended scratch pointers.
  std::int32_t parameter_count() const noexcept;
  // The value of a compile-time constant the kernel was specialized with, nullptr when it has none of that name.
  const char* constant(const char* name) const noexcept;

  // Whether this variant takes these arguments: the count matches the record and every pointer address and integer
  // value is divisible by its spec's divisibility. Runs on the host without a GPU.
  bool accepts(const void* const* args, std::int32_t count) const noexcept;
  // The same, with the reason for a refusal (which argument, which rule) in `why`.
  bool accepts(const void* const* args, std::int32_t count, std::string* why) const noexcept;

  // Launches on `stream` (a CUstream / cudaStream_t): checks the arguments as accepts does, appends the record's
  // scratch pointers as nullptr, and checks the block against the record's `threads` (a block of {0, 0, 0} means
  // "the record's threads") and the loaded function's limits. False with a message in `error` on any failure.
  bool launch(Dim3 grid, Dim3 block, const void* const* args, std::int32_t count, void* stream,
              plugin::ErrorSink& error, std::uint32_t shared_bytes = kImageSharedBytes) const noexcept;

 private:
  const KernelRecord* record_ = nullptr;
  ModuleCache* modules_ = nullptr;
};

// The loaded modules of one bundle's kernels: one CUmodule per kernel per CUDA context, loaded from the image of the
// context's device SM after its SHA-256 was checked, under a mutex; each unloaded in its own context at destruction
// (contexts destroyed before are skipped). Defined in cubin_plugin.cpp.
class ModuleCache {
 public:
  explicit ModuleCache(std::string owner);
  ~ModuleCache();
  ModuleCache(const ModuleCache&) = delete;
  ModuleCache& operator=(const ModuleCache&) = delete;

  // Loads these kernels into the current context (those loaded already are kept). False with a message on failure.
  bool load(const KernelRecord* const* records, std::int32_t count, plugin::ErrorSink& error) noexcept;

  struct State;

 private:
  friend class Kernel;
  std::unique_ptr<State> state_;
};

// Input to PluginBase::run: the enqueue call's arguments in one place.
struct RunArgs {
  const plugin::TensorDesc* inputs;
  const void* const* input_data;
  std::int32_t input_count;
  const plugin::TensorDesc* outputs;
  void* const* output_data;
  std::int32_t output_count;
  void* workspace;
  std::size_t workspace_bytes;
  void* stream;  // CUstream / cudaStream_t
};

// The element count of a tensor (the product of its dims).
std::int64_t element_count(const plugin::TensorDesc& tensor) noexcept;
// The name of a dtype ("f32"), for messages.
const char* dtype_name(plugin::DType type) noexcept;

// The base of a plugin type. A subclass T is constructed from the layer's fields (T(const plugin::Fields&)), passes
// its type, version, fields and PluginIO here, reads its fields (throwing FieldError to refuse them) and looks up its
// kernels (kernel("bias")). Creator<T> answers the builder's questions with a T made for each call's fields — so a
// constructor must not touch the GPU — and creates one T per execution context as its PluginKernel.
//
// The base answers, from PluginIO: one output, its dtype, its shape (that of input shape_input_index), supports
// (device kCuda, counts, dtypes, formats) and, at configure, the same checks on concrete shapes plus validate_shape;
// configure then loads the bundle's modules into the current context. Override the virtual methods for several
// outputs, computed shapes or other dtypes. run() is the caller's launch sequence.
//
// Thread safety: a T made by create() is used by one thread at a time (the interface's rule for PluginKernel); the
// const queries may run concurrently on different objects.
class PluginBase : public plugin::PluginKernel {
 public:
  PluginBase(const char* type, const char* version, const plugin::Fields& fields);
  PluginBase(const char* type, const char* version, const plugin::Fields& fields, PluginIO io);
  virtual ~PluginBase();
  PluginBase(const PluginBase&) = delete;
  PluginBase& operator=(const PluginBase&) = delete;

  const std::string& type() const noexcept { return type_; }
  const std::string& version() const noexcept { return version_; }
  const FieldList& fields() const noexcept { return fields_; }
  const PluginIO& io() const noexcept { return io_; }
  // A handle to the bundle's kernel of that name (configure loads the kernels asked for here); throws FieldError
  // (naming the bundle's kernels) when there is none. Ask in the constructor and keep the handle.
  Kernel kernel(const char* name);

  // ---- what Creator<T> asks; the defaults follow PluginIO ----
  // Output count, dtypes and shapes. `error` receives why the inputs are refused.
  virtual bool infer_outputs(plugin::ShapeBuilder& shapes, plugin::OutputDesc* outputs, std::int32_t max_outputs,
                             std::int32_t* output_count, std::string& error) const;
  virtual bool supports(plugin::Device device, const plugin::TensorDesc* inputs, std::int32_t input_count,
                        const plugin::TensorDesc* outputs, std::int32_t output_count) const;
  virtual std::size_t workspace_bytes(plugin::Device device, const plugin::TensorDesc* inputs, std::int32_t input_count,
                                      const plugin::TensorDesc* outputs, std::int32_t output_count) const;
  // Concrete shapes at configure, after the count/type/format checks: true when the plugin takes them.
  virtual bool validate_shape(const plugin::TensorDesc* inputs, std::int32_t input_count,
                              const plugin::TensorDesc& output) const noexcept;

  // The concrete tensors at configure: check_io, the output shaped like input shape_input_index, validate_shape.
  // Override it together with infer_outputs and supports for several outputs or computed shapes.
  virtual bool check_shapes(const plugin::TensorDesc* inputs, std::int32_t input_count,
                            const plugin::TensorDesc* outputs, std::int32_t output_count,
                            std::string* why) const noexcept;

  // ---- PluginKernel ----
  // Runs check_shapes, loads the kernels this object asked for into the current context, then calls prepare().
  bool configure(const plugin::TensorDesc* inputs, std::int32_t input_count, const plugin::TensorDesc* outputs,
                 std::int32_t output_count, plugin::ErrorSink& error) noexcept override;
  bool enqueue(const plugin::TensorDesc* inputs, const void* const* input_data, std::int32_t input_count,
               const plugin::TensorDesc* outputs, void* const* output_data, std::int32_t output_count, void* workspace,
               std::size_t workspace_bytes, void* stream, plugin::ErrorSink& error) noexcept override;
  void destroy() noexcept override;

 protected:
  // Shape-dependent planning after configure's checks (launch geometry, variant choice); default: nothing.
  virtual bool prepare(const plugin::TensorDesc* inputs, std::int32_t input_count, const plugin::TensorDesc* outputs,
                       std::int32_t output_count, plugin::ErrorSink& error) noexcept;
  // The launch sequence on args.stream: no allocation, no synchronization (the enqueue may be captured).
  virtual bool run(const RunArgs& args, plugin::ErrorSink& error) noexcept = 0;

  // Checks counts, dtypes and formats against PluginIO; false with the reason in `why`.
  bool check_io(const plugin::TensorDesc* inputs, std::int32_t input_count, const plugin::TensorDesc* outputs,
                std::int32_t output_count, std::string* why) const noexcept;

 private:
  std::string type_;
  std::string version_;
  FieldList fields_;
  PluginIO io_;
  ModuleCache modules_;
  std::vector<const KernelRecord*> used_;
};

// Runs `body` and turns an exception into an ErrorSink message prefixed with `what`; false then.
template <typename Body>
bool guarded(const char* what, plugin::ErrorSink& error, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    error.set((std::string(what) + ": " + e.what()).c_str());
  } catch (...) {
    error.set((std::string(what) + ": unknown exception").c_str());
  }
  return false;
}

// Collects a message into a std::string (an ErrorSink for code that wants the text).
class StringErrorSink final : public plugin::ErrorSink {
 public:
  void set(const char* message) noexcept override {
    try {
      message_ = message ? message : "";
    } catch (...) {
    }
  }
  const std::string& message() const noexcept { return message_; }

 private:
  std::string message_;
};

// The plugin::PluginCreator of a PluginBase subclass T (constructible from const plugin::Fields&). It lives as long as
// the process (a function-local static of the entry point) and is safe to call from several threads.
template <typename T>
class Creator final : public plugin::PluginCreator {
 public:
  Creator(const char* type, const char* version) noexcept : type_(type), version_(version) {}

  const char* type() const noexcept override { return type_; }
  const char* version() const noexcept override { return version_; }

  bool infer_outputs(const plugin::Fields& fields, plugin::ShapeBuilder& shapes, plugin::OutputDesc* outputs,
                     std::int32_t max_outputs, std::int32_t* output_count,
                     plugin::ErrorSink& error) const noexcept override {
    return guarded(type_, error, [&] {
      T plugin(fields);
      std::string why;
      if (plugin.infer_outputs(shapes, outputs, max_outputs, output_count, why)) return true;
      error.set((std::string(type_) + ": " + why).c_str());
      return false;
    });
  }

  bool supports(const plugin::Fields& fields, plugin::Device device, const plugin::TensorDesc* inputs,
                std::int32_t input_count, const plugin::TensorDesc* outputs,
                std::int32_t output_count) const noexcept override {
    StringErrorSink ignored;
    return guarded(type_, ignored,
                   [&] { return T(fields).supports(device, inputs, input_count, outputs, output_count); });
  }

  std::size_t workspace_bytes(const plugin::Fields& fields, plugin::Device device, const plugin::TensorDesc* inputs,
                              std::int32_t input_count, const plugin::TensorDesc* outputs,
                              std::int32_t output_count) const noexcept override {
    try {
      return T(fields).workspace_bytes(device, inputs, input_count, outputs, output_count);
    } catch (...) {
      return 0;  // fields that are refused were already reported by infer_outputs
    }
  }

  plugin::PluginKernel* create(const plugin::Fields& fields, plugin::Device device,
                               plugin::ErrorSink& error) const noexcept override {
    if (device != plugin::Device::kCuda) {
      error.set((std::string(type_) + ": a cubin plugin runs on CUDA devices only").c_str());
      return nullptr;
    }
    plugin::PluginKernel* made = nullptr;
    guarded(type_, error, [&] {
      made = new T(fields);
      return true;
    });
    return made;
  }

 private:
  const char* type_;
  const char* version_;
};

// Fills the entry point's outputs from a library's creator array: the body of tensoracle_get_plugin_creators.
inline std::int32_t publish_creators(plugin::PluginCreator* const* all, std::int32_t count, std::int32_t* abi_version,
                                     plugin::PluginCreator* const** creators, std::int32_t* out_count) noexcept {
  if (abi_version == nullptr || creators == nullptr || out_count == nullptr) return 1;
  *abi_version = plugin::kAbiVersion;
  *creators = all;
  *out_count = count;
  return 0;
}

// Lower-case hex SHA-256 of `size` bytes (the digest the bundle records for each image).
std::string sha256_hex(const void* data, std::size_t size);

}  // namespace tensoracle::cubin
