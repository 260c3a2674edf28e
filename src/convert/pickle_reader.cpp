// The restricted unpickler: the opcodes of pickle protocols 2 to 5 that hold data, an allowlist of globals, and
// REDUCE/BUILD/NEWOBJ interpreted for the allowlisted callables only. Nothing is ever imported or called.
#include "convert/pickle_reader.hpp"

#include <array>
#include <cstring>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "core/utf8.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::convert {
namespace {

// torch's storage classes (torch/storage.py and torch._C), as `torch.<name>` globals in persistent ids.
constexpr std::array<StorageType, 29> kStorageTypes = {{
    {"DoubleStorage", 8, DataType::kF64, "float64"},
    {"FloatStorage", 4, DataType::kF32, "float32"},
    {"HalfStorage", 2, DataType::kF16, "float16"},
    {"BFloat16Storage", 2, DataType::kBF16, "bfloat16"},
    {"Float8_e4m3fnStorage", 1, DataType::kF8E4M3, "float8_e4m3fn"},
    {"Float8_e5m2Storage", 1, DataType::kF8E5M2, "float8_e5m2"},
    {"LongStorage", 8, DataType::kI64, "int64"},
    {"IntStorage", 4, DataType::kI32, "int32"},
    {"ShortStorage", 2, DataType::kI16, "int16"},
    {"CharStorage", 1, DataType::kI8, "int8"},
    {"ByteStorage", 1, DataType::kU8, "uint8"},
    {"BoolStorage", 1, DataType::kBool, "bool"},
    {"UntypedStorage", 1, DataType::kU8, "uint8"},
    {"ComplexFloatStorage", 8, std::nullopt, "complex64"},
    {"ComplexDoubleStorage", 16, std::nullopt, "complex128"},
    {"ComplexHalfStorage", 4, std::nullopt, "complex32"},
    {"QInt8Storage", 1, std::nullopt, "qint8"},
    {"QUInt8Storage", 1, std::nullopt, "quint8"},
    {"QInt32Storage", 4, std::nullopt, "qint32"},
    {"QUInt4x2Storage", 1, std::nullopt, "quint4x2"},
    {"QUInt2x4Storage", 1, std::nullopt, "quint2x4"},
    {"Float8_e4m3fnuzStorage", 1, std::nullopt, "float8_e4m3fnuz"},
    {"Float8_e5m2fnuzStorage", 1, std::nullopt, "float8_e5m2fnuz"},
    {"Float8_e8m0fnuStorage", 1, std::nullopt, "float8_e8m0fnu"},
    {"UInt16Storage", 2, std::nullopt, "uint16"},
    {"UInt32Storage", 4, std::nullopt, "uint32"},
    {"UInt64Storage", 8, std::nullopt, "uint64"},
    {"Float4_e2m1fn_x2Storage", 1, std::nullopt, "float4_e2m1fn_x2"},
    {"TypedStorage", 1, std::nullopt, "unknown"},
}};

// torch dtypes as `torch.<name>` globals (_rebuild_tensor_v3, optimizer or config entries).
struct DtypeName {
  std::string_view name;
  std::optional<DataType> dtype;
};
constexpr std::array<DtypeName, 26> kDtypes = {{
    {"float64", DataType::kF64},
    {"double", DataType::kF64},
    {"float32", DataType::kF32},
    {"float", DataType::kF32},
    {"float16", DataType::kF16},
    {"half", DataType::kF16},
    {"bfloat16", DataType::kBF16},
    {"float8_e4m3fn", DataType::kF8E4M3},
    {"float8_e5m2", DataType::kF8E5M2},
    {"int64", DataType::kI64},
    {"long", DataType::kI64},
    {"int32", DataType::kI32},
    {"int", DataType::kI32},
    {"int16", DataType::kI16},
    {"short", DataType::kI16},
    {"int8", DataType::kI8},
    {"uint8", DataType::kU8},
    {"bool", DataType::kBool},
    {"complex32", std::nullopt},
    {"complex64", std::nullopt},
    {"complex128", std::nullopt},
    {"cfloat", std::nullopt},
    {"cdouble", std::nullopt},
    {"uint16", std::nullopt},
    {"uint32", std::nullopt},
    {"uint64", std::nullopt},
}};

constexpr std::array<std::string_view, 12> kTensorClasses = {
    "Tensor",    "DoubleTensor", "FloatTensor", "HalfTensor", "BFloat16Tensor", "LongTensor",
    "IntTensor", "ShortTensor",  "CharTensor",  "ByteTensor", "BoolTensor",     "ComplexFloatTensor"};

// Allowlisted globals that are callable (REDUCE, NEWOBJ) and what they become.
enum class Callable {
  kNone,  // allowlisted as a value only (dtypes, storage and tensor classes)
  kOrderedDict,
  kRebuildTensor,    // torch._utils._rebuild_tensor (storage, offset, size, stride)
  kRebuildTensorV2,  // (+ requires_grad, backward_hooks[, metadata])
  kRebuildTensorV3,  // (+ dtype[, metadata])
  kRebuildParameter,
  kRebuildParameterWithState,
  kRebuildFromTypeV2,
  kParameter,  // torch.nn.parameter.Parameter (NEWOBJ)
  kSize,
  kCodecsEncode,
  kSet,
  kFrozenSet,
  kByteArray,
  kDevice,
  kGetLayout,
  kUnsupportedTensor,  // sparse, quantized, meta, wrapper-subclass and NumPy-backed tensors
};

struct GlobalInfo {
  bool allowed = false;
  Callable callable = Callable::kNone;
};

GlobalInfo classify_global(std::string_view module, std::string_view name) {
  if (module == "collections" && name == "OrderedDict") return {true, Callable::kOrderedDict};
  if (module == "torch._utils") {
    if (name == "_rebuild_tensor") return {true, Callable::kRebuildTensor};
    if (name == "_rebuild_tensor_v2") return {true, Callable::kRebuildTensorV2};
    if (name == "_rebuild_tensor_v3") return {true, Callable::kRebuildTensorV3};
    if (name == "_rebuild_parameter") return {true, Callable::kRebuildParameter};
    if (name == "_rebuild_parameter_with_state") return {true, Callable::kRebuildParameterWithState};
    if (name == "_rebuild_sparse_tensor" || name == "_rebuild_sparse_csr_tensor" ||
        name == "_rebuild_meta_tensor_no_storage" || name == "_rebuild_qtensor" ||
        name == "_rebuild_wrapper_subclass" || name == "_rebuild_device_tensor_from_numpy" ||
        name == "_rebuild_nested_tensor") {
      return {true, Callable::kUnsupportedTensor};
    }
    return {};
  }
  if (module == "torch._tensor" && name == "_rebuild_from_type_v2") return {true, Callable::kRebuildFromTypeV2};
  if (module == "torch.nn.parameter" && name == "Parameter") return {true, Callable::kParameter};
  if (module == "torch.serialization" && name == "_get_layout") return {true, Callable::kGetLayout};
  if (module == "_codecs" && name == "encode") return {true, Callable::kCodecsEncode};
  if (module == "builtins" || module == "__builtin__") {
    if (name == "set") return {true, Callable::kSet};
    if (name == "frozenset") return {true, Callable::kFrozenSet};
    if (name == "bytearray") return {true, Callable::kByteArray};
    return {};
  }
  if (module == "torch.storage" && (name == "UntypedStorage" || name == "TypedStorage" || name == "_LegacyStorage")) {
    return {true, Callable::kNone};
  }
  if (module == "torch") {
    if (name == "Size") return {true, Callable::kSize};
    if (name == "device") return {true, Callable::kDevice};
    if (find_storage_type(name)) return {true, Callable::kNone};
    for (const DtypeName& d : kDtypes) {
      if (d.name == name) return {true, Callable::kNone};
    }
    for (std::string_view t : kTensorClasses) {
      if (t == name) return {true, Callable::kNone};
    }
    if (name == "strided" || name == "sparse_coo" || name == "sparse_csr") return {true, Callable::kNone};
  }
  return {};
}

std::optional<DataType> dtype_of_global(std::string_view full, std::string* torch_name) {
  if (full.substr(0, 6) != "torch.") return std::nullopt;
  std::string_view name = full.substr(6);
  for (const DtypeName& d : kDtypes) {
    if (d.name == name) {
      *torch_name = std::string(name);
      return d.dtype;
    }
  }
  *torch_name = std::string(name);
  return std::nullopt;
}

class Reader {
 public:
  Reader(std::string_view data, std::size_t position, PickleObjects& objects, const PersistentLoad& load,
         const std::string& where, const PickleLimits& limits)
      : data_(data), pos_(position), objects_(objects), load_(load), where_(where), limits_(limits) {}

