// The cubin plugin base's common source (cubin_plugin.hpp), compiled into each plugin library (never into
// libtensoracle): fields, the PluginIO defaults, argument checks, SHA-256 of images, per-context modules and launches
// through the CUDA driver API.
#include "tensoracle/cubin_plugin.hpp"

#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

namespace tensoracle::cubin {
namespace {

// ---- SHA-256 (FIPS 180-4): self-contained because a plugin library links neither OpenSSL nor tensoracle ----

constexpr std::uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void sha256_block(std::uint32_t state[8], const unsigned char* block) {
  std::uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = std::uint32_t(block[4 * i]) << 24 | std::uint32_t(block[4 * i + 1]) << 16 |
           std::uint32_t(block[4 * i + 2]) << 8 | std::uint32_t(block[4 * i + 3]);
  }
  for (int i = 16; i < 64; ++i) {
    std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t v[8];
  std::copy(state, state + 8, v);
  for (int i = 0; i < 64; ++i) {
    std::uint32_t t1 = v[7] + (rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) +
                       kRoundConstants[i] + w[i];
    std::uint32_t t2 =
        (rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
    std::copy_backward(v, v + 7, v + 8);
    v[4] += t1;
    v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; ++i) state[i] += v[i];
}

// ---- messages ----

std::string error_name(CUresult result) {
  const char* name = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) return "CUresult " + std::to_string(result);
  return name;
}

std::string call_failed(const char* call, CUresult result) {
  return std::string(call) + " failed: " + error_name(result);
}

std::string sm_list(const KernelRecord& record) {
  if (record.image_count <= 0) return "none";
  std::string list;
  for (std::int32_t i = 0; i < record.image_count; ++i) {
    if (!list.empty()) list += ", ";
    list += "sm_" + std::to_string(record.images[i].sm);
  }
  return list;
}

const char* field_type_name(plugin::FieldType type) noexcept {
  switch (type) {
    case plugin::FieldType::kInt64: return "int64";
    case plugin::FieldType::kFloat64: return "float64";
    case plugin::FieldType::kString: return "string";
    case plugin::FieldType::kInt64s: return "int64 array";
    case plugin::FieldType::kFloat64s: return "float64 array";
  }
  return "unknown";
}

std::string shape_text(const plugin::TensorDesc& t) {
  std::string s = "[";
  for (std::int32_t a = 0; a < t.rank && a < plugin::kMaxRank; ++a) s += (a ? ", " : "") + std::to_string(t.dims[a]);
  return s + "]";
}

// ---- images whose digest was checked (process-wide: the bytes are the library's own and never change) ----

bool verify_image(const KernelRecord& record, const Image& image, std::string* error) {
  static std::mutex mutex;
  static std::set<const Image*> verified;
  std::lock_guard<std::mutex> lock(mutex);
  if (verified.count(&image)) return true;
  std::string actual = sha256_hex(image.data, image.size);
  std::string recorded = image.sha256 ? image.sha256 : "";
  std::transform(recorded.begin(), recorded.end(), recorded.begin(),
                 [](unsigned char c) { return char(c >= 'A' && c <= 'Z' ? c + 32 : c); });
  if (image.data == nullptr || image.size == 0 || actual != recorded) {
    *error = std::string("kernel '") + record.name + "': the sm_" + std::to_string(image.sm) + " cubin's SHA-256 is " +
             actual + ", the bundle records " + (recorded.empty() ? "none" : recorded) +
             ": the library embeds a damaged cubin; rebuild it from the bundle";
    return false;
  }
  verified.insert(&image);
  return true;
}

bool is_integer(ArgType type) {
  return type == ArgType::kI32 || type == ArgType::kI64 || type == ArgType::kU32 || type == ArgType::kU64;
}

constexpr std::int32_t kMaxParameters = 64;  // public parameters of one kernel (cuLaunchKernel has no smaller limit)

}  // namespace

std::string sha256_hex(const void* data, std::size_t size) {
  std::uint32_t state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                            0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::size_t full = size / 64 * 64;
  for (std::size_t offset = 0; offset < full; offset += 64) sha256_block(state, bytes + offset);
  unsigned char tail[128] = {};
  std::size_t rest = size - full;
  if (rest) std::memcpy(tail, bytes + full, rest);
  tail[rest] = 0x80;
  std::size_t tail_size = rest < 56 ? 64 : 128;
  std::uint64_t bits = std::uint64_t(size) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_size - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  sha256_block(state, tail);
  if (tail_size == 128) sha256_block(state, tail + 64);
  static const char kHex[] = "0123456789abcdef";
  std::string hex(64, '0');
  for (int i = 0; i < 32; ++i) {
    auto byte = static_cast<unsigned char>(state[i / 4] >> (24 - 8 * (i % 4)));
    hex[2 * i] = kHex[byte >> 4];
    hex[2 * i + 1] = kHex[byte & 15];
  }
  return hex;
}

std::int64_t element_count(const plugin::TensorDesc& tensor) noexcept {
  std::int64_t n = 1;
  for (std::int32_t a = 0; a < tensor.rank && a < plugin::kMaxRank; ++a) n *= tensor.dims[a];
  return n;
}

const char* dtype_name(plugin::DType type) noexcept {
  switch (type) {
    case plugin::DType::kF64: return "f64";
    case plugin::DType::kF32: return "f32";
    case plugin::DType::kF16: return "f16";
    case plugin::DType::kBF16: return "bf16";
    case plugin::DType::kF8E4M3: return "f8e4m3";
    case plugin::DType::kF8E5M2: return "f8e5m2";
    case plugin::DType::kI64: return "i64";
    case plugin::DType::kI32: return "i32";
    case plugin::DType::kI16: return "i16";
    case plugin::DType::kI8: return "i8";
    case plugin::DType::kU8: return "u8";
    case plugin::DType::kBool: return "bool";
  }
  return "unknown";
}

// ---- FieldList ----

FieldList::FieldList(std::string plugin_name, const plugin::Fields& fields) : plugin_name_(std::move(plugin_name)) {
  if (fields.count < 0 || (fields.count > 0 && fields.items == nullptr)) {
    throw FieldError("plugin '" + plugin_name_ + "': malformed field list (count " + std::to_string(fields.count) +
                     ")");
  }
  for (std::int32_t i = 0; i < fields.count; ++i) {
    const plugin::Field& f = fields.items[i];
    std::string where = "plugin '" + plugin_name_ + "': field " + std::to_string(i);
    if (f.name == nullptr || f.name[0] == '\0') throw FieldError(where + " has no name");
    if (find(f.name)) throw FieldError("plugin '" + plugin_name_ + "': field '" + f.name + "' is given twice");
    if (f.count < 0 || (f.count > 0 && f.data == nullptr)) {
      throw FieldError("plugin '" + plugin_name_ + "': field '" + f.name + "' has no data");
    }
    FieldValue v;
    v.name = f.name;
    v.type = f.type;
    switch (f.type) {
      case plugin::FieldType::kInt64:
        if (f.count != 1) throw FieldError("plugin '" + plugin_name_ + "': field '" + f.name + "' must hold one int64");
        v.int_value = *static_cast<const std::int64_t*>(f.data);
        break;
      case plugin::FieldType::kFloat64:
        if (f.count != 1)
          throw FieldError("plugin '" + plugin_name_ + "': field '" + f.name + "' must hold one float64");
        v.float_value = *static_cast<const double*>(f.data);
        break;
      case plugin::FieldType::kString:
        v.string_value.assign(static_cast<const char*>(f.data), static_cast<std::size_t>(f.count));
        break;
      case plugin::FieldType::kInt64s: {
        const auto* p = static_cast<const std::int64_t*>(f.data);
        v.ints.assign(p, p + f.count);
        break;
      }
      case plugin::FieldType::kFloat64s: {
        const auto* p = static_cast<const double*>(f.data);
        v.floats.assign(p, p + f.count);
        break;
      }
      default:
        throw FieldError("plugin '" + plugin_name_ + "': field '" + f.name + "' has an unknown type " +
                         std::to_string(static_cast<int>(f.type)));
    }
    items_.push_back(std::move(v));
  }
}

const FieldValue* FieldList::find(const char* name) const noexcept {
  for (const auto& v : items_) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

const FieldValue& FieldList::require(const char* name, plugin::FieldType type) const {
  const FieldValue* v = find(name);
  if (v == nullptr) {
    std::string given;
    for (const auto& item : items_) given += (given.empty() ? "" : ", ") + item.name;
    throw FieldError("plugin '" + plugin_name_ + "': needs the " + field_type_name(type) + " field '" + name +
                     "' (the layer gives: " + (given.empty() ? "no fields" : given) + ")");
  }
  if (v->type != type) {
    throw FieldError("plugin '" + plugin_name_ + "': field '" + name + "' is " + field_type_name(v->type) +
                     ", expected " + field_type_name(type));
  }
  return *v;
}

std::int64_t FieldList::get_int(const char* name) const { return require(name, plugin::FieldType::kInt64).int_value; }
std::int64_t FieldList::get_int(const char* name, std::int64_t fallback) const {
  return has(name) ? get_int(name) : fallback;
}
double FieldList::get_float(const char* name) const {
  const FieldValue* v = find(name);
  if (v && v->type == plugin::FieldType::kInt64) return static_cast<double>(v->int_value);
  return require(name, plugin::FieldType::kFloat64).float_value;
}
double FieldList::get_float(const char* name, double fallback) const { return has(name) ? get_float(name) : fallback; }
const std::string& FieldList::get_string(const char* name) const {
  return require(name, plugin::FieldType::kString).string_value;
}
std::string FieldList::get_string(const char* name, const std::string& fallback) const {
  return has(name) ? get_string(name) : fallback;
}
const std::vector<std::int64_t>& FieldList::get_ints(const char* name) const {
  return require(name, plugin::FieldType::kInt64s).ints;
}
const std::vector<double>& FieldList::get_floats(const char* name) const {
  return require(name, plugin::FieldType::kFloat64s).floats;
}
void FieldList::check_known(const std::vector<std::string>& known) const {
  for (const auto& v : items_) {
    if (std::find(known.begin(), known.end(), v.name) != known.end()) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw FieldError("plugin '" + plugin_name_ + "': unknown field '" + v.name +
                     "' (it takes: " + (list.empty() ? "no fields" : list) + ")");
  }
}

// ---- ModuleCache ----

struct LoadedKernel {
  const KernelRecord* record;
  const Image* image;
  CUmodule module;
  CUfunction function;
  int max_threads;    // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
  int static_shared;  // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
  int dynamic_limit;  // the dynamic shared memory the function may take now
};

struct ContextModules {
  CUcontext context;
  unsigned long long id;  // cuCtxGetId: tells a live context from a new one at a destroyed one's address
  int sm;
  int shared_optin;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
  std::vector<LoadedKernel> kernels;
};

struct ModuleCache::State {
  std::string owner;
  std::mutex mutex;
  std::vector<ContextModules> contexts;

  // The entry of the current context (made on first use); nullptr with a message on failure. Holds `mutex`.
  ContextModules* current(std::string* error) {
    CUcontext context = nullptr;
    CUresult r = cuCtxGetCurrent(&context);
    if (r != CUDA_SUCCESS) return *error = call_failed("cuCtxGetCurrent", r), nullptr;
    if (context == nullptr) return *error = "no current CUDA context (the caller must make one current)", nullptr;
    unsigned long long id = 0;
    if ((r = cuCtxGetId(context, &id)) != CUDA_SUCCESS) return *error = call_failed("cuCtxGetId", r), nullptr;
    for (auto it = contexts.begin(); it != contexts.end(); ++it) {
      if (it->context != context) continue;
      if (it->id == id) return &*it;
      contexts.erase(it);  // that context was destroyed with its modules; a new one has its address
      break;
    }
    CUdevice device = 0;
    if ((r = cuCtxGetDevice(&device)) != CUDA_SUCCESS) return *error = call_failed("cuCtxGetDevice", r), nullptr;
    int major = 0, minor = 0, optin = 0;
    if ((r = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)) != CUDA_SUCCESS ||
        (r = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)) != CUDA_SUCCESS ||
        (r = cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device)) !=
            CUDA_SUCCESS) {
      return *error = call_failed("cuDeviceGetAttribute", r), nullptr;
    }
    contexts.push_back(ContextModules{context, id, 10 * major + minor, optin, {}});
    return &contexts.back();
  }

  // The record's function in `ctx` (loaded on first use); nullptr with a message on failure. Holds `mutex`.
  LoadedKernel* kernel(ContextModules& ctx, const KernelRecord& record, std::string* error) {
    for (auto& k : ctx.kernels) {
      if (k.record == &record) return &k;
    }
    const Image* image = nullptr;
    for (std::int32_t i = 0; i < record.image_count; ++i) {
      if (record.images[i].sm == ctx.sm) image = &record.images[i];
    }
    std::string where = owner + ": kernel '" + record.name + "'";
    if (image == nullptr) {
      *error = where + " has no cubin for sm_" + std::to_string(ctx.sm) + " (this device); the bundle has " +
               sm_list(record) + ": produce the bundle for sm_" + std::to_string(ctx.sm) + " too";
      return nullptr;
    }
    if (!verify_image(record, *image, error)) return *error = owner + ": " + *error, nullptr;
    LoadedKernel k{&record, image, nullptr, nullptr, 0, 0, 0};
    CUresult r = cuModuleLoadData(&k.module, image->data);
    if (r != CUDA_SUCCESS) return *error = where + ": " + call_failed("cuModuleLoadData", r), nullptr;
    auto fail = [&](std::string message) -> LoadedKernel* {
      cuModuleUnload(k.module);
      *error = where + ": " + message;
      return nullptr;
    };
    if ((r = cuModuleGetFunction(&k.function, k.module, record.entry)) != CUDA_SUCCESS) {
      return fail(call_failed("cuModuleGetFunction", r) + " for entry '" + record.entry + "'");
    }
    if ((r = cuFuncGetAttribute(&k.max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k.function)) != CUDA_SUCCESS ||
        (r = cuFuncGetAttribute(&k.static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k.function)) != CUDA_SUCCESS) {
      return fail(call_failed("cuFuncGetAttribute", r));
    }
    if (record.threads > k.max_threads) {
      return fail("compiled for " + std::to_string(record.threads) + " threads per block, but the function allows " +
                  std::to_string(k.max_threads) + " on sm_" + std::to_string(ctx.sm));
    }
    if (std::uint64_t(k.static_shared) + image->shared_bytes > std::uint64_t(ctx.shared_optin)) {
      return fail("needs " + std::to_string(k.static_shared + std::uint64_t(image->shared_bytes)) +
                  " bytes of shared memory, the device allows " + std::to_string(ctx.shared_optin) + " per block");
    }
    // Without the attribute, static plus dynamic shared memory may not exceed 48 KiB.
    k.dynamic_limit = std::max(0, 48 * 1024 - k.static_shared);
    if (!raise_dynamic_limit(k, image->shared_bytes, error)) return fail(*error);
    ctx.kernels.push_back(k);
    return &ctx.kernels.back();
  }

  static bool raise_dynamic_limit(LoadedKernel& k, std::uint32_t bytes, std::string* error) {
    if (bytes <= std::uint32_t(k.dynamic_limit)) return true;
    CUresult r = cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes));
    if (r != CUDA_SUCCESS) return *error = call_failed("cuFuncSetAttribute", r), false;
    k.dynamic_limit = int(bytes);
    return true;
  }
};

