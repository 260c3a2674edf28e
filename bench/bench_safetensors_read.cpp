// Benchmark: loading every tensor of a >= 1 GiB safetensors file into one host buffer, against a plain sequential read
// of the same file.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tensoracle/safetensors.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Plain sequential read() of the whole file in 16 MiB chunks: the ceiling for any loader.
double sequential_read(const std::string& path, std::byte* destination, std::size_t size) {
  auto start = Clock::now();
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("open failed");
  std::size_t done = 0;
  while (done < size) {
    ssize_t got = ::read(fd, destination + done, std::min<std::size_t>(16 << 20, size - done));
    if (got <= 0) break;
    done += static_cast<std::size_t>(got);
  }
  ::close(fd);
  return seconds_since(start);
}

// tensoracle: open (map + validate) and copy every tensor into its place in one buffer.
double tensoracle_read(const std::string& path, std::byte* destination) {
  auto start = Clock::now();
  auto file = tensoracle::SafetensorsFile::open(path);
  std::size_t offset = 0;
  for (const auto& info : file->tensors()) {
    file->read(info, destination + offset);
    offset += info.byte_size();
  }
  return seconds_since(start);
}

// For information: copying through the zero-copy views (page faults on the mapping).
double mapped_copy(const std::string& path, std::byte* destination) {
  auto start = Clock::now();
  auto file = tensoracle::SafetensorsFile::open(path);
  std::size_t offset = 0;
  for (const auto& info : file->tensors()) {
    auto view = file->view(info);
    std::memcpy(destination + offset, view.data, info.byte_size());
    offset += info.byte_size();
  }
  return seconds_since(start);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path directory = argc > 1 ? argv[1] : std::filesystem::temp_directory_path();
  const int repeats = argc > 2 ? std::stoi(argv[2]) : 7;
  const std::string path = (directory / "tensoracle_bench_read.safetensors").string();

  // 1 GiB + a little: about 60 tensors of mixed sizes and dtypes, like a real checkpoint.
  std::vector<tensoracle::TensorToWrite> tensors;
  std::vector<std::byte> source;
  {
    const std::size_t total = (std::size_t{1} << 30) + (std::size_t{3} << 20);
    source.resize(total);
    for (std::size_t i = 0; i < total; i += 4096) source[i] = static_cast<std::byte>(i >> 12);
    std::size_t offset = 0;
    for (int i = 0; offset < total; ++i) {
      const bool half = i % 3 == 0;
      const std::size_t elem = half ? 2 : 4;
      std::size_t elements = std::min<std::size_t>((std::size_t{1} << 20) * (1 + i % 9), (total - offset) / elem);
      if (elements == 0) break;
      tensors.push_back({fmt::format("layers.{}.weight", i),
                         half ? tensoracle::DataType::kBF16 : tensoracle::DataType::kF32,
                         tensoracle::Dims{static_cast<std::int64_t>(elements)}, source.data() + offset});
      offset += elements * elem;
    }
    tensoracle::write_safetensors(path, tensors);
  }
  source.clear();
  source.shrink_to_fit();

  const std::size_t file_size = std::filesystem::file_size(path);
  std::vector<std::byte> destination(file_size);
  std::memset(destination.data(), 1, destination.size());  // fault the buffer in before timing

  // Warm the page cache so both loaders read from memory, not from the disk.
  sequential_read(path, destination.data(), file_size);
  std::vector<double> seq, ours, mapped;
  for (int r = 0; r < repeats; ++r) {
    seq.push_back(sequential_read(path, destination.data(), file_size));
    ours.push_back(tensoracle_read(path, destination.data()));
    mapped.push_back(mapped_copy(path, destination.data()));
  }
  const double gb = static_cast<double>(file_size) / 1e9;
  const double seq_gbs = gb / median(seq), ours_gbs = gb / median(ours), mapped_gbs = gb / median(mapped);
  std::printf(
      "{\"benchmark\": \"safetensors_read\", \"file_bytes\": %zu, \"tensors\": %zu, \"repeats\": %d,\n"
      " \"sequential_read_gb_s\": %.2f, \"tensoracle_read_gb_s\": %.2f, \"mapped_view_copy_gb_s\": %.2f,\n"
      " \"ratio_tensoracle_to_sequential\": %.3f}\n",
      file_size, tensors.size(), repeats, seq_gbs, ours_gbs, mapped_gbs, ours_gbs / seq_gbs);
  std::filesystem::remove(path);
  return 0;
}
