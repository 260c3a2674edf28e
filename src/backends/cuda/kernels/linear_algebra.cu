// CUDA kernels of the linear_algebra family: matmul (broadcast batches) and linear (x · Wᵀ + b) through cuBLASLt.
#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/cublaslt_library.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/cutlass_gemm_sm90.hpp"

namespace tensoracle::cuda {
namespace {

using namespace kernels;  // NOLINT(google-build-using-namespace): the shared helpers of this backend's kernels

// cuBLASLt's scratch: what Hopper's heuristics ask for at most.
constexpr std::size_t kGemmWorkspaceBytes = std::size_t{32} << 20;

// A row-major product C[m, n] = op(A) · op(B) (+ bias[n]) (+ C), A [m, k] ([k, m] when trans_a), B [k, n] ([n, k]
// when trans_b), `batch` of them `stride_*` elements apart, for every pointer triple of `calls`.
struct Gemm {
  DataType dtype = DataType::kF32;
  bool trans_a = false;
  bool trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  const void* bias = nullptr;  // bias epilogue: bias[n] added to every row of C
  bool accumulate = false;     // beta = 1: C already holds values to add (or, with a residual, reads them there)
  int activation = 0;          // cuBLASLt's epilogue after the bias: 0 none, 1 relu, 2 gelu (tanh approximation)
};

cudaDataType_t cuda_type(DataType dtype) {
  switch (dtype) {
    case DataType::kF64: return CUDA_R_64F;
    case DataType::kF16: return CUDA_R_16F;
    case DataType::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// The largest power of two (up to 256) dividing a byte count.
std::uint32_t value_alignment(std::uint64_t v) {
  std::uint32_t a = 1;
  while (a < 256 && v % (a * 2U) == 0) a *= 2;
  return a;
}

// Descriptors of one cuBLASLt call, destroyed however the launch ends.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (op == nullptr && a == nullptr && b == nullptr && c == nullptr && preference == nullptr) return;
    const CublasLtLibrary& lt = cublaslt_library();  // opened: it made them
    if (preference != nullptr) lt.cublasLtMatmulPreferenceDestroy(preference);
    if (c != nullptr) lt.cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) lt.cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) lt.cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) lt.cublasLtMatmulDescDestroy(op);
  }
};

template <typename V>
void set_layout_batch(const std::string& context, cublasLtMatrixLayout_t layout, V count, std::int64_t stride) {
  const auto batch = static_cast<std::int32_t>(count);
  const CublasLtLibrary& lt = cublaslt_library();
  TENSORACLE_CUBLAS_CHECK(
      lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)), context);
  TENSORACLE_CUBLAS_CHECK(
      lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
      context);
}

void set_preference(const std::string& context, cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, std::uint32_t value) {
  TENSORACLE_CUBLAS_CHECK(
      cublaslt_library().cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)), context);
}

// Gemm::activation of linear's "activation" attribute ("gelu_erf", which cuBLASLt has no epilogue for, runs as a kernel
// after the product: 0 here).
int epilogue_activation(const std::string& name) { return name == "relu" ? 1 : name == "gelu_tanh" ? 2 : 0; }

cublasLtEpilogue_t epilogue_of(const Gemm& g) {
  const bool bias = g.bias != nullptr;
  switch (g.activation) {
    case 1: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case 2: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// Descriptors, preference and the heuristic's algorithm of one product for pointers of given alignments.
struct GemmPlan {
  std::unique_ptr<LtDescriptors> desc;
  cublasLtMatmulHeuristicResult_t heuristic{};
  bool found = false;
  std::uint32_t align_a = 256, align_b = 256, align_c = 256, align_r = 256;  // in cuBLASLt's roles (A is our B)
};

// f16/bf16 accumulate in f32; f32 without TF32 unless Precision::kTf32.
cublasComputeType_t compute_type(DataType dtype, Precision precision) {
  if (dtype == DataType::kF64) return CUBLAS_COMPUTE_64F;
  if (dtype == DataType::kF32 && precision == Precision::kTf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

// How many of cuBLASLt's heuristic results the linear entries offer as timed candidates (kernel names
// "..._algo1" to "..._algo7" beside the heuristic's first), and how many of them every product is offered: the others
// only a product with an activation in cuBLASLt's epilogue (supports_gemm_with_epilogue_activation).
constexpr int kLinearAlgorithms = 8;
constexpr int kLinearAlgorithmsForEveryProduct = 4;

// cuBLASLt's heuristic answers for the process, by problem: a step's prepare queries cuBLASLt only for a problem that
// no step asked about before (a query that ranks several algorithms takes milliseconds, and a transformer's layers
// repeat a few products: BERT-base's 24 "_algo1" steps took 134 ms to prepare on the H200 before). The key holds
// everything the query is given, and the device; the answers (algorithm configurations) do not depend on the handle.
class HeuristicMemo {
 public:
  struct Answer {
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    int found = 0;
    std::array<cublasLtMatmulHeuristicResult_t, kLinearAlgorithms> results{};
  };
  static std::optional<Answer> find(const std::string& key) {
    const std::lock_guard<std::mutex> lock(mutex());
    const auto it = answers().find(key);
    if (it == answers().end()) return std::nullopt;
    return it->second;
  }
  static void store(const std::string& key, const Answer& answer) {
    const std::lock_guard<std::mutex> lock(mutex());
    answers().emplace(key, answer);
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<std::string, Answer>& answers() {
    static auto* memo = new std::map<std::string, Answer>;  // kept for the process (no destruction order at exit)
    return *memo;
  }
};

// Descriptors, preference and algorithm `algo` of the heuristic's ranking (its first is 0; the last one it returns when
// it has fewer) of a product, for pointers with these alignments.
GemmPlan make_gemm_plan(cublasLtHandle_t handle, const Gemm& g, cublasComputeType_t compute, std::uint32_t align_a,
                        std::uint32_t align_b, std::uint32_t align_c, std::uint32_t align_r,
                        std::size_t workspace_bytes, const std::string& context, int algo = 0) {
  const cudaDataType_t type = cuda_type(g.dtype);
  const cudaDataType_t scale_type = g.dtype == DataType::kF64 ? CUDA_R_64F : CUDA_R_32F;
  GemmPlan plan;
  plan.align_a = align_a;
  plan.align_b = align_b;
  plan.align_c = align_c;
  plan.align_r = align_r;
  plan.desc = std::make_unique<LtDescriptors>();
  LtDescriptors& d = *plan.desc;
  const CublasLtLibrary& lt = cublaslt_library();
  TENSORACLE_CUBLAS_CHECK(lt.cublasLtMatmulDescCreate(&d.op, compute, scale_type), context);
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
  TENSORACLE_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
                          context);
  TENSORACLE_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
                          context);
  const cublasLtEpilogue_t epilogue = epilogue_of(g);
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    TENSORACLE_CUBLAS_CHECK(
        lt.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), context);
  }
  if (g.bias != nullptr) {
    TENSORACLE_CUBLAS_CHECK(
        lt.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)), context);
  }
  const auto m = static_cast<std::uint64_t>(g.m), n = static_cast<std::uint64_t>(g.n),
             k = static_cast<std::uint64_t>(g.k);
  // Our B: [k, n] row-major is column-major [n, k] with ld n; [n, k] (trans_b) is column-major [k, n] with ld k.
  TENSORACLE_CUBLAS_CHECK(g.trans_b ? lt.cublasLtMatrixLayoutCreate(&d.a, type, k, n, g.k)
                                    : lt.cublasLtMatrixLayoutCreate(&d.a, type, n, k, g.n),
                          context);
  // Our A: [m, k] row-major is column-major [k, m] with ld k; [k, m] (trans_a) is column-major [m, k] with ld m.
  TENSORACLE_CUBLAS_CHECK(g.trans_a ? lt.cublasLtMatrixLayoutCreate(&d.b, type, m, k, g.m)
                                    : lt.cublasLtMatrixLayoutCreate(&d.b, type, k, m, g.k),
                          context);
  TENSORACLE_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(&d.c, type, n, m, g.n), context);
  if (g.batch > 1) {
    set_layout_batch(context, d.a, g.batch, g.stride_b);
    set_layout_batch(context, d.b, g.batch, g.stride_a);
    set_layout_batch(context, d.c, g.batch, g.stride_c);
  }
  TENSORACLE_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceCreate(&d.preference), context);
  const std::uint64_t max_workspace = workspace_bytes;
  TENSORACLE_CUBLAS_CHECK(
      lt.cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                              sizeof(max_workspace)),
      context);
  set_preference(context, d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
  set_preference(context, d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
  set_preference(context, d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, std::min(align_c, align_r));
  set_preference(context, d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c);
  const int wanted = std::clamp(algo + 1, 1, kLinearAlgorithms);
  int device = 0;
  TENSORACLE_CUDA_CHECK(cudaGetDevice(&device), context);
  const std::string key = fmt::format(
      "{} {} {} {} {} {}x{}x{} batch {} strides {} {} {} epilogue {} bias {} alignments {} {} {} {} workspace {} want "
      "{}",
      device, static_cast<int>(compute), static_cast<int>(g.dtype), g.trans_a, g.trans_b, g.m, g.n, g.k, g.batch,
      g.stride_a, g.stride_b, g.stride_c, static_cast<int>(epilogue),
      g.bias != nullptr ? value_alignment(reinterpret_cast<std::uintptr_t>(g.bias)) : 0U, align_a, align_b, align_c,
      align_r, workspace_bytes, wanted);
  std::optional<HeuristicMemo::Answer> answer = HeuristicMemo::find(key);
  if (!answer) {
    HeuristicMemo::Answer asked;
    asked.status = lt.cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, d.preference, wanted,
                                                     asked.results.data(), &asked.found);
    if (asked.status != CUBLAS_STATUS_NOT_SUPPORTED) TENSORACLE_CUBLAS_CHECK(asked.status, context);
    HeuristicMemo::store(key, asked);
    answer = asked;
  }
  plan.found = answer->status == CUBLAS_STATUS_SUCCESS && answer->found > 0;
  if (plan.found) plan.heuristic = answer->results[static_cast<std::size_t>(std::min(wanted, answer->found) - 1)];
  return plan;
}