  Ref run();
  std::size_t position() const noexcept { return pos_; }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(fmt::format("{}: pickle offset {}: {}", where_, opcode_pos_, what));
  }
  [[noreturn]] void refuse(const std::string& what) const {
    throw FormatError(fmt::format(
        "{}: not a plain weights checkpoint: {} (tensoracle reads data only and never runs code from a checkpoint)",
        where_, what));
  }

  std::string_view take(std::uint64_t n) {
    if (n > data_.size() - pos_) {
      throw PickleTruncatedError(
          fmt::format("{}: pickle offset {}: needs {} more bytes, the pickle ends first", where_, opcode_pos_, n));
    }
    std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::uint64_t take_le(std::size_t n) {
    std::string_view s = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
    return v;
  }
  std::string_view take_line() {
    std::size_t end = data_.find('\n', pos_);
    if (end == std::string_view::npos) throw PickleTruncatedError(where_ + ": the pickle ends inside a GLOBAL");
    if (end - pos_ > 1024) fail("a GLOBAL's name is longer than 1024 bytes");
    std::string_view s = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }

  Ref make(Value value) {
    if (objects_.size() >= limits_.max_values) fail(fmt::format("more than {} values", limits_.max_values));
    return objects_.add(std::move(value));
  }
  Ref make_kind(Kind kind) {
    Value v;
    v.kind = kind;
    return make(std::move(v));
  }
  Ref make_int(std::int64_t i) {
    Value v;
    v.kind = Kind::kInt;
    v.integer = i;
    return make(std::move(v));
  }
  Ref make_text(Kind kind, std::string_view text) {
    Value v;
    v.kind = kind;
    v.text = std::string(text);
    return make(std::move(v));
  }
  Ref make_string(std::string_view text) {
    for (std::size_t i = 0; i < text.size();) {
      if (static_cast<unsigned char>(text[i]) < 0x80) {
        ++i;
        continue;
      }
      std::uint32_t cp = 0;
      std::size_t n = decode_utf8(text, i, cp);
      if (n == 0) fail("a string is not valid UTF-8");
      i += n;
    }
    return make_text(Kind::kString, text);
  }

  void push(Ref r) { stack_.push_back(r); }
  Ref pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  Ref& top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Value& value(Ref r) { return objects_.at(r); }
  Kind kind(Ref r) { return objects_[r].kind; }
  std::string describe(Ref r) {
    const Value& v = objects_[r];
    if (v.kind == Kind::kGlobal) return v.text;
    if (v.kind == Kind::kObject) return v.text;
    return std::string(objects_.type_name(r));
  }

  void memo_put(std::uint64_t index) {
    if (memo_.size() >= limits_.max_memo && memo_.find(index) == memo_.end()) {
      fail(fmt::format("more than {} memo entries", limits_.max_memo));
    }
    memo_[index] = top();
  }
  void memo_get(std::uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail(fmt::format("memo entry {} is not defined", index));
    push(it->second);
  }

  void set_items(Ref dict, const std::vector<Ref>& items) {
    if (items.size() % 2 != 0) fail("SETITEMS with an odd number of items");
    if (kind(dict) != Kind::kDict) fail(fmt::format("SETITEM on a {}", describe(dict)));
    auto& index = dict_index_[dict];
    for (std::size_t i = 0; i < items.size(); i += 2) {
      auto& entries = value(dict).entries;
      // A key given again replaces its value, as in Python (for the key types a checkpoint uses: str, bytes, int).
      std::optional<std::string> signature = key_signature(items[i]);
      if (signature) {
        auto [it, inserted] = index.emplace(*signature, entries.size());
        if (!inserted) {
          entries[it->second].second = items[i + 1];
          continue;
        }
      }
      entries.emplace_back(items[i], items[i + 1]);
    }
  }
  std::optional<std::string> key_signature(Ref key) {
    const Value& v = objects_[key];
    switch (v.kind) {
      case Kind::kString: return "s" + v.text;
      case Kind::kBytes: return "b" + v.text;
      case Kind::kInt: return "i" + std::to_string(v.integer);
      case Kind::kBool: return std::string(v.flag ? "i1" : "i0");
      default: return std::nullopt;
    }
  }
  void add_to_list(Ref list, const std::vector<Ref>& items) {
    if (kind(list) != Kind::kList) fail(fmt::format("APPEND to a {}", describe(list)));
    auto& target = value(list).items;
    target.insert(target.end(), items.begin(), items.end());
  }

  Ref global(std::string_view module, std::string_view name) {
    std::string full = fmt::format("{}.{}", module, name);
    if (!classify_global(module, name).allowed) refuse("global " + full);
    return make_text(Kind::kGlobal, full);
  }
  std::vector<Ref> tuple_items(Ref args, const char* what) {
    if (kind(args) != Kind::kTuple) fail(fmt::format("the arguments of {} are not a tuple", what));
    return objects_[args].items;
  }
  std::int64_t as_int(Ref r, const char* what) {
    if (kind(r) != Kind::kInt) fail(fmt::format("{} is a {}, not an int", what, describe(r)));
    return objects_[r].integer;
  }
  std::vector<std::int64_t> as_int_tuple(Ref r, const char* what) {
    if (kind(r) != Kind::kTuple && kind(r) != Kind::kList) fail(fmt::format("{} is not a tuple", what));
    std::vector<std::int64_t> out;
    const std::vector<Ref> items = objects_[r].items;
    if (items.size() > limits_.max_rank) fail(fmt::format("{} has {} dimensions", what, items.size()));
    for (Ref i : items) out.push_back(as_int(i, what));
    return out;
  }

  Ref rebuild_tensor(const std::vector<Ref>& args, std::size_t minimum, std::size_t maximum, const char* what,
                     Ref dtype_arg);
  Ref call(Ref callable, Ref args, const char* opcode);
  void build();

  std::string_view data_;
  std::size_t pos_;
  std::size_t opcode_pos_ = 0;
  PickleObjects& objects_;
  const PersistentLoad& load_;
  const std::string& where_;
  const PickleLimits& limits_;
  std::vector<Ref> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Ref> memo_;
  std::unordered_map<Ref, std::unordered_map<std::string, std::size_t>> dict_index_;
  int nested_calls_ = 0;
};

Ref Reader::rebuild_tensor(const std::vector<Ref>& args, std::size_t minimum, std::size_t maximum, const char* what,
                           Ref dtype_arg) {
  if (args.size() < minimum || args.size() > maximum) {
    fail(fmt::format("{} takes {} to {} arguments, not {}", what, minimum, maximum, args.size()));
  }
  if (kind(args[0]) != Kind::kStorage) fail(fmt::format("{}: the storage is a {}", what, describe(args[0])));
  const StorageRef& storage = objects_[args[0]].storage;
  TensorRef t;
  t.storage = args[0];
  t.dtype = storage.dtype;
  t.dtype_name = std::string(find_storage_type(storage.type_name) ? find_storage_type(storage.type_name)->torch_dtype
                                                                  : std::string_view("unknown"));
  std::size_t element_size = storage.element_size;
  if (dtype_arg != std::numeric_limits<Ref>::max()) {
    if (kind(dtype_arg) != Kind::kGlobal) fail(fmt::format("{}: the dtype is a {}", what, describe(dtype_arg)));
    t.dtype = dtype_of_global(objects_[dtype_arg].text, &t.dtype_name);
    element_size = t.dtype ? tensoracle::element_size(*t.dtype) : 1;
  }
  const std::int64_t offset = as_int(args[1], "a tensor's storage offset");
  t.shape = as_int_tuple(args[2], "a tensor's size");
  t.strides = as_int_tuple(args[3], "a tensor's stride");
  if (t.shape.size() != t.strides.size()) fail("a tensor's size and stride have different lengths");
  if (offset < 0) fail("a tensor's storage offset is negative");
  t.storage_offset = static_cast<std::uint64_t>(offset);
  if (args.size() > 4 && kind(args[4]) == Kind::kBool) t.requires_grad = objects_[args[4]].flag;
  // The highest element reached must lie inside the storage (computed with overflow checks).
  std::uint64_t numel = 1, last = t.storage_offset;
  bool overflow = false;
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] < 0) fail("a tensor has a negative size");
    if (t.strides[i] < 0) fail("a tensor has a negative stride");
    overflow |= __builtin_mul_overflow(numel, static_cast<std::uint64_t>(t.shape[i]), &numel);
    if (overflow || numel > (std::uint64_t{1} << 62)) fail("a tensor has more than 2^62 elements");
  }
  if (numel > 0) {
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      std::uint64_t reach = 0;
      overflow |= __builtin_mul_overflow(static_cast<std::uint64_t>(t.shape[i] - 1),
                                         static_cast<std::uint64_t>(t.strides[i]), &reach);
      overflow |= __builtin_add_overflow(last, reach, &last);
    }
    std::uint64_t needed = 0;
    overflow |= __builtin_add_overflow(last, std::uint64_t{1}, &needed);
    overflow |= __builtin_mul_overflow(needed, static_cast<std::uint64_t>(element_size), &needed);
    // storage.numel * element_size fits: persistent ids are limited to 2^62 bytes.
    if (overflow || needed > storage.numel * storage.element_size) {
      fail(fmt::format("a tensor of size ({}) reaches past the end of its storage '{}' ({} elements)",
                       fmt::join(t.shape, ", "), storage.key, storage.numel));
    }
  }
  Value v;
  v.kind = Kind::kTensor;
  v.tensor = std::move(t);
  return make(std::move(v));
}