ModuleCache::ModuleCache(std::string owner) : state_(std::make_unique<State>()) { state_->owner = std::move(owner); }

ModuleCache::~ModuleCache() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (auto& ctx : state_->contexts) {
    // A context destroyed before us took its modules with it: skip it (and one that now has its address).
    unsigned long long id = 0;
    if (cuCtxGetId(ctx.context, &id) != CUDA_SUCCESS || id != ctx.id) continue;
    if (cuCtxPushCurrent(ctx.context) != CUDA_SUCCESS) continue;
    for (auto& k : ctx.kernels) cuModuleUnload(k.module);
    CUcontext popped = nullptr;
    cuCtxPopCurrent(&popped);
  }
}

bool ModuleCache::load(const KernelRecord* const* records, std::int32_t count, plugin::ErrorSink& error) noexcept {
  return guarded(state_->owner.c_str(), error, [&] {
    std::lock_guard<std::mutex> lock(state_->mutex);
    std::string why;
    ContextModules* ctx = state_->current(&why);
    if (ctx == nullptr) {
      error.set((state_->owner + ": " + why).c_str());
      return false;
    }
    for (std::int32_t i = 0; i < count; ++i) {
      if (state_->kernel(*ctx, *records[i], &why) == nullptr) {
        error.set(why.c_str());
        return false;
      }
    }
    return true;
  });
}