// One product of a step, as prepared: the problem, and a plan for the alignments its pointers are known to have.
// Constants and arena tensors have fixed addresses; a caller buffer (an engine input or output) is planned at 256-byte
// alignment, with a second plan at its dtype's alignment for an enqueue whose buffers are less aligned (chosen by a
// bit test at launch). `offsets` are the byte offsets of the product's calls from the tensors' base addresses.
struct GemmStep {
  Gemm g;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  std::size_t workspace_bytes = 0;
  bool caller_a = false, caller_b = false, caller_c = false, caller_r = false, caller_bias = false;
  GemmPlan aligned;
  std::optional<GemmPlan> unaligned;
  struct Offsets {
    std::int64_t a, b, c;
  };
  std::vector<Offsets> offsets = {{0, 0, 0}};

  bool found() const { return aligned.found && (!unaligned || unaligned->found); }
};

// The alignment a tensor's address is known to have at prepare: its own for fixed addresses, `caller` for buffers
// bound at each enqueue.
std::uint32_t prepared_alignment(const DeviceTensor& t, std::uint32_t caller) {
  return t.caller_buffer ? caller : value_alignment(reinterpret_cast<std::uintptr_t>(t.data));
}

// A stand-in bias pointer for a plan whose bias is bound at launch: only its alignment matters to the heuristic.
alignas(256) const std::byte kAlignedStandIn[256] = {};

// Plans the product g of a, b into c (C = A·B + r with a residual r) for calls at `offsets` from the tensors' bases;
// `bias` is the bias epilogue's tensor (g.bias is set from it here). The plans may have found no algorithm
// (GemmStep::found): the caller decides what then.
GemmStep prepare_gemm(const StepLaunch& launch, const Gemm& g, std::vector<GemmStep::Offsets> offsets,
                      const DeviceTensor& a, const DeviceTensor& b, const DeviceTensor& c, const DeviceTensor* r,
                      const DeviceTensor* bias, int algo = 0) {
  const std::string& context = layer_name(launch);
  if (launch.handles == nullptr || launch.handles->cublaslt() == nullptr) {
    launch.attrs->fail("no cuBLASLt handle was given to the launch");
  }
  GemmStep step;
  step.g = g;
  step.g.bias = bias == nullptr ? nullptr : bias->caller_buffer ? kAlignedStandIn : bias->data;
  step.compute = compute_type(g.dtype, launch.precision);
  step.workspace_bytes = launch.workspace != nullptr ? std::min(launch.workspace_bytes, kGemmWorkspaceBytes) : 0;
  step.caller_a = a.caller_buffer;
  step.caller_b = b.caller_buffer;
  step.caller_c = c.caller_buffer;
  step.caller_r = r != nullptr && r->caller_buffer;
  step.caller_bias = bias != nullptr && bias->caller_buffer;
  step.offsets = std::move(offsets);
  const std::uint64_t element = element_size(g.dtype);
  auto plan_for = [&](std::uint32_t caller) {
    std::uint32_t align_a = prepared_alignment(b, caller);  // cuBLASLt's A is our B
    std::uint32_t align_b = prepared_alignment(a, caller);
    std::uint32_t align_c = prepared_alignment(c, caller);
    const std::uint32_t align_r = r != nullptr ? prepared_alignment(*r, caller) : 256;
    if (g.batch > 1) {
      align_a = std::min(align_a, value_alignment(static_cast<std::uint64_t>(g.stride_b) * element));
      align_b = std::min(align_b, value_alignment(static_cast<std::uint64_t>(g.stride_a) * element));
      align_c = std::min(align_c, value_alignment(static_cast<std::uint64_t>(g.stride_c) * element));
    }
    for (const auto& o : step.offsets) {  // every call of the step starts at such an offset from the bases
      if (o.b != 0) align_a = std::min(align_a, value_alignment(static_cast<std::uint64_t>(o.b)));
      if (o.a != 0) align_b = std::min(align_b, value_alignment(static_cast<std::uint64_t>(o.a)));
      if (o.c != 0) align_c = std::min(align_c, value_alignment(static_cast<std::uint64_t>(o.c)));
    }
    return make_gemm_plan(launch.handles->cublaslt(), step.g, step.compute, align_a, align_b, align_c, align_r,
                          step.workspace_bytes, context, algo);
  };
  step.aligned = plan_for(256);
  if (step.caller_a || step.caller_b || step.caller_c || step.caller_r)
    step.unaligned = plan_for(static_cast<std::uint32_t>(element));
  return step;
}

