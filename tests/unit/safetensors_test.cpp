// Tests of the safetensors writer, the validating zero-copy reader and WeightStore (plain files and sharded
// checkpoints).
#include "tensoracle/safetensors.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/host_tensor.hpp"

namespace tensoracle {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;
using Metadata = std::map<std::string, std::string>;

// ---- helpers ----

// A fresh directory under the system temporary directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::random_device random;
    path_ =
        fs::temp_directory_path() / ("tensoracle-safetensors-test-" + std::string(test->test_suite_name()) + "-" +
                                     test->name() + "-" + std::to_string(::getpid()) + "-" + std::to_string(random()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::vector<DataType> all_data_types() {
  std::vector<DataType> types;
  for (int i = 0; i < kNumDataTypes; ++i) types.push_back(static_cast<DataType>(i));
  return types;
}

// Random bytes for a tensor; BOOL tensors get 0/1 only. Random float bit patterns include NaNs,
// infinities and subnormals, which must survive bit for bit.
Bytes random_tensor_bytes(DataType type, const Dims& shape, std::mt19937_64& rng) {
  Bytes bytes(static_cast<std::size_t>(shape.volume()) * element_size(type));
  for (auto& b : bytes) b = static_cast<std::byte>(type == DataType::kBool ? rng() & 1U : rng() & 0xFFU);
  return bytes;
}

Bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

void write_file(const fs::path& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  ASSERT_TRUE(out.good()) << path;
}

void write_file(const fs::path& path, const std::string& text) { write_file(path, text.data(), text.size()); }

std::string header_text(const Bytes& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(file.at(static_cast<std::size_t>(i)));
  return std::string(reinterpret_cast<const char*>(file.data()) + 8, static_cast<std::size_t>(n));
}

bool same_bytes(const void* a, const Bytes& b) { return b.empty() || std::memcmp(a, b.data(), b.size()) == 0; }

// Tensors with their owned bytes, in a form both the writer and the checks can use.
struct Sample {
  std::string name;
  DataType dtype;
  Dims shape;
  Bytes bytes;
};

std::vector<TensorToWrite> to_write(const std::vector<Sample>& samples) {
  std::vector<TensorToWrite> out;
  for (const Sample& s : samples) out.push_back({s.name, s.dtype, s.shape, s.bytes.empty() ? nullptr : s.bytes.data()});
  return out;
}

// Every sample is in `file` with its dtype, shape and bytes, seen through view(), get() and read().
void expect_contents(const SafetensorsFile& file, const std::vector<Sample>& samples) {
  ASSERT_EQ(file.tensors().size(), samples.size());
  for (const Sample& s : samples) {
    SCOPED_TRACE("tensor " + s.name);
    const TensorInfo* info = file.find(s.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->name, s.name);
    EXPECT_EQ(info->dtype, s.dtype);
    EXPECT_EQ(info->shape, s.shape);
    EXPECT_EQ(info->byte_size(), s.bytes.size());
    TensorView view = file.get(s.name);
    EXPECT_EQ(view.info, info);
    EXPECT_EQ(view.byte_size(), s.bytes.size());
    EXPECT_TRUE(same_bytes(view.data, s.bytes)) << "view bytes differ";
    Bytes copy(s.bytes.size() + 1, std::byte{0xA5});  // one guard byte that read() must not touch
    file.read(*info, copy.data());
    EXPECT_EQ(copy.back(), std::byte{0xA5}) << "read() wrote past byte_size()";
    copy.pop_back();
    EXPECT_EQ(copy, s.bytes) << "read() bytes differ";
  }
}

// The mapping in /proc/self/maps that contains `address`: its file name, or "" when none does.
std::string mapping_containing(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto target = reinterpret_cast<std::uintptr_t>(address);
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, name;
    fields >> range >> perms >> offset >> device >> inode;
    std::getline(fields >> std::ws, name);
    const auto dash = range.find('-');
    const auto begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const auto end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (target >= begin && target < end) return name.empty() ? std::string("[anonymous]") : name;
  }
  return {};
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no exception>";
}

// ---- round trips ----

TEST(Safetensors, EveryDataTypeRoundTripsBitwiseThroughBytesAndFiles) {
  TempDir dir;
  std::mt19937_64 rng(12345);
  std::vector<Sample> samples;
  for (DataType type : all_data_types()) {
    const Dims shape{3, static_cast<std::int64_t>(1 + rng() % 7), 2};
    samples.push_back({"tensor." + std::string(to_string(type)), type, shape, random_tensor_bytes(type, shape, rng)});
  }
  const auto tensors = to_write(samples);
  const Bytes bytes = serialize_safetensors(tensors);
  write_safetensors(dir / "all.safetensors", tensors);
  EXPECT_EQ(read_file(dir / "all.safetensors"), bytes) << "write_safetensors and serialize_safetensors disagree";

  auto from_memory = SafetensorsFile::from_bytes(bytes.data(), bytes.size(), "in-memory");
  EXPECT_EQ(from_memory->path(), "in-memory");
  EXPECT_EQ(from_memory->file_size(), bytes.size());
  EXPECT_FALSE(from_memory->has_metadata());
  expect_contents(*from_memory, samples);

  auto from_disk = SafetensorsFile::open(dir / "all.safetensors");
  EXPECT_EQ(from_disk->path(), (dir / "all.safetensors").string());
  EXPECT_EQ(from_disk->file_size(), bytes.size());
  EXPECT_EQ(from_disk->header_size(), header_text(bytes).size());
  EXPECT_EQ(from_disk->data_start(), 8 + from_disk->header_size());
  expect_contents(*from_disk, samples);
}

TEST(Safetensors, ScalarsAndEmptyTensors) {
  std::mt19937_64 rng(7);
  std::vector<Sample> samples = {
      {"scalar_f32", DataType::kF32, Dims{}, {}}, {"scalar_bool", DataType::kBool, Dims{}, {}},
      {"empty", DataType::kF32, Dims{0}, {}},     {"empty_middle", DataType::kBF16, Dims{3, 0, 2}, {}},
      {"after", DataType::kI64, Dims{2}, {}},
  };
  for (Sample& s : samples) s.bytes = random_tensor_bytes(s.dtype, s.shape, rng);
  ASSERT_EQ(samples[0].bytes.size(), 4U);
  ASSERT_TRUE(samples[2].bytes.empty());

  const Bytes bytes = serialize_safetensors(to_write(samples));  // empty tensors pass a null data pointer
  auto file = SafetensorsFile::from_bytes(bytes.data(), bytes.size(), "scalars");
  expect_contents(*file, samples);
  EXPECT_EQ(file->find("scalar_f32")->shape.rank(), 0);
  EXPECT_EQ(file->find("empty")->byte_size(), 0U);
  EXPECT_NE(header_text(bytes).find(R"("scalar_f32":{"dtype":"F32","shape":[],)"), std::string::npos)
      << header_text(bytes);
  EXPECT_NE(header_text(bytes).find(R"("shape":[3,0,2])"), std::string::npos) << header_text(bytes);
}

// A zero-size tensor last in a file with no data at all (what the fuzzer found: read() passed a null destination to
// memcpy). Reading it from bytes and from a file, viewing, copying, writing it back and opening it in a WeightStore
// must all work without touching a byte (the sanitizer build checks for the null pointers).
TEST(Safetensors, ZeroSizeTensorAtTheEndOfAnEmptyDataSection) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})";
  Bytes bytes(8 + header.size());
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<std::size_t>(i)] = static_cast<std::byte>((header.size() >> (8 * i)) & 0xFF);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  auto from_bytes = SafetensorsFile::from_bytes(bytes.data(), bytes.size(), "zero-size");
  {
    std::ofstream out(dir / "zero.safetensors", std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  auto from_file = SafetensorsFile::open(dir / "zero.safetensors");
  for (const auto& file : {from_bytes, from_file}) {
    const TensorInfo& info = file->tensors().at(0);
    EXPECT_EQ(info.byte_size(), 0U);
    EXPECT_EQ(file->data_start(), bytes.size());
    Bytes empty;  // data() is null
    file->read(info, empty.data());
    const HostTensor copy = HostTensor::from_view(file->get("a"));
    EXPECT_EQ(copy.shape, Dims{0});
    EXPECT_TRUE(copy.bytes.empty());
    const Bytes written = serialize_safetensors({copy.to_write("a")});
    auto again = SafetensorsFile::from_bytes(written.data(), written.size(), "rewritten");
    EXPECT_EQ(again->get("a").shape(), Dims{0});
  }
  write_safetensors(dir / "rewritten.safetensors", {HostTensor::from_view(from_file->get("a")).to_write("b")});
  const WeightStore store = WeightStore::open({dir / "zero.safetensors", dir / "rewritten.safetensors"});
  EXPECT_EQ(store.get("a").shape(), Dims{0});
  EXPECT_EQ(store.get("b").shape(), Dims{0});
}

TEST(Safetensors, NoTensorsAtAll) {
  const Bytes bytes = serialize_safetensors({});
  EXPECT_EQ(header_text(bytes), "{}      ");
  auto file = SafetensorsFile::from_bytes(bytes.data(), bytes.size(), "empty");
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_EQ(file->file_size(), 16U);
}

TEST(Safetensors, MetadataPresentAbsentAndEmpty) {
  const Bytes data(8, std::byte{1});
  const std::vector<TensorToWrite> tensors = {{"w", DataType::kF64, Dims{1}, data.data()}};

  const Bytes absent = serialize_safetensors(tensors);
  EXPECT_EQ(header_text(absent).find("__metadata__"), std::string::npos);
  auto file = SafetensorsFile::from_bytes(absent.data(), absent.size(), "absent");
  EXPECT_FALSE(file->has_metadata());
  EXPECT_TRUE(file->metadata().empty());

  const Bytes empty = serialize_safetensors(tensors, Metadata{});
  EXPECT_EQ(header_text(empty).rfind(R"({"__metadata__":{},"w":)", 0), 0U) << header_text(empty);
  file = SafetensorsFile::from_bytes(empty.data(), empty.size(), "empty");
  EXPECT_TRUE(file->has_metadata());
  EXPECT_TRUE(file->metadata().empty());

  const Metadata metadata = {
      {"format", "pt"},
      {"quote\"and\\backslash", "line\nbreak\ttab"},
      {"unicode \xC3\xA9\xE2\x82\xAC", "\xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87"},
      {"", "empty key"},
      {"control", std::string("nul\0byte\x01", 9)},
  };
  const Bytes present = serialize_safetensors(tensors, metadata);
  EXPECT_NE(header_text(present).find(R"("quote\"and\\backslash":"line\nbreak\ttab")"), std::string::npos)
      << header_text(present);
  EXPECT_NE(header_text(present).find(R"("control":"nul\u0000byte\u0001")"), std::string::npos) << header_text(present);
  file = SafetensorsFile::from_bytes(present.data(), present.size(), "present");
  EXPECT_TRUE(file->has_metadata());
  EXPECT_EQ(file->metadata(), metadata);
  expect_contents(*file, {{"w", DataType::kF64, Dims{1}, data}});
}

// ---- exact bytes ----

TEST(Safetensors, HeaderIsTheOfficialJsonPaddedWithSpaces) {
  const float b[2] = {1.0F, -2.5F};
  const std::int8_t a[3] = {1, -2, 3};
  const Bytes bytes = serialize_safetensors({{"b", DataType::kF32, Dims{2}, b}, {"a", DataType::kI8, Dims{3}, a}});
  const std::string json =
      R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"I8","shape":[3],"data_offsets":[8,11]}})";
  ASSERT_EQ(json.size(), 107U);
  const std::string expected_header = json + std::string(5, ' ');  // 107 -> 112, the next multiple of 8
  const Bytes prefix = {std::byte{112}, std::byte{0}, std::byte{0}, std::byte{0},
                        std::byte{0},   std::byte{0}, std::byte{0}, std::byte{0}};
  ASSERT_EQ(bytes.size(), 8U + 112U + 11U);
  EXPECT_EQ(Bytes(bytes.begin(), bytes.begin() + 8), prefix);
  EXPECT_EQ(header_text(bytes), expected_header);
  EXPECT_EQ(std::memcmp(bytes.data() + 120, b, 8), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 128, a, 3), 0);
}