// ---- Kernel ----

std::int32_t Kernel::parameter_count() const noexcept {
  if (record_ == nullptr) return 0;
  std::int32_t n = 0;
  for (std::int32_t i = 0; i < record_->arg_count; ++i) n += record_->args[i].count;
  return n;
}

const char* Kernel::constant(const char* name) const noexcept {
  if (record_ == nullptr || name == nullptr) return nullptr;
  for (std::int32_t i = 0; i < record_->constant_count; ++i) {
    if (std::strcmp(record_->constants[i].name, name) == 0) return record_->constants[i].value;
  }
  return nullptr;
}

bool Kernel::accepts(const void* const* args, std::int32_t count) const noexcept {
  return accepts(args, count, nullptr);
}

bool Kernel::accepts(const void* const* args, std::int32_t count, std::string* why) const noexcept {
  auto refuse = [&](auto&& make) {
    if (why) {
      try {
        *why = make();
      } catch (...) {
      }
    }
    return false;
  };
  if (record_ == nullptr) return refuse([] { return std::string("no kernel"); });
  std::int32_t expected = parameter_count();
  if (count != expected) {
    return refuse([&] {
      return "kernel '" + std::string(record_->name) + "' takes " + std::to_string(expected) +
             " arguments, the call gives " + std::to_string(count);
    });
  }
  if (count > 0 && args == nullptr) return refuse([&] { return std::string("no argument array"); });
  std::int32_t index = 0;
  for (std::int32_t i = 0; i < record_->arg_count; ++i) {
    const ArgSpec& spec = record_->args[i];
    for (std::int32_t j = 0; j < spec.count; ++j, ++index) {
      const void* p = args[index];
      if (p == nullptr) {
        return refuse([&] { return "argument '" + std::string(spec.name) + "' has no value (a nullptr entry)"; });
      }
      if (spec.divisibility <= 1) continue;
      std::uint64_t value = 0;
      bool negative = false;
      if (spec.type == ArgType::kPointer) {
        value = reinterpret_cast<std::uintptr_t>(*static_cast<void* const*>(p));
      } else if (is_integer(spec.type)) {
        std::int64_t s = 0;
        switch (spec.type) {
          case ArgType::kI32: s = *static_cast<const std::int32_t*>(p); break;
          case ArgType::kI64: s = *static_cast<const std::int64_t*>(p); break;
          case ArgType::kU32: value = *static_cast<const std::uint32_t*>(p); break;
          default: value = *static_cast<const std::uint64_t*>(p); break;
        }
        if (spec.type == ArgType::kI32 || spec.type == ArgType::kI64) {
          negative = s < 0;
          value = negative ? std::uint64_t(0) - std::uint64_t(s) : std::uint64_t(s);
        }
      } else {
        continue;  // floats carry no divisibility rule
      }
      if (value % std::uint64_t(spec.divisibility) != 0) {
        return refuse([&] {
          std::string shown = spec.type == ArgType::kPointer ? "address" : "value";
          return "kernel '" + std::string(record_->name) + "': argument '" + spec.name + "'" +
                 (spec.count > 1 ? "[" + std::to_string(j) + "]" : "") + " " + shown + " " + (negative ? "-" : "") +
                 std::to_string(value) + " is not divisible by " + std::to_string(spec.divisibility);
        });
      }
    }
  }
  return true;
}

