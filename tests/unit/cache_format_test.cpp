// Tests for the engine cache's file container, canonical JSON, weight digest records, and prune parsing/selection.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cache/python_json.hpp"
#include "cache/weight_record.hpp"
#include "tensoracle/cache.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("tensoracle-cache-test-" + std::string(test->test_suite_name()) + "-" +
                                         test->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::permissions(path_, fs::perms::owner_all, ignored);
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The container written independently of the library: magic, big-endian length, header, plan.
std::string container(const std::string& header, const std::string& plan) {
  std::string out("TENSORACLE\x01", 11);
  for (int i = 7; i >= 0; --i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + plan;
}

const std::string kConditions = R"({"name":"m","graph_version":3,"weights":["ab"]})";
const std::string kPlan = "PLAN";

// json.dumps({"conditions": {...}, "plan_sha256": sha256(b"PLAN"), "shape_tensor_outputs": ["s"]},
//            sort_keys=True, separators=(",", ":")), computed with Python.
const std::string kPythonHeader =
    R"({"conditions":{"graph_version":3,"name":"m","weights":["ab"]},)"
    R"("plan_sha256":"0ff15403106fefdaa7a0816f2c17f1fd4e4e1c065feb6194a07df811dc03d188","shape_tensor_outputs":["s"]})";

template <typename ErrorType>
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const ErrorType& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

// ---- canonical JSON ----

TEST(CacheJson, CanonicalMatchesPythonJsonDumps) {
  // Python: json.dumps(v, sort_keys=True, separators=(",", ":")) of the same value.
  const std::string input =
      "{\"b\":[1.0,1e16,1e15,1.5e-7,0.0001,-0.0,2.5e-5,1e22,0.1,-5,18446744073709551615],"
      "\"a\":\"\xC3\xA9\xE2\x80\xA8\xF0\x9F\x98\x80\\u007f\\u0000\\u001f\\\"\\\\\\n\\t\\b\\f\\r/\","
      "\"\xC3\xA4\":true,\"Z\":null}";
  EXPECT_EQ(canonical_json(input),
            "{\"Z\":null,\"a\":\"\\u00e9\\u2028\\ud83d\\ude00\\u007f\\u0000\\u001f\\\"\\\\\\n\\t\\b\\f\\r/\","
            "\"b\":[1.0,1e+16,1000000000000000.0,1.5e-07,0.0001,-0.0,2.5e-05,1e+22,0.1,-5,18446744073709551615],"
            "\"\\u00e4\":true}");
  EXPECT_THROW(canonical_json("{"), InvalidArgumentError);
}

TEST(CacheJson, FloatReprMatchesPython) {
  const std::pair<double, const char*> cases[] = {
      {0.5, "0.5"},
      {100.0, "100.0"},
      {1e-4, "0.0001"},
      {1e-5, "1e-05"},
      {123.456, "123.456"},
      {1e300, "1e+300"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {12345678901234567.0, "1.2345678901234568e+16"},
      {0.1 + 0.2, "0.30000000000000004"},
      {0.0, "0.0"},
      {-2.0, "-2.0"},
  };
  for (const auto& [value, expected] : cases) EXPECT_EQ(cache_json::float_repr(value), expected) << expected;
}

TEST(CacheJson, UndecodableBytesEscapeLikeSurrogateescape) {
  // Python: json.dumps({"p": b"/a/\xff\xc3(".decode("utf-8", "surrogateescape")}, ...)
  nlohmann::json value;
  value["p"] = std::string("/a/\xFF\xC3(");
  EXPECT_EQ(cache_json::dumps_canonical(value), R"({"p":"/a/\udcff\udcc3("})");
}

TEST(CacheJson, DeepNestingIsRejected) {
  const std::string deep = std::string(10000, '[') + std::string(10000, ']');
  EXPECT_THROW(cache_json::parse(deep), nlohmann::json::exception);
  EXPECT_NO_THROW(cache_json::parse(std::string(100, '[') + std::string(100, ']')));
}

// ---- engine files ----

TEST(EngineFile, WriteMatchesIndependentContainerAndReadsBack) {
  TempDir dir;
  const fs::path path = dir.path() / "m.engine";
  write_engine_file(path, kConditions, kPlan.data(), kPlan.size(), {"s"});
  EXPECT_EQ(read_bytes(path), container(kPythonHeader, kPlan));
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  // Nothing but the file is left (the temporary file was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

  const EngineHeader header = read_engine_header(path);
  EXPECT_EQ(header.conditions_json, R"({"graph_version":3,"name":"m","weights":["ab"]})");
  EXPECT_EQ(header.plan_sha256, sha256_hex(kPlan.data(), kPlan.size()));
  EXPECT_EQ(header.shape_tensor_outputs, std::vector<std::string>{"s"});
  EXPECT_EQ(header.plan_size(), kPlan.size());

  // Key order and whitespace of the expected conditions do not matter.
  const EngineFileContents contents =
      read_engine_file(path, R"({ "weights": ["ab"], "name": "m", "graph_version": 3 })");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(contents.plan.data()), contents.plan.size()), kPlan);
}

TEST(EngineFile, LargePlanRoundTrip) {
  TempDir dir;
  const fs::path path = dir.path() / "big.engine";
  std::vector<std::byte> plan((std::size_t{20} << 20) + 7);
  for (std::size_t i = 0; i < plan.size(); ++i) plan[i] = static_cast<std::byte>((i * 2654435761u) >> 11);
  write_engine_file(path, kConditions, plan.data(), plan.size());
  const EngineFileContents contents = read_engine_file(path, kConditions);
  EXPECT_EQ(contents.plan, plan);
  EXPECT_TRUE(contents.header.shape_tensor_outputs.empty());
}

TEST(EngineFile, ReadsFilesWithoutShapeTensorOutputs) {
  TempDir dir;
  const fs::path path = dir.path() / "old.engine";
  write_bytes(path, container(R"({"conditions":{"a":1},"plan_sha256":")" + sha256_hex("P", 1) + "\"}", "P"));
  EXPECT_TRUE(read_engine_header(path).shape_tensor_outputs.empty());
  EXPECT_NO_THROW(read_engine_file(path, R"({"a":1})"));
}