[[noreturn]] void throw_no_algorithm(const StepLaunch& launch, const Gemm& g) {
  throw_cublas_error(
      "cublasLtMatmulAlgoGetHeuristic", CUBLAS_STATUS_NOT_SUPPORTED,
      layer_name(launch) + (epilogue_of(g) != CUBLASLT_EPILOGUE_DEFAULT && epilogue_of(g) != CUBLASLT_EPILOGUE_BIAS
                                ? " (no cuBLASLt algorithm with the fused activation epilogue)"
                                : ""));
}

// Enqueues a prepared product on the bound addresses. Row-major matrices are column-major transposes, so cuBLASLt
// computes Cᵀ = op(B)ᵀ · op(A)ᵀ: its "A" is our B and its "B" our A, and Cᵀ [n, m] column-major with ld n is C
// row-major.
void run_gemm(const StepLaunch& launch, const GemmStep& step, const void* a, const void* b, void* c,
              const void* residual, const void* bias, void* workspace) {
  const GemmPlan* plan = &step.aligned;
  if (step.unaligned) {
    auto meets = [](bool caller, const void* p, std::uint32_t need) {
      return !caller || value_alignment(reinterpret_cast<std::uintptr_t>(p)) >= need;
    };
    if (!meets(step.caller_b, b, plan->align_a) || !meets(step.caller_a, a, plan->align_b) ||
        !meets(step.caller_c, c, plan->align_c) || !meets(step.caller_r, residual, plan->align_r))
      plan = &*step.unaligned;
  }
  const LtDescriptors& d = *plan->desc;
  if (step.caller_bias) {
    TENSORACLE_CUBLAS_CHECK(
        cublaslt_library().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
        layer_name(launch));
  }
  const Gemm& g = step.g;
  const float one_f = 1.0F, zero_f = 0.0F;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = g.dtype == DataType::kF64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* beta =
      g.accumulate ? alpha : (f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f));
  const auto* base_a = static_cast<const std::byte*>(a);
  const auto* base_b = static_cast<const std::byte*>(b);
  auto* base_c = static_cast<std::byte*>(c);
  for (const GemmStep::Offsets& o : step.offsets) {
    void* pc = base_c + o.c;
    const void* c_in = residual != nullptr ? residual : pc;
    TENSORACLE_CUBLAS_CHECK(
        cublaslt_library().cublasLtMatmul(launch.handles->cublaslt(), d.op, alpha, base_b + o.b, d.a, base_a + o.a, d.b,
                                          beta, c_in, d.c, pc, d.c, &plan->heuristic.algo, workspace,
                                          step.workspace_bytes, launch.stream),
        layer_name(launch));
  }
}

// ---- bias rows: out[r, j] = bias[j] ----

template <typename W, typename Index>
__global__ void fill_rows_kernel(const W* bias, W* out, Index n, Index features) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) out[i] = bias[i % features];
}

void fill_rows(const StepLaunch& launch, DataType dtype, const void* bias, void* out, std::int64_t rows,
               std::int64_t features) {
  const std::int64_t n = rows * features;
  if (n == 0) return;
  dispatch_element_word(element_size(dtype), [&](auto tag) {
    using W = typename decltype(tag)::type;
    if (fits_index32(n)) {
      launch_kernel(launch, fill_rows_kernel<W, std::int32_t>, grid_for(n), kThreads, 0, static_cast<const W*>(bias),
                    static_cast<W*>(out), static_cast<std::int32_t>(n), static_cast<std::int32_t>(features));
    } else {
      launch_kernel(launch, fill_rows_kernel<W, std::int64_t>, grid_for(n), kThreads, 0, static_cast<const W*>(bias),
                    static_cast<W*>(out), n, features);
    }
  });
}

// ---- erf GELU in place, after a product whose epilogue could not apply it ----

template <typename T>
__global__ void gelu_erf_words_kernel(uint4* data, std::int32_t words) {
  wait_for_preceding_steps();
  constexpr int kPer = static_cast<int>(sizeof(uint4) / sizeof(T));
  for (std::int32_t w = global_thread<std::int32_t>(); w < words; w += grid_threads<std::int32_t>()) {
    uint4 word = data[w];
    T* e = reinterpret_cast<T*>(&word);
#pragma unroll
    for (int k = 0; k < kPer; ++k) store(e, k, math::gelu_erf(load(e, k)));
    data[w] = word;
  }
}

template <typename T, typename Index>
__global__ void gelu_erf_kernel(T* data, Index n) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>())
    store(data, i, math::gelu_erf(load(data, i)));
}

void gelu_erf_in_place(const StepLaunch& launch, DataType dtype, void* data, std::int64_t n) {
  if (n == 0) return;
  const bool handled = dispatch(FloatTypes{}, dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr auto kPer = static_cast<std::int64_t>(sizeof(uint4) / sizeof(T));
    if (n % kPer == 0 && fits_index32(n) && reinterpret_cast<std::uintptr_t>(data) % sizeof(uint4) == 0) {
      launch_kernel(launch, gelu_erf_words_kernel<T>, grid_for(n / kPer), kThreads, 0, static_cast<uint4*>(data),
                    static_cast<std::int32_t>(n / kPer));
    } else if (fits_index32(n)) {
      launch_kernel(launch, gelu_erf_kernel<T, std::int32_t>, grid_for(n), kThreads, 0, static_cast<T*>(data),
                    static_cast<std::int32_t>(n));
    } else {
      launch_kernel(launch, gelu_erf_kernel<T, std::int64_t>, grid_for(n), kThreads, 0, static_cast<T*>(data), n);
    }
  });
  if (!handled) throw CudaError(layer_name(launch) + ": no erf-GELU kernel for this dtype");
}

void zero_fill(const StepLaunch& launch, void* data, std::size_t bytes) {
  if (bytes == 0) return;
  TENSORACLE_CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, launch.stream), layer_name(launch));
}

// ---- matmul ----
// The batch dims broadcast (NumPy). After merging the batch axes that both operands walk contiguously (or both
// broadcast), the innermost merged axis becomes cuBLASLt's strided batch (stride 0 for a broadcast operand) and any
// remaining outer axes are enumerated at prepare, one cuBLASLt call per outer index, so every broadcast pattern works;
// the common ones (equal batch dims, one operand without batch dims) take a single call.

struct MatmulPlan {
  enum class Kind { kEmpty, kZero, kGemm } kind = Kind::kEmpty;
  std::size_t out_bytes = 0;  // kZero: an empty sum
  std::optional<GemmStep> gemm;
};

