// Unit tests of cubin bundles: cubin_sm on real and hand-made ELF headers, parameter records, the producer (real
// nvcc), inspect_bundle on good and damaged bundles, and inspect_library on shared libraries built from bundle.cpp.
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bundle/bundle_internal.hpp"
#include "tensoracle/bundle.hpp"
#include "tensoracle/cubin_bundle.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle::bundle {
namespace {

namespace fs = std::filesystem;

// Two kernels: `scale` (4 parameters: 8, 8, 4, 4 bytes) and `fill`, whose value comes from the -D constant VALUE.
constexpr const char* kKernelSource = R"(
extern "C" __global__ void scale(float* out, const float* in, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * s;
}
#ifndef VALUE
#define VALUE 1
#endif
extern "C" __global__ void fill(int* out, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = VALUE;
}
)";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  const std::string text = read_text(path);
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tensoracle-bundle-test-XXXXXX").string();
    EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// nvcc and ptxas, or empty when the machine has no CUDA compiler.
struct Toolkit {
  fs::path nvcc, ptxas;
  std::string missing;
};

Toolkit find_toolkit() {
  Toolkit t;
  try {
    t.nvcc = find_tool("nvcc", {}, {});
    t.ptxas = find_tool("ptxas", {}, {});
  } catch (const NotFoundError& e) {
    t.missing = e.what();
  }
  return t;
}

#define REQUIRE_NVCC(toolkit)             \
  const Toolkit toolkit = find_toolkit(); \
  if (!toolkit.missing.empty()) GTEST_SKIP() << "no CUDA compiler here: " << toolkit.missing

// A cubin of kKernelSource compiled with nvcc -cubin for one SM.
std::vector<std::uint8_t> compile_cubin(const Toolkit& toolkit, const fs::path& dir, int sm,
                                        const std::string& extra = "") {
  const fs::path source = dir / "kernels.cu";
  if (!fs::exists(source)) write_text(source, kKernelSource);
  const fs::path out = dir / fmt::format("k{}{}.cubin", sm, extra.empty() ? "" : "x");
  std::vector<std::string> argv = {toolkit.nvcc.string(), "-cubin", fmt::format("-arch=sm_{}", sm)};
  if (!extra.empty()) argv.push_back(extra);
  argv.insert(argv.end(), {"-o", out.string(), source.string()});
  const ToolResult r = run_tool(argv);
  EXPECT_EQ(r.exit_status, 0) << r.output;
  return read_bytes(out);
}

nlohmann::json scale_spec(const std::vector<std::string>& architectures) {
  return {{"architectures", architectures},
          {"kernels",
           {{{"name", "scale"},
             {"source", "src/kernels.cu"},
             {"args",
              {{{"name", "out"}, {"type", "pointer"}, {"divisibility", 16}},
               {{"name", "in"}, {"type", "pointer"}, {"divisibility", 16}},
               {{"name", "s"}, {"type", "f32"}},
               {{"name", "n"}, {"type", "i32"}}}},
             {"threads", 128}},
            {{"name", "fill.v7"},
             {"source", "src/kernels.cu"},
             {"entry", "fill"},
             {"args", {{{"name", "out"}, {"type", "pointer"}}, {{"name", "n"}, {"type", "i64"}}}},
             {"constants", {{"VALUE", 7}}},
             {"shared_bytes", 256}}}}};
}

// Writes a spec and its source into `dir`; returns the spec's path.
fs::path write_spec(const fs::path& dir, const nlohmann::json& spec) {
  fs::create_directories(dir / "src");
  write_text(dir / "src" / "kernels.cu", kKernelSource);
  write_text(dir / "spec.json", spec.dump(2));
  return dir / "spec.json";
}

// The digest by its definition: SHA-256 of the document without "digest", keys sorted, no whitespace.
std::string digest_of(nlohmann::json doc) {
  doc.erase("digest");
  const std::string canonical = doc.dump();
  return sha256_hex(canonical.data(), canonical.size());
}

// Rewrites a bundle's bundle.json through `change`, then records the new digest.
template <typename Change>
void edit_bundle_json(const fs::path& bundle, Change change, bool update_digest = true) {
  nlohmann::json doc = nlohmann::json::parse(read_text(bundle / "bundle.json"));
  change(doc);
  if (update_digest) doc["digest"] = digest_of(doc);
  write_text(bundle / "bundle.json", doc.dump(2));
}

