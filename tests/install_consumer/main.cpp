// Consumer of the installed package: writes and reads a safetensors file through the public C++17 API.
#include <cstdio>
#include <vector>

#include <tensoracle/tensoracle.hpp>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::vector<float> values{1.0f, 2.0f, 3.0f, 4.0f};
  tensoracle::write_safetensors(argv[1], {{"w", tensoracle::DataType::kF32, tensoracle::Dims{2, 2}, values.data()}},
                                std::map<std::string, std::string>{{"producer", "consumer"}});
  auto store = tensoracle::WeightStore::open({argv[1]});
  auto w = store.get("w");
  float read_back[4];
  w.file->read(*w.info, read_back);
  if (w.shape() != tensoracle::Dims{2, 2} || read_back[3] != 4.0f) return 1;
  std::printf("consumer OK: tensoracle %s, w %s\n", TENSORACLE_VERSION_STRING, w.shape().to_string().c_str());
  return 0;
}