MatmulPlan prepare_matmul(const StepLaunch& launch) {
  const DeviceTensor& a = launch.inputs.at(0);
  const DeviceTensor& b = launch.inputs.at(1);
  const DeviceTensor& out = launch.outputs.at(0);
  const bool trans_a = launch.attrs->get_bool("transpose_a", false);
  const bool trans_b = launch.attrs->get_bool("transpose_b", false);
  const int rank = out.shape.rank();
  const int ra = a.shape.rank();
  const std::int64_t m = out.shape[rank - 2], n = out.shape[rank - 1];
  const std::int64_t k = trans_a ? a.shape[ra - 2] : a.shape[ra - 1];
  const std::int64_t total = volume(out.shape);
  MatmulPlan plan;
  if (total == 0) return plan;
  const std::size_t element = element_size(out.dtype);
  if (k == 0) {
    plan.kind = MatmulPlan::Kind::kZero;
    plan.out_bytes = static_cast<std::size_t>(total) * element;
    return plan;
  }

  // Batch strides in matrices: 0 where an operand is broadcast.
  const Dims out_batch(std::vector<std::int64_t>(out.shape.begin(), out.shape.end() - 2));
  const Dims a_batch(std::vector<std::int64_t>(a.shape.begin(), a.shape.end() - 2));
  const Dims b_batch(std::vector<std::int64_t>(b.shape.begin(), b.shape.end() - 2));
  const std::vector<std::int64_t> sa = broadcast_strides(a_batch, out_batch);
  const std::vector<std::int64_t> sb = broadcast_strides(b_batch, out_batch);
  const std::vector<std::int64_t> sc = row_major_strides(out_batch);
  std::vector<std::int64_t> dims, ma, mb, mc;  // merged batch axes
  for (std::size_t i = 0; i < sc.size(); ++i) {
    const std::int64_t d = out_batch[static_cast<int>(i)];
    if (d == 1) continue;
    if (!dims.empty() && ma.back() == sa[i] * d && mb.back() == sb[i] * d && mc.back() == sc[i] * d) {
      dims.back() *= d;
      ma.back() = sa[i];
      mb.back() = sb[i];
      mc.back() = sc[i];
      continue;
    }
    dims.push_back(d);
    ma.push_back(sa[i]);
    mb.push_back(sb[i]);
    mc.push_back(sc[i]);
  }

  Gemm g;
  g.dtype = out.dtype;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  const std::int64_t size_a = m * k, size_b = k * n, size_c = m * n;
  const auto e = static_cast<std::int64_t>(element);
  std::vector<GemmStep::Offsets> offsets;
  if (dims.empty()) {
    offsets.push_back({0, 0, 0});
  } else {
    const std::size_t last = dims.size() - 1;
    if (dims[last] > std::numeric_limits<std::int32_t>::max()) launch.attrs->fail("too many matrices in one batch");
    g.batch = dims[last];
    g.stride_a = ma[last] * size_a;
    g.stride_b = mb[last] * size_b;
    g.stride_c = mc[last] * size_c;
    std::int64_t outer = 1;
    for (std::size_t i = 0; i < last; ++i) outer *= dims[i];
    for (std::int64_t o = 0; o < outer; ++o) {
      std::int64_t rest = o, oa = 0, ob = 0, oc = 0;
      for (std::size_t i = last; i-- > 0;) {
        const std::int64_t c = rest % dims[i];
        rest /= dims[i];
        oa += c * ma[i];
        ob += c * mb[i];
        oc += c * mc[i];
      }
      offsets.push_back({oa * size_a * e, ob * size_b * e, oc * size_c * e});
    }
  }
  plan.kind = MatmulPlan::Kind::kGemm;
  plan.gemm = prepare_gemm(launch, g, std::move(offsets), a, b, out, nullptr, nullptr);
  if (!plan.gemm->found()) throw_no_algorithm(launch, g);
  return plan;
}

void launch_matmul(const StepLaunch& launch, const MatmulPlan& plan) {
  void* out = launch.outputs[0].data;
  switch (plan.kind) {
    case MatmulPlan::Kind::kEmpty: return;
    case MatmulPlan::Kind::kZero: zero_fill(launch, out, plan.out_bytes); return;
    case MatmulPlan::Kind::kGemm:
      run_gemm(launch, *plan.gemm, launch.inputs[0].data, launch.inputs[1].data, out, nullptr, nullptr,
               launch.workspace);
      return;
  }
}

// ---- linear: x [..., in] · weight[out, in]ᵀ + bias[out] ----

// kEpilogue: the bias goes through cuBLASLt's bias epilogue (the beta form when cuBLASLt has no algorithm with it);
// otherwise the output is first filled with the bias rows and the product accumulates onto them (beta = 1). Either way
// the bias is added to the f32 (f64) accumulator and the sum rounded once.
struct LinearPlan {
  enum class Kind { kEmpty, kBiasOnly, kZero, kGemm } kind = Kind::kEmpty;
  bool has_bias = false;
  bool fill_bias_rows = false;  // kGemm: the beta form (bias rows first, the product accumulates onto them)
  bool residual = false;        // kGemm: input 3, the fused epilogue's residual
  bool gelu_erf_after = false;  // kGemm: activation "gelu_erf", applied by a kernel after the product
  DataType dtype = DataType::kF32;
  std::int64_t rows = 0, features = 0;
  std::size_t out_bytes = 0;
  std::optional<GemmStep> gemm;
};

// kAlgo: which of the heuristic's algorithms the product takes (0: its first; the _algoN entries, timed by the
// builder, take the others).
template <bool kEpilogue, int kAlgo = 0>
LinearPlan prepare_linear(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  const DeviceTensor* bias = present(launch, 2) ? &launch.inputs[2] : nullptr;
  const DeviceTensor& out = launch.outputs.at(0);
  LinearPlan plan;
  plan.dtype = out.dtype;
  plan.has_bias = bias != nullptr;
  plan.features = weight.shape[0];
  plan.rows = volume(x.shape, 0, x.shape.rank() - 1);
  const std::int64_t in = weight.shape[1];
  // The builder's fused epilogue: activation(x·Wᵀ + bias + residual) (only the epilogue entries take it).
  const DeviceTensor* residual = present(launch, 3) ? &launch.inputs[3] : nullptr;
  plan.residual = residual != nullptr;
  const std::string activation_name = launch.attrs->get_string("activation", "none");
  const int activation = epilogue_activation(activation_name);
  const bool gelu_erf_after = activation_name == "gelu_erf";
  const bool fused = residual != nullptr || activation != 0 || gelu_erf_after;
  if (plan.rows == 0 || plan.features == 0) return plan;
  if (in == 0 && fused) launch.attrs->fail("a fused epilogue on an empty product (weight with 0 columns)");
  if (in == 0) {  // an empty sum: the bias alone
    plan.kind = bias != nullptr ? LinearPlan::Kind::kBiasOnly : LinearPlan::Kind::kZero;
    plan.out_bytes = static_cast<std::size_t>(plan.rows * plan.features) * element_size(out.dtype);
    return plan;
  }
  plan.kind = LinearPlan::Kind::kGemm;
  Gemm g;
  g.dtype = out.dtype;
  g.trans_a = false;
  g.trans_b = true;
  g.m = plan.rows;
  g.n = plan.features;
  g.k = in;
  if (kEpilogue && (bias != nullptr || fused)) {
    g.activation = activation;
    g.accumulate = residual != nullptr;
    GemmStep step = prepare_gemm(launch, g, {{0, 0, 0}}, x, weight, out, residual, bias, kAlgo);
    if (step.found()) {
      plan.gemm = std::move(step);
      plan.gelu_erf_after = gelu_erf_after;
      return plan;
    }
    if (fused) throw_no_algorithm(launch, step.g);  // only a plain bias epilogue has the beta form to fall back on
    g.activation = 0;
    g.accumulate = false;
  }
  if (bias != nullptr) {
    plan.fill_bias_rows = true;
    g.accumulate = true;
  }
  plan.gemm = prepare_gemm(launch, g, {{0, 0, 0}}, x, weight, out, nullptr, nullptr, kAlgo);
  if (!plan.gemm->found()) throw_no_algorithm(launch, g);
  return plan;
}

// The addresses a planned linear product runs on (a step's bound tensors, or another op's view of them).
struct LinearOperands {
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;      // with LinearPlan::has_bias
  const void* residual = nullptr;  // with LinearPlan::residual
  void* out = nullptr;
  void* workspace = nullptr;  // cuBLASLt's scratch, of the size the plan was made for
};