bool Kernel::launch(Dim3 grid, Dim3 block, const void* const* args, std::int32_t count, void* stream,
                    plugin::ErrorSink& error, std::uint32_t shared_bytes) const noexcept {
  const char* owner = modules_ ? modules_->state_->owner.c_str() : "cubin plugin";
  return guarded(owner, error, [&] {
    auto fail = [&](const std::string& message) {
      error.set((std::string(owner) + ": " + message).c_str());
      return false;
    };
    if (!valid()) return fail("launch of a kernel handle that names no kernel");
    std::string why;
    if (!accepts(args, count, &why)) return fail(why);
    std::int32_t scratch = record_->scratch_pointers;
    if (scratch < 0 || scratch > 2 || count + scratch > kMaxParameters) {
      return fail("kernel '" + std::string(record_->name) + "': unsupported parameter list (" + std::to_string(count) +
                  " arguments and " + std::to_string(scratch) + " scratch pointers)");
    }
    if (block.x == 0 && block.y == 0 && block.z == 0) {
      if (record_->threads <= 0) {
        return fail("kernel '" + std::string(record_->name) + "' records no thread count: give the block size");
      }
      block = Dim3{std::uint32_t(record_->threads), 1, 1};
    }
    std::uint64_t threads = std::uint64_t(block.x) * block.y * block.z;
    if (record_->threads > 0 && threads != std::uint64_t(record_->threads)) {
      return fail("kernel '" + std::string(record_->name) + "' was compiled for " + std::to_string(record_->threads) +
                  " threads per block, the launch asks " + std::to_string(threads));
    }
    if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
      return fail("kernel '" + std::string(record_->name) + "': empty grid or block");
    }
    CUfunction function = nullptr;
    {
      std::lock_guard<std::mutex> lock(modules_->state_->mutex);
      ContextModules* ctx = modules_->state_->current(&why);
      if (ctx == nullptr) return fail(why);
      // Normally configure loaded it; a launch in a context configure did not see loads here.
      LoadedKernel* k = modules_->state_->kernel(*ctx, *record_, &why);
      if (k == nullptr) return error.set(why.c_str()), false;
      if (shared_bytes == kImageSharedBytes) shared_bytes = k->image->shared_bytes;
      if (threads > std::uint64_t(k->max_threads)) {
        return fail("kernel '" + std::string(record_->name) + "': " + std::to_string(threads) +
                    " threads per block, the function allows " + std::to_string(k->max_threads));
      }
      if (std::uint64_t(k->static_shared) + shared_bytes > std::uint64_t(ctx->shared_optin)) {
        return fail("kernel '" + std::string(record_->name) + "': " + std::to_string(shared_bytes) +
                    " bytes of dynamic shared memory with " + std::to_string(k->static_shared) +
                    " static exceed the device's " + std::to_string(ctx->shared_optin) + " per block");
      }
      if (!ModuleCache::State::raise_dynamic_limit(*k, shared_bytes, &why)) return fail(why);
      function = k->function;
    }
    std::array<void*, kMaxParameters> params{};
    for (std::int32_t i = 0; i < count; ++i) params[i] = const_cast<void*>(args[i]);
    void* null_scratch[2] = {nullptr, nullptr};
    for (std::int32_t i = 0; i < scratch; ++i) params[count + i] = &null_scratch[i];
    CUresult r = cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes,
                                static_cast<CUstream>(stream), params.data(), nullptr);
    if (r != CUDA_SUCCESS)
      return fail("kernel '" + std::string(record_->name) + "': " + call_failed("cuLaunchKernel", r));
    return true;
  });
}

