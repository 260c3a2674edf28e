// cuDNN backend-API plans for a forward convolution with its fused epilogue: the operation graph
// conv → (· scale) → (+ bias) → (+ residual, or / s + quantized residual · s) → (relu) → (/ output scale), heuristics
// mode A, the first usable engine
// configuration finalized once, when the step is prepared. The legacy cudnnConvolution*Forward calls rebuild that plan
// inside cuDNN on every call (hundreds of microseconds of host time per launch on cuDNN 9); here a launch costs one
// cudnnBackendExecute (and, when its pointers differ from the last launch's, a new variant pack).
#include "backends/cuda/kernels/cudnn_conv_graph.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace tensoracle::cuda {
namespace {

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) { status_ = cudnnBackendCreateDescriptor(type, &d_); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc(Desc&& other) noexcept : d_(std::exchange(other.d_, nullptr)), status_(other.status_) {}
  ~Desc() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t release() { return std::exchange(d_, nullptr); }
  cudnnStatus_t status() const { return status_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
};

// Keeps the first failing status of a descriptor chain (the backend API reports an unsupported graph from any call).
struct Builder {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;

  bool ok() const { return status == CUDNN_STATUS_SUCCESS; }
  void note(cudnnStatus_t s) {
    if (ok()) status = s;
  }
  template <typename T>
  void set(const Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values,
           std::int64_t count) {
    if (ok()) note(cudnnBackendSetAttribute(d.get(), name, type, count, values));
  }
  template <typename T>
  void set(const Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T& value) {
    set(d, name, type, &value, 1);
  }
  void set_desc(const Desc& d, cudnnBackendAttributeName_t name, const Desc& value) {
    cudnnBackendDescriptor_t v = value.get();
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, v);
  }
  Desc make(cudnnBackendDescriptorType_t type) {
    Desc d(type);
    note(d.status());
    return d;
  }
  void finalize(const Desc& d) {
    if (ok()) note(cudnnBackendFinalize(d.get()));
  }
};

enum Uid : std::int64_t {
  kX = 1,
  kW,
  kBias,
  kResidual,
  kY,
  kConvOut,
  kBiasOut,
  kResidualOut,
  kScale,
  kScaleOut,
  kOutputScale,
  kReluOut,
  kResidualScale,
  kUnscaledOut,
  kRescaledOut
};

Desc tensor(Builder& b, std::int64_t uid, cudnnDataType_t type, const std::array<std::int64_t, 4>& dims, bool nhwc,
            bool is_virtual, std::int64_t alignment) {
  // dims [N, C, H, W]; strides of NCHW or of NHWC.
  const std::int64_t c = dims[1], h = dims[2], w = dims[3];
  const std::array<std::int64_t, 4> strides =
      nhwc ? std::array<std::int64_t, 4>{h * w * c, 1, w * c, c} : std::array<std::int64_t, 4>{c * h * w, h * w, w, 1};
  Desc d = b.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  b.set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type);
  b.set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4);
  b.set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4);
  b.set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid);
  b.set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, alignment);
  const bool virt = is_virtual;
  b.set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, virt);
  b.finalize(d);
  return d;
}

Desc pointwise_op(Builder& b, cudnnPointwiseMode_t mode, const Desc& x, const Desc* operand, const Desc& y) {
  Desc pw = b.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  b.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode);
  const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
  b.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, precision);
  b.finalize(pw);
  Desc op = b.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (operand != nullptr) b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *operand);
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  b.finalize(op);
  return op;
}

bool has_note(const Desc& engine, cudnnBackendNumericalNote_t wanted) {
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  std::int64_t count = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<std::int64_t>(notes.size()), &count, notes.data()) != CUDNN_STATUS_SUCCESS) {
    return true;  // unknown notes: treat the engine as unusable
  }
  for (std::int64_t i = 0; i < count && i < static_cast<std::int64_t>(notes.size()); ++i) {
    if (notes[static_cast<std::size_t>(i)] == wanted) return true;
  }
  return false;
}

}  // namespace

ConvGraphPlan::~ConvGraphPlan() {
  if (variant_pack_ != nullptr) cudnnBackendDestroyDescriptor(variant_pack_);
}