void launch_linear_on(const StepLaunch& launch, const LinearPlan& plan, const LinearOperands& o) {
  switch (plan.kind) {
    case LinearPlan::Kind::kEmpty: return;
    case LinearPlan::Kind::kZero: zero_fill(launch, o.out, plan.out_bytes); return;
    case LinearPlan::Kind::kBiasOnly: fill_rows(launch, plan.dtype, o.bias, o.out, plan.rows, plan.features); return;
    case LinearPlan::Kind::kGemm: {
      if (plan.fill_bias_rows) {
        fill_rows(launch, plan.dtype, o.bias, o.out, plan.rows, plan.features);
        run_gemm(launch, *plan.gemm, o.x, o.weight, o.out, nullptr, nullptr, o.workspace);
      } else {
        run_gemm(launch, *plan.gemm, o.x, o.weight, o.out, o.residual, o.bias, o.workspace);
        if (plan.gelu_erf_after) gelu_erf_in_place(launch, plan.dtype, o.out, plan.rows * plan.features);
      }
      return;
    }
  }
}

void launch_linear(const StepLaunch& launch, const LinearPlan& plan) {
  LinearOperands o;
  o.x = launch.inputs[0].data;
  o.weight = launch.inputs[1].data;
  o.bias = plan.has_bias ? launch.inputs[2].data : nullptr;
  o.residual = plan.residual ? launch.inputs[3].data : nullptr;
  o.out = launch.outputs[0].data;
  o.workspace = launch.workspace;
  launch_linear_on(launch, plan, o);
}

// ---- linear on Hopper through CUTLASS: bias, residual and erf-GELU in the product's epilogue ----

// kConfig's product (cutlass_gemm_sm90.hpp) for a linear layer with activation "gelu_erf", or none (the small-tile
// configurations, for products of few rows where cuBLASLt's kernels leave most of the GPU idle). Its operands move
// through the bulk tensor copy engine, so every address must be 16-byte aligned: a step that reads or writes a caller
// buffer plans again at each enqueue and runs `fallback` (cuBLASLt, then the GELU kernel; without cuBLASLt scratch, as
// the entry declares none) for buffers that are not.
struct FusedLinearPlan {
  std::unique_ptr<sm90::FusedGemm> gemm;  // nullptr: an empty product, which `fallback` does
  sm90::GemmProblem problem;
  bool rebind = false;
  std::optional<LinearPlan> fallback;
};

template <sm90::GemmConfig kConfig>
FusedLinearPlan prepare_fused_linear(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  const DeviceTensor* bias = present(launch, 2) ? &launch.inputs[2] : nullptr;
  const DeviceTensor* residual = present(launch, 3) ? &launch.inputs[3] : nullptr;
  const DeviceTensor& out = launch.outputs.at(0);
  FusedLinearPlan plan;
  const sm90::DeviceInfo gpu = sm90::current_device(layer_name(launch));
  if (gpu.sm_count == 0) {
    launch.attrs->fail(
        fmt::format("the CUTLASS sm_90 products run on compute capability 9.0 GPUs, not {}.{}", gpu.major, gpu.minor));
  }
  sm90::GemmProblem& p = plan.problem;
  p.m = volume(x.shape, 0, x.shape.rank() - 1);
  p.n = weight.shape[0];
  p.k = weight.shape[1];
  if (p.m == 0 || p.n == 0 || p.k == 0) {
    plan.fallback = prepare_linear<true>(launch);
    return plan;
  }
  const std::string activation = launch.attrs->get_string("activation", "none");
  if (activation != "gelu_erf" && activation != "none") {
    launch.attrs->fail(fmt::format("the CUTLASS sm_90 products have no activation '{}'", activation));
  }
  plan.gemm = sm90::make_fused_gemm(kConfig, out.dtype,
                                    activation == "gelu_erf" ? sm90::Activation::kGeluErf : sm90::Activation::kNone,
                                    residual != nullptr, gpu.device, gpu.sm_count);
  if (plan.gemm == nullptr) {
    launch.attrs->fail(
        fmt::format("this build has no CUTLASS sm_90 product of this configuration for {} with activation '{}'",
                    to_string(out.dtype), activation));
  }
  if (!plan.gemm->can_implement(p)) {
    launch.attrs->fail(fmt::format("CUTLASS's sm_90 product does not take a {}x{}x{} problem", p.m, p.n, p.k));
  }
  if (plan.gemm->workspace_bytes(p) > launch.workspace_bytes) {
    launch.attrs->fail("CUTLASS's sm_90 product needs scratch that the step does not have");
  }
  p.a = x.data;
  p.b = weight.data;
  p.bias = bias != nullptr ? bias->data : nullptr;
  p.c = residual != nullptr ? residual->data : nullptr;
  p.d = out.data;
  plan.rebind = x.caller_buffer || weight.caller_buffer || (bias != nullptr && bias->caller_buffer) ||
                (residual != nullptr && residual->caller_buffer) || out.caller_buffer;
  if (plan.rebind) {
    plan.fallback = prepare_linear<true>(launch);
    return plan;
  }
  if (!sm90::aligned_for_tma(p)) launch.attrs->fail("an operand of the CUTLASS sm_90 product is not 16-byte aligned");
  plan.gemm->plan(p, launch.workspace, layer_name(launch).c_str());
  return plan;
}

void launch_fused_linear(const StepLaunch& launch, const FusedLinearPlan& plan) {
  if (plan.gemm == nullptr) {
    launch_linear(launch, *plan.fallback);
    return;
  }
  if (plan.rebind) {
    sm90::GemmProblem p = plan.problem;
    p.a = launch.inputs[0].data;
    p.b = launch.inputs[1].data;
    if (present(launch, 2)) p.bias = launch.inputs[2].data;
    if (plan.fallback->residual) p.c = launch.inputs[3].data;
    p.d = launch.outputs[0].data;
    if (!sm90::aligned_for_tma(p)) {
      launch_linear(launch, *plan.fallback);
      return;
    }
    plan.gemm->plan(p, launch.workspace, layer_name(launch).c_str());
  }
  plan.gemm->run(launch.stream, launch.programmatic, layer_name(launch).c_str());
}

// ---- supports ----

// Every present input (and the output) has the entry's dtype.
template <DataType kDtype>
bool supports_gemm(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (layer.inputs.size() < 2 || !has_tensor(layer, 0) || !has_tensor(layer, 1)) return false;
  for (std::size_t i = 0; i < layer.inputs.size(); ++i) {
    if (has_tensor(layer, i) && input_dtype(graph, layer, i) != kDtype) return false;
  }
  return output_dtype(graph, layer, 0) == kDtype;
}

// The workspace of algorithm kAlgo of cuBLASLt's heuristic for a product g (no bias, epilogue or residual set yet)
// with arena-aligned (256-byte) pointers, within kGemmWorkspaceBytes.
template <int kAlgo>
std::size_t gemm_workspace(Gemm g, bool bias, const std::string& activation, bool residual, Precision precision,
                           const std::string& context) {
  static const cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    return cublaslt_library().cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS ? h : nullptr;
  }();
  if (handle == nullptr) return kGemmWorkspaceBytes;
  if (g.m == 0 || g.n == 0 || g.k == 0) return 0;
  alignas(256) static const std::byte aligned[256] = {};  // a stand-in bias pointer: only its alignment matters here
  if (bias) g.bias = aligned;
  g.activation = epilogue_activation(activation);
  g.accumulate = residual;
  const GemmPlan plan = make_gemm_plan(handle, g, compute_type(g.dtype, precision), 256, 256, 256, 256,
                                       kGemmWorkspaceBytes, context, kAlgo);
  return plan.found ? plan.heuristic.workspaceSize : kGemmWorkspaceBytes;
}