TEST(EngineFile, HeaderOnlyReaderNeverChecksThePlan) {
  TempDir dir;
  const fs::path path = dir.path() / "m.engine";
  write_bytes(path, container(kPythonHeader, "XXXX"));  // wrong plan bytes
  EXPECT_NO_THROW(read_engine_header(path));
  EXPECT_NE(error_of<CorruptEngineError>([&] { read_engine_file(path, kConditions); }).find("checksum differs"),
            std::string::npos);
}

TEST(EngineFile, TruncatedFilesAreCorruptEngineErrorsNamingTheFile) {
  TempDir dir;
  const std::string whole = container(kPythonHeader, kPlan);
  const fs::path path = dir.path() / "t.engine";
  // Every truncation point: before magic+length → incomplete, before the plan → invalid header,
  // inside the plan → checksum.
  for (std::size_t size = 0; size < whole.size(); ++size) {
    write_bytes(path, whole.substr(0, size));
    const std::string message = error_of<CorruptEngineError>([&] { read_engine_file(path, kConditions); });
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("force_rebuild"), std::string::npos) << message;
    const char* expected = size < 19                           ? "incomplete engine file"
                           : size <= 19 + kPythonHeader.size() ? "invalid engine header"
                                                               : "checksum differs";
    EXPECT_NE(message.find(expected), std::string::npos) << size << ": " << message;
    if (size < 19 + kPythonHeader.size() + 1) {
      EXPECT_THROW(read_engine_header(path), CorruptEngineError) << size;
    }
  }
}

