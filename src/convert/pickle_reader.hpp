// A restricted unpickler: builds a tree of plain values from a pickle, executes nothing, and interprets only the
// allowlisted callables a PyTorch weights checkpoint uses (tensors, parameters, OrderedDict, ...).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::convert {

// Values live in one arena (PickleObjects) and refer to each other by index, so shared references (the memo) and
// even cycles cost nothing to own; every traversal is bounded by kMaxDepth.
using Ref = std::uint32_t;

enum class Kind : std::uint8_t {
  kNone,
  kBool,
  kInt,
  kBigInt,  // an integer beyond 64 bits: `text` holds its little-endian two's complement bytes
  kFloat,
  kString,
  kBytes,
  kTuple,
  kList,
  kSet,
  kDict,     // insertion-ordered (dict and collections.OrderedDict)
  kGlobal,   // an allowlisted global: `text` is "module.name"
  kStorage,  // a storage reference (persistent id)
  kTensor,   // a rebuilt tensor description
  kObject,   // an allowlisted object that is not data (torch.device, a layout): `text` names it
};

// A torch storage type: its class name, element size and our DataType when we have one.
struct StorageType {
  std::string_view name;  // "FloatStorage"
  std::size_t element_size;
  std::optional<DataType> dtype;
  std::string_view torch_dtype;  // "float32"
};
// nullptr for names that are not torch storage types.
const StorageType* find_storage_type(std::string_view name) noexcept;

struct StorageRef {
  std::string key;        // the archive's data/<key>, or the legacy storage key
  std::string type_name;  // "FloatStorage"
  std::size_t element_size = 1;
  std::optional<DataType> dtype;
  std::uint64_t numel = 0;        // elements, as recorded
  std::uint64_t view_offset = 0;  // legacy storage views: elements into the root storage
};

struct TensorRef {
  Ref storage = 0;                   // a kStorage value
  std::optional<DataType> dtype;     // of the tensor (the storage's unless _rebuild_tensor_v3 says otherwise)
  std::string dtype_name;            // torch's name, for messages about unsupported dtypes
  std::uint64_t storage_offset = 0;  // elements
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  bool parameter = false;
  bool requires_grad = false;
};

struct Value {
  Kind kind = Kind::kNone;
  bool flag = false;  // kBool
  std::int64_t integer = 0;
  double real = 0;
  std::string text;                          // string, bytes, big int, global name, object name
  std::vector<Ref> items;                    // tuple, list, set
  std::vector<std::pair<Ref, Ref>> entries;  // dict
  StorageRef storage;
  TensorRef tensor;
};

class PickleObjects {
 public:
  const Value& operator[](Ref ref) const { return values_[ref]; }
  Value& at(Ref ref) { return values_[ref]; }
  Ref add(Value value);
  std::size_t size() const noexcept { return values_.size(); }
  // "int", "str", "list", "dict", "tensor", ... (Python's names).
  std::string_view type_name(Ref ref) const;

 private:
  std::vector<Value> values_;
};

// Reading limits against hostile input.
struct PickleLimits {
  std::uint64_t max_values = 20'000'000;  // values created (each opcode creates at most one)
  std::uint64_t max_memo = 20'000'000;
  std::size_t max_depth = 1000;  // MARK nesting, and every later traversal
  std::size_t max_rank = 64;
};
inline constexpr std::size_t kMaxDepth = 1000;

// A pickle that ends before STOP (a FormatError; the legacy reader then reads further into the file).
class PickleTruncatedError : public FormatError {
 public:
  using FormatError::FormatError;
};

// Resolves a BINPERSID's argument (a tuple) into a value (a kStorage one). Throws FormatError when it is not a
// storage reference of the checkpoint.
using PersistentLoad = std::function<Ref(PickleObjects& objects, Ref pid)>;

// Unpickles one pickle from `data` starting at `*position` (advanced past STOP). `where` names the input in errors.
// Throws FormatError for damaged or unsupported pickles and for every global, REDUCE, BUILD or NEWOBJ that is not on
// the allowlist ("not a plain weights checkpoint: global os.system").
Ref read_pickle(std::string_view data, std::size_t* position, PickleObjects& objects, const PersistentLoad& load,
                const std::string& where, const PickleLimits& limits = {});

}  // namespace tensoracle::convert