TEST(Safetensors, HeaderLengthIsAlwaysAMultipleOfEight) {
  const std::uint8_t data[1] = {7};
  for (std::size_t length = 1; length <= 16; ++length) {
    const std::string name(length, 'n');
    const Bytes bytes = serialize_safetensors({{name, DataType::kU8, Dims{1}, data}});
    const std::string header = header_text(bytes);
    SCOPED_TRACE(header);
    EXPECT_EQ(header.size() % 8, 0U);
    const auto end = header.find_last_not_of(' ');
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(header[end], '}');
    EXPECT_LT(header.size() - end - 1, 8U) << "more padding than needed";
    EXPECT_EQ(static_cast<std::uint8_t>(bytes.back()), 7);
  }
}

TEST(Safetensors, TensorsAreOrderedByDtypeRankThenName) {
  // The official order, highest dtype rank first; two tensors per dtype to check the name order.
  const std::vector<DataType> rank_order = {DataType::kI64,    DataType::kF64, DataType::kF32, DataType::kI32,
                                            DataType::kBF16,   DataType::kF16, DataType::kI16, DataType::kF8E4M3,
                                            DataType::kF8E5M2, DataType::kI8,  DataType::kU8,  DataType::kBool};
  ASSERT_EQ(rank_order.size(), static_cast<std::size_t>(kNumDataTypes));
  std::vector<Sample> samples;
  std::mt19937_64 rng(3);
  for (DataType type : all_data_types()) {  // given in enum order, names chosen so that neither order is the answer
    for (const char* suffix : {"z", "a"}) {
      samples.push_back(
          {std::string(suffix) + std::string(to_string(type)), type, Dims{2}, random_tensor_bytes(type, Dims{2}, rng)});
    }
  }
  const Bytes bytes = serialize_safetensors(to_write(samples));
  auto file = SafetensorsFile::from_bytes(bytes.data(), bytes.size(), "ordered");
  std::vector<std::string> expected;
  for (DataType type : rank_order) {
    expected.push_back("a" + std::string(to_string(type)));
    expected.push_back("z" + std::string(to_string(type)));
  }
  std::vector<std::string> actual;
  std::uint64_t offset = 0;
  for (const TensorInfo& info : file->tensors()) {
    actual.push_back(info.name);
    EXPECT_EQ(info.data_begin, offset) << info.name;
    offset = info.data_end;
  }
  EXPECT_EQ(actual, expected);
  // The header lists them in the same order.
  const std::string header = header_text(bytes);
  std::size_t previous = 0;
  for (const std::string& name : expected) {
    const std::size_t at = header.find("\"" + name + "\"");
    ASSERT_NE(at, std::string::npos) << name;
    EXPECT_GT(at, previous) << name;
    previous = at;
  }
  expect_contents(*file, samples);
}