fs::path copy_bundle(const fs::path& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

// A hand-made ELF header: 64-bit, little-endian, CUDA unless `machine` says otherwise.
std::vector<std::uint8_t> elf_header(int abi_version, std::uint32_t flags, std::uint16_t machine = 190,
                                     std::uint8_t osabi = 0x33) {
  std::vector<std::uint8_t> h(64, 0);
  h[0] = 0x7f, h[1] = 'E', h[2] = 'L', h[3] = 'F', h[4] = 2, h[5] = 1, h[6] = 1, h[7] = osabi;
  h[8] = static_cast<std::uint8_t>(abi_version);
  h[16] = 2;  // ET_EXEC
  h[18] = static_cast<std::uint8_t>(machine), h[19] = static_cast<std::uint8_t>(machine >> 8);
  h[20] = 1;  // EV_CURRENT
  std::memcpy(h.data() + 48, &flags, 4);
  h[52] = 64;  // e_ehsize
  return h;
}

// Compiles `bundle/bundle.cpp` into a shared library; returns its path, or empty with a message in `error`.
fs::path build_library(const fs::path& bundle, const fs::path& out, std::string* error) {
  const ToolResult r =
      run_tool({"/bin/sh", "-c",
                fmt::format("'{}' -std=c++17 -shared -fPIC -O1 -I'{}' -o '{}' '{}'", TENSORACLE_TEST_CXX,
                            TENSORACLE_INCLUDE_DIR, out.string(), (bundle / "bundle.cpp").string())});
  if (r.exit_status != 0) {
    *error = r.output;
    return {};
  }
  return out;
}

std::string failure_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- cubin_sm ----

TEST(CubinSm, RealCubinOfEachDefaultArchitecture) {
  REQUIRE_NVCC(toolkit);
  TempDir dir;
  for (int sm : default_architectures()) {
    const std::vector<std::uint8_t> cubin = compile_cubin(toolkit, dir.path, sm);
    ASSERT_GE(cubin.size(), 64u);
    EXPECT_TRUE(cubin[8] == 7 || cubin[8] == 8) << "ELF ABI version " << int(cubin[8]);
    EXPECT_EQ(cubin_sm(cubin.data(), cubin.size()), sm);
  }
  EXPECT_EQ(default_architectures(), (std::vector<int>{80, 86, 89, 90, 120}));
}

TEST(CubinSm, AbiVersion7KeepsTheSmInTheLowByte) {
  // As ptxas up to 12.x writes them: SM in bits 0-7, the virtual SM in bits 16-23, flags 0x500 in between.
  for (int sm : {75, 80, 86, 89, 90}) {
    const auto h = elf_header(7, static_cast<std::uint32_t>(sm | 0x500 | (sm << 16)));
    EXPECT_EQ(cubin_sm(h.data(), h.size()), sm);
  }
  // The same flags read as ABI version 8 name SM 5: unknown.
  const auto h = elf_header(8, 0x560556, 190, 0x41);
  EXPECT_THROW(cubin_sm(h.data(), h.size()), CubinArchitectureError);
}

TEST(CubinSm, AbiVersion8KeepsTheSmInBits8To15) {
  for (auto [sm, flags] : std::vector<std::pair<int, std::uint32_t>>{
           {80, 0x6005004}, {86, 0x6005604}, {89, 0x6005904}, {90, 0x6005a04}, {90, 0x9005a04}, {120, 0x6007802}}) {
    const auto h = elf_header(8, flags, 190, 0x41);
    EXPECT_EQ(cubin_sm(h.data(), h.size()), sm) << std::hex << flags;
  }
}

TEST(CubinSm, RejectsWhatIsNotACudaCubin) {
  const auto cuda = elf_header(8, 0x6005604, 190, 0x41);
  EXPECT_THROW(cubin_sm(cuda.data(), 63), BundleError);
  EXPECT_NE(failure_of([&] { cubin_sm(cuda.data(), 10, "x.cubin"); }).find("x.cubin: 10 bytes, shorter than an ELF"),
            std::string::npos);
  const auto x86 = elf_header(8, 0x6005604, 62);
  try {
    cubin_sm(x86.data(), x86.size());
    FAIL() << "an x86-64 ELF was accepted";
  } catch (const CubinArchitectureError&) {
    FAIL() << "a non-CUDA ELF is a BundleError, not an architecture error";
  } catch (const BundleError& e) {
    EXPECT_NE(std::string(e.what()).find("e_machine 190"), std::string::npos) << e.what();
  }
  std::vector<std::uint8_t> not_elf(64, 'x');
  EXPECT_THROW(cubin_sm(not_elf.data(), not_elf.size()), BundleError);
  const auto abi6 = elf_header(6, 0x56);
  EXPECT_THROW(cubin_sm(abi6.data(), abi6.size()), CubinArchitectureError);
  const auto unknown_sm = elf_header(7, 0x63);  // sm99
  EXPECT_THROW(cubin_sm(unknown_sm.data(), unknown_sm.size()), CubinArchitectureError);
}

TEST(CubinSm, ParsesArchitectureNames) {
  EXPECT_EQ(parse_architecture("sm86"), 86);
  EXPECT_EQ(parse_architecture("sm_120"), 120);
  EXPECT_EQ(parse_architecture("89"), 89);
  EXPECT_THROW(parse_architecture("sm99"), CubinArchitectureError);
  EXPECT_THROW(parse_architecture("compute_86"), CubinArchitectureError);
  EXPECT_EQ(parse_architectures("sm120, sm86,sm86"), (std::vector<int>{86, 120}));
  EXPECT_THROW(parse_architectures(","), CubinArchitectureError);
}

// ---- parameter records ----

TEST(CubinParams, ReadsKparamInfoOfARealCubin) {
  REQUIRE_NVCC(toolkit);
  TempDir dir;
  for (int sm : {86, 120}) {
    const auto cubin = compile_cubin(toolkit, dir.path, sm);
    const auto params = cubin_kernel_params(cubin.data(), cubin.size(), "scale");
    ASSERT_EQ(params.size(), 4u);
    const std::uint32_t sizes[] = {8, 8, 4, 4}, offsets[] = {0, 8, 16, 20};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(params[i].ordinal, i);
      EXPECT_EQ(params[i].size, sizes[i]);
      EXPECT_EQ(params[i].offset, offsets[i]);
    }
    const auto fill = cubin_kernel_params(cubin.data(), cubin.size(), "fill");
    ASSERT_EQ(fill.size(), 2u);
    EXPECT_EQ(fill[1].size, 8u);
    EXPECT_EQ(cubin_entries(cubin.data(), cubin.size()), (std::vector<std::string>{"fill", "scale"}));
    EXPECT_THROW(cubin_kernel_params(cubin.data(), cubin.size(), "missing"), BundleError);
  }
}