// The product x [..., k] · weight [n, k]ᵀ of a linear (or quantized_linear) layer at these shapes, in its result's
// dtype.
Gemm linear_gemm(const graph::Graph& graph, const graph::Layer& layer, const std::vector<Dims>& shapes) {
  const Dims& x = shapes.at(static_cast<std::size_t>(layer.inputs[0]));
  const Dims& weight = shapes.at(static_cast<std::size_t>(layer.inputs[1]));
  Gemm g;
  g.dtype = graph.tensor(layer.outputs[0]).dtype;
  g.trans_b = true;
  g.m = volume(x, 0, x.rank() - 1);
  g.n = weight[0];
  g.k = weight[1];
  return g;
}

// The same for a linear layer's product at these shapes.
template <int kAlgo>
std::size_t linear_workspace(const graph::Graph& graph, const graph::Layer& layer, const std::vector<Dims>& shapes,
                             Precision precision) {
  return gemm_workspace<kAlgo>(linear_gemm(graph, layer, shapes), has_tensor(layer, 2),
                               graph::AttrReader(layer.attrs, layer.name, layer.op).get_string("activation", "none"),
                               has_tensor(layer, 3), precision, layer.name);
}

// The CUTLASS products: activation "gelu_erf" (kGelu) or none (the other epilogues are cuBLASLt's), a constant 2D
// weight [n, k] with n and k multiples of 8 (16-byte rows for the bulk tensor copy engine).
template <DataType kDtype, bool kGelu>
bool supports_fused_linear(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  if (!supports_gemm<kDtype>(graph, layer, precision)) return false;
  const std::string activation = graph::AttrReader(layer.attrs, layer.name, layer.op).get_string("activation", "none");
  if (activation != (kGelu ? "gelu_erf" : "none")) return false;
  const Dims weight = graph.static_dims(layer.inputs[1]);
  return weight.rank() == 2 && weight[0] > 0 && weight[1] > 0 && weight[0] % 8 == 0 && weight[1] % 8 == 0;
}

// The heuristic's fifth to eighth algorithms (the "_algo4" to "_algo7" entries) are offered only for a product with an
// activation in cuBLASLt's epilogue (relu, gelu_tanh), which no CUTLASS product of ours has: there, on an H100, one
// of them ran GPT-2's tanh-GELU MLP product 8 to 13 % faster than the best of the first four, while for the other
// products of BERT, GPT-2 and BERT-large none of them beat the first four or the CUTLASS products
// (docs/performance.md).
template <DataType kDtype>
bool supports_gemm_with_epilogue_activation(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  const std::string activation = graph::AttrReader(layer.attrs, layer.name, layer.op).get_string("activation", "none");
  return epilogue_activation(activation) != 0 && supports_gemm<kDtype>(graph, layer, precision);
}

// The bias-through-beta form has no fused epilogue.
template <DataType kDtype>
bool supports_gemm_unfused(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  const bool activation =
      graph::AttrReader(layer.attrs, layer.name, layer.op).get_string("activation", "none") != "none";
  return !activation && !has_tensor(layer, 3) && supports_gemm<kDtype>(graph, layer, precision);
}

// ---- conv as a product: a pointwise (1x1) channels-last convolution is a linear layer over its pixels ----

// A 2D channels-last conv with a 1x1 kernel, stride 1, no padding, no dilation and one group, f16 or bf16: x [N, H, W,
// C] is a linear layer's x [N·H·W, C], its weight [O, 1, 1, C] the linear's [O, C], its bias, residual and relu the
// linear's epilogue (ResNet's bottleneck expansions, memory-bound at cuDNN's rate). Timed against cuDNN's plans.
template <DataType kDtype>
bool supports_pointwise_conv(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  if ((kDtype != DataType::kF16 && kDtype != DataType::kBF16) || !supports_gemm<kDtype>(graph, layer, precision))
    return false;
  if (graph.tensor(layer.inputs[0]).shape.size() != 4 || graph.tensor(layer.inputs[1]).shape.size() != 4) return false;
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  const auto all = [&](const char* name, std::int64_t fallback, std::int64_t want) {
    const std::vector<std::int64_t> values = attrs.get_ints(name, std::vector<std::int64_t>{fallback, fallback});
    return std::all_of(values.begin(), values.end(), [&](std::int64_t v) { return v == want; });
  };
  const Dims w = graph.static_dims(layer.inputs[1]);  // a constant's shape (graph shapes are dim expressions)
  const std::string activation = attrs.get_string("activation", "none");
  return attrs.get_string("layout", "nchw") == "nhwc" && attrs.get_int("groups", 1) == 1 && w[1] == 1 && w[2] == 1 &&
         all("stride", 1, 1) && all("padding", 0, 0) && all("dilation", 1, 1) &&
         (activation == "none" || activation == "relu");
}

// The linear layer's view of a pointwise convolution's step: the weight [O, 1, 1, C] as [O, C].
StepLaunch as_linear(const StepLaunch& launch) {
  const Dims& x = launch.inputs.at(0).shape;
  const Dims& w = launch.inputs.at(1).shape;
  if (x.rank() != 4 || w.rank() != 4 || w[1] != 1 || w[2] != 1 || w[3] != x[3])
    launch.attrs->fail("a pointwise convolution as a product needs x [N, H, W, C] and a weight [O, 1, 1, C]");
  StepLaunch linear = launch;
  linear.inputs[1].shape = Dims{w[0], w[3]};
  return linear;
}

template <int kAlgo>
LinearPlan prepare_pointwise_conv(const StepLaunch& launch) {
  return prepare_linear<true, kAlgo>(as_linear(launch));
}

template <int kAlgo>
std::size_t pointwise_conv_workspace(const graph::Graph& graph, const graph::Layer& layer,
                                     const std::vector<Dims>& shapes, Precision precision) {
  std::vector<Dims> as_linear_shapes = shapes;
  Dims& w = as_linear_shapes.at(static_cast<std::size_t>(layer.inputs[1]));
  w = Dims{w[0], w[3]};
  return linear_workspace<kAlgo>(graph, layer, as_linear_shapes, precision);
}

// ---- weight-only quantized_linear: a float x times an i8 or f8e4m3 weight, dequantized for cuBLASLt ----
// At each enqueue the weight times its scale per output feature is written in x's type at the start of the step's
// scratch (which the steps share, so it is written again every time: the weight's N·K bytes read and twice (f16) that
// written), and linear's cuBLASLt product, with bias, residual and activation in its epilogue, runs on it with the
// rest of the scratch. Any number of rows; the engine holds the weight's quantized bytes. quantized_linear.cu's rows
// kernel reads the quantized weight directly instead (timed against these).

// Weight elements per thread: 8 when the rows split into such groups and the weight's address allows 8-byte loads.
constexpr int kDequantizeVector = 8;