// ---- zero copy ----

TEST(Safetensors, FromBytesViewsPointIntoTheCallersBuffer) {
  std::mt19937_64 rng(11);
  std::vector<Sample> samples = {{"x", DataType::kF16, Dims{5}, {}}, {"y", DataType::kU8, Dims{3}, {}}};
  for (Sample& s : samples) s.bytes = random_tensor_bytes(s.dtype, s.shape, rng);
  const Bytes bytes = serialize_safetensors(to_write(samples));
  auto file = SafetensorsFile::from_bytes(bytes.data(), bytes.size(), "buffer");
  for (const TensorInfo& info : file->tensors()) {
    EXPECT_EQ(file->view(info).data, bytes.data() + file->data_start() + info.data_begin) << info.name;
  }
}

TEST(Safetensors, OpenedViewsPointIntoTheMappingAndKeepItAlive) {
  TempDir dir;
  std::mt19937_64 rng(99);
  std::vector<Sample> samples = {{"big", DataType::kF32, Dims{1024, 4}, {}}, {"small", DataType::kI16, Dims{3}, {}}};
  for (Sample& s : samples) s.bytes = random_tensor_bytes(s.dtype, s.shape, rng);
  const fs::path path = dir / "mapped.safetensors";
  write_safetensors(path, to_write(samples));

  std::optional<TensorView> view;
  {
    auto file = SafetensorsFile::open(path);
    const TensorView big = file->get("big");
    const TensorView small = file->get("small");
    // Both views are in one mapping of this file, at their offsets: no copy was made.
    EXPECT_EQ(mapping_containing(big.data), fs::canonical(path).string());
    EXPECT_EQ(mapping_containing(small.data), fs::canonical(path).string());
    EXPECT_EQ(small.data - big.data,
              static_cast<std::ptrdiff_t>(small.info->data_begin) - static_cast<std::ptrdiff_t>(big.info->data_begin));
    EXPECT_EQ(file.use_count(), 1 + 2) << "each view holds a reference to the file";
    view = file->get("small");
  }  // the last SafetensorsFile pointer held by the test is gone; `view` still holds one
  ASSERT_TRUE(view->file);
  EXPECT_EQ(view->file.use_count(), 1);
  // Removing the file from disk doesn't invalidate the mapping either.
  fs::remove(path);
  EXPECT_EQ(mapping_containing(view->data).rfind(fs::canonical(dir.path()).string(), 0), 0U)
      << mapping_containing(view->data);
  EXPECT_EQ(view->name(), "small");
  EXPECT_EQ(view->dtype(), DataType::kI16);
  EXPECT_EQ(view->shape(), Dims{3});
  EXPECT_TRUE(same_bytes(view->data, samples[1].bytes));
  Bytes copy(view->byte_size());
  view->file->read(*view->info, copy.data());
  EXPECT_EQ(copy, samples[1].bytes);

  const void* address = view->data;
  view.reset();  // the last reference: the mapping goes away
  EXPECT_EQ(mapping_containing(address).find("mapped.safetensors"), std::string::npos) << "the mapping leaked";
}