TEST(CubinParams, AgreesWithCuobjdump) {
  REQUIRE_NVCC(toolkit);
  fs::path cuobjdump;
  try {
    cuobjdump = find_tool("cuobjdump", {}, {});
  } catch (const NotFoundError& e) {
    GTEST_SKIP() << e.what();
  }
  TempDir dir;
  const auto cubin = compile_cubin(toolkit, dir.path, 86);
  const ToolResult r = run_tool({cuobjdump.string(), "-elf", (dir.path / "k86.cubin").string()});
  ASSERT_EQ(r.exit_status, 0) << r.output;
  // cuobjdump prints "Ordinal : 0x3  Offset  : 0x14  Size    : 0x4" for each EIATTR_KPARAM_INFO record.
  const std::size_t at = r.output.find("\n.nv.info.scale\n\t");  // the section's dump, not its header line
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string section = r.output.substr(at, r.output.find("\n.nv.", at + 10) - at);
  const auto params = cubin_kernel_params(cubin.data(), cubin.size(), "scale");
  for (const CubinParam& p : params) {
    EXPECT_NE(
        section.find(fmt::format("Ordinal : 0x{:x}\tOffset  : 0x{:x}\tSize    : 0x{:x}", p.ordinal, p.offset, p.size)),
        std::string::npos)
        << section;
  }
}

TEST(EmbeddedCubins, FindsACubinInsideOtherBytes) {
  REQUIRE_NVCC(toolkit);
  TempDir dir;
  const auto cubin = compile_cubin(toolkit, dir.path, 89);
  std::vector<std::uint8_t> blob(1000, 0x11);
  const auto x86 = elf_header(8, 0, 62);  // a host ELF header is skipped
  std::copy(x86.begin(), x86.end(), blob.begin() + 10);
  blob.insert(blob.begin() + 333, cubin.begin(), cubin.end());
  blob.insert(blob.end(), {0x7f, 'E', 'L', 'F'});  // a truncated magic at the end is no image
  const auto found = find_embedded_cubins(blob.data(), blob.size());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].offset, 333u);
  EXPECT_EQ(found[0].size, cubin.size());
  EXPECT_EQ(found[0].sm, 89);
  EXPECT_EQ(found[0].sha256, sha256_hex(cubin.data(), cubin.size()));
}

// Damaged cubins (every truncation of the headers, seeded random byte changes in the header and the tables) are
// errors or values, never reads outside the bytes (the sanitizer build checks that).
TEST(EmbeddedCubins, ReadersSurviveDamagedCubins) {
  REQUIRE_NVCC(toolkit);
  TempDir dir;
  const auto cubin = compile_cubin(toolkit, dir.path, 86);
  const auto exercise = [](const std::vector<std::uint8_t>& bytes) {
    try {
      cubin_sm(bytes.data(), bytes.size());
    } catch (const Error&) {
    }
    try {
      cubin_entries(bytes.data(), bytes.size());
      cubin_kernel_params(bytes.data(), bytes.size(), "scale");
    } catch (const Error&) {
    }
    for (const EmbeddedCubin& e : find_embedded_cubins(bytes.data(), bytes.size())) {
      EXPECT_LE(e.offset + e.size, bytes.size());
    }
  };
  for (std::size_t size = 0; size <= 256; ++size) {
    exercise(std::vector<std::uint8_t>(cubin.begin(), cubin.begin() + static_cast<std::ptrdiff_t>(size)));
  }
  std::uint64_t state = 0x9e3779b97f4a7c15ull;  // splitmix64: the same inputs every run
  const auto next = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const std::uint64_t shoff = [&] {
    std::uint64_t v = 0;
    std::memcpy(&v, cubin.data() + 0x28, 8);
    return v;
  }();
  for (int round = 0; round < 3000; ++round) {
    std::vector<std::uint8_t> bytes = cubin;
    const int changes = 1 + static_cast<int>(next() % 4);
    for (int c = 0; c < changes; ++c) {
      // Mostly the ELF header and the section header table, where offsets and sizes live.
      const std::uint64_t r = next();
      std::size_t at = r % 3 == 0   ? static_cast<std::size_t>(next() % 64)
                       : r % 3 == 1 ? static_cast<std::size_t>(shoff + next() % (bytes.size() - shoff))
                                    : static_cast<std::size_t>(next() % bytes.size());
      bytes[at] = static_cast<std::uint8_t>(next());
    }
    if (next() % 4 == 0) bytes.resize(static_cast<std::size_t>(next() % bytes.size()));
    exercise(bytes);
  }
}