std::unique_ptr<ConvGraphPlan> ConvGraphPlan::running(std::shared_ptr<void> plan, const ConvGraphProblem& p,
                                                      std::size_t workspace) {
  std::unique_ptr<ConvGraphPlan> result(new ConvGraphPlan);
  result->plan_ = std::move(plan);
  result->scale_ = p.scale;
  result->bias_ = p.bias;
  result->residual_ = p.residual;
  result->output_scale_ = p.output_scale;
  result->residual_scale_ = p.residual && p.residual_scale;
  result->workspace_ = workspace;
  return result;
}

std::vector<std::unique_ptr<ConvGraphPlan>> ConvGraphPlan::build_all(cudnnHandle_t handle, const ConvGraphProblem& p,
                                                                     std::size_t workspace_limit, std::size_t max_plans,
                                                                     std::size_t skip) {
  std::vector<std::unique_ptr<ConvGraphPlan>> plans;
  Builder b;
  const bool epilogue = p.scale || p.bias || p.residual || p.relu || p.output_scale;
  const std::array<std::int64_t, 4> y_dims = {p.n, p.o, p.oh, p.ow};
  const std::array<std::int64_t, 4> channel_dims = {1, p.o, 1, 1};
  Desc x = tensor(b, kX, p.input_type, {p.n, p.c, p.h, p.w}, p.nhwc, false, p.alignment);
  Desc w = tensor(b, kW, p.input_type, {p.o, p.c / p.groups, p.kh, p.kw}, p.nhwc, false, p.alignment);
  Desc y = tensor(b, kY, p.output_type, y_dims, p.nhwc, false, p.alignment);
  // The convolution's result: y itself, or an f32 intermediate that the epilogue reads.
  Desc conv_out = epilogue ? tensor(b, kConvOut, CUDNN_DATA_FLOAT, y_dims, p.nhwc, true, p.alignment) : Desc{};
  const Desc& conv_y = epilogue ? conv_out : y;

  Desc conv = b.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const std::int64_t spatial = 2;
  const std::array<std::int64_t, 2> dilations = {p.dh, p.dw}, strides = {p.sh, p.sw}, pads = {p.ph, p.pw};
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  b.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, p.compute);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, mode);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, spatial);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilations.data(), 2);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, strides.data(), 2);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pads.data(), 2);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pads.data(), 2);
  b.finalize(conv);

  std::vector<Desc> ops;
  {
    Desc op = b.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    const float alpha = 1.0F, beta = 0.0F;
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, conv_y);
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
    b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, alpha);
    b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, beta);
    b.finalize(op);
    ops.push_back(std::move(op));
  }
  // The epilogue chain: each step reads the previous result (f32, virtual); the last one writes y.
  struct Step {
    cudnnPointwiseMode_t mode;
    std::int64_t operand_uid;  // 0: none
    cudnnDataType_t operand_type;
    std::array<std::int64_t, 4> operand_dims;
    std::int64_t out_uid;
  };
  std::vector<Step> steps;
  if (p.scale) steps.push_back({CUDNN_POINTWISE_MUL, kScale, CUDNN_DATA_FLOAT, channel_dims, kScaleOut});
  if (p.bias) steps.push_back({CUDNN_POINTWISE_ADD, kBias, p.type, channel_dims, kBiasOut});
  if (p.residual && p.residual_scale) {
    // v + residual · s as (v / s + residual) · s: a chain whose every step reads the previous result and one graph
    // input (the form cuDNN's runtime fusion takes), equal up to f32 rounding.
    const std::array<std::int64_t, 4> scalar = {1, 1, 1, 1};
    steps.push_back({CUDNN_POINTWISE_DIV, kResidualScale, CUDNN_DATA_FLOAT, scalar, kUnscaledOut});
    steps.push_back({CUDNN_POINTWISE_ADD, kResidual, p.residual_type, y_dims, kResidualOut});
    steps.push_back({CUDNN_POINTWISE_MUL, kResidualScale, CUDNN_DATA_FLOAT, scalar, kRescaledOut});
  } else if (p.residual) {
    steps.push_back({CUDNN_POINTWISE_ADD, kResidual, p.type, y_dims, kResidualOut});
  }
  if (p.relu) steps.push_back({CUDNN_POINTWISE_RELU_FWD, 0, CUDNN_DATA_FLOAT, {}, kReluOut});
  if (p.output_scale) {
    steps.push_back({CUDNN_POINTWISE_DIV, kOutputScale, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, kY});
  }
  std::vector<Desc> keep;  // tensors the chain refers to
  keep.reserve(2 * steps.size());
  std::vector<std::pair<std::int64_t, const Desc*>> operands;  // uid -> its descriptor (one per graph input)
  const Desc* current = &conv_out;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    const Desc* operand = nullptr;
    for (const auto& [uid, desc] : operands) {
      if (uid == step.operand_uid) operand = desc;
    }
    if (step.operand_uid != 0 && operand == nullptr) {
      keep.push_back(tensor(b, step.operand_uid, step.operand_type, step.operand_dims, p.nhwc, false, p.alignment));
      operand = &keep.back();
      operands.emplace_back(step.operand_uid, operand);
    }
    const bool last = i + 1 == steps.size();
    if (!last) keep.push_back(tensor(b, step.out_uid, CUDNN_DATA_FLOAT, y_dims, p.nhwc, true, p.alignment));
    const Desc& out = last ? y : keep.back();
    ops.push_back(pointwise_op(b, step.mode, *current, operand, out));
    current = &out;
  }

  Desc graph = b.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> op_list;
  for (const Desc& op : ops) op_list.push_back(op.get());
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle);
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, op_list.data(),
        static_cast<std::int64_t>(op_list.size()));
  b.finalize(graph);

  Desc heuristics = b.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
  b.set_desc(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  b.set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, heur_mode);
  b.finalize(heuristics);
  std::int64_t count = 0;
  if (b.ok()) {
    b.note(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                    &count, nullptr));
  }
  if (!b.ok()) return plans;
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.push_back(b.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back().get());
  }
  std::int64_t returned = 0;
  if (b.ok() && count > 0) {
    b.note(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                    count, &returned, raw.data()));
  }
  if (!b.ok()) return plans;
  for (std::int64_t i = 0; i < returned && i < count && plans.size() < max_plans; ++i) {
    const Desc& config = configs[static_cast<std::size_t>(i)];
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    std::int64_t got = 0;
    cudnnBackendDescriptor_t engine_raw = engine.get();
    if (engine.status() != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                 &engine_raw) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    if (has_note(engine, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) || has_note(engine, CUDNN_NUMERICAL_NOTE_FFT)) continue;
    if (skip > 0) {  // not finalized: finalizing a runtime-fusion plan compiles its kernel (tenths of a second)
      --skip;
      continue;
    }
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendDescriptor_t config_raw = config.get();
    if (plan.status() != CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &config_raw) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    std::int64_t workspace = 0;
    if (cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                 &workspace) != CUDNN_STATUS_SUCCESS ||
        workspace < 0 || static_cast<std::size_t>(workspace) > workspace_limit) {
      continue;
    }
    plans.push_back(running(
        std::shared_ptr<void>(plan.release(),
                              [](void* d) { cudnnBackendDestroyDescriptor(static_cast<cudnnBackendDescriptor_t>(d)); }),
        p, static_cast<std::size_t>(workspace)));
  }
  return plans;
}