TEST(Safetensors, ReadCopiesTheSameBytesAsTheView) {
  TempDir dir;
  std::mt19937_64 rng(5);
  std::vector<Sample> samples;
  for (int i = 0; i < 20; ++i) {
    const Dims shape{static_cast<std::int64_t>(rng() % 300), 3};
    const DataType type = all_data_types()[static_cast<std::size_t>(i) % all_data_types().size()];
    samples.push_back({"t" + std::to_string(i), type, shape, random_tensor_bytes(type, shape, rng)});
  }
  write_safetensors(dir / "r.safetensors", to_write(samples));
  auto file = SafetensorsFile::open(dir / "r.safetensors");
  for (const TensorInfo& info : file->tensors()) {
    Bytes copy(info.byte_size());
    file->read(info, copy.data());
    EXPECT_TRUE(same_bytes(file->view(info).data, copy)) << info.name;
    if (!copy.empty()) {
      EXPECT_NE(static_cast<const void*>(copy.data()), static_cast<const void*>(file->view(info).data));
    }
  }
  expect_contents(*file, samples);
}

// ---- lookups ----

TEST(Safetensors, MissingNamesAreNotFoundErrorsNamingFileAndTensor) {
  TempDir dir;
  const std::int32_t value = 42;
  write_safetensors(dir / "one.safetensors", {{"present", DataType::kI32, Dims{}, &value}});
  auto file = SafetensorsFile::open(dir / "one.safetensors");
  EXPECT_EQ(file->find("absent"), nullptr);
  EXPECT_EQ(file->find("presen"), nullptr);
  EXPECT_EQ(file->find(""), nullptr);
  EXPECT_NE(file->find("present"), nullptr);
  EXPECT_THROW(file->get("absent"), NotFoundError);
  const std::string message = message_of([&] { file->get("absent"); });
  EXPECT_NE(message.find((dir / "one.safetensors").string()), std::string::npos) << message;
  EXPECT_NE(message.find("'absent'"), std::string::npos) << message;
}