// ---- PluginBase ----

PluginBase::PluginBase(const char* type, const char* version, const plugin::Fields& fields)
    : PluginBase(type, version, fields, PluginIO{}) {}

PluginBase::PluginBase(const char* type, const char* version, const plugin::Fields& fields, PluginIO io)
    : type_(type ? type : ""),
      version_(version ? version : ""),
      fields_(type_, fields),
      io_(std::move(io)),
      modules_("plugin '" + type_ + "'") {
  if (io_.shape_input_index < 0 || io_.shape_input_index >= int(io_.inputs.size())) {
    throw FieldError("plugin '" + type_ + "': PluginIO::shape_input_index " + std::to_string(io_.shape_input_index) +
                     " names no input (it declares " + std::to_string(io_.inputs.size()) + ")");
  }
}

PluginBase::~PluginBase() = default;

Kernel PluginBase::kernel(const char* name) {
  const Bundle& bundle = embedded_bundle();
  std::string names;
  for (std::int32_t i = 0; i < bundle.kernel_count; ++i) {
    const KernelRecord* record = &bundle.kernels[i];
    if (name != nullptr && std::strcmp(record->name, name) == 0) {
      if (std::find(used_.begin(), used_.end(), record) == used_.end()) used_.push_back(record);
      return Kernel(record, &modules_);
    }
    names += (names.empty() ? "" : ", ") + std::string(record->name);
  }
  throw FieldError("plugin '" + type_ + "': the bundle has no kernel '" + (name ? name : "") +
                   "' (it has: " + (names.empty() ? "none" : names) + ")");
}