std::unique_ptr<ConvGraphPlan> ConvGraphPlan::build(cudnnHandle_t handle, const ConvGraphProblem& p,
                                                    std::size_t workspace_limit) {
  std::vector<std::unique_ptr<ConvGraphPlan>> plans = build_all(handle, p, workspace_limit, 1);
  return plans.empty() ? nullptr : std::move(plans.front());
}

namespace {

// What build_shared's plans are keyed by: the handle, every field of the problem, the scratch limit and the index.
std::vector<std::int64_t> shared_plan_key(cudnnHandle_t handle, const ConvGraphProblem& p, std::size_t limit,
                                          std::size_t index) {
  return {static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(handle)),
          p.n,
          p.c,
          p.h,
          p.w,
          p.o,
          p.kh,
          p.kw,
          p.oh,
          p.ow,
          p.sh,
          p.sw,
          p.ph,
          p.pw,
          p.dh,
          p.dw,
          p.groups,
          p.input_type,
          p.type,
          p.output_type,
          p.compute,
          p.nhwc,
          p.scale,
          p.bias,
          p.residual,
          p.relu,
          p.output_scale,
          p.residual_scale,
          p.residual_type,
          p.alignment,
          static_cast<std::int64_t>(limit),
          static_cast<std::int64_t>(index)};
}