// ---- writer errors ----

TEST(Safetensors, WriterRejectsInvalidTensors) {
  TempDir dir;
  const Bytes data(16, std::byte{0});
  struct Case {
    const char* what;
    std::vector<TensorToWrite> tensors;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"duplicate names",
       {{"w", DataType::kF32, Dims{1}, data.data()}, {"w", DataType::kI8, Dims{1}, data.data()}},
       "'w'"},
      {"__metadata__ as a name", {{"__metadata__", DataType::kF32, Dims{1}, data.data()}}, "__metadata__"},
      {"dynamic shape", {{"d", DataType::kF32, Dims{-1, 2}, data.data()}}, "dynamic"},
      {"null data", {{"n", DataType::kF32, Dims{2}, nullptr}}, "'n'"},
      {"invalid UTF-8 name", {{"bad\xFF", DataType::kU8, Dims{1}, data.data()}}, "UTF-8"},
      {"truncated UTF-8 name", {{"bad\xC3", DataType::kU8, Dims{1}, data.data()}}, "UTF-8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_THROW(serialize_safetensors(c.tensors), InvalidArgumentError);
    const std::string message = message_of([&] { serialize_safetensors(c.tensors); });
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
    EXPECT_THROW(write_safetensors(dir / "out.safetensors", c.tensors), InvalidArgumentError);
    EXPECT_FALSE(fs::exists(dir / "out.safetensors"));
  }
  EXPECT_TRUE(fs::is_empty(dir.path())) << "a failed write left a temporary file behind";
}

