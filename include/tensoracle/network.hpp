// Network: the model package's C++ API for defining a network (inputs, weight constants, layers, outputs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {

namespace graph {
struct Graph;
struct NetworkAccess;
}  // namespace graph

// A network that is invalid: the message names the layer and the tensor and says what is wrong.
class GraphError : public Error {
 public:
  using Error::Error;
};

// A handle to a tensor of one Network (an input, a constant or a layer output). Cheap to copy;
// valid only with the Network that made it.
struct Tensor {
  std::int32_t id = -1;
  bool valid() const noexcept { return id >= 0; }
  friend bool operator==(Tensor a, Tensor b) noexcept { return a.id == b.id; }
  friend bool operator!=(Tensor a, Tensor b) noexcept { return a.id != b.id; }
};

// One attribute value of a layer. Booleans are stored as 0/1 integers.
using AttrValue = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>, std::vector<double>>;
using Attributes = std::map<std::string, AttrValue>;

// A typed parameter of a plugin layer (an integer, a float, a string, or a list of integers or floats). A plugin
// receives its layer's fields in the order they were given.
struct PluginField {
  std::string name;  // letters, digits, '_', '.' and '-'
  AttrValue value;
};

enum class GeluApproximation { kNone, kTanh };
enum class PoolType { kMax, kAverage };
enum class ResizeMode { kNearest, kBilinear };
enum class PadMode { kConstant, kReflect, kEdge };

// Options of layers with several parameters; the defaults are PyTorch's.
struct ConvOptions {
  std::vector<std::int64_t> stride;    // per spatial dim; empty = all 1
  std::vector<std::int64_t> padding;   // symmetric, per spatial dim; empty = all 0
  std::vector<std::int64_t> dilation;  // empty = all 1
  std::int64_t groups = 1;
  std::vector<std::int64_t> output_padding;  // transposed convolution only; empty = all 0
};

struct PoolOptions {
  std::vector<std::int64_t> kernel;   // [kh, kw]
  std::vector<std::int64_t> stride;   // empty = kernel
  std::vector<std::int64_t> padding;  // empty = 0
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
};

struct AttentionOptions {
  bool causal = false;          // mask[i][j] = j <= i (top-left aligned, as torch's is_causal)
  std::optional<double> scale;  // default 1/sqrt(head dim)
};

struct RotaryOptions {
  double base = 10000.0;        // theta
  std::int64_t rotary_dim = 0;  // leading dims of the head that rotate; 0 = all
  bool interleaved = false;     // false: rotate halves (Llama/NeoX); true: rotate pairs (GPT-J)
  std::int64_t position_offset = 0;
};

// A network under construction. Every layer is checked and its outputs' dtypes and shapes are
// inferred when it is added: an invalid layer throws GraphError and leaves the network as it was.
// Dynamic dimensions (-1) of inputs propagate as expressions of the input dimensions.
//
// Ownership: constants refer to weight views without copying; the network keeps each view (and
// so its file mapping) alive. Not thread-safe while being built; a finished network may be read
// from several threads.
class Network {
 public:
  Network();
  ~Network();
  Network(Network&&) noexcept;
  Network& operator=(Network&&) noexcept;
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  // ---- tensors ----
  // A named input; -1 marks a dynamic dimension.
  Tensor add_input(const std::string& name, DataType dtype, const Dims& dims);
  // A constant whose bytes are a weight (zero-copy). The tensor is named after the weight unless
  // `name` is given. `file` is recorded for the JSON form (defaults to the view's file path).
  Tensor add_constant(const TensorView& weight, const std::string& name = {});
  // A constant whose bytes the network copies and keeps, for weights made in memory rather than read
  // from a file: `data` holds dims.volume() elements of `dtype` (little-endian, as in safetensors), and
  // may be freed once this returns. Named `name`, else const_N. Its JSON form names no file, so a
  // network read back from JSON needs the weight from a WeightStore under the same name.
  Tensor add_constant_copy(DataType dtype, const Dims& dims, const void* data, const std::string& name = {});
  // A small constant held by value (scalars, short vectors: at most 4096 elements), stored inline
  // in the JSON form.
  Tensor add_scalar(double value, DataType dtype, const std::string& name = {});
  Tensor add_small_constant(const std::vector<double>& values, DataType dtype, const Dims& dims,
                            const std::string& name = {});
  // Marks a tensor as a network output under `name` (the tensor is renamed).
  void mark_output(Tensor tensor, const std::string& name);
  // Gives a layer output another name (unique in the network). Throws GraphError for inputs,
  // constants and names already taken.
  void rename_tensor(Tensor tensor, const std::string& name);