// A live plan of build_shared: its finalized execution plan (expired once every ConvGraphPlan sharing it is gone, so
// an entry never outlives its handle's states) and its scratch.
struct SharedPlan {
  std::weak_ptr<void> plan;
  std::size_t workspace = 0;
};

}  // namespace

std::unique_ptr<ConvGraphPlan> ConvGraphPlan::build_shared(cudnnHandle_t handle, const ConvGraphProblem& p,
                                                           std::size_t workspace_limit, std::size_t plan_index) {
  static std::mutex mutex;
  static std::map<std::vector<std::int64_t>, SharedPlan> live;
  const std::vector<std::int64_t> key = shared_plan_key(handle, p, workspace_limit, plan_index);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = live.find(key);
    if (it != live.end()) {
      if (std::shared_ptr<void> plan = it->second.plan.lock()) return running(std::move(plan), p, it->second.workspace);
    }
  }
  // Built outside the lock (finalizing a runtime-fusion plan compiles a kernel): two threads on two handles never
  // share a key, and one handle is used by one thread at a time.
  std::unique_ptr<ConvGraphPlan> result;
  if (plan_index > 0) {
    std::vector<std::unique_ptr<ConvGraphPlan>> plans = build_all(handle, p, workspace_limit, 1, plan_index);
    if (!plans.empty()) result = std::move(plans.front());
  }
  if (result == nullptr) result = build(handle, p, workspace_limit);
  if (result != nullptr) {
    const std::lock_guard<std::mutex> lock(mutex);
    std::erase_if(live, [](const auto& entry) { return entry.second.plan.expired(); });
    live[key] = SharedPlan{result->plan_, result->workspace_};
  }
  return result;
}

cudnnStatus_t ConvGraphPlan::execute(cudnnHandle_t handle, const void* x, const void* w, const void* scale,
                                     const void* bias, const void* residual, const void* output_scale,
                                     const void* residual_scale, void* y, void* workspace) const {
  const std::array<const void*, 9> pointers = {x, w, scale, bias, residual, output_scale, residual_scale, y, workspace};
  if (variant_pack_ == nullptr || pointers != bound_) {
    if (variant_pack_ != nullptr) {
      cudnnBackendDestroyDescriptor(variant_pack_);
      variant_pack_ = nullptr;
    }
    std::array<std::int64_t, 8> uids = {kX, kW, kY};
    std::array<void*, 8> data = {const_cast<void*>(x), const_cast<void*>(w), y};
    std::size_t count = 3;
    if (scale_) {
      uids[count] = kScale;
      data[count++] = const_cast<void*>(scale);
    }
    if (bias_) {
      uids[count] = kBias;
      data[count++] = const_cast<void*>(bias);
    }
    if (residual_) {
      uids[count] = kResidual;
      data[count++] = const_cast<void*>(residual);
    }
    if (output_scale_) {
      uids[count] = kOutputScale;
      data[count++] = const_cast<void*>(output_scale);
    }
    if (residual_scale_) {
      uids[count] = kResidualScale;
      data[count++] = const_cast<void*>(residual_scale);
    }
    Builder b;
    Desc pack = b.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    b.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), static_cast<std::int64_t>(count));
    b.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, data.data(),
          static_cast<std::int64_t>(count));
    b.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace);
    b.finalize(pack);
    if (!b.ok()) return b.status;
    variant_pack_ = pack.release();
    bound_ = pointers;
  }
  return cudnnBackendExecute(handle, static_cast<cudnnBackendDescriptor_t>(plan_.get()), variant_pack_);
}

}  // namespace tensoracle::cuda