TEST(EngineFile, FlippedBytesAndOtherConditions) {
  TempDir dir;
  const fs::path path = dir.path() / "f.engine";
  const std::string whole = container(kPythonHeader, kPlan);

  std::string bad_magic = whole;
  bad_magic[0] = 'X';
  write_bytes(path, bad_magic);
  EXPECT_NE(error_of<CorruptEngineError>([&] { read_engine_file(path, kConditions); }).find("incomplete engine file"),
            std::string::npos);

  std::string bad_header = whole;
  bad_header[19] ^= 0x01;  // '{' -> 'z'
  write_bytes(path, bad_header);
  std::string message = error_of<CorruptEngineError>([&] { read_engine_file(path, kConditions); });
  EXPECT_NE(message.find("invalid engine header: " + path.string()), std::string::npos) << message;

  std::string bad_body = whole;
  bad_body.back() ^= 0x20;
  write_bytes(path, bad_body);
  message = error_of<CorruptEngineError>([&] { read_engine_file(path, kConditions); });
  EXPECT_NE(message.find("engine checksum differs: " + path.string()), std::string::npos) << message;

  write_bytes(path, whole);
  message = error_of<EngineConditionError>(
      [&] { read_engine_file(path, R"({"name":"m","graph_version":4,"weights":["ab"]})"); });
  EXPECT_NE(message.find("engine conditions differ: " + path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("\"graph_version\""), std::string::npos) << message;
  // Conditions are checked before the checksum: a damaged plan with other conditions is a condition error.
  write_bytes(path, bad_body);
  EXPECT_THROW(read_engine_file(path, R"({"other":true})"), EngineConditionError);
}

TEST(EngineFile, InvalidHeadersOfEveryKind) {
  TempDir dir;
  const fs::path path = dir.path() / "h.engine";
  const std::string sha = sha256_hex("P", 1);
  const std::vector<std::string> headers = {
      "[]",
      R"({"plan_sha256":")" + sha + "\"}",
      R"({"conditions":[],"plan_sha256":")" + sha + "\"}",
      R"({"conditions":{},"shape_tensor_outputs":"s"})",
      R"({"conditions":{},"shape_tensor_outputs":[1]})",
      R"({"conditions":{},"shape_tensor_outputs":null})",
      R"({"conditions":{"a":NaN}})",
      "{\"conditions\":{\"a\":\"\xFF\"}}",
      R"({"conditions":{})",
  };
  for (const std::string& header : headers) {
    write_bytes(path, container(header, "P"));
    const std::string message = error_of<CorruptEngineError>([&] { read_engine_header(path); });
    EXPECT_NE(message.find("invalid engine header: " + path.string()), std::string::npos) << header << message;
  }
  // A zero length, and a length reaching past the end of the file.
  write_bytes(path, container("", "P{}"));
  EXPECT_NE(error_of<CorruptEngineError>([&] { read_engine_header(path); }).find("header length is 0"),
            std::string::npos);
  std::string huge = container("{}", "P");
  huge[11] = '\x7F';
  write_bytes(path, huge);
  EXPECT_THROW(read_engine_header(path), CorruptEngineError);
  // A missing plan_sha256 is only found by the full reader (as in the reference).
  write_bytes(path, container(R"({"conditions":{}})", "P"));
  EXPECT_NO_THROW(read_engine_header(path));
  EXPECT_NE(error_of<CorruptEngineError>([&] { read_engine_file(path, "{}"); }).find("checksum differs"),
            std::string::npos);
}

TEST(EngineFile, ErrorHierarchyAndMissingFile) {
  TempDir dir;
  const fs::path path = dir.path() / "none.engine";
  EXPECT_THROW(read_engine_header(path), IoError);
  write_bytes(path, "");
  try {
    read_engine_file(path, kConditions);
    FAIL();
  } catch (const EngineCacheError& e) {
    EXPECT_NE(dynamic_cast<const CorruptEngineError*>(&e), nullptr);
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr);
  }
  EXPECT_THROW(write_engine_file(path, "[]", "x", 1), InvalidArgumentError);
  EXPECT_THROW(write_engine_file(path, "{}", "", 0), InvalidArgumentError);
}

// ---- cache directory ----

TEST(CacheDirectory, XdgCacheHomeThenHome) {
  const char* saved_xdg = std::getenv("XDG_CACHE_HOME");
  const char* saved_home = std::getenv("HOME");
  const std::string xdg = saved_xdg ? saved_xdg : "";
  const std::string home = saved_home ? saved_home : "";
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  ::setenv("HOME", "/h", 1);
  EXPECT_EQ(default_cache_directory(), fs::path("/x/cache/tensoracle"));
  ::setenv("XDG_CACHE_HOME", "", 1);
  EXPECT_EQ(default_cache_directory(), fs::path("/h/.cache/tensoracle"));
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_directory(), fs::path("/h/.cache/tensoracle"));
  if (saved_xdg) ::setenv("XDG_CACHE_HOME", xdg.c_str(), 1);
  if (saved_home) ::setenv("HOME", home.c_str(), 1);
}

