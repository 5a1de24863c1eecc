// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The primary cuDNN path: the backend ("graph") API, called directly through
// GpuApi (no cuDNN frontend: see docs/gpu.md for the trade-off). One
// operation graph per ConvSpec: a forward convolution of int8 x and w
// (INT8x4, INT8x32 or plain NHWC), int32 compute, cross-correlation, explicit
// pre/post padding, alpha 1, beta 0, into y = the int32 accumulator or
// float32(acc) (see ConvLayout). cuDNN's heuristics list engine configurations
// for it; each becomes an execution plan that autotuning can time.
#ifndef TF_FUSED_INT8_CC_CORE_GPU_CUDNN_GRAPH_H_
#define TF_FUSED_INT8_CC_CORE_GPU_CUDNN_GRAPH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cc/core/gpu/gpu_api.h"
#include "cc/core/gpu/plan.h"
#include "cc/core/gpu/status.h"

namespace tf_fused_int8 {
namespace gpu {

// An owned cudnnBackendDescriptor_t (move-only). The GpuApi must outlive it.
class BackendDesc {
 public:
  BackendDesc() = default;
  ~BackendDesc() { Reset(); }
  BackendDesc(BackendDesc&& o) noexcept : api_(o.api_), d_(o.d_) { o.d_ = nullptr; }
  BackendDesc& operator=(BackendDesc&& o) noexcept {
    if (this != &o) {
      Reset();
      api_ = o.api_;
      d_ = o.d_;
      o.d_ = nullptr;
    }
    return *this;
  }
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;

  static Status Create(const GpuApi& api, cudnnBackendDescriptorType_t type,
                       BackendDesc* out);
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  void Reset() {
    if (d_ != nullptr && api_ != nullptr) api_->cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }
  const GpuApi* api_ = nullptr;
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The finalized operation graph of one ConvSpec, with every descriptor it
// refers to kept alive (cuDNN does not promise to deep-copy them).
struct GraphConv {
  ConvSpec spec;
  BackendDesc x, w, y, conv, op, graph;
};

Status BuildConvGraph(const GpuApi& api, cudnnHandle_t handle,
                      const ConvSpec& spec, std::unique_ptr<GraphConv>* out);

// One engine configuration from the heuristics, with what its notes say.
struct EngineChoice {
  BackendDesc cfg;
  BackendDesc engine;
  int64_t engine_id = -1;
  std::string knobs;  // "k2=3,k3=0" (knob type = value)
  bool nondeterministic = false;
  // Anything but exact integer accumulation (never acceptable here).
  bool inexact = false;
  std::string inexact_reason;
  // Needs filters pre-reordered for INT8x32 (we pass them unreordered).
  bool requires_reorder = false;
  bool runtime_compiled = false;

  std::string Name() const;  // "eng12{k2=3,k3=0}"
};

// The heuristics' engine configurations for `mode` (CUDNN_HEUR_MODE_A, or
// CUDNN_HEUR_MODE_FALLBACK), in the heuristics' order.
Status GetEngineChoices(const GpuApi& api, const GraphConv& graph,
                        cudnnBackendHeurMode_t mode,
                        std::vector<std::unique_ptr<EngineChoice>>* out);

struct GraphPlan {
  BackendDesc plan;
  int64_t workspace_bytes = 0;
};

Status FinalizePlan(const GpuApi& api, cudnnHandle_t handle,
                    const EngineChoice& choice, GraphPlan* out);

// Runs the plan on the handle's current stream.
Status ExecutePlan(const GpuApi& api, cudnnHandle_t handle,
                   const GraphPlan& plan, const void* x, const void* w, void* y,
                   void* workspace);

}  // namespace gpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_GPU_CUDNN_GRAPH_H_