// ---- paths and the manifest ----

TEST(BundlePaths, OnlySafeRelativePathsPass) {
  EXPECT_NO_THROW(check_relative_path("cubins/sm86/scale.cubin", "cubin path"));
  EXPECT_NO_THROW(check_relative_path("kernels.cu", "source"));
  const std::pair<const char*, const char*> bad[] = {
      {"/etc/passwd", "absolute POSIX"},
      {"../x.cubin", "'..'"},
      {"cubins/../../x", "'..'"},
      {"C:/x.cubin", "Windows drive"},
      {"c:x.cubin", "Windows drive"},
      {"\\x.cubin", "Windows root"},
      {"\\\\server\\x", "Windows root"},
      {"cubins\\sm86\\x", "backslash"},
      {"", "empty"},
      {"cubins//x", "empty component"},
      {"./x", "'.'"},
  };
  for (const auto& item : bad) {
    const std::string path = item.first, why = item.second;  // a lambda cannot capture structured bindings (C++17)
    const std::string message = failure_of([&] { check_relative_path(path, "cubin path"); });
    EXPECT_NE(message.find(why), std::string::npos) << path << ": " << message;
  }
}

TEST(BundleManifest, RoundTripsAndDigestIsTheCanonicalSha256) {
  Manifest m;
  m.architectures = {86, 120};
  m.tools = {{"nvcc", "13.0.88"}, {"ptxas", "13.0.88"}};
  KernelRecord k;
  k.name = "dot.specialized";
  k.entry = "dot";
  k.args = {{"a", cubin::ArgType::kPointer, 1, 16}, {"shape", cubin::ArgType::kI32, 3, 1}};
  k.constants = {{"BLOCK", "128"}};
  k.threads = 128;
  k.source = "kernels/dot.cu";
  k.source_sha256 = std::string(64, 'a');
  for (int sm : m.architectures) {
    k.cubins.push_back({sm, fmt::format("cubins/sm{}/dot.specialized.cubin", sm), std::string(64, 'b'), 100, 0});
  }
  m.kernels.push_back(k);
  m.digest = compute_digest(m);
  const std::string text = manifest_json(m);
  const Manifest back = parse_manifest(text);
  EXPECT_EQ(back.digest, m.digest);
  EXPECT_EQ(canonical_json(back), canonical_json(m));
  EXPECT_EQ(digest_of(nlohmann::json::parse(text)), m.digest);  // the definition, computed independently
  // Unknown and duplicate fields, floats for integers: rejected.
  nlohmann::json doc = nlohmann::json::parse(text);
  doc["extra"] = 1;
  EXPECT_THROW(parse_manifest(doc.dump()), BundleError);
  doc = nlohmann::json::parse(text);
  doc["kernels"][0]["threads"] = 128.0;
  doc["digest"] = digest_of(doc);
  EXPECT_THROW(parse_manifest(doc.dump()), BundleError);
  std::string duplicated = text;
  duplicated.insert(duplicated.find("\"format_version\""), "\"format_version\": 1,\n");
  EXPECT_NE(failure_of([&] { parse_manifest(duplicated); }).find("appears twice"), std::string::npos);
}

// ---- the producer, inspect_bundle and inspect_library ----

class BundleProducer : public ::testing::Test {
 protected:
  void SetUp() override {
    toolkit_ = find_toolkit();
    if (!toolkit_.missing.empty()) GTEST_SKIP() << "no CUDA compiler here: " << toolkit_.missing;
  }
  // A bundle of scale_spec for `architectures`, in dir_/`name`.
  fs::path produce(const std::string& name, const std::vector<std::string>& architectures = {"sm86", "sm120"},
                   nlohmann::json spec = nullptr) {
    if (spec.is_null()) spec = scale_spec(architectures);
    const fs::path spec_path = write_spec(dir_.path / (name + "-spec"), spec);
    compile_bundle(spec_path, dir_.path / name);
    return dir_.path / name;
  }
  Toolkit toolkit_;
  TempDir dir_;
};