TEST(CacheDirectory, CreatedWithMode0700) {
  TempDir dir;
  const fs::path cache = dir.path() / "a" / "b" / "tensoracle";
  ensure_cache_directory(cache);
  EXPECT_TRUE(fs::is_directory(cache));
  EXPECT_EQ(fs::status(cache).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(dir.path() / "a").permissions() & fs::perms::all, fs::perms::owner_all);
  ensure_cache_directory(cache);  // existing: fine
  write_bytes(dir.path() / "file", "x");
  EXPECT_THROW(ensure_cache_directory(dir.path() / "file"), IoError);
}

// ---- weight digest records ----

TEST(WeightRecord, PythonAbspath) {
  EXPECT_EQ(cache_detail::python_abspath("/a/./b//c/../d/"), "/a/b/d");
  EXPECT_EQ(cache_detail::python_abspath("/../x"), "/x");
  EXPECT_EQ(cache_detail::python_abspath("//net/x"), "//net/x");
  EXPECT_EQ(cache_detail::python_abspath("///x"), "/x");
  EXPECT_EQ(cache_detail::python_abspath("/"), "/");
  EXPECT_EQ(cache_detail::python_abspath("rel/f"), fs::current_path().string() + "/rel/f");
}

TEST(WeightRecord, CanonicalBytesMatchPython) {
  WeightRecord record;
  record.identity = {"/models/w.safetensors", 3, 1700000000123456789, 2049, 12345};
  record.sha256 = sha256_hex("abc", 3);
  // Python: rec["checksum"] = sha256(json.dumps(rec, sort_keys=True, separators=(",", ":"))), dumped the same way.
  EXPECT_EQ(weight_record_json(record),
            R"({"checksum":"7c7fb9954317eed2d2ecf9e04351c04f75aa1bf6b4f437f2588e3d1063488992","device":2049,)"
            R"("inode":12345,"mtime_ns":1700000000123456789,"path":"/models/w.safetensors",)"
            R"("sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad","size":3,"version":1})");
  EXPECT_EQ(weight_record_path("/c", "/models/w.safetensors"),
            fs::path("/c/weight-5cd0c38a580fed9139380284973dc110d4c8de5fb2a62ec5245cf43c41005e97.json"));
}

TEST(WeightRecord, InvalidRecordsAreRejected) {
  TempDir dir;
  const fs::path file = dir.path() / "weight-x.json";
  WeightRecord record;
  record.identity = {"/w", 3, 5, 1, 2};
  record.sha256 = sha256_hex("abc", 3);
  const std::string good = weight_record_json(record);
  write_bytes(file, good);
  ASSERT_TRUE(read_weight_record(file).has_value());
  EXPECT_EQ(read_weight_record(file)->identity, record.identity);
  // Whitespace and key order do not matter (Python compares values).
  write_bytes(file, cache_json::dumps_indented(nlohmann::ordered_json::parse(good), 1));
  EXPECT_TRUE(read_weight_record(file).has_value());

  auto variant = [&](const std::function<void(nlohmann::json&)>& change, bool fix_checksum) {
    nlohmann::json json = nlohmann::json::parse(good);
    change(json);
    if (fix_checksum) {
      json.erase("checksum");
      const std::string body = cache_json::dumps_canonical(json);
      json["checksum"] = sha256_hex(body.data(), body.size());
    }
    return cache_json::dumps_canonical(json);
  };
  const std::vector<std::string> bad = {
      variant([](nlohmann::json& j) { j["size"] = 4; }, false),  // checksum mismatch
      variant([](nlohmann::json& j) { j["extra"] = 1; }, true),
      variant([](nlohmann::json& j) { j.erase("inode"); }, true),
      variant([](nlohmann::json& j) { j["version"] = 2; }, true),
      variant([](nlohmann::json& j) { j["version"] = 1.0; }, true),
      variant([](nlohmann::json& j) { j["version"] = true; }, true),
      variant([](nlohmann::json& j) { j["size"] = 3.0; }, true),
      variant([](nlohmann::json& j) { j["size"] = "3"; }, true),
      variant([](nlohmann::json& j) { j["sha256"] = std::string(64, 'A'); }, true),
      variant([](nlohmann::json& j) { j["sha256"] = "abc"; }, true),
      variant([](nlohmann::json& j) { j["path"] = 1; }, true),
      "[]",
      "not json",
      "",
  };
  for (const std::string& text : bad) {
    write_bytes(file, text);
    EXPECT_FALSE(read_weight_record(file).has_value()) << text;
  }
  EXPECT_FALSE(read_weight_record(dir.path() / "missing.json").has_value());
}