Ref Reader::call(Ref callable, Ref args, const char* opcode) {
  if (kind(callable) != Kind::kGlobal) refuse(fmt::format("{} of a {}", opcode, describe(callable)));
  const std::string name = objects_[callable].text;
  const std::size_t dot = name.rfind('.');
  const GlobalInfo info =
      classify_global(std::string_view(name).substr(0, dot), std::string_view(name).substr(dot + 1));
  const std::vector<Ref> a = tuple_items(args, name.c_str());
  constexpr Ref kNoDtype = std::numeric_limits<Ref>::max();
  switch (info.callable) {
    case Callable::kOrderedDict: {
      Ref dict = make_kind(Kind::kDict);
      if (!a.empty()) {
        if (a.size() != 1 || (kind(a[0]) != Kind::kList && kind(a[0]) != Kind::kTuple))
          fail("OrderedDict(...) arguments");
        std::vector<Ref> flat;
        for (Ref pair : std::vector<Ref>(objects_[a[0]].items)) {
          if (kind(pair) != Kind::kTuple || objects_[pair].items.size() != 2) fail("OrderedDict(...) items");
          flat.push_back(objects_[pair].items[0]);
          flat.push_back(objects_[pair].items[1]);
        }
        set_items(dict, flat);
      }
      return dict;
    }
    case Callable::kRebuildTensor: return rebuild_tensor(a, 4, 4, "_rebuild_tensor", kNoDtype);
    case Callable::kRebuildTensorV2: return rebuild_tensor(a, 6, 7, "_rebuild_tensor_v2", kNoDtype);
    case Callable::kRebuildTensorV3: {
      if (a.size() < 7) fail("_rebuild_tensor_v3 takes 7 or 8 arguments");
      return rebuild_tensor(a, 7, 8, "_rebuild_tensor_v3", a[6]);
    }
    case Callable::kRebuildParameter:
    case Callable::kRebuildParameterWithState:
    case Callable::kParameter: {
      if (a.empty() || kind(a[0]) != Kind::kTensor) fail(fmt::format("{}: the data is not a tensor", name));
      Value v = objects_[a[0]];
      v.tensor.parameter = true;
      if (a.size() > 1 && kind(a[1]) == Kind::kBool) v.tensor.requires_grad = objects_[a[1]].flag;
      return make(std::move(v));
    }
    case Callable::kRebuildFromTypeV2: {
      if (a.size() != 4) fail("_rebuild_from_type_v2 takes 4 arguments");
      if (kind(a[1]) != Kind::kGlobal ||
          (objects_[a[1]].text != "torch.Tensor" && objects_[a[1]].text != "torch.nn.parameter.Parameter")) {
        refuse(fmt::format("_rebuild_from_type_v2 to {}", describe(a[1])));
      }
      // Nested _rebuild_from_type_v2 calls recurse here: a hostile pickle could nest them deeply.
      if (++nested_calls_ > 8) fail("_rebuild_from_type_v2 nested more than 8 deep");
      Ref tensor = call(a[0], a[2], opcode);
      --nested_calls_;
      if (kind(tensor) != Kind::kTensor) fail("_rebuild_from_type_v2 does not rebuild a tensor");
      if (objects_[a[1]].text == "torch.nn.parameter.Parameter") value(tensor).tensor.parameter = true;
      return tensor;
    }
    case Callable::kSize: {
      if (a.size() > 1) fail("torch.Size takes one argument");
      Ref tuple = make_kind(Kind::kTuple);
      if (!a.empty()) {
        std::vector<std::int64_t> dims = as_int_tuple(a[0], "torch.Size");
        (void)dims;
        value(tuple).items = objects_[a[0]].items;
      }
      return tuple;
    }
    case Callable::kCodecsEncode: {
      // How protocol 2 pickles bytes: _codecs.encode(text, "latin1") (every code point below 256).
      if (a.size() != 2 || kind(a[0]) != Kind::kString || kind(a[1]) != Kind::kString) fail("_codecs.encode arguments");
      const std::string& encoding = objects_[a[1]].text;
      if (encoding != "latin1" && encoding != "latin-1") fail("_codecs.encode with encoding " + encoding);
      const std::string text = objects_[a[0]].text;
      std::string bytes;
      for (std::size_t i = 0; i < text.size();) {
        std::uint32_t cp = static_cast<unsigned char>(text[i]);
        std::size_t n = cp < 0x80 ? 1 : decode_utf8(text, i, cp);
        if (n == 0 || cp > 0xFF) fail("_codecs.encode: a character beyond latin-1");
        bytes.push_back(static_cast<char>(cp));
        i += n;
      }
      return make_text(Kind::kBytes, bytes);
    }
    case Callable::kSet:
    case Callable::kFrozenSet: {
      Ref set = make_kind(Kind::kSet);
      if (!a.empty()) {
        if (kind(a[0]) != Kind::kList && kind(a[0]) != Kind::kTuple && kind(a[0]) != Kind::kSet)
          fail("set(...) arguments");
        value(set).items = objects_[a[0]].items;
      }
      return set;
    }
    case Callable::kByteArray: {
      if (a.empty()) return make_text(Kind::kBytes, "");
      if (kind(a[0]) != Kind::kBytes) fail("bytearray(...) arguments");
      return make_text(Kind::kBytes, std::string(objects_[a[0]].text));
    }
    case Callable::kDevice: {
      std::string text = "torch.device";
      if (!a.empty() && kind(a[0]) == Kind::kString) text += "(" + objects_[a[0]].text + ")";
      return make_text(Kind::kObject, text);
    }
    case Callable::kGetLayout: return make_text(Kind::kObject, "torch.layout");
    case Callable::kUnsupportedTensor:
      throw UnsupportedError(fmt::format(
          "{}: the checkpoint holds a tensor rebuilt by {} (sparse, quantized, meta or subclass tensors); only "
          "dense tensors can be converted to safetensors",
          where_, name));
    case Callable::kNone: break;
  }
  refuse(fmt::format("{} of {}", opcode, name));
}