  // ---- generic layer: what the JSON form and every typed method below use ----
  // `op` is an op name (docs/network-json.md lists them with their inputs and attributes);
  // an absent optional input is Tensor{}. `name` defaults to "<op>_<n>".
  std::vector<Tensor> add_layer(const std::string& op, const std::vector<Tensor>& inputs, const Attributes& attrs = {},
                                const std::string& name = {});

  // ---- matrix products ----
  Tensor add_matmul(Tensor a, Tensor b, bool transpose_a = false, bool transpose_b = false);
  // x [..., in] · weight[out, in]ᵀ + bias[out]
  Tensor add_linear(Tensor x, Tensor weight, Tensor bias = {});

  // ---- convolution and pooling (NCW / NCHW) ----
  Tensor add_convolution(Tensor x, Tensor weight, Tensor bias = {}, const ConvOptions& options = {});
  Tensor add_conv_transpose2d(Tensor x, Tensor weight, Tensor bias = {}, const ConvOptions& options = {});
  Tensor add_pool2d(Tensor x, PoolType type, const PoolOptions& options);
  Tensor add_global_average_pool(Tensor x);
  // Output size [h, w]; align_corners applies to bilinear.
  Tensor add_resize(Tensor x, ResizeMode mode, const std::vector<std::int64_t>& size, bool align_corners = false);

  // ---- elementwise ----
  // op: add, sub, mul, div, pow, max, min, equal, less, greater (NumPy broadcasting).
  Tensor add_binary(const std::string& op, Tensor a, Tensor b);
  Tensor add_where(Tensor condition, Tensor a, Tensor b);
  // op: abs, neg, exp, log, sqrt, rsqrt, reciprocal, sin, cos, tanh, erf, floor, ceil, not.
  Tensor add_unary(const std::string& op, Tensor x);
  // op: relu, leaky_relu, gelu, silu, sigmoid, hard_sigmoid, hard_swish, softplus, clip.
  // Attributes: leaky_relu {alpha}, gelu {approximate: "none"|"tanh"}, softplus {beta, threshold},
  // clip {min, max}.
  Tensor add_activation(const std::string& op, Tensor x, const Attributes& attrs = {});
  Tensor add_cast(Tensor x, DataType to);

  // ---- normalization and softmax ----
  Tensor add_softmax(Tensor x, std::int64_t axis, bool log = false);
  // Normalizes over the last `normalized_rank` dims.
  Tensor add_layer_norm(Tensor x, Tensor weight, Tensor bias, double epsilon = 1e-5, std::int64_t normalized_rank = 1);
  Tensor add_rms_norm(Tensor x, Tensor weight, double epsilon = 1e-6, std::int64_t normalized_rank = 1);
  Tensor add_batch_norm(Tensor x, Tensor mean, Tensor var, Tensor weight, Tensor bias, double epsilon = 1e-5);
  Tensor add_group_norm(Tensor x, std::int64_t num_groups, Tensor weight, Tensor bias, double epsilon = 1e-5);
  Tensor add_instance_norm(Tensor x, Tensor weight, Tensor bias, double epsilon = 1e-5);

  // ---- reductions ----
  // op: sum, mean, max, min, prod.
  Tensor add_reduce(const std::string& op, Tensor x, const std::vector<std::int64_t>& axes, bool keep_dims);
  Tensor add_arg_reduce(bool max, Tensor x, std::int64_t axis, bool keep_dims);  // i64 indices
  // Returns {values, indices (i64)}.
  std::pair<Tensor, Tensor> add_top_k(Tensor x, std::int64_t k, std::int64_t axis = -1, bool largest = true);

