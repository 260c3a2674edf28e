// convert_checkpoint end to end on hand-built checkpoints (zip and legacy): values, views, byte order, casts,
// shards opened as a WeightStore, and failures that leave nothing behind.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "convert_test_util.hpp"
#include "tensoracle/convert.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {
namespace {

namespace fs = std::filesystem;
using convert_test::make_zip;
using convert_test::PickleBuilder;

class ConvertCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tensoracle-convert-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return dir_ / name;
  }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

std::string floats(const std::vector<float>& values) {
  std::string s(values.size() * 4, '\0');
  std::memcpy(s.data(), values.data(), s.size());
  return s;
}

std::vector<float> read_floats(const TensorView& view) {
  std::vector<float> out(view.byte_size() / 4);
  std::memcpy(out.data(), view.data, view.byte_size());
  return out;
}

// {"model": {"w": 3x2 view (transposed) of 6 floats, "b": 2 floats at offset 4 of the same storage, "step": 5},
//  "epoch": 1}
std::string model_pickle() {
  PickleBuilder b;
  b.proto().op('}').op('(').str("model").op('}').op('(');
  b.str("w").tensor("FloatStorage", "0", 6, 0, {3, 2}, {1, 3});
  b.str("b").tensor("FloatStorage", "0", 6, 4, {2}, {1});
  b.str("step").integer(5).op('u');
  b.str("epoch").integer(1).op('u').stop();
  return b.bytes;
}