TEST(Safetensors, WriterRejectsInvalidUtf8Metadata) {
  const Bytes data(4, std::byte{0});
  const std::vector<TensorToWrite> tensors = {{"w", DataType::kF32, Dims{1}, data.data()}};
  EXPECT_THROW(serialize_safetensors(tensors, Metadata{{"key\xFF", "v"}}), InvalidArgumentError);
  EXPECT_THROW(serialize_safetensors(tensors, Metadata{{"k", "value\xC0\x80"}}), InvalidArgumentError);
}

TEST(Safetensors, WriteToAMissingDirectoryIsAnIoErrorNamingThePath) {
  TempDir dir;
  const Bytes data(4, std::byte{0});
  const fs::path path = dir / "no-such-dir" / "w.safetensors";
  EXPECT_THROW(write_safetensors(path, {{"w", DataType::kF32, Dims{1}, data.data()}}), IoError);
  const std::string message = message_of([&] {
    write_safetensors(path, {{"w", DataType::kF32, Dims{1}, data.data()}});
  });
  EXPECT_NE(message.find((dir / "no-such-dir").string()), std::string::npos) << message;
}

TEST(Safetensors, WriteReplacesAnExistingFile) {
  TempDir dir;
  const fs::path path = dir / "w.safetensors";
  write_file(path, std::string("old contents that are not safetensors"));
  const std::int64_t value = -7;
  write_safetensors(path, {{"v", DataType::kI64, Dims{}, &value}});
  auto file = SafetensorsFile::open(path);
  std::int64_t back = 0;
  file->read(*file->find("v"), &back);
  EXPECT_EQ(back, -7);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1)
      << "temporary file left behind";
}

// ---- reader errors (the full malformed corpus is in tests/python/test_safetensors_malformed.py) ----