void Reader::build() {
  Ref state = pop();
  Ref target = top();
  (void)state;
  // torch's weights_only unpickler allows BUILD on OrderedDict (its `_metadata` attribute) and tensors/parameters
  // (their __dict__); the state is data already read and is dropped.
  if (kind(target) == Kind::kDict || kind(target) == Kind::kTensor) return;
  refuse(fmt::format("BUILD of {}", describe(target)));
}

Ref Reader::run() {
  for (;;) {
    opcode_pos_ = pos_;
    if (pos_ >= data_.size()) throw PickleTruncatedError(where_ + ": the pickle ends without STOP");
    const unsigned char op = static_cast<unsigned char>(data_[pos_++]);
    switch (op) {
      case 0x80: {  // PROTO
        const std::uint64_t proto = take_le(1);
        if (proto < 2 || proto > 5) fail(fmt::format("pickle protocol {} (2 to 5 are read)", proto));
        break;
      }
      case 0x95: take_le(8); break;  // FRAME: a hint only
      case '.': {                    // STOP
        if (!marks_.empty() || stack_.size() != 1) fail("STOP with an unbalanced stack");
        return stack_.back();
      }
      case '(':
        if (marks_.size() >= limits_.max_depth) fail(fmt::format("MARKs nested deeper than {}", limits_.max_depth));
        marks_.push_back(stack_.size());
        break;
      case '0': pop(); break;
      case '1': pop_mark(); break;
      case '2': push(top()); break;
      case 'N': push(make_kind(Kind::kNone)); break;
      case 0x88:
      case 0x89: {
        Value v;
        v.kind = Kind::kBool;
        v.flag = op == 0x88;
        push(make(std::move(v)));
        break;
      }
      case 'J': push(make_int(static_cast<std::int32_t>(static_cast<std::uint32_t>(take_le(4))))); break;
      case 'K': push(make_int(static_cast<std::int64_t>(take_le(1)))); break;
      case 'M': push(make_int(static_cast<std::int64_t>(take_le(2)))); break;
      case 0x8a:
      case 0x8b: {  // LONG1, LONG4: little-endian two's complement
        const std::uint64_t n = take_le(op == 0x8a ? 1 : 4);
        if (n > 4096) fail(fmt::format("an integer of {} bytes", n));
        std::string_view bytes = take(n);
        if (n <= 8) {
          std::uint64_t u = 0;
          for (std::size_t i = 0; i < n; ++i)
            u |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
          if (n > 0 && n < 8 && (static_cast<unsigned char>(bytes[n - 1]) & 0x80)) u |= ~std::uint64_t{0} << (8 * n);
          push(make_int(static_cast<std::int64_t>(u)));
        } else {
          push(make_text(Kind::kBigInt, bytes));
        }
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        std::string_view b = take(8);
        std::uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<unsigned char>(b[static_cast<std::size_t>(i)]);
        Value v;
        v.kind = Kind::kFloat;
        std::memcpy(&v.real, &u, sizeof u);
        push(make(std::move(v)));
        break;
      }
      case 'X': push(make_string(take(take_le(4)))); break;
      case 0x8c: push(make_string(take(take_le(1)))); break;
      case 0x8d: push(make_string(take(take_le(8)))); break;
      case 'T': push(make_text(Kind::kString, take(take_le(4)))); break;  // BINSTRING (Python 2 str: bytes)
      case 'U': push(make_text(Kind::kString, take(take_le(1)))); break;
      case 'B': push(make_text(Kind::kBytes, take(take_le(4)))); break;
      case 'C': push(make_text(Kind::kBytes, take(take_le(1)))); break;
      case 0x8e:
      case 0x96: push(make_text(Kind::kBytes, take(take_le(8)))); break;
      case ')': push(make_kind(Kind::kTuple)); break;
      case 't': {
        Ref r = make_kind(Kind::kTuple);
        value(r).items = pop_mark();
        push(r);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        const std::size_t n = op - 0x84u;
        if (stack_.size() < floor() + n) fail("stack underflow");
        std::vector<Ref> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        Ref r = make_kind(Kind::kTuple);
        value(r).items = std::move(items);
        push(r);
        break;
      }
      case ']': push(make_kind(Kind::kList)); break;
      case 'l': {
        Ref r = make_kind(Kind::kList);
        value(r).items = pop_mark();
        push(r);
        break;
      }
      case 'a': {
        Ref item = pop();
        add_to_list(top(), {item});
        break;
      }
      case 'e': {
        std::vector<Ref> items = pop_mark();
        add_to_list(top(), items);
        break;
      }
      case '}': push(make_kind(Kind::kDict)); break;
      case 'd': {
        std::vector<Ref> items = pop_mark();
        Ref r = make_kind(Kind::kDict);
        set_items(r, items);
        push(r);
        break;
      }
      case 's': {
        Ref v = pop();
        Ref k = pop();
        set_items(top(), {k, v});
        break;
      }
      case 'u': {
        std::vector<Ref> items = pop_mark();
        set_items(top(), items);
        break;
      }
      case 0x8f: push(make_kind(Kind::kSet)); break;
      case 0x90: {
        std::vector<Ref> items = pop_mark();
        if (kind(top()) != Kind::kSet) fail("ADDITEMS to a " + describe(top()));
        auto& target = value(top()).items;
        target.insert(target.end(), items.begin(), items.end());
        break;
      }
      case 0x91: {
        Ref r = make_kind(Kind::kSet);
        value(r).items = pop_mark();
        push(r);
        break;
      }
      case 'q': memo_put(take_le(1)); break;
      case 'r': memo_put(take_le(4)); break;
      case 0x94: memo_put(memo_.size()); break;
      case 'h': memo_get(take_le(1)); break;
      case 'j': memo_get(take_le(4)); break;
      case 'c': {
        std::string module(take_line());
        std::string name(take_line());
        push(global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Ref name = pop();
        Ref module = pop();
        if (kind(name) != Kind::kString || kind(module) != Kind::kString) fail("STACK_GLOBAL of non-strings");
        push(global(objects_[module].text, objects_[name].text));
        break;
      }
      case 'R': {
        Ref args = pop();
        Ref callable = pop();
        push(call(callable, args, "REDUCE"));
        break;
      }
      case 0x81: {  // NEWOBJ
        Ref args = pop();
        Ref cls = pop();
        if (kind(cls) != Kind::kGlobal ||
            (objects_[cls].text != "torch.nn.parameter.Parameter" && objects_[cls].text != "collections.OrderedDict")) {
          refuse("NEWOBJ of " + describe(cls));
        }
        push(call(cls, args, "NEWOBJ"));
        break;
      }
      case 0x92: {  // NEWOBJ_EX
        Ref kwargs = pop();
        Ref args = pop();
        Ref cls = pop();
        if (kind(kwargs) != Kind::kDict || !objects_[kwargs].entries.empty())
          refuse("NEWOBJ_EX with keyword arguments");
        if (kind(cls) != Kind::kGlobal ||
            (objects_[cls].text != "torch.nn.parameter.Parameter" && objects_[cls].text != "collections.OrderedDict")) {
          refuse("NEWOBJ_EX of " + describe(cls));
        }
        push(call(cls, args, "NEWOBJ_EX"));
        break;
      }
      case 'b': build(); break;
      case 'Q': {
        Ref pid = pop();
        push(load_(objects_, pid));
        if (objects_.size() > limits_.max_values) fail("too many values");
        break;
      }
      case 'i': refuse("INST opcode (creates an instance of a class)");
      case 'o': refuse("OBJ opcode (creates an instance of a class)");
      case 0x82:
      case 0x83:
      case 0x84: refuse("EXT opcode (a registered extension global)");
      case 'P': fail("text persistent id (PERSID) is not used by torch.save");
      default:
        fail(fmt::format("unsupported pickle opcode 0x{:02x} (protocols 2 to 5 as torch.save writes them are read)",
                         op));
    }
  }
}

}  // namespace

const StorageType* find_storage_type(std::string_view name) noexcept {
  for (const StorageType& t : kStorageTypes) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Ref PickleObjects::add(Value value) {
  values_.push_back(std::move(value));
  return static_cast<Ref>(values_.size() - 1);
}

std::string_view PickleObjects::type_name(Ref ref) const {
  switch (values_[ref].kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt:
    case Kind::kBigInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kSet: return "set";
    case Kind::kDict: return "dict";
    case Kind::kGlobal: return "global";
    case Kind::kStorage: return "storage";
    case Kind::kTensor: return "tensor";
    case Kind::kObject: return "object";
  }
  return "?";
}

Ref read_pickle(std::string_view data, std::size_t* position, PickleObjects& objects, const PersistentLoad& load,
                const std::string& where, const PickleLimits& limits) {
  Reader reader(data, *position, objects, load, where, limits);
  Ref result = reader.run();
  *position = reader.position();
  return result;
}

}  // namespace tensoracle::convert