TEST_F(ConvertCheckpoint, ZipCheckpointOpensAsAWeightStore) {
  const fs::path ckpt =
      write("m.pt",
            make_zip({{"m/data.pkl", model_pickle()}, {"m/data/0", floats({0, 1, 2, 3, 4, 5})}, {"m/version", "3\n"}}));
  const ConvertSummary summary = convert_checkpoint(ckpt, dir_ / "m.safetensors");
  ASSERT_EQ(summary.tensors.size(), 2u);
  ASSERT_EQ(summary.skipped.size(), 1u);
  EXPECT_EQ(summary.skipped[0].name, "step");
  EXPECT_EQ(summary.skipped[0].type, "int");
  const WeightStore store = WeightStore::open({dir_ / "m.safetensors"});
  EXPECT_EQ(store.names(), (std::vector<std::string>{"b", "w"}));
  EXPECT_EQ(store.get("w").shape(), Dims({3, 2}));
  EXPECT_EQ(read_floats(store.get("w")), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(read_floats(store.get("b")), (std::vector<float>{4, 5}));
  // --no-duplicates: w and b share storage 0.
  ConvertOptions strict;
  strict.no_duplicates = true;
  EXPECT_THROW(convert_checkpoint(ckpt, dir_ / "x.safetensors", strict), InvalidArgumentError);
  EXPECT_EQ(files(), (std::vector<std::string>{"m.pt", "m.safetensors"}));
}

TEST_F(ConvertCheckpoint, ShardsOpenThroughTheirIndex) {
  PickleBuilder b;
  b.proto().op('}').op('(');
  for (int i = 0; i < 5; ++i)
    b.str("t" + std::to_string(i)).tensor("FloatStorage", std::to_string(i), 25, 0, {25}, {1});
  b.op('u').stop();
  std::vector<std::pair<std::string, std::string>> entries = {{"archive/data.pkl", b.bytes}};
  for (int i = 0; i < 5; ++i)
    entries.emplace_back("archive/data/" + std::to_string(i), floats(std::vector<float>(25, float(i))));
  const fs::path ckpt = write("s.pt", make_zip(entries, true));
  ConvertOptions options;
  options.max_shard_size = 250;  // two tensors of 100 bytes per shard
  options.dtype = DataType::kF16;
  options.metadata = std::map<std::string, std::string>{{"format", "pt"}};
  // As f16 the five tensors take 50 bytes each: one shard, so just the file.
  const ConvertSummary summary = convert_checkpoint(ckpt, dir_ / "model.safetensors", options);
  EXPECT_EQ(summary.total_bytes, 5u * 50);
  EXPECT_EQ(files(), (std::vector<std::string>{"model.safetensors", "s.pt"}));
  fs::remove(dir_ / "model.safetensors");
  // As f32, 100 bytes each: shards of two, two and one.
  options.dtype.reset();
  const ConvertSummary f32 = convert_checkpoint(ckpt, dir_ / "model.safetensors", options);
  ASSERT_EQ(f32.files.size(), 4u);
  EXPECT_EQ(files(),
            (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors", "model.safetensors.index.json", "s.pt"}));
  const WeightStore store = WeightStore::open({dir_ / "model.safetensors.index.json"});
  ASSERT_EQ(store.names().size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(read_floats(store.get("t" + std::to_string(i))), std::vector<float>(25, float(i)));
  }
  EXPECT_EQ(store.files()[0]->metadata().at("format"), "pt");
}

TEST_F(ConvertCheckpoint, LegacyFormatAndDefaultChoice) {
  // Five pickles: magic, protocol, sys info, the object, the storage keys; then each storage's count and bytes.
  std::string legacy = "\x80\x02\x8a\x0a";
  legacy += std::string("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10) + ".";
  legacy += "\x80\x02M\xe9\x03.";
  legacy += PickleBuilder().proto().op('}').op('(').str("little_endian").raw("\x88").op('u').stop().bytes;
  PickleBuilder obj;
  obj.proto().op('}').op('(').str("state_dict").op('}').op('(');
  obj.str("x").tensor("ShortStorage", "k1", 3, 1, {2}, {1}).op('u');
  obj.str("opt").op('}').op('u').stop();
  legacy += obj.bytes;
  legacy += PickleBuilder().proto().op(']').op('(').str("k1").op('e').stop().bytes;
  legacy += std::string("\x03\0\0\0\0\0\0\0", 8) + std::string("\x01\x00\x02\x00\x03\x00", 6);
  const fs::path ckpt = write("l.pt", legacy);
  const nlohmann::json listing = nlohmann::json::parse(list_checkpoint(ckpt));
  EXPECT_EQ(listing["format"], "legacy");
  EXPECT_EQ(listing["default_key"], "state_dict");
  EXPECT_EQ(listing["tree"]["entries"]["state_dict"]["entries"]["x"]["shape"], nlohmann::json::array({2}));
  convert_checkpoint(ckpt, dir_ / "l.safetensors");
  auto file = SafetensorsFile::open(dir_ / "l.safetensors");
  ASSERT_EQ(file->tensors().size(), 1u);
  const TensorView x = file->get("x");
  EXPECT_EQ(x.dtype(), DataType::kI16);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(x.data), 4), std::string("\x02\x00\x03\x00", 4));
  // A storage count beyond the file.
  std::string cut = legacy.substr(0, legacy.size() - 1);
  EXPECT_THROW(convert_checkpoint(write("cut.pt", cut), dir_ / "c.safetensors"), FormatError);
  EXPECT_FALSE(fs::exists(dir_ / "c.safetensors"));
}

TEST_F(ConvertCheckpoint, RefusedCheckpointsWriteNothing) {
  PickleBuilder evil;
  evil.proto().op('}').op('(').str("w").tensor("FloatStorage", "0", 6, 0, {6}, {1});
  evil.str("x").global("os", "system").str("touch marker").raw("\x85").op('R').op('u').stop();
  const fs::path ckpt = write("e.pt", make_zip({{"e/data.pkl", evil.bytes}, {"e/data/0", floats({0, 1, 2, 3, 4, 5})}}));
  try {
    convert_checkpoint(ckpt, dir_ / "e.safetensors");
    ADD_FAILURE();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("not a plain weights checkpoint: global os.system"), std::string::npos);
  }
  EXPECT_THROW(list_checkpoint(ckpt), FormatError);
  // A failure while streaming (the storage is shorter than the pickle says) leaves no output either.
  const fs::path short_ckpt =
      write("s.pt", make_zip({{"s/data.pkl", model_pickle()}, {"s/data/0", floats({0, 1, 2, 3, 4})}}));
  EXPECT_THROW(convert_checkpoint(short_ckpt, dir_ / "s.safetensors"), FormatError);
  EXPECT_EQ(files(), (std::vector<std::string>{"e.pt", "s.pt"}));
  EXPECT_THROW(convert_checkpoint(dir_ / "missing.pt", dir_ / "m.safetensors"), IoError);
  ConvertOptions bad_key;
  bad_key.key = "model.nope";
  EXPECT_THROW(convert_checkpoint(short_ckpt, dir_ / "k.safetensors", bad_key), Error);
}

TEST(ConvertByteSize, ParsesDecimalAndBinaryUnits) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("5GiB"), 5ull << 30);
  EXPECT_EQ(parse_byte_size("5GB"), 5'000'000'000ull);
  EXPECT_EQ(parse_byte_size("500mb"), 500'000'000ull);
  EXPECT_EQ(parse_byte_size("1.5KiB"), 1536u);
  for (const char* bad : {"", "GB", "-1GB", "5 parsecs", "0", "1e3", "99999999999TB"}) {
    EXPECT_THROW(parse_byte_size(bad), InvalidArgumentError) << bad;
  }
}

}  // namespace
}  // namespace tensoracle