class WeightDigest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_log_level(LogSeverity::kInfo);
    set_log_callback([this](LogSeverity severity, std::string_view message) {
      if (severity == LogSeverity::kInfo && message.find("its SHA-256 is recorded") != std::string_view::npos)
        ++hashes_;
      if (severity == LogSeverity::kInfo && message.find("% of") != std::string_view::npos) ++progress_;
    });
    cache_ = dir_.path() / "cache";
    ensure_cache_directory(cache_);
    weights_ = dir_.path() / "w.safetensors";
    write_bytes(weights_, "first contents");
  }
  void TearDown() override {
    set_log_callback({});
    set_log_level(LogSeverity::kWarning);
  }
  // Hashes through the path with the progress threshold at 0, so every hash is logged and counted.
  std::string digest(bool force = false) { return cache_detail::weight_file_sha256(weights_, cache_, force, 0); }
  fs::path record() const { return weight_record_path(cache_, cache_detail::python_abspath(weights_.string())); }
  void set_mtime(std::int64_t ns) {
    const timespec times[2] = {{0, UTIME_OMIT},
                               {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)}};
    ASSERT_EQ(::utimensat(AT_FDCWD, weights_.c_str(), times, 0), 0);
  }
  // Rewrites the file in place (same inode, same size) and restores its modification time: the
  // identity is unchanged, so only a reused record can still answer the old digest.
  void rewrite_keeping_identity(const std::string& contents) {
    const WeightFileIdentity before = weight_file_identity(weights_);
    {
      std::fstream out(weights_, std::ios::binary | std::ios::in | std::ios::out);
      out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    }
    set_mtime(before.mtime_ns);
    ASSERT_EQ(weight_file_identity(weights_), before);
  }

  TempDir dir_;
  fs::path cache_;
  fs::path weights_;
  int hashes_ = 0;
  int progress_ = 0;
};

