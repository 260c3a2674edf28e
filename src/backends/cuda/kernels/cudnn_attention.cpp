// AttentionGraphPlan: cuDNN's fused SDPA (flash attention forward) built through the cuDNN frontend's graph API. The
// only translation unit that includes the frontend (a header-only library from PyPI, nvidia-cudnn-frontend).
#include "backends/cuda/kernels/cudnn_attention.hpp"

#include <dlfcn.h>

#include <cudnn_frontend.h>

#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

// The frontend runs in its dynamic-loading mode (src/CMakeLists.txt) and finds cuDNN's functions through this handle.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace tensoracle::cuda {

namespace fe = cudnn_frontend;

namespace {

enum Uid : std::int64_t { kQ = 1, kK = 2, kV = 3, kO = 4 };

// The cuDNN that tensoracle is linked with (already loaded: its soname finds it), handed to the frontend once.
bool frontend_has_cudnn(std::string* why) {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string soname = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
    cudnn_frontend::cudnn_dlhandle = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (cudnn_frontend::cudnn_dlhandle == nullptr) cudnn_frontend::cudnn_dlhandle = dlopen(soname.c_str(), RTLD_NOW);
  });
  if (cudnn_frontend::cudnn_dlhandle == nullptr && why != nullptr)
    *why = "libcudnn could not be opened for the frontend";
  return cudnn_frontend::cudnn_dlhandle != nullptr;
}

std::vector<std::int64_t> strides_of(const std::int64_t (&s)[3]) { return {s[0], s[1], s[2], 1}; }

}  // namespace

struct AttentionGraphPlan::Impl {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
  mutable std::unordered_map<std::int64_t, void*> pointers;
};

AttentionGraphPlan::AttentionGraphPlan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AttentionGraphPlan::~AttentionGraphPlan() = default;

std::unique_ptr<AttentionGraphPlan> AttentionGraphPlan::build(cudnnHandle_t handle, const AttentionGraphProblem& p,
                                                              std::size_t workspace_limit, std::string* why) {
  if (!frontend_has_cudnn(why)) return nullptr;
  auto impl = std::make_unique<Impl>();
  try {
    impl->graph = std::make_shared<fe::graph::Graph>();
    fe::graph::Graph& g = *impl->graph;
    g.set_io_data_type(p.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char* name, Uid uid, std::int64_t h, std::int64_t s, std::int64_t d,
                      const std::int64_t(&stride)[3]) {
      return g.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({p.b, h, s, d})
                          .set_stride(strides_of(stride)));
    };
    auto q = tensor("q", kQ, p.hq, p.sq, p.d, p.q_stride);
    auto k = tensor("k", kK, p.hkv, p.skv, p.d, p.k_stride);
    auto v = tensor("v", kV, p.hkv, p.skv, p.dv, p.v_stride);
    auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(false).set_attn_scale(p.scale);
    if (p.causal) options.set_causal_mask(true);
    auto [o, stats] = g.sdpa(q, k, v, options);
    (void)stats;
    o->set_output(true).set_uid(kO).set_dim({p.b, p.hq, p.sq, p.dv}).set_stride(strides_of(p.o_stride));
    fe::error_t status = g.build(handle, {fe::HeurMode_t::A});
    if (status.is_bad()) {
      if (why != nullptr) *why = status.get_message();
      return nullptr;
    }
    if (g.get_workspace_size(impl->workspace).is_bad() || impl->workspace < 0 ||
        static_cast<std::size_t>(impl->workspace) > workspace_limit) {
      if (why != nullptr) *why = "its plan needs more scratch than the step has";
      return nullptr;
    }
  } catch (const std::exception& e) {  // the frontend throws for problems it cannot express
    if (why != nullptr) *why = e.what();
    return nullptr;
  }
  impl->pointers = {{kQ, nullptr}, {kK, nullptr}, {kV, nullptr}, {kO, nullptr}};
  return std::unique_ptr<AttentionGraphPlan>(new AttentionGraphPlan(std::move(impl)));
}

std::size_t AttentionGraphPlan::workspace_bytes() const { return static_cast<std::size_t>(impl_->workspace); }

bool AttentionGraphPlan::execute(cudnnHandle_t handle, const void* q, const void* k, const void* v, void* out,
                                 void* workspace, std::string* why) const {
  impl_->pointers[kQ] = const_cast<void*>(q);  // the frontend's map holds non-const pointers; inputs are only read
  impl_->pointers[kK] = const_cast<void*>(k);
  impl_->pointers[kV] = const_cast<void*>(v);
  impl_->pointers[kO] = out;
  fe::error_t status = impl_->graph->execute(handle, impl_->pointers, workspace);
  if (status.is_bad()) {
    if (why != nullptr) *why = status.get_message();
    return false;
  }
  return true;
}

}  // namespace tensoracle::cuda