TEST_F(BundleProducer, WritesACheckedBundle) {
  const fs::path bundle = produce("good");
  EXPECT_TRUE(fs::is_regular_file(bundle / "bundle.json"));
  EXPECT_TRUE(fs::is_regular_file(bundle / "bundle.cpp"));
  for (const char* f : {"cubins/sm86/scale.cubin", "cubins/sm120/scale.cubin", "cubins/sm86/fill.v7.cubin"}) {
    EXPECT_TRUE(fs::is_regular_file(bundle / f)) << f;
  }
  // No temporary directory is left beside it.
  for (const auto& entry : fs::directory_iterator(dir_.path)) {
    EXPECT_EQ(entry.path().filename().string().find(".good.tmp"), std::string::npos) << entry.path();
  }
  const BundleReport report = inspect_bundle(bundle);
  const Manifest& m = report.manifest;
  EXPECT_EQ(m.architectures, (std::vector<int>{86, 120}));
  ASSERT_EQ(m.kernels.size(), 2u);
  EXPECT_EQ(m.kernels[0].name, "scale");
  EXPECT_EQ(m.kernels[0].threads, 128);
  EXPECT_EQ(m.kernels[0].args[0].divisibility, 16);
  EXPECT_EQ(m.kernels[1].entry, "fill");
  ASSERT_EQ(m.kernels[1].constants.size(), 1u);
  EXPECT_EQ(m.kernels[1].constants[0].value, "7");
  EXPECT_EQ(m.kernels[1].cubins[0].shared_bytes, 256u);
  EXPECT_EQ(m.kernels[0].source, "src/kernels.cu");
  const std::string source = read_text(dir_.path / "good-spec" / "src" / "kernels.cu");
  EXPECT_EQ(m.kernels[0].source_sha256, sha256_hex(source.data(), source.size()));
  EXPECT_EQ(m.tools.at("nvcc"), cuda_tool_version(toolkit_.nvcc));
  EXPECT_EQ(m.tools.at("ptxas"), cuda_tool_version(toolkit_.ptxas));
  const auto cubin = read_bytes(bundle / "cubins/sm120/scale.cubin");
  EXPECT_EQ(m.kernels[0].cubins[1].sha256, sha256_hex(cubin.data(), cubin.size()));
  EXPECT_EQ(cubin_sm(cubin.data(), cubin.size()), 120);
  const nlohmann::json j = nlohmann::json::parse(report.to_json());
  EXPECT_EQ(j["digest"], m.digest);
  EXPECT_EQ(j["architectures"], nlohmann::json({"sm86", "sm120"}));
  EXPECT_EQ(j["kernels"][1]["constants"]["VALUE"], "7");
  // Producing again replaces the bundle (same cubins, same digest).
  EXPECT_EQ(inspect_bundle(produce("good")).manifest.digest, m.digest);
  EXPECT_THROW(inspect_bundle(bundle, {86}), CubinArchitectureError);
}