TEST(Safetensors, ReaderErrorsNameTheFile) {
  TempDir dir;
  const std::uint8_t short_file[4] = {1, 2, 3, 4};
  EXPECT_THROW(SafetensorsFile::from_bytes(short_file, sizeof short_file, "short-buffer"), FormatError);
  EXPECT_NE(message_of([&] {
              SafetensorsFile::from_bytes(short_file, sizeof short_file, "short-buffer");
            }).find("short-buffer"),
            std::string::npos);

  const std::uint8_t data[4] = {1, 2, 3, 4};
  Bytes bytes = serialize_safetensors({{"w", DataType::kF32, Dims{1}, data}});
  bytes.push_back(std::byte{0});  // a trailing byte after the last tensor
  write_file(dir / "trailing.safetensors", bytes.data(), bytes.size());
  const std::string message = message_of([&] { SafetensorsFile::open(dir / "trailing.safetensors"); });
  EXPECT_NE(message.find((dir / "trailing.safetensors").string()), std::string::npos) << message;
  EXPECT_NE(message.find("invalid safetensors file"), std::string::npos) << message;
  EXPECT_THROW(SafetensorsFile::open(dir / "trailing.safetensors"), FormatError);

  EXPECT_THROW(SafetensorsFile::open(dir / "missing.safetensors"), IoError);
  EXPECT_NE(message_of([&] { SafetensorsFile::open(dir / "missing.safetensors"); }).find("missing.safetensors"),
            std::string::npos);
  EXPECT_THROW(SafetensorsFile::open(dir.path()), IoError);
}

// ---- WeightStore ----

struct Shard {
  std::string file;
  std::vector<Sample> tensors;
};

void write_shard(const TempDir& dir, const Shard& shard) {
  write_safetensors(dir / shard.file, to_write(shard.tensors));
}

std::vector<Shard> make_shards(std::mt19937_64& rng) {
  std::vector<Shard> shards = {
      {"model-00001-of-00002.safetensors",
       {{"embed.weight", DataType::kBF16, Dims{8, 4}, {}}, {"layers.0.weight", DataType::kF32, Dims{4, 4}, {}}}},
      {"model-00002-of-00002.safetensors",
       {{"layers.1.weight", DataType::kF16, Dims{4, 4}, {}}, {"lm_head.bias", DataType::kF32, Dims{8}, {}}}},
  };
  for (Shard& shard : shards) {
    for (Sample& s : shard.tensors) s.bytes = random_tensor_bytes(s.dtype, s.shape, rng);
  }
  return shards;
}

std::string index_json(const std::vector<std::pair<std::string, std::string>>& weight_map) {
  std::string json = R"({"metadata":{"total_size":1234},"weight_map":{)";
  for (std::size_t i = 0; i < weight_map.size(); ++i) {
    if (i != 0) json += ',';
    json += '"' + weight_map[i].first + "\":\"" + weight_map[i].second + '"';
  }
  return json + "}}";
}

void expect_store_holds(const WeightStore& store, const TempDir& dir, const std::vector<Shard>& shards) {
  std::vector<std::string> expected_names;
  for (const Shard& shard : shards) {
    for (const Sample& s : shard.tensors) {
      SCOPED_TRACE(s.name);
      expected_names.push_back(s.name);
      EXPECT_TRUE(store.contains(s.name));
      const TensorView view = store.get(s.name);
      EXPECT_EQ(view.file->path(), (dir / shard.file).string());
      EXPECT_EQ(view.dtype(), s.dtype);
      EXPECT_EQ(view.shape(), s.shape);
      EXPECT_TRUE(same_bytes(view.data, s.bytes));
    }
  }
  std::sort(expected_names.begin(), expected_names.end());
  EXPECT_EQ(store.names(), expected_names);
}

TEST(WeightStore, TwoPlainFiles) {
  TempDir dir;
  std::mt19937_64 rng(21);
  const auto shards = make_shards(rng);
  for (const Shard& shard : shards) write_shard(dir, shard);
  const WeightStore store = WeightStore::open({dir / shards[0].file, dir / shards[1].file});
  EXPECT_EQ(store.files().size(), 2U);
  expect_store_holds(store, dir, shards);
  EXPECT_FALSE(store.contains("absent"));
}

TEST(WeightStore, ShardedCheckpointThroughItsIndex) {
  TempDir dir;
  std::mt19937_64 rng(22);
  const auto shards = make_shards(rng);
  for (const Shard& shard : shards) write_shard(dir, shard);
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (const Shard& shard : shards) {
    for (const Sample& s : shard.tensors) weight_map.emplace_back(s.name, shard.file);
  }
  write_file(dir / "model.safetensors.index.json", index_json(weight_map));
  const WeightStore store = WeightStore::open({dir / "model.safetensors.index.json"});
  EXPECT_EQ(store.files().size(), 2U);
  expect_store_holds(store, dir, shards);
}