template <typename Q, typename T, int kVector>
__global__ void dequantize_weight_kernel(const Q* __restrict__ w, const float* __restrict__ scale, T* __restrict__ out,
                                         std::int64_t groups, std::int64_t k) {
  wait_for_preceding_steps();
  struct alignas(kVector * sizeof(Q)) In {
    Q v[kVector];
  };
  struct alignas(kVector * sizeof(T) > 16 ? 16 : kVector * sizeof(T)) Out {
    T v[kVector];
  };
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const std::int64_t first = g * kVector;
    const float s = scale[first / k];  // kVector divides k: a group lies in one row
    const In in = *reinterpret_cast<const In*>(w + first);
    Out result;
#pragma unroll
    for (int i = 0; i < kVector; ++i) result.v[i] = from_compute<T>(static_cast<float>(to_compute(in.v[i])) * s);
    *reinterpret_cast<Out*>(out + first) = result;
  }
}

using DequantizeFn = void (*)(const StepLaunch& launch, const void* w, const float* scale, void* out,
                              std::int64_t elements, std::int64_t k);

template <typename Q, typename T, int kVector>
void dequantize_weight(const StepLaunch& launch, const void* w, const float* scale, void* out, std::int64_t elements,
                       std::int64_t k) {
  const std::int64_t groups = elements / kVector;
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((groups + kThreads - 1) / kThreads, 65535));
  launch_kernel(launch, dequantize_weight_kernel<Q, T, kVector>, blocks, kThreads, 0, static_cast<const Q*>(w), scale,
                static_cast<T*>(out), groups, k);
}

template <typename Q, typename T>
DequantizeFn dequantize_for(bool vector) {
  return vector ? dequantize_weight<Q, T, kDequantizeVector> : dequantize_weight<Q, T, 1>;
}

template <typename Q>
DequantizeFn dequantize_for(DataType to, bool vector) {
  switch (to) {
    case DataType::kF16: return dequantize_for<Q, F16>(vector);
    case DataType::kBF16: return dequantize_for<Q, BF16>(vector);
    default: return dequantize_for<Q, float>(vector);
  }
}

// The scratch the dequantized weight takes ahead of cuBLASLt's (256-byte aligned).
std::size_t dequantized_weight_bytes(std::int64_t n, std::int64_t k, DataType to) {
  return (static_cast<std::size_t>(n * k) * element_size(to) + 255) / 256 * 256;
}

struct WeightOnlyPlan {
  LinearPlan linear;
  DequantizeFn dequantize = nullptr;
  std::int64_t elements = 0, k = 0;
  std::size_t weight_bytes = 0;  // the dequantized weight's share of the scratch
};

// The linear step that quantized_linear's weight-only form is on its dequantized weight: x, that weight (in the
// scratch), bias (input 3) and residual (input 4); the scratch after the weight for cuBLASLt.
template <int kAlgo>
WeightOnlyPlan prepare_weight_only_dequantized(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  WeightOnlyPlan plan;
  plan.k = weight.shape[1];
  plan.elements = weight.shape[0] * plan.k;
  plan.weight_bytes = dequantized_weight_bytes(weight.shape[0], plan.k, x.dtype);
  if (launch.workspace == nullptr || launch.workspace_bytes < plan.weight_bytes) {
    launch.attrs->fail(fmt::format("the dequantized weight needs {} bytes of scratch, the step has {}",
                                   plan.weight_bytes, launch.workspace_bytes));
  }
  StepLaunch linear = launch;
  DeviceTensor dequantized;
  dequantized.dtype = x.dtype;
  dequantized.shape = weight.shape;
  dequantized.data = launch.workspace;
  const DeviceTensor absent;
  linear.inputs = {x, dequantized, present(launch, 3) ? launch.inputs[3] : absent,
                   present(launch, 4) ? launch.inputs[4] : absent};
  linear.workspace = static_cast<std::byte*>(launch.workspace) + plan.weight_bytes;
  linear.workspace_bytes = launch.workspace_bytes - plan.weight_bytes;
  plan.linear = prepare_linear<true, kAlgo>(linear);
  const bool vector =
      plan.k % kDequantizeVector == 0 && !weight.caller_buffer &&
      reinterpret_cast<std::uintptr_t>(weight.data) % (kDequantizeVector * element_size(weight.dtype)) == 0;
  plan.dequantize = weight.dtype == DataType::kI8 ? dequantize_for<std::int8_t>(x.dtype, vector)
                                                  : dequantize_for<F8E4M3>(x.dtype, vector);
  return plan;
}

void launch_weight_only_dequantized(const StepLaunch& launch, const WeightOnlyPlan& plan) {
  if (plan.linear.kind == LinearPlan::Kind::kGemm) {
    plan.dequantize(launch, launch.inputs[1].data, static_cast<const float*>(launch.inputs[2].data), launch.workspace,
                    plan.elements, plan.k);
  }
  LinearOperands o;
  o.x = launch.inputs[0].data;
  o.weight = launch.workspace;
  o.bias = plan.linear.has_bias ? launch.inputs[3].data : nullptr;
  o.residual = plan.linear.residual ? launch.inputs[4].data : nullptr;
  o.out = launch.outputs[0].data;
  o.workspace = static_cast<std::byte*>(launch.workspace) + plan.weight_bytes;
  launch_linear_on(launch, plan.linear, o);
}

// quantized_linear's weight-only form (common.cuh): every shape.
bool supports_weight_only(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return is_weight_only_product(graph, layer);
}

template <int kAlgo>
std::size_t weight_only_dequantized_workspace(const graph::Graph& graph, const graph::Layer& layer,
                                              const std::vector<Dims>& shapes, Precision precision) {
  const Gemm g = linear_gemm(graph, layer, shapes);
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  return dequantized_weight_bytes(g.n, g.k, g.dtype) +
         gemm_workspace<kAlgo>(g, has_tensor(layer, 3), attrs.get_string("activation", "none"), has_tensor(layer, 4),
                               precision, layer.name);
}

}  // namespace

// The f16/bf16 linear entries with the heuristic's algorithm `index` instead of its first, timed against it (from the
// fifth on, `supports` is supports_gemm_with_epilogue_activation).
#define TENSORACLE_LINEAR_ALGORITHM(dtypes, dtype, index)                                         \
  prepared_kernel<prepare_linear<true, index>, launch_linear>(                                    \
      "linear_" #dtypes "_cublaslt_bias_epilogue_algo" #index, "linear",                          \
      (index) < kLinearAlgorithmsForEveryProduct ? supports_gemm<dtype>                           \
                                                 : supports_gemm_with_epilogue_activation<dtype>, \
      ws, linear_workspace<index>)

// A pointwise convolution as cuBLASLt's product with the heuristic's algorithm `index`.
#define TENSORACLE_POINTWISE_CONV(dtypes, dtype, index)                                                              \
  prepared_kernel<prepare_pointwise_conv<index>, launch_linear>("conv_" #dtypes "_1x1_cublaslt_algo" #index, "conv", \
                                                                supports_pointwise_conv<dtype>, ws,                  \
                                                                pointwise_conv_workspace<index>)