TEST_F(BundleProducer, InspectRejectsEachDamage) {
  const fs::path good = produce("good");
  int n = 0;
  const auto expect_rejected = [&](auto change, const char* why, bool architecture) {
    const fs::path copy = copy_bundle(good, dir_.path / fmt::format("bad{}", n++));
    change(copy);
    try {
      inspect_bundle(copy);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const CubinArchitectureError& e) {
      EXPECT_TRUE(architecture) << why << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    } catch (const BundleError& e) {
      EXPECT_FALSE(architecture) << why << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  // An sm86 cubin in sm120's place, with its hash and size recorded: the ELF header gives it away.
  expect_rejected(
      [&](const fs::path& b) {
        fs::copy_file(b / "cubins/sm86/scale.cubin", b / "cubins/sm120/scale.cubin",
                      fs::copy_options::overwrite_existing);
        const auto bytes = read_bytes(b / "cubins/sm86/scale.cubin");
        edit_bundle_json(b, [&](nlohmann::json& d) {
          d["kernels"][0]["cubins"][1]["sha256"] = sha256_hex(bytes.data(), bytes.size());
          d["kernels"][0]["cubins"][1]["size"] = bytes.size();
        });
      },
      "its ELF header says sm86", true);
  // A cubin recorded as sm120 in directory sm86.
  expect_rejected(
      [&](const fs::path& b) {
        edit_bundle_json(b,
                         [&](nlohmann::json& d) { d["kernels"][0]["cubins"][1]["path"] = "cubins/sm86/scale.cubin"; });
      },
      "lies in directory 'sm86'", true);
  for (const auto& item :
       std::vector<std::pair<std::string, std::string>>{{"/tmp/scale.cubin", "absolute POSIX"},
                                                        {"../good/cubins/sm86/scale.cubin", "'..'"},
                                                        {"C:/cubins/sm86/scale.cubin", "Windows drive"},
                                                        {"\\cubins\\sm86\\scale.cubin", "Windows root"},
                                                        {"cubins\\sm86\\scale.cubin", "backslash"}}) {
    const std::string path = item.first, why = item.second;
    expect_rejected(
        [&](const fs::path& b) {
          edit_bundle_json(b, [&](nlohmann::json& d) { d["kernels"][0]["cubins"][0]["path"] = path; });
        },
        why.c_str(), false);
    expect_rejected(
        [&](const fs::path& b) { edit_bundle_json(b, [&](nlohmann::json& d) { d["kernels"][0]["source"] = path; }); },
        why.c_str(), false);
  }
  // Changed cubin bytes (same size).
  expect_rejected(
      [&](const fs::path& b) {
        auto bytes = read_bytes(b / "cubins/sm86/scale.cubin");
        bytes[bytes.size() / 2] ^= 0x01;
        write_text(b / "cubins/sm86/scale.cubin", std::string(bytes.begin(), bytes.end()));
      },
      "SHA-256", false);
  // Truncated cubin.
  expect_rejected([&](const fs::path& b) { fs::resize_file(b / "cubins/sm120/fill.v7.cubin", 100); },
                  "bytes, bundle.json records", false);
  // bundle.json changed without its digest.
  expect_rejected(
      [&](const fs::path& b) {
        edit_bundle_json(
            b, [&](nlohmann::json& d) { d["kernels"][0]["threads"] = 256; }, false);
      },
      "does not match its contents", false);
  expect_rejected(
      [&](const fs::path& b) {
        edit_bundle_json(
            b, [&](nlohmann::json& d) { d["kernels"][0]["args"][3]["type"] = "i64"; }, false);
      },
      "does not match its contents", false);
  // A missing cubin, a symbolic link leading out of the bundle.
  expect_rejected([&](const fs::path& b) { fs::remove(b / "cubins/sm86/fill.v7.cubin"); }, "missing", false);
  expect_rejected(
      [&](const fs::path& b) {
        fs::remove(b / "cubins/sm86/fill.v7.cubin");
        fs::create_symlink(good / "cubins/sm86/fill.v7.cubin", b / "cubins/sm86/fill.v7.cubin");
      },
      "outside the bundle", false);
  // No bundle.json at all.
  expect_rejected([&](const fs::path& b) { fs::remove(b / "bundle.json"); }, "no bundle.json", false);
}

TEST_F(BundleProducer, RejectsAWrongParameterAbiBeforeWritingAnything) {
  for (const auto& change : std::vector<std::function<void(nlohmann::json&)>>{
           [](nlohmann::json& s) { s["kernels"][0]["args"].erase(3); },            // one arg too few
           [](nlohmann::json& s) { s["kernels"][0]["args"][3]["type"] = "i64"; },  // int declared as 8 bytes
           [](nlohmann::json& s) { s["kernels"][1]["args"][1]["count"] = 2; },     // two where there is one
           [](nlohmann::json& s) {
             s["kernels"][1]["args"].push_back({{"name", "x"}, {"type", "f32"}});
           }}) {
    nlohmann::json spec = scale_spec({"sm86"});
    change(spec);
    const fs::path spec_path = write_spec(dir_.path / "spec", spec);
    const fs::path out = dir_.path / "out";
    const std::string message = failure_of([&] { compile_bundle(spec_path, out); });
    EXPECT_NE(message.find("parameter ABI"), std::string::npos) << message;
    EXPECT_FALSE(fs::exists(out));
    for (const auto& entry : fs::directory_iterator(dir_.path)) {
      EXPECT_EQ(entry.path().filename().string().find("tmp"), std::string::npos) << entry.path();
    }
  }
  // An existing bundle stays as it was when a new one fails.
  const fs::path bundle = produce("kept", {"sm86"});
  const std::string before = read_text(bundle / "bundle.json");
  nlohmann::json spec = scale_spec({"sm86"});
  spec["kernels"][0]["args"].erase(0);
  EXPECT_THROW(compile_bundle(write_spec(dir_.path / "spec2", spec), bundle), BundleError);
  EXPECT_EQ(read_text(bundle / "bundle.json"), before);
}

TEST_F(BundleProducer, RejectsScratchAndWrongArchitectureInTheWriter) {
  const auto cubin86 = compile_cubin(toolkit_, dir_.path, 86);
  CompiledKernel k;
  k.record.name = "scale";
  k.record.entry = "scale";
  k.record.args = {{"out", cubin::ArgType::kPointer, 1, 1},
                   {"in", cubin::ArgType::kPointer, 1, 1},
                   {"s", cubin::ArgType::kF32, 1, 1},
                   {"n", cubin::ArgType::kI32, 1, 1}};
  k.record.source = "k.cu";
  k.record.source_sha256 = std::string(64, '0');
  k.cubins.push_back({86, cubin86, 0, 64});
  const fs::path out = dir_.path / "out";
  EXPECT_NE(failure_of([&] { write_bundle({k}, {86}, {}, out); }).find("scratch"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
  k.cubins[0].scratch_bytes = 0;
  k.cubins[0].sm = 89;  // an sm86 cubin presented as sm89
  EXPECT_THROW(write_bundle({k}, {89}, {}, out), CubinArchitectureError);
  k.cubins[0].sm = 86;
  EXPECT_THROW(write_bundle({k}, {86, 89}, {}, out), CubinArchitectureError);  // no sm89 cubin
  k.record.kind = KernelKind::kTriton;  // Triton kernels take two scratch pointers more
  EXPECT_THROW(write_bundle({k}, {86}, {}, out), BundleError);
  EXPECT_FALSE(fs::exists(out));
  k.record.kind = KernelKind::kCuda;
  EXPECT_EQ(write_bundle({k}, {86}, {}, out).kernels.size(), 1u);
  // A directory that is not a bundle is never replaced.
  const fs::path other = dir_.path / "other";
  fs::create_directories(other);
  write_text(other / "notes.txt", "mine");
  EXPECT_THROW(write_bundle({k}, {86}, {}, other), BundleError);
  EXPECT_EQ(read_text(other / "notes.txt"), "mine");
}

TEST_F(BundleProducer, GeneratedTranslationUnitEmbedsExactlyTheBundle) {
  const fs::path a = produce("a");
  std::string error;
  const fs::path lib = build_library(a, dir_.path / "liba.so", &error);
  ASSERT_FALSE(lib.empty()) << error;
  const LibraryReport report = inspect_library(lib, a);
  EXPECT_TRUE(report.ok()) << report.to_json();
  EXPECT_TRUE(report.digest_present);
  EXPECT_EQ(report.matched.size(), 4u);
  EXPECT_EQ(report.embedded, 4u);

  // What the library's embedded_bundle() returns is the manifest, cubin for cubin.
  void* handle = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << ::dlerror();
  using Fn = const cubin::Bundle& (*)();
  auto fn = reinterpret_cast<Fn>(::dlsym(handle, "_ZN10tensoracle5cubin15embedded_bundleEv"));
  ASSERT_NE(fn, nullptr);
  const cubin::Bundle& embedded = fn();
  const Manifest m = inspect_bundle(a).manifest;
  EXPECT_STREQ(embedded.digest, m.digest.c_str());
  ASSERT_EQ(embedded.kernel_count, 2);
  for (int k = 0; k < 2; ++k) {
    const cubin::KernelRecord& e = embedded.kernels[k];
    EXPECT_STREQ(e.name, m.kernels[k].name.c_str());
    EXPECT_STREQ(e.entry, m.kernels[k].entry.c_str());
    ASSERT_EQ(e.arg_count, static_cast<int>(m.kernels[k].args.size()));
    for (int i = 0; i < e.arg_count; ++i) {
      EXPECT_STREQ(e.args[i].name, m.kernels[k].args[i].name.c_str());
      EXPECT_EQ(e.args[i].type, m.kernels[k].args[i].type);
      EXPECT_EQ(e.args[i].divisibility, m.kernels[k].args[i].divisibility);
    }
    EXPECT_EQ(e.threads, m.kernels[k].threads);
    EXPECT_EQ(e.scratch_pointers, 0);
    EXPECT_STREQ(e.source_sha256, m.kernels[k].source_sha256.c_str());
    ASSERT_EQ(e.image_count, 2);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(e.images[i].sm, m.kernels[k].cubins[i].sm);
      EXPECT_EQ(sha256_hex(e.images[i].data, e.images[i].size), m.kernels[k].cubins[i].sha256);
      EXPECT_STREQ(e.images[i].sha256, m.kernels[k].cubins[i].sha256.c_str());
      EXPECT_EQ(e.images[i].shared_bytes, m.kernels[k].cubins[i].shared_bytes);
    }
  }
  ASSERT_EQ(embedded.kernels[1].constant_count, 1);
  EXPECT_STREQ(embedded.kernels[1].constants[0].name, "VALUE");
  EXPECT_STREQ(embedded.kernels[1].constants[0].value, "7");
  EXPECT_EQ(embedded.kernels[0].constants, nullptr);
  ::dlclose(handle);

  // A bundle whose fill kernel has another constant: its cubins differ, and the library is not built from it.
  nlohmann::json spec = scale_spec({"sm86", "sm120"});
  spec["kernels"][1]["constants"]["VALUE"] = 8;
  const fs::path b = produce("b", {}, spec);
  const LibraryReport other = inspect_library(lib, b);
  EXPECT_FALSE(other.ok());
  EXPECT_FALSE(other.digest_present);
  EXPECT_EQ(other.matched.size(), 2u);  // scale is the same
  ASSERT_EQ(other.missing.size(), 2u);
  EXPECT_EQ(other.missing[0].first, "fill.v7");
  EXPECT_EQ(other.extra.size(), 2u);
  const nlohmann::json j = nlohmann::json::parse(other.to_json());
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["missing"].size(), 2u);
  // A library without any cubin.
  const fs::path empty_lib = dir_.path / "empty.so";
  const ToolResult r = run_tool({"/bin/sh", "-c",
                                 fmt::format("echo 'int f() {{ return 1; }}' | '{}' -x c++ -shared -fPIC -o '{}' -",
                                             TENSORACLE_TEST_CXX, empty_lib.string())});
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const LibraryReport none = inspect_library(empty_lib, a);
  EXPECT_FALSE(none.ok());
  EXPECT_EQ(none.embedded, 0u);
  EXPECT_EQ(none.missing.size(), 4u);
}

// ---- tools ----

TEST(BundleTools, MissingToolNamesThePackageAndThePathsSearched) {
  TempDir dir;
  const std::string message =
      failure_of([&] { find_tool("tensoracle-no-such-tool", {}, {dir.path / "site-packages"}); });
  EXPECT_NE(message.find("nvidia-cuda-nvcc"), std::string::npos) << message;
  EXPECT_NE(message.find((dir.path / "site-packages/nvidia/cu13/bin/tensoracle-no-such-tool").string()),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("/usr/local/cuda/bin/tensoracle-no-such-tool"), std::string::npos) << message;
  EXPECT_THROW(find_tool("nvcc", dir.path / "nvcc", {}), NotFoundError);
  // The wheel layout comes first; an explicit path overrides it.
  const fs::path bin = dir.path / "sp" / "nvidia" / "cu13" / "bin";
  fs::create_directories(bin);
  write_text(bin / "ptxas", "#!/bin/sh\necho 'Cuda compilation tools, release 13.2, V13.2.51'\n");
  fs::permissions(bin / "ptxas", fs::perms::owner_all);
  EXPECT_EQ(find_tool("ptxas", {}, {dir.path / "sp"}), bin / "ptxas");
  EXPECT_EQ(cuda_tool_version(bin / "ptxas"), "13.2.51");
  write_text(dir.path / "my-ptxas", "#!/bin/sh\n");
  fs::permissions(dir.path / "my-ptxas", fs::perms::owner_all);
  EXPECT_EQ(find_tool("ptxas", dir.path / "my-ptxas", {dir.path / "sp"}), dir.path / "my-ptxas");
  EXPECT_THROW(cuda_tool_version(dir.path / "my-ptxas"), BundleError);
}

TEST(BundleTools, ProducerWithAMissingToolWritesNothing) {
  TempDir dir;
  const fs::path spec = write_spec(dir.path / "spec", scale_spec({"sm86"}));
  bundle::ProducerOptions options;
  options.nvcc = dir.path / "bin" / "nvcc";
  const std::string message = failure_of([&] { compile_bundle(spec, dir.path / "out", options); });
  EXPECT_NE(message.find("not an executable file"), std::string::npos) << message;
  EXPECT_NE(message.find("nvidia-cuda-nvcc"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir.path / "out"));
}

TEST(BundleSpec, RejectsBadSpecs) {
  EXPECT_THROW(parse_kernel_spec("{}"), BundleError);
  EXPECT_THROW(parse_kernel_spec(R"({"kernels": [{"name": "k", "source": "/abs/k.cu", "args": []}]})"), BundleError);
  EXPECT_THROW(parse_kernel_spec(R"({"kernels": [{"name": "k", "source": "k.cu", "args": [], "kind": "triton"}]})"),
               BundleError);
  EXPECT_THROW(parse_kernel_spec(R"({"kernels": [{"name": "k", "source": "k.cu", "args": [], "colour": 1}]})"),
               BundleError);
  EXPECT_THROW(
      parse_kernel_spec(R"({"kernels": [{"name": "k", "source": "k.cu", "args": [{"name": "a", "type": "f16"}]}]})"),
      BundleError);
  EXPECT_THROW(
      parse_kernel_spec(R"({"architectures": ["sm99"], "kernels": [{"name": "k", "source": "k.cu", "args": []}]})"),
      CubinArchitectureError);
  const KernelSpecFile spec = parse_kernel_spec(
      R"({"kernels": [{"name": "k", "source": "k.cu", "args": [{"name": "a", "type": "u64", "count": 2}],
          "constants": {"B": 64, "F": true, "S": "x"}}]})");
  ASSERT_EQ(spec.kernels.size(), 1u);
  EXPECT_EQ(spec.kernels[0].entry, "k");
  EXPECT_EQ(spec.kernels[0].args[0].count, 2);
  ASSERT_EQ(spec.kernels[0].constants.size(), 3u);
  EXPECT_EQ(spec.kernels[0].constants[1].value, "1");
}

}  // namespace
}  // namespace tensoracle::bundle