bool PluginBase::infer_outputs(plugin::ShapeBuilder& shapes, plugin::OutputDesc* outputs, std::int32_t max_outputs,
                               std::int32_t* output_count, std::string& error) const {
  std::int32_t n = shapes.input_count();
  if (n != std::int32_t(io_.inputs.size())) {
    error = "takes " + std::to_string(io_.inputs.size()) + " input(s), the layer has " + std::to_string(n);
    return false;
  }
  if (max_outputs < 1 || outputs == nullptr || output_count == nullptr) {
    error = "no room for the output";
    return false;
  }
  std::int32_t rank = shapes.input_rank(io_.shape_input_index);
  if (rank < 0 || rank > plugin::kMaxRank) {
    error = "input " + std::to_string(io_.shape_input_index) + " has an unsupported rank " + std::to_string(rank);
    return false;
  }
  outputs[0].dtype = io_.output.type;
  outputs[0].rank = rank;
  for (std::int32_t a = 0; a < rank; ++a) outputs[0].dims[a] = shapes.input_dim(io_.shape_input_index, a);
  *output_count = 1;
  return true;
}

bool PluginBase::check_io(const plugin::TensorDesc* inputs, std::int32_t input_count, const plugin::TensorDesc* outputs,
                          std::int32_t output_count, std::string* why) const noexcept {
  auto refuse = [&](std::string message) {
    if (why) *why = std::move(message);
    return false;
  };
  try {
    if (input_count != std::int32_t(io_.inputs.size()) || (input_count > 0 && inputs == nullptr)) {
      return refuse("takes " + std::to_string(io_.inputs.size()) + " input(s), got " + std::to_string(input_count));
    }
    if (output_count != 1 || outputs == nullptr) {
      return refuse("gives 1 output, got " + std::to_string(output_count));
    }
    for (std::int32_t i = 0; i < input_count; ++i) {
      const TensorSpec& spec = io_.inputs[i];
      if (inputs[i].dtype != spec.type || inputs[i].format != spec.format) {
        return refuse("input " + std::to_string(i) + " must be " + dtype_name(spec.type) + " (linear), not " +
                      dtype_name(inputs[i].dtype));
      }
    }
    if (outputs[0].dtype != io_.output.type || outputs[0].format != io_.output.format) {
      return refuse(std::string("the output must be ") + dtype_name(io_.output.type) + " (linear), not " +
                    dtype_name(outputs[0].dtype));
    }
    return true;
  } catch (...) {
    return false;
  }
}