TEST_F(WeightDigest, RecordIsWrittenAndReused) {
  const std::string first = digest();
  EXPECT_EQ(first, sha256_hex("first contents", 14));
  EXPECT_EQ(hashes_, 1);
  EXPECT_GE(progress_, 1);
  ASSERT_TRUE(fs::exists(record()));
  EXPECT_EQ(fs::status(record()).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  const auto saved = read_weight_record(record());
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(saved->identity, weight_file_identity(weights_));
  EXPECT_EQ(saved->sha256, first);

  rewrite_keeping_identity("FIRST CONTENTS");
  EXPECT_EQ(digest(), first);  // from the record: the file was not read
  EXPECT_EQ(hashes_, 1);
  EXPECT_EQ(digest(/*force=*/true), sha256_hex("FIRST CONTENTS", 14));  // force_rebuild hashes again
  EXPECT_EQ(hashes_, 2);
  // The public entry point agrees with the record now.
  EXPECT_EQ(weight_file_sha256(weights_, cache_), sha256_hex("FIRST CONTENTS", 14));
  EXPECT_EQ(hashes_, 2);
}

TEST_F(WeightDigest, IdentityChangeRehashes) {
  digest();
  write_bytes(weights_, "second, longer contents");
  EXPECT_EQ(digest(), sha256_hex("second, longer contents", 23));
  EXPECT_EQ(hashes_, 2);
  // Replaced by another file (new inode) with the same size and time: hashed again.
  const WeightFileIdentity before = weight_file_identity(weights_);
  const fs::path other = dir_.path() / "other";
  write_bytes(other, "SECOND, LONGER CONTENTS");
  fs::rename(other, weights_);
  set_mtime(before.mtime_ns);
  EXPECT_NE(weight_file_identity(weights_).inode, before.inode);
  EXPECT_EQ(digest(), sha256_hex("SECOND, LONGER CONTENTS", 23));
  EXPECT_EQ(hashes_, 3);
}

TEST_F(WeightDigest, TouchingTheFileRehashesOnce) {
  const std::string first = digest();
  const WeightFileIdentity before = weight_file_identity(weights_);
  set_mtime(before.mtime_ns + 1000);
  EXPECT_EQ(digest(), first);
  EXPECT_EQ(hashes_, 2);
  EXPECT_EQ(digest(), first);
  EXPECT_EQ(digest(), first);
  EXPECT_EQ(hashes_, 2);
  EXPECT_EQ(read_weight_record(record())->identity.mtime_ns, before.mtime_ns + 1000);
}

TEST_F(WeightDigest, CorruptedRecordRehashes) {
  const std::string first = digest();
  std::string bytes = read_bytes(record());
  const std::size_t at = bytes.find("\"size\":") + 7;
  bytes[at] = bytes[at] == '9' ? '8' : '9';  // another size with the old checksum
  write_bytes(record(), bytes);
  EXPECT_FALSE(read_weight_record(record()).has_value());
  EXPECT_EQ(digest(), first);
  EXPECT_EQ(hashes_, 2);
  EXPECT_TRUE(read_weight_record(record()).has_value());  // rewritten
  write_bytes(record(), "garbage");
  EXPECT_EQ(digest(), first);
  EXPECT_EQ(hashes_, 3);
  EXPECT_EQ(digest(), first);
  EXPECT_EQ(hashes_, 3);
}

TEST_F(WeightDigest, UnwritableCacheStillAnswers) {
  fs::permissions(cache_, fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(cache_.c_str(), W_OK) == 0) GTEST_SKIP() << "running as root: permissions are not enforced";
  EXPECT_EQ(digest(), sha256_hex("first contents", 14));
  EXPECT_FALSE(fs::exists(record()));
  fs::permissions(cache_, fs::perms::owner_all);
}

TEST_F(WeightDigest, MissingWeightFileIsIoErrorNamingIt) {
  fs::remove(weights_);
  try {
    digest();
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(weights_.string()), std::string::npos) << e.what();
  }
}

// ---- prune parsing and selection ----

TEST(Prune, ParseDays) {
  EXPECT_EQ(parse_prune_days("30"), 30.0);
  EXPECT_EQ(parse_prune_days("0.5"), 0.5);
  EXPECT_EQ(parse_prune_days(".25"), 0.25);
  EXPECT_EQ(parse_prune_days("1e1"), 10.0);
  EXPECT_EQ(parse_prune_days("0"), 0.0);
  EXPECT_EQ(parse_prune_days("-0"), 0.0);
  for (const char* bad : {"", "-1", "inf", "nan", "1e400", "abc", "1d", "0x10", "1,5", "--1"})
    EXPECT_THROW(parse_prune_days(bad), InvalidArgumentError) << bad;
}

TEST(Prune, ParseSize) {
  EXPECT_EQ(parse_prune_size("0"), 0u);
  EXPECT_EQ(parse_prune_size("123"), 123u);
  EXPECT_EQ(parse_prune_size("1.9"), 1u);
  EXPECT_EQ(parse_prune_size("10B"), 10u);
  EXPECT_EQ(parse_prune_size("1kib"), 1024u);
  EXPECT_EQ(parse_prune_size("1.5GiB"), 1610612736u);
  EXPECT_EQ(parse_prune_size("10GiB"), 10737418240u);
  EXPECT_EQ(parse_prune_size("2TIB"), 2199023255552u);
  EXPECT_EQ(parse_prune_size("0.1KiB"), 102u);
  EXPECT_EQ(parse_prune_size("0.3MiB"), 314572u);  // 314572.8
  EXPECT_EQ(parse_prune_size("1e3"), 1000u);
  EXPECT_EQ(parse_prune_size("1e-3KiB"), 1u);          // 1.024
  EXPECT_EQ(parse_prune_size("0.0009765625KiB"), 1u);  // exactly 1
  EXPECT_EQ(parse_prune_size("99999999999999999999999TiB"), UINT64_MAX);
  for (const char* bad : {"", "-1", "-0", "1KB", "1 GB", "GiB", "1.5.GiB", "inf", "nan", "1PiB", "x", "0x10"})
    EXPECT_THROW(parse_prune_size(bad), InvalidArgumentError) << bad;
}