TEST(WeightStore, DuplicateNamesAcrossFilesAreAFormatErrorNamingBothFiles) {
  TempDir dir;
  std::mt19937_64 rng(23);
  auto shards = make_shards(rng);
  shards[1].tensors.push_back(shards[0].tensors[1]);  // layers.0.weight in both files
  for (const Shard& shard : shards) write_shard(dir, shard);
  const std::vector<fs::path> paths = {dir / shards[0].file, dir / shards[1].file};
  EXPECT_THROW(WeightStore::open(paths), FormatError);
  const std::string message = message_of([&] { WeightStore::open(paths); });
  EXPECT_NE(message.find("'layers.0.weight'"), std::string::npos) << message;
  EXPECT_NE(message.find(paths[0].string()), std::string::npos) << message;
  EXPECT_NE(message.find(paths[1].string()), std::string::npos) << message;
}

TEST(WeightStore, IndexNamingAMissingShardIsAnIoError) {
  TempDir dir;
  std::mt19937_64 rng(24);
  const auto shards = make_shards(rng);
  write_shard(dir, shards[0]);  // the second shard is never written
  write_file(dir / "model.safetensors.index.json", index_json({{"embed.weight", shards[0].file},
                                                               {"layers.0.weight", shards[0].file},
                                                               {"layers.1.weight", shards[1].file}}));
  EXPECT_THROW(WeightStore::open({dir / "model.safetensors.index.json"}), IoError);
  const std::string message = message_of([&] { WeightStore::open({dir / "model.safetensors.index.json"}); });
  EXPECT_NE(message.find((dir / shards[1].file).string()), std::string::npos) << message;
}

TEST(WeightStore, IndexEntryWhoseTensorIsNotInItsShardIsAFormatError) {
  TempDir dir;
  std::mt19937_64 rng(25);
  const auto shards = make_shards(rng);
  for (const Shard& shard : shards) write_shard(dir, shard);
  // "ghost" is in no shard at all.
  write_file(dir / "ghost.index.json", index_json({{"embed.weight", shards[0].file}, {"ghost", shards[0].file}}));
  EXPECT_THROW(WeightStore::open({dir / "ghost.index.json"}), FormatError);
  std::string message = message_of([&] { WeightStore::open({dir / "ghost.index.json"}); });
  EXPECT_NE(message.find("'ghost'"), std::string::npos) << message;
  EXPECT_NE(message.find((dir / shards[0].file).string()), std::string::npos) << message;
  // "lm_head.bias" exists, but in the other shard than the one the index names.
  write_file(dir / "moved.index.json", index_json({{"embed.weight", shards[0].file},
                                                   {"lm_head.bias", shards[0].file},
                                                   {"layers.1.weight", shards[1].file}}));
  EXPECT_THROW(WeightStore::open({dir / "moved.index.json"}), FormatError);
  message = message_of([&] { WeightStore::open({dir / "moved.index.json"}); });
  EXPECT_NE(message.find("'lm_head.bias'"), std::string::npos) << message;
}

TEST(WeightStore, GetOnAnUnknownNameIsNotFoundNamingTheFiles) {
  TempDir dir;
  std::mt19937_64 rng(26);
  const auto shards = make_shards(rng);
  for (const Shard& shard : shards) write_shard(dir, shard);
  const WeightStore store = WeightStore::open({dir / shards[0].file, dir / shards[1].file});
  EXPECT_THROW(store.get("nope"), NotFoundError);
  const std::string message = message_of([&] { store.get("nope"); });
  EXPECT_NE(message.find("'nope'"), std::string::npos) << message;
  EXPECT_NE(message.find((dir / shards[0].file).string()), std::string::npos) << message;
  EXPECT_NE(message.find((dir / shards[1].file).string()), std::string::npos) << message;
}

}  // namespace
}  // namespace tensoracle
