// The restricted unpickler: values of every opcode a checkpoint uses, tensors rebuilt, and every global, REDUCE,
// BUILD, NEWOBJ and limit that must be refused (hand-built pickles).
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "convert/pickle_reader.hpp"
#include "convert_test_util.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {
namespace {

using convert::Kind;
using convert::PickleObjects;
using convert::Ref;
using convert_test::PickleBuilder;

// A persistent load that makes a storage of the given type for ('storage', type, key, location, numel).
Ref test_storage(PickleObjects& objects, Ref pid) {
  const convert::Value& t = objects[pid];
  if (t.kind != Kind::kTuple || t.items.size() != 5 || objects[t.items[1]].kind != Kind::kGlobal ||
      objects[t.items[1]].text.size() < 7 || objects[t.items[4]].kind != Kind::kInt ||
      objects[t.items[4]].integer < 0 || objects[t.items[4]].integer > (1 << 30)) {
    throw FormatError("bad pid");
  }
  const std::string type = objects[t.items[1]].text.substr(6);
  const convert::StorageType* st = convert::find_storage_type(type);
  if (!st) throw FormatError("bad storage type");
  convert::Value v;
  v.kind = Kind::kStorage;
  v.storage.key = objects[t.items[2]].text;
  v.storage.type_name = type;
  v.storage.element_size = st->element_size;
  v.storage.dtype = st->dtype;
  v.storage.numel = static_cast<std::uint64_t>(objects[t.items[4]].integer);
  return objects.add(std::move(v));
}

struct Parsed {
  PickleObjects objects;
  Ref root = 0;
  const convert::Value& operator[](Ref r) const { return objects[r]; }
  const convert::Value& root_value() const { return objects[root]; }
};

Parsed parse(const std::string& bytes, const convert::PickleLimits& limits = {}) {
  Parsed p;
  std::size_t position = 0;
  p.root = convert::read_pickle(bytes, &position, p.objects, test_storage, "test.pkl", limits);
  EXPECT_EQ(position, bytes.size());
  return p;
}

std::string error_of(const std::string& bytes, const convert::PickleLimits& limits = {}) {
  try {
    parse(bytes, limits);
  } catch (const FormatError& e) {
    return e.what();
  } catch (const Error& e) {
    return std::string("other error: ") + e.what();
  }
  return "accepted";
}

TEST(ConvertPickle, ReadsScalarsStringsAndContainers) {
  PickleBuilder b;
  b.proto().op('}').op('q').le(0, 1).op('(');
  b.str("int").integer(-5).str("k").op('K').le(200, 1).str("m").op('M').le(60000, 2);
  b.str("long").raw("\x8a\x08").le(0x8000000000000000ull, 8);          // LONG1 of 8 bytes: -2^63
  b.str("neg").raw("\x8a\x02\xff\x7f");                                // 32767
  b.str("small_neg").raw("\x8a\x01\xfe");                              // -2
  b.str("big").raw("\x8a\x0a").le(0, 8).le(1, 2);                      // 2^64: beyond 64 bits
  b.str("float").op('G').raw(std::string("\x3f\xf8\0\0\0\0\0\0", 8));  // 1.5
  b.str("bytes").op('C').le(3, 1).raw(std::string("a\0b", 3));
  b.str("t").integer(1).integer(2).raw("\x86");
  b.str("l").op(']').op('(').integer(1).op('N').op('e').raw("\x88").op('a');
  b.str("none").op('N').str("true").raw("\x88").str("false").raw("\x89");
  b.str("again").op('h').le(0, 1);  // the dict itself, through the memo
  b.op('u').stop();
  Parsed p = parse(b.bytes);
  const auto& root = p.root_value();
  ASSERT_EQ(root.kind, Kind::kDict);
  ASSERT_EQ(root.entries.size(), 15u);
  auto get = [&](const std::string& key) -> const convert::Value& {
    for (const auto& [k, v] : root.entries) {
      if (p[k].text == key) return p[v];
    }
    throw std::runtime_error("no " + key);
  };
  EXPECT_EQ(get("int").integer, -5);
  EXPECT_EQ(get("k").integer, 200);
  EXPECT_EQ(get("m").integer, 60000);
  EXPECT_EQ(get("long").integer, std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(get("neg").integer, 32767);
  EXPECT_EQ(get("small_neg").integer, -2);
  EXPECT_EQ(get("big").kind, Kind::kBigInt);
  EXPECT_EQ(get("float").real, 1.5);
  EXPECT_EQ(get("bytes").text, std::string("a\0b", 3));
  EXPECT_EQ(get("t").kind, Kind::kTuple);
  EXPECT_EQ(get("t").items.size(), 2u);
  ASSERT_EQ(get("l").items.size(), 3u);
  EXPECT_EQ(p[get("l").items[2]].flag, true);
  EXPECT_EQ(get("none").kind, Kind::kNone);
  EXPECT_TRUE(get("true").flag);
  EXPECT_FALSE(get("false").flag);
  EXPECT_EQ(&get("again"), &root);
}

TEST(ConvertPickle, ReadsProtocol4Opcodes) {
  PickleBuilder b;
  b.proto(4).raw("\x95").le(0, 8);  // FRAME
  b.raw("\x8c\x0b").raw("collections").raw("\x94").raw("\x8c\x0b").raw("OrderedDict").raw("\x94").raw("\x93");
  b.op(')').op('R').raw("\x94");
  b.raw("\x8c\x01").raw("s").raw("\x8f").op('(').integer(1).integer(2).raw("\x90").op('s');
  b.raw("\x8c\x01").raw("f").op('(').integer(3).raw("\x91").op('s');
  b.raw("\x8c\x01").raw("b").raw("\x8e").le(2, 8).raw("xy").op('s');
  b.stop();
  Parsed p = parse(b.bytes);
  ASSERT_EQ(p.root_value().kind, Kind::kDict);
  ASSERT_EQ(p.root_value().entries.size(), 3u);
  EXPECT_EQ(p[p.root_value().entries[0].second].items.size(), 2u);
  EXPECT_EQ(p[p.root_value().entries[1].second].kind, Kind::kSet);
  EXPECT_EQ(p[p.root_value().entries[2].second].text, "xy");
}

TEST(ConvertPickle, RepeatedKeysReplaceTheirValue) {
  PickleBuilder b;
  b.proto().op('}').op('(').str("a").integer(1).str("b").integer(2).str("a").integer(3).op('u').stop();
  Parsed p = parse(b.bytes);
  ASSERT_EQ(p.root_value().entries.size(), 2u);
  EXPECT_EQ(p[p.root_value().entries[0].second].integer, 3);
}

TEST(ConvertPickle, RebuildsTensorsAndParameters) {
  PickleBuilder b;
  b.proto().op('}').op('(');
  b.str("w").tensor("HalfStorage", "0", 12, 2, {2, 3}, {1, 3});
  b.str("p").global("torch._utils", "_rebuild_parameter").op('(');
  b.tensor("FloatStorage", "1", 4, 0, {4}, {1}).raw("\x88").global("collections", "OrderedDict").op(')').op('R');
  b.op('t').op('R');
  b.str("v3").global("torch._utils", "_rebuild_tensor_v3").op('(');
  b.op('(').str("storage").global("torch", "UntypedStorage").str("2").str("cpu").integer(16).op('t').op('Q');
  b.integer(0).int_tuple({4}).int_tuple({1}).raw("\x89").global("collections", "OrderedDict").op(')').op('R');
  b.global("torch", "int32").op('t').op('R');
  b.str("size").global("torch", "Size").op('(').int_tuple({3, 4}).op('t').op('R');
  b.op('u').stop();
  Parsed p = parse(b.bytes);
  const auto& e = p.root_value().entries;
  ASSERT_EQ(e.size(), 4u);
  const convert::TensorRef& w = p[e[0].second].tensor;
  EXPECT_EQ(p[e[0].second].kind, Kind::kTensor);
  EXPECT_EQ(w.dtype, DataType::kF16);
  EXPECT_EQ(w.storage_offset, 2u);
  EXPECT_EQ(w.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(w.strides, (std::vector<std::int64_t>{1, 3}));
  EXPECT_FALSE(w.parameter);
  EXPECT_TRUE(p[e[1].second].tensor.parameter);
  EXPECT_TRUE(p[e[1].second].tensor.requires_grad);
  EXPECT_EQ(p[e[2].second].tensor.dtype, DataType::kI32);
  EXPECT_EQ(p[e[3].second].kind, Kind::kTuple);
  // v3 over 16 untyped bytes: 4 int32 fit, 5 don't.
  PickleBuilder over;
  over.proto().global("torch._utils", "_rebuild_tensor_v3").op('(');
  over.op('(').str("storage").global("torch", "UntypedStorage").str("2").str("cpu").integer(16).op('t').op('Q');
  over.integer(1).int_tuple({4}).int_tuple({1}).raw("\x89").op('N').global("torch", "int32").op('t').op('R').stop();
  EXPECT_NE(error_of(over.bytes).find("reaches past the end of its storage"), std::string::npos);
}

TEST(ConvertPickle, RebuildFromTypeV2ForTensorsAndParametersOnly) {
  auto build = [](const std::string& type_module, const std::string& type_name) {
    PickleBuilder b;
    b.proto().global("torch._tensor", "_rebuild_from_type_v2").op('(').global("torch._utils", "_rebuild_tensor_v2");
    b.global(type_module, type_name).op('(');
    b.op('(').str("storage").global("torch", "FloatStorage").str("0").str("cpu").integer(4).op('t').op('Q');
    b.integer(0).int_tuple({4}).int_tuple({1}).raw("\x89").global("collections", "OrderedDict").op(')').op('R');
    b.op('t').op('}').op('t').op('R').stop();
    return b.bytes;
  };
  Parsed p = parse(build("torch.nn.parameter", "Parameter"));
  ASSERT_EQ(p.root_value().kind, Kind::kTensor);
  EXPECT_TRUE(p.root_value().tensor.parameter);
  EXPECT_NE(error_of(build("collections", "OrderedDict")).find("_rebuild_from_type_v2 to collections.OrderedDict"),
            std::string::npos);
}

TEST(ConvertPickle, ChecksTensorGeometry) {
  auto one = [](std::int64_t numel, std::int64_t offset, std::vector<std::int64_t> size,
                std::vector<std::int64_t> stride) {
    PickleBuilder b;
    b.proto().tensor("FloatStorage", "0", numel, offset, size, stride).stop();
    return error_of(b.bytes);
  };
  EXPECT_EQ(one(6, 0, {2, 3}, {3, 1}), "accepted");
  EXPECT_EQ(one(6, 0, {0, 100}, {100, 1}), "accepted");  // empty: nothing reached
  EXPECT_EQ(one(1, 0, {5}, {0}), "accepted");            // stride 0 (expand)
  EXPECT_NE(one(6, 1, {2, 3}, {3, 1}).find("reaches past the end"), std::string::npos);
  EXPECT_NE(one(6, 0, {2, 3}, {4, 1}).find("reaches past the end"), std::string::npos);
  EXPECT_NE(one(6, 0, {2}, {-1}).find("negative stride"), std::string::npos);
  EXPECT_NE(one(6, -1, {2}, {1}).find("negative"), std::string::npos);
  EXPECT_NE(one(6, 0, {2, 3}, {1}).find("different lengths"), std::string::npos);
  EXPECT_NE(one(6, 0, {2147483647, 2147483647, 2147483647}, {0, 0, 0}).find("2^62"), std::string::npos);
  EXPECT_NE(one(6, 0, {2, 2}, {2147483647, 2147483647}).find("reaches past"), std::string::npos);
  EXPECT_NE(one(6, 0, std::vector<std::int64_t>(65, 1), std::vector<std::int64_t>(65, 1)).find("65 dimensions"),
            std::string::npos);
}

TEST(ConvertPickle, RefusesEveryOtherGlobal) {
  for (const auto& [module, name] :
       std::vector<std::pair<std::string, std::string>>{{"os", "system"},
                                                        {"posix", "system"},
                                                        {"builtins", "eval"},
                                                        {"__builtin__", "exec"},
                                                        {"subprocess", "Popen"},
                                                        {"torch", "load"},
                                                        {"torch._utils", "_rebuild_evil"},
                                                        {"mymodule", "Payload"},
                                                        {"builtins", "getattr"},
                                                        {"collections", "defaultdict"},
                                                        {"numpy.core.multiarray", "_reconstruct"}}) {
    PickleBuilder b;
    b.proto().global(module, name).str("touch /tmp/x").raw("\x85").op('R').stop();
    const std::string message = error_of(b.bytes);
    EXPECT_NE(message.find("not a plain weights checkpoint: global " + module + "." + name), std::string::npos)
        << message;
  }
  PickleBuilder stack;
  stack.proto(4).raw("\x8c\x02os\x8c\x06system\x93").stop();
  EXPECT_NE(error_of(stack.bytes).find("global os.system"), std::string::npos);
}

TEST(ConvertPickle, RefusesReduceBuildAndNewobjOfAnythingElse) {
  auto refusal = [](PickleBuilder& b) { return error_of(b.stop().bytes); };
  PickleBuilder reduce_dtype;
  reduce_dtype.proto().global("torch", "float16").op(')').op('R');
  EXPECT_NE(refusal(reduce_dtype).find("REDUCE of torch.float16"), std::string::npos);
  PickleBuilder reduce_value;
  reduce_value.proto().op('}').op(')').op('R');
  EXPECT_NE(refusal(reduce_value).find("REDUCE of a dict"), std::string::npos);
  PickleBuilder build_list;
  build_list.proto().op(']').op('}').op('b');
  EXPECT_NE(refusal(build_list).find("BUILD of list"), std::string::npos);
  PickleBuilder build_storage;
  build_storage.proto().global("torch", "FloatStorage").op('}').op('b');
  EXPECT_NE(refusal(build_storage).find("BUILD of torch.FloatStorage"), std::string::npos);
  PickleBuilder build_dict;  // OrderedDict's _metadata: allowed, as torch's weights_only does
  build_dict.proto().global("collections", "OrderedDict").op(')').op('R').op('}').op('b');
  EXPECT_EQ(refusal(build_dict), "accepted");
  PickleBuilder newobj;
  newobj.proto().global("torch", "FloatTensor").op(')').raw("\x81");
  EXPECT_NE(refusal(newobj).find("NEWOBJ of torch.FloatTensor"), std::string::npos);
  PickleBuilder inst;
  inst.proto().op('(').raw("ios\nsystem\n");
  EXPECT_NE(refusal(inst).find("INST"), std::string::npos);
  PickleBuilder obj;
  obj.proto().op('(').global("os", "system");
  EXPECT_NE(refusal(obj).find("global os.system"), std::string::npos);
  PickleBuilder ext;
  ext.proto().raw("\x82\x01");
  EXPECT_NE(refusal(ext).find("EXT"), std::string::npos);
  PickleBuilder sparse;
  sparse.proto().global("torch._utils", "_rebuild_sparse_tensor").op(')').op('R');
  EXPECT_NE(refusal(sparse).find("other error"), std::string::npos);  // allowlisted by torch, but not convertible
}

TEST(ConvertPickle, LimitsAndDamage) {
  convert::PickleLimits small;
  small.max_values = 100;
  small.max_memo = 10;
  small.max_depth = 20;
  PickleBuilder many;
  many.proto().op('(');
  for (int i = 0; i < 200; ++i) many.op('N');
  many.op('l').stop();
  EXPECT_NE(error_of(many.bytes, small).find("more than 100 values"), std::string::npos);
  PickleBuilder memo;
  memo.proto().op('N');
  for (int i = 0; i < 20; ++i) memo.op('q').le(static_cast<std::uint64_t>(i), 1);
  memo.stop();
  EXPECT_NE(error_of(memo.bytes, small).find("memo entries"), std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x02") + std::string(30, '(') + "N.", small).find("MARKs nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02h\x05.").find("memo entry 5"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02N").find("without STOP"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02NN.").find("unbalanced"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02s.").find("underflow"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02}(N.u.").find("STOP with an unbalanced stack"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02}(Nu.").find("odd number"), std::string::npos);
  EXPECT_NE(error_of("\x80\x09N.").find("protocol 9"), std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x02X\x02\0\0\0\xff\xfe.", 10)).find("UTF-8"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02X\xff\xff\xff\x7f.").find("ends first"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02I1\n.").find("unsupported pickle opcode 0x49"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02"
                     "c" +
                     std::string(2000, 'a') + "\nb\n.")
                .find("longer than 1024"),
            std::string::npos);
  try {
    parse("\x80\x02]");
    ADD_FAILURE();
  } catch (const convert::PickleTruncatedError&) {
  }
}

TEST(ConvertPickle, EveryTruncationAndByteFlipIsAnErrorOrAValue) {
  PickleBuilder b;
  b.proto().op('}').op('(').str("w").tensor("FloatStorage", "0", 12, 0, {3, 4}, {4, 1});
  b.str("n").integer(3).str("l").op(']').op('(').integer(1).integer(2).op('e').op('u').stop();
  for (std::size_t n = 0; n < b.bytes.size(); ++n) EXPECT_NE(error_of(b.bytes.substr(0, n)), "accepted") << n;
  for (std::size_t i = 0; i < b.bytes.size(); ++i) {
    for (int flip : {0x01, 0x10, 0x80}) {
      std::string bad = b.bytes;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      PickleObjects objects;
      std::size_t position = 0;
      try {
        convert::read_pickle(bad, &position, objects, test_storage, "flip", {});
      } catch (const Error&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << i << ": " << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace tensoracle