CacheEntry engine(const std::string& name, std::uint64_t size, std::int64_t recorded,
                  CacheEntryStatus status = CacheEntryStatus::kRecognized) {
  CacheEntry entry;
  entry.file = name;
  entry.size_bytes = size;
  entry.recorded_at_ns = recorded;
  entry.status = status;
  return entry;
}

std::vector<std::string> names(const std::vector<CacheEntry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.file);
  return out;
}

TEST(Prune, SizeModeRemovesOldestFirstTiesByName) {
  CacheListing listing;
  listing.entries = {engine("c.engine", 10, 100), engine("a.engine", 10, 200), engine("b.engine", 10, 100),
                     engine("empty.engine", 0, 1, CacheEntryStatus::kBuildingOrLeftover),
                     engine("junk.engine", 5, 2, CacheEntryStatus::kUnrecognized)};
  listing.total_size_bytes = 35;
  PruneCriteria criteria;
  criteria.mode = PruneCriteria::Mode::kMaxSize;
  criteria.max_size_bytes = 15;
  PrunePlan plan = plan_prune(listing, criteria);
  EXPECT_EQ(names(plan.selected), (std::vector<std::string>{"b.engine", "c.engine"}));
  EXPECT_EQ(names(plan.excluded), (std::vector<std::string>{"empty.engine", "junk.engine"}));
  EXPECT_EQ(plan.projected_total_size_bytes, 15u);
  EXPECT_TRUE(plan.size_limit_attainable);
  criteria.max_size_bytes = 4;  // the unrecognized file alone is 5 bytes
  plan = plan_prune(listing, criteria);
  EXPECT_EQ(plan.selected.size(), 3u);
  EXPECT_FALSE(plan.size_limit_attainable);
  criteria.max_size_bytes = 35;
  EXPECT_TRUE(plan_prune(listing, criteria).selected.empty());
}

TEST(Prune, UnusedForSelectsStrictlyEarlierThanTheCutoff) {
  const std::int64_t day = 86400LL * 1000000000LL;
  const std::int64_t now = 1000 * day;
  CacheListing listing;
  listing.entries = {engine("old.engine", 1, now - 2 * day - 1), engine("edge.engine", 1, now - 2 * day),
                     engine("half.engine", 1, now - day / 2 - 1), engine("new.engine", 1, now)};
  PruneCriteria criteria;
  criteria.now_ns = now;
  criteria.unused_for_days = 2;
  PrunePlan plan = plan_prune(listing, criteria);
  EXPECT_EQ(names(plan.selected), std::vector<std::string>{"old.engine"});
  EXPECT_EQ(plan.cutoff_ns, now - 2 * day);
  criteria.unused_for_days = 0.5;
  plan = plan_prune(listing, criteria);
  EXPECT_EQ(names(plan.selected), (std::vector<std::string>{"old.engine", "edge.engine", "half.engine"}));
  criteria.unused_for_days = 0;
  EXPECT_EQ(plan_prune(listing, criteria).selected.size(), 3u);  // "now" itself is not earlier than now
}

TEST(Prune, FormatUtc) {
  EXPECT_EQ(format_utc_ns(0), "1970-01-01T00:00:00.000000000Z");
  EXPECT_EQ(format_utc_ns(1700000000123456789), "2023-11-14T22:13:20.123456789Z");
  EXPECT_EQ(format_utc_ns(-1), "1969-12-31T23:59:59.999999999Z");
}

}  // namespace
}  // namespace tensoracle