bool PluginBase::supports(plugin::Device device, const plugin::TensorDesc* inputs, std::int32_t input_count,
                          const plugin::TensorDesc* outputs, std::int32_t output_count) const {
  return device == plugin::Device::kCuda && check_io(inputs, input_count, outputs, output_count, nullptr);
}

std::size_t PluginBase::workspace_bytes(plugin::Device, const plugin::TensorDesc*, std::int32_t,
                                        const plugin::TensorDesc*, std::int32_t) const {
  return 0;
}

bool PluginBase::validate_shape(const plugin::TensorDesc*, std::int32_t, const plugin::TensorDesc&) const noexcept {
  return true;
}

bool PluginBase::prepare(const plugin::TensorDesc*, std::int32_t, const plugin::TensorDesc*, std::int32_t,
                         plugin::ErrorSink&) noexcept {
  return true;
}

bool PluginBase::check_shapes(const plugin::TensorDesc* inputs, std::int32_t input_count,
                              const plugin::TensorDesc* outputs, std::int32_t output_count,
                              std::string* why) const noexcept {
  if (!check_io(inputs, input_count, outputs, output_count, why)) return false;
  try {
    const plugin::TensorDesc& shape_input = inputs[io_.shape_input_index];
    bool same = outputs[0].rank == shape_input.rank;
    for (std::int32_t a = 0; same && a < shape_input.rank && a < plugin::kMaxRank; ++a) {
      same = outputs[0].dims[a] == shape_input.dims[a];
    }
    if (!same) {
      if (why) {
        *why = "the output " + shape_text(outputs[0]) + " must have the shape of input " +
               std::to_string(io_.shape_input_index) + " " + shape_text(shape_input);
      }
      return false;
    }
    if (!validate_shape(inputs, input_count, outputs[0])) {
      if (why) {
        std::string shapes;
        for (std::int32_t i = 0; i < input_count; ++i) shapes += (i ? ", " : "") + shape_text(inputs[i]);
        *why = "refuses the input shapes " + shapes;
      }
      return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

bool PluginBase::configure(const plugin::TensorDesc* inputs, std::int32_t input_count,
                           const plugin::TensorDesc* outputs, std::int32_t output_count,
                           plugin::ErrorSink& error) noexcept {
  return guarded(type_.c_str(), error, [&] {
    std::string why;
    if (!check_shapes(inputs, input_count, outputs, output_count, &why)) {
      error.set(("plugin '" + type_ + "': " + why).c_str());
      return false;
    }
    if (!modules_.load(used_.data(), std::int32_t(used_.size()), error)) return false;
    return prepare(inputs, input_count, outputs, output_count, error);
  });
}

bool PluginBase::enqueue(const plugin::TensorDesc* inputs, const void* const* input_data, std::int32_t input_count,
                         const plugin::TensorDesc* outputs, void* const* output_data, std::int32_t output_count,
                         void* workspace, std::size_t workspace_bytes, void* stream,
                         plugin::ErrorSink& error) noexcept {
  RunArgs args{inputs, input_data, input_count, outputs, output_data, output_count, workspace, workspace_bytes, stream};
  return run(args, error);
}

void PluginBase::destroy() noexcept { delete this; }

}  // namespace tensoracle::cubin