void register_pointwise_convolution_kernels(std::vector<KernelEntry>& kernels) {
  const std::size_t ws = kGemmWorkspaceBytes;
  const std::vector<KernelEntry> entries = {
      TENSORACLE_POINTWISE_CONV(f16_f32acc, DataType::kF16, 0),
      TENSORACLE_POINTWISE_CONV(f16_f32acc, DataType::kF16, 1),
      TENSORACLE_POINTWISE_CONV(bf16_f32acc, DataType::kBF16, 0),
      TENSORACLE_POINTWISE_CONV(bf16_f32acc, DataType::kBF16, 1),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

#undef TENSORACLE_POINTWISE_CONV

void register_linear_algebra_kernels(std::vector<KernelEntry>& kernels) {
  const std::size_t ws = kGemmWorkspaceBytes;
  const std::vector<KernelEntry> entries = {
      // f32 uses TF32 tensor cores only at Precision::kTf32.
      prepared_kernel<prepare_matmul, launch_matmul>("matmul_f32_cublaslt", "matmul", supports_gemm<DataType::kF32>,
                                                     ws),
      prepared_kernel<prepare_matmul, launch_matmul>("matmul_f16_f32acc_cublaslt", "matmul",
                                                     supports_gemm<DataType::kF16>, ws),
      prepared_kernel<prepare_matmul, launch_matmul>("matmul_bf16_f32acc_cublaslt", "matmul",
                                                     supports_gemm<DataType::kBF16>, ws),
      prepared_kernel<prepare_matmul, launch_matmul>("matmul_f64_cublaslt", "matmul", supports_gemm<DataType::kF64>,
                                                     ws),
      prepared_kernel<prepare_linear<true>, launch_linear>("linear_f32_cublaslt_bias_epilogue", "linear",
                                                           supports_gemm<DataType::kF32>, ws, linear_workspace<0>),
      prepared_kernel<prepare_linear<true>, launch_linear>("linear_f16_f32acc_cublaslt_bias_epilogue", "linear",
                                                           supports_gemm<DataType::kF16>, ws, linear_workspace<0>),
      TENSORACLE_LINEAR_ALGORITHM(f16_f32acc, DataType::kF16, 1),
      TENSORACLE_LINEAR_ALGORITHM(f16_f32acc, DataType::kF16, 2),
      TENSORACLE_LINEAR_ALGORITHM(f16_f32acc, DataType::kF16, 3),
      TENSORACLE_LINEAR_ALGORITHM(f16_f32acc, DataType::kF16, 4),
      TENSORACLE_LINEAR_ALGORITHM(f16_f32acc, DataType::kF16, 5),
      TENSORACLE_LINEAR_ALGORITHM(f16_f32acc, DataType::kF16, 6),
      TENSORACLE_LINEAR_ALGORITHM(f16_f32acc, DataType::kF16, 7),
      prepared_kernel<prepare_linear<true>, launch_linear>("linear_bf16_f32acc_cublaslt_bias_epilogue", "linear",
                                                           supports_gemm<DataType::kBF16>, ws, linear_workspace<0>),
      TENSORACLE_LINEAR_ALGORITHM(bf16_f32acc, DataType::kBF16, 1),
      TENSORACLE_LINEAR_ALGORITHM(bf16_f32acc, DataType::kBF16, 2),
      TENSORACLE_LINEAR_ALGORITHM(bf16_f32acc, DataType::kBF16, 3),
      TENSORACLE_LINEAR_ALGORITHM(bf16_f32acc, DataType::kBF16, 4),
      TENSORACLE_LINEAR_ALGORITHM(bf16_f32acc, DataType::kBF16, 5),
      TENSORACLE_LINEAR_ALGORITHM(bf16_f32acc, DataType::kBF16, 6),
      TENSORACLE_LINEAR_ALGORITHM(bf16_f32acc, DataType::kBF16, 7),
      prepared_kernel<prepare_linear<false>, launch_linear>(
          "linear_f32_cublaslt_bias_beta", "linear", supports_gemm_unfused<DataType::kF32>, ws, linear_workspace<0>),
      prepared_kernel<prepare_linear<false>, launch_linear>("linear_f16_f32acc_cublaslt_bias_beta", "linear",
                                                            supports_gemm_unfused<DataType::kF16>, ws,
                                                            linear_workspace<0>),
      prepared_kernel<prepare_linear<false>, launch_linear>("linear_bf16_f32acc_cublaslt_bias_beta", "linear",
                                                            supports_gemm_unfused<DataType::kBF16>, ws,
                                                            linear_workspace<0>),
      prepared_kernel<prepare_linear<false>, launch_linear>(
          "linear_f64_cublaslt_bias_beta", "linear", supports_gemm_unfused<DataType::kF64>, ws, linear_workspace<0>),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
  // quantized_linear's weight-only form, ahead of quantized_linear.cu's rows kernel (the registry keeps this order
  // within an op): --no-timing builds take the dequantized product, which suits every row count. The static bound
  // is 0: the scratch follows the weight (weight_only_dequantized_workspace).
  kernels.push_back(prepared_kernel<prepare_weight_only_dequantized<0>, launch_weight_only_dequantized>(
      "quantized_linear_weight_only_dequantized_cublaslt", "quantized_linear", supports_weight_only, 0,
      weight_only_dequantized_workspace<0>));
  kernels.push_back(prepared_kernel<prepare_weight_only_dequantized<1>, launch_weight_only_dequantized>(
      "quantized_linear_weight_only_dequantized_cublaslt_algo1", "quantized_linear", supports_weight_only, 0,
      weight_only_dequantized_workspace<1>));
  // After cuBLASLt's entries (the first candidate is what --no-timing builds take), where this build has them.
  if (sm90::kFusedGemmBuilt) {
    using sm90::GemmConfig;
    // erf-GELU: every configuration but the 128x192 tile. No activation: the small tiles, for products of few rows,
    // the 128x128 ping-pong tile, whose epilogue overlaps the products, for products of few columns, and the 128x192
    // cooperative tile, whose tiles fill one wave where 128x128 ones leave a partial second (768 or 2304 columns;
    // make_typed_plain_gemm). With many rows and columns cuBLASLt's plain products run at 643-656 TFLOP/s
    // (docs/performance.md).
#define TENSORACLE_CUTLASS_LINEAR(dtype_name, dtype, config, config_name, gelu)   \
  prepared_kernel<prepare_fused_linear<GemmConfig::config>, launch_fused_linear>( \
      "linear_" #dtype_name "_f32acc_cutlass_sm90_" config_name, "linear", supports_fused_linear<dtype, gelu>)
    const std::vector<KernelEntry> fused = {
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kCooperative128x256, "coop128x256_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kCooperative256x128, "coop256x128_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kCooperative128x128, "coop128x128_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kPingpong128x128, "pingpong128x128_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kPingpong128x128Epi64, "pingpong128x128e64_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kPingpong64x128, "pingpong64x128_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kPingpong64x64, "pingpong64x64_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kPingpong64x128, "pingpong64x128", false),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kPingpong64x64, "pingpong64x64", false),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kPingpong128x128, "pingpong128x128", false),
        TENSORACLE_CUTLASS_LINEAR(f16, DataType::kF16, kCooperative128x192, "coop128x192", false),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kCooperative128x256, "coop128x256_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kCooperative256x128, "coop256x128_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kCooperative128x128, "coop128x128_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kPingpong128x128, "pingpong128x128_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kPingpong128x128Epi64, "pingpong128x128e64_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kPingpong64x128, "pingpong64x128_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kPingpong64x64, "pingpong64x64_gelu_erf", true),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kPingpong64x128, "pingpong64x128", false),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kPingpong64x64, "pingpong64x64", false),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kPingpong128x128, "pingpong128x128", false),
        TENSORACLE_CUTLASS_LINEAR(bf16, DataType::kBF16, kCooperative128x192, "coop128x192", false),
    };
#undef TENSORACLE_CUTLASS_LINEAR
    kernels.insert(kernels.end(), fused.begin(), fused.end());
  }
}

#undef TENSORACLE_LINEAR_ALGORITHM

}  // namespace tensoracle::cuda
