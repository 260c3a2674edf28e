// Reading CUDA ELF files (cubins): the SM of the ELF header, kernel entries and their parameter records
// (.nv.info.<entry>), and CUDA ELF images embedded in other files. Every offset is checked before use.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tensoracle/bundle.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle::bundle {
namespace {

constexpr std::size_t kElfHeaderSize = 64;  // ELF64
constexpr std::uint16_t kEmCuda = 190;
constexpr std::size_t kSectionHeaderSize = 64;
constexpr std::size_t kProgramHeaderSize = 56;
constexpr std::uint32_t kShtNobits = 8;
// .nv.info attribute formats and the attributes read here (the values ptxas writes; cuobjdump -elf names them).
constexpr std::uint8_t kEifmtNval = 1;
constexpr std::uint8_t kEifmtBval = 2;
constexpr std::uint8_t kEifmtHval = 3;
constexpr std::uint8_t kEifmtSval = 4;
constexpr std::uint8_t kEiattrParamCbank = 0x0a;
constexpr std::uint8_t kEiattrKparamInfo = 0x17;
constexpr std::uint8_t kEiattrCbankParamSize = 0x19;

std::uint16_t u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
std::uint64_t u64(const std::uint8_t* p) { return u32(p) | (static_cast<std::uint64_t>(u32(p + 4)) << 32); }

// True when `offset + length` fits in `size` (without overflow).
bool fits(std::uint64_t offset, std::uint64_t length, std::uint64_t size) {
  return offset <= size && length <= size - offset;
}

bool has_elf_magic(const std::uint8_t* p) { return p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F'; }

// A 64-bit little-endian CUDA ELF header (does not look at the ABI version or the flags).
bool is_cuda_elf_header(const std::uint8_t* p) {
  return has_elf_magic(p) && p[4] == 2 && p[5] == 1 && p[6] == 1 && u16(p + 18) == kEmCuda && u32(p + 20) == 1;
}

struct Section {
  std::string name;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

// The header is checked first (check_cuda_header); BundleError naming `where` for tables outside the file.
std::vector<Section> read_sections(const std::uint8_t* data, std::size_t size, std::string_view where) {
  const std::uint64_t shoff = u64(data + 0x28);
  const std::uint16_t shentsize = u16(data + 0x3a);
  const std::uint16_t shnum = u16(data + 0x3c);
  const std::uint16_t shstrndx = u16(data + 0x3e);
  if (shnum == 0) return {};
  if (shentsize != kSectionHeaderSize || !fits(shoff, std::uint64_t{shnum} * kSectionHeaderSize, size) ||
      shstrndx >= shnum) {
    throw BundleError(
        fmt::format("{}: its ELF section header table (offset {}, {} entries of {} bytes) lies outside "
                    "the file's {} bytes; the cubin is damaged: compile it again",
                    where, shoff, shnum, shentsize, size));
  }
  std::vector<Section> sections(shnum);
  std::vector<std::uint32_t> name_offsets(shnum);
  for (std::size_t i = 0; i < shnum; ++i) {
    const std::uint8_t* h = data + shoff + i * kSectionHeaderSize;
    name_offsets[i] = u32(h);
    sections[i].type = u32(h + 4);
    sections[i].offset = u64(h + 0x18);
    sections[i].size = u64(h + 0x20);
    if (sections[i].type != kShtNobits && !fits(sections[i].offset, sections[i].size, size)) {
      throw BundleError(
          fmt::format("{}: ELF section {} (offset {}, {} bytes) lies outside the file's {} bytes; the "
                      "cubin is damaged: compile it again",
                      where, i, sections[i].offset, sections[i].size, size));
    }
  }
  const Section& strings = sections[shstrndx];
  if (strings.type == kShtNobits) return sections;  // no names (and no bytes behind the offset)
  for (std::size_t i = 0; i < shnum; ++i) {
    if (name_offsets[i] >= strings.size) continue;  // no name
    const char* begin = reinterpret_cast<const char*>(data + strings.offset + name_offsets[i]);
    const std::size_t room = strings.size - name_offsets[i];
    sections[i].name.assign(begin, strnlen(begin, room));
  }
  return sections;
}

const std::uint8_t* bytes_of(const void* data) { return static_cast<const std::uint8_t*>(data); }

void check_cuda_header(const std::uint8_t* p, std::size_t size, std::string_view where) {
  if (size < kElfHeaderSize) {
    throw BundleError(
        fmt::format("{}: {} bytes, shorter than an ELF header ({} bytes): not a cubin", where, size, kElfHeaderSize));
  }
  if (!has_elf_magic(p)) throw BundleError(fmt::format("{}: not an ELF file (no \\x7fELF magic): not a cubin", where));
  if (p[4] != 2 || p[5] != 1) {
    throw BundleError(
        fmt::format("{}: not a 64-bit little-endian ELF file (class {}, data {}): not a cubin", where, p[4], p[5]));
  }
  const std::uint16_t machine = u16(p + 18);
  if (machine != kEmCuda) {
    throw BundleError(
        fmt::format("{}: an ELF file for machine {}, not CUDA (e_machine {}): not a cubin", where, machine, kEmCuda));
  }
}

// The SM of a header already known to be a CUDA ELF one; 0 for an unknown ABI version.
int header_sm(const std::uint8_t* p, int* abi_version) {
  const int abi = p[8];
  const std::uint32_t flags = u32(p + 48);
  if (abi_version != nullptr) *abi_version = abi;
  if (abi == 7) return static_cast<int>(flags & 0xff);
  if (abi == 8) return static_cast<int>((flags >> 8) & 0xff);
  return 0;
}

bool is_known(int sm) {
  const auto& known = known_architectures();
  return std::find(known.begin(), known.end(), sm) != known.end();
}

// The furthest byte the tables of the ELF image at `p` (at most `available` bytes) describe; 0 when they don't fit.
std::uint64_t elf_extent(const std::uint8_t* p, std::uint64_t available) {
  if (available < kElfHeaderSize || u16(p + 0x34) != kElfHeaderSize) return 0;
  std::uint64_t end = kElfHeaderSize;
  const std::uint64_t phoff = u64(p + 0x20);
  const std::uint16_t phentsize = u16(p + 0x36);
  const std::uint16_t phnum = u16(p + 0x38);
  if (phnum != 0) {
    if (phentsize != kProgramHeaderSize || !fits(phoff, std::uint64_t{phnum} * kProgramHeaderSize, available)) return 0;
    end = std::max(end, phoff + std::uint64_t{phnum} * kProgramHeaderSize);
    for (std::size_t i = 0; i < phnum; ++i) {
      const std::uint8_t* h = p + phoff + i * kProgramHeaderSize;
      const std::uint64_t offset = u64(h + 8);
      const std::uint64_t filesz = u64(h + 0x20);
      if (!fits(offset, filesz, available)) return 0;
      end = std::max(end, offset + filesz);
    }
  }
  const std::uint64_t shoff = u64(p + 0x28);
  const std::uint16_t shentsize = u16(p + 0x3a);
  const std::uint16_t shnum = u16(p + 0x3c);
  if (shnum != 0) {
    if (shentsize != kSectionHeaderSize || !fits(shoff, std::uint64_t{shnum} * kSectionHeaderSize, available)) return 0;
    end = std::max(end, shoff + std::uint64_t{shnum} * kSectionHeaderSize);
    for (std::size_t i = 0; i < shnum; ++i) {
      const std::uint8_t* h = p + shoff + i * kSectionHeaderSize;
      if (u32(h + 4) == kShtNobits) continue;
      const std::uint64_t offset = u64(h + 0x18);
      const std::uint64_t length = u64(h + 0x20);
      if (!fits(offset, length, available)) return 0;
      end = std::max(end, offset + length);
    }
  }
  return end;
}

}  // namespace

int cubin_sm(const void* data, std::size_t size, std::string_view where) {
  const std::uint8_t* p = bytes_of(data);
  check_cuda_header(p, size, where);
  int abi = 0;
  const int sm = header_sm(p, &abi);
  if (abi != 7 && abi != 8) {
    throw CubinArchitectureError(fmt::format(
        "{}: CUDA ELF ABI version {} (e_ident[EI_ABIVERSION]); this library reads versions 7 (ptxas up to 12.x) and 8 "
        "(ptxas 13.x): compile the cubin with a supported ptxas",
        where, abi));
  }
  if (!is_known(sm)) {
    throw CubinArchitectureError(fmt::format(
        "{}: its ELF header (ABI version {}, e_flags 0x{:x}) names SM {}, not an architecture this library knows (sm75 "
        "to sm121): the file is damaged or from an unsupported compiler",
        where, abi, u32(p + 48), sm));
  }
  return sm;
}

std::vector<std::string> cubin_entries(const void* data, std::size_t size, std::string_view where) {
  const std::uint8_t* p = bytes_of(data);
  check_cuda_header(p, size, where);
  std::vector<std::string> entries;
  for (const Section& s : read_sections(p, size, where)) {
    if (s.name.rfind(".text.", 0) == 0 && s.name.size() > 6) entries.push_back(s.name.substr(6));
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

std::vector<CubinParam> cubin_kernel_params(const void* data, std::size_t size, const std::string& entry,
                                            std::string_view where) {
  const std::uint8_t* p = bytes_of(data);
  check_cuda_header(p, size, where);
  const std::vector<Section> sections = read_sections(p, size, where);
  const std::string text_name = ".text." + entry;
  const std::string info_name = ".nv.info." + entry;
  const auto find = [&](const std::string& name) {
    return std::find_if(sections.begin(), sections.end(), [&](const Section& s) { return s.name == name; });
  };
  if (find(text_name) == sections.end()) {
    std::string defined;
    for (const std::string& e : cubin_entries(data, size, where)) defined += (defined.empty() ? "" : ", ") + e;
    throw BundleError(
        fmt::format("{}: defines no kernel entry '{}' (it defines: {}); declare the function extern \"C\" "
                    "__global__ and give its name as the kernel's entry",
                    where, entry, defined.empty() ? "none" : defined));
  }
  std::vector<CubinParam> params;
  std::optional<std::uint32_t> bank_size;
  const auto info = find(info_name);
  if (info != sections.end() && info->type != kShtNobits) {
    const std::uint8_t* d = p + info->offset;
    std::uint64_t i = 0;
    while (i + 4 <= info->size) {
      const std::uint8_t format = d[i];
      const std::uint8_t attribute = d[i + 1];
      const std::uint16_t value = u16(d + i + 2);
      i += 4;
      if (format == kEifmtSval) {
        if (!fits(i, value, info->size)) {
          throw BundleError(fmt::format("{}: section {} has an attribute record past its end; the cubin is damaged",
                                        where, info_name));
        }
        const std::uint8_t* payload = d + i;
        if (attribute == kEiattrKparamInfo && value >= 12) {
          // u32 index, u16 ordinal, u16 offset, u32 flags with the parameter's size in bits 18-31.
          CubinParam param;
          param.ordinal = u16(payload + 4);
          param.offset = u16(payload + 6);
          param.size = (u32(payload + 8) >> 18) & 0x3fff;
          params.push_back(param);
        } else if (attribute == kEiattrParamCbank && value >= 8) {
          bank_size = u16(payload + 6);  // u32 section, u16 bank offset, u16 bytes of parameters
        }
        i += value;
      } else if (format == kEifmtHval || format == kEifmtBval || format == kEifmtNval) {
        if (attribute == kEiattrCbankParamSize && format == kEifmtHval) bank_size = value;
      } else {
        throw BundleError(
            fmt::format("{}: section {} has an attribute of unknown format {}; the cubin is damaged or "
                        "from an unsupported compiler",
                        where, info_name, format));
      }
    }
  }
  std::sort(params.begin(), params.end(),
            [](const CubinParam& a, const CubinParam& b) { return a.ordinal < b.ordinal; });
  std::uint32_t end = 0;
  for (std::size_t k = 0; k < params.size(); ++k) {
    if (params[k].ordinal != static_cast<int>(k)) {
      throw BundleError(
          fmt::format("{}: kernel '{}' records parameter ordinal {} where {} was expected; the cubin is "
                      "damaged",
                      where, entry, params[k].ordinal, k));
    }
    if (params[k].offset < end) {
      throw BundleError(
          fmt::format("{}: kernel '{}' parameter {} at offset {} overlaps the previous one; the cubin is "
                      "damaged",
                      where, entry, k, params[k].offset));
    }
    end = params[k].offset + params[k].size;
  }
  if (bank_size && *bank_size != end && !(params.empty() && *bank_size == 0)) {
    throw BundleError(
        fmt::format("{}: kernel '{}' has {} bytes of parameters but its parameter records end at byte {}; "
                    "the cubin is damaged",
                    where, entry, *bank_size, end));
  }
  return params;
}

std::vector<EmbeddedCubin> find_embedded_cubins(const void* data, std::size_t size) {
  const std::uint8_t* p = bytes_of(data);
  std::vector<EmbeddedCubin> found;
  static constexpr std::array<std::uint8_t, 4> kMagic = {0x7f, 'E', 'L', 'F'};
  std::size_t at = 0;
  while (at + kElfHeaderSize <= size) {
    const std::uint8_t* hit = std::search(p + at, p + size, kMagic.begin(), kMagic.end());
    if (hit == p + size) break;
    const std::size_t offset = static_cast<std::size_t>(hit - p);
    if (offset + kElfHeaderSize > size) break;
    if (!is_cuda_elf_header(hit)) {
      at = offset + 1;
      continue;
    }
    const std::uint64_t extent = elf_extent(hit, size - offset);
    if (extent == 0) {
      at = offset + 1;
      continue;
    }
    EmbeddedCubin image;
    image.offset = offset;
    image.size = extent;
    image.sha256 = sha256_hex(hit, static_cast<std::size_t>(extent));
    const int sm = header_sm(hit, nullptr);
    image.sm = is_known(sm) ? sm : 0;
    found.push_back(image);
    at = offset + static_cast<std::size_t>(extent);
  }
  return found;
}

}  // namespace tensoracle::bundle