  // ---- data movement ----
  Tensor add_reshape(Tensor x, const std::vector<std::int64_t>& shape);  // 0 copies, -1 infers
  Tensor add_transpose(Tensor x, const std::vector<std::int64_t>& perm);
  Tensor add_slice(Tensor x, const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& ends,
                   const std::vector<std::int64_t>& axes, const std::vector<std::int64_t>& steps = {});
  Tensor add_concat(const std::vector<Tensor>& xs, std::int64_t axis);
  std::vector<Tensor> add_split(Tensor x, const std::vector<std::int64_t>& sizes, std::int64_t axis);
  Tensor add_gather(Tensor data, Tensor indices, std::int64_t axis = 0);
  Tensor add_squeeze(Tensor x, const std::vector<std::int64_t>& axes);
  Tensor add_unsqueeze(Tensor x, const std::vector<std::int64_t>& axes);
  Tensor add_expand(Tensor x, const std::vector<std::int64_t>& shape);
  // pads: [begin_0 .. begin_{r-1}, end_0 .. end_{r-1}]
  Tensor add_pad(Tensor x, const std::vector<std::int64_t>& pads, PadMode mode = PadMode::kConstant,
                 double value = 0.0);

  // ---- transformer ----
  // q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv]; Hq % Hkv == 0 (grouped/multi-query).
  // mask: bool (true = attend) or additive float, broadcastable to [B, Hq, Sq, Skv].
  Tensor add_attention(Tensor q, Tensor k, Tensor v, Tensor mask = {}, const AttentionOptions& options = {});
  // x [B, H, S, D] with positions along S.
  Tensor add_rotary_embedding(Tensor x, const RotaryOptions& options = {});

  // ---- quantization (symmetric: zero point 0) ----
  // scale: f32 scalar (per tensor) or [C] along `axis` (per channel). to: i8 or f8e4m3.
  Tensor add_quantize(Tensor x, Tensor scale, DataType to, std::int64_t axis = 0);
  Tensor add_dequantize(Tensor x, Tensor scale, DataType to = DataType::kF32, std::int64_t axis = 0);

  // ---- plugin layers (docs/plugins.md) ----
  // A layer computed by the plugin `type` of `version`, which a loaded plugin library must provide
  // (load_plugin_library, plugin_registry.hpp): its creator gives the output count, dtypes and shapes. Fields are
  // recorded in the network and the engine (op "plugin", attributes type, version, field_names and f:NAME in the JSON
  // form).
  std::vector<Tensor> add_plugin(const std::string& type, const std::string& version, const std::vector<Tensor>& inputs,
                                 const std::vector<PluginField>& fields = {}, const std::string& name = {});

  // ---- queries ----
  std::string name(Tensor t) const;
  DataType dtype(Tensor t) const;
  // Static view of the shape: -1 where a dimension depends on dynamic input dimensions.
  Dims shape(Tensor t) const;
  // The expression of one dimension, e.g. "x.0 * 12" (for messages and tests).
  std::string dim_expression(Tensor t, int axis) const;
  Tensor find(const std::string& tensor_name) const;  // invalid Tensor when absent
  std::vector<Tensor> inputs() const;
  std::vector<Tensor> outputs() const;
  std::size_t num_layers() const;

  // Whole-network checks that can only be made once it is complete (at least one output, every
  // input used, output names unique). Throws GraphError.
  void verify() const;

  // Concrete shapes of every tensor for the given input shapes (all inputs must be given, each
  // matching its declared static dimensions). Throws GraphError naming the layer on a mismatch.
  std::map<std::string, Dims> infer_shapes(const std::map<std::string, Dims>& input_shapes) const;

  // ---- JSON form (docs/network-json.md) ----
  // Weight constants are written as references {weight, file}; weight bytes are never written.
  std::string to_json() const;
  // Rebuilds a network; weight references are resolved in `weights`. Paths of weight files are
  // compared as given. Throws GraphError (invalid network) or NotFoundError (missing weight).
  static Network from_json(std::string_view json, const WeightStore& weights);
  // Rebuilds a network whose weight references are resolved by a callback: given the weight name
  // and the recorded file, it returns the tensor, or nullopt when there is none (NotFoundError).
  using WeightResolver = std::function<std::optional<TensorView>(const std::string& weight, const std::string& file)>;
  static Network from_json(std::string_view json, const WeightResolver& resolve_weight);
  static Network from_json_file(const std::filesystem::path& path, const WeightStore& weights);
  // Opens the weight files the JSON names (relative paths are relative to the JSON file's folder).
  static Network from_json_file(const std::filesystem::path& path);

 private:
  friend struct graph::NetworkAccess;  // the library's own access to the graph (src/graph/graph.hpp)
  std::unique_ptr<graph::Graph> graph_;
};

}  // namespace tensoracle
