// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/gpu/cudnn_graph.h"

#include <string>
#include <utility>
#include <vector>

namespace tf_fused_int8 {
namespace gpu {
namespace {

Status Set(const GpuApi& api, const BackendDesc& d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const void* values,
           const char* what) {
  return CudnnCheck(api, api.cudnnBackendSetAttribute(d.get(), name, type, count, values), what);
}

Status MakeTensor(const GpuApi& api, const TensorSpec& t, BackendDesc* out) {
  TFI_GPU_RETURN_IF_ERROR(BackendDesc::Create(api, CUDNN_BACKEND_TENSOR_DESCRIPTOR, out));
  const cudnnDataType_t dtype = t.type == ElementType::kFloat   ? CUDNN_DATA_FLOAT
                                : t.type == ElementType::kInt32 ? CUDNN_DATA_INT32
                                                                : CUDNN_DATA_INT8;
  TFI_GPU_RETURN_IF_ERROR(Set(api, *out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
                              &dtype, "tensor data type"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, *out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4,
                              t.dims, "tensor dims"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, *out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4,
                              t.strides, "tensor strides"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, *out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1,
                              &t.uid, "tensor uid"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, *out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
                              &t.alignment, "tensor alignment"));
  if (t.vector_count > 1) {
    TFI_GPU_RETURN_IF_ERROR(Set(api, *out, CUDNN_ATTR_TENSOR_VECTOR_COUNT, CUDNN_TYPE_INT64, 1,
                                &t.vector_count, "tensor vector count"));
    TFI_GPU_RETURN_IF_ERROR(Set(api, *out, CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION,
                                CUDNN_TYPE_INT64, 1, &t.vectorized_dim,
                                "tensor vectorized dimension"));
  }
  TFI_CUDNN(api, api.cudnnBackendFinalize(out->get()));
  return Status::Ok();
}

}  // namespace

Status BackendDesc::Create(const GpuApi& api, cudnnBackendDescriptorType_t type,
                           BackendDesc* out) {
  *out = BackendDesc();
  cudnnBackendDescriptor_t d = nullptr;
  const cudnnStatus_t s = api.cudnnBackendCreateDescriptor(type, &d);
  if (s != CUDNN_STATUS_SUCCESS) {
    return Internal("cudnnBackendCreateDescriptor(" + std::to_string(static_cast<int>(type)) +
                    "): " + CudnnErrorString(api, s));
  }
  out->api_ = &api;
  out->d_ = d;
  return Status::Ok();
}

Status BuildConvGraph(const GpuApi& api, cudnnHandle_t handle, const ConvSpec& spec,
                      std::unique_ptr<GraphConv>* out) {
  auto g = std::make_unique<GraphConv>();
  g->spec = spec;
  TFI_GPU_RETURN_IF_ERROR(MakeTensor(api, spec.x, &g->x));
  TFI_GPU_RETURN_IF_ERROR(MakeTensor(api, spec.w, &g->w));
  TFI_GPU_RETURN_IF_ERROR(MakeTensor(api, spec.y, &g->y));

  TFI_GPU_RETURN_IF_ERROR(BackendDesc::Create(api, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &g->conv));
  const cudnnDataType_t comp = CUDNN_DATA_INT32;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
                              CUDNN_TYPE_DATA_TYPE, 1, &comp, "conv compute type"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                              CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "conv mode"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
                              CUDNN_TYPE_INT64, 1, &spatial, "conv spatial dims"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
                              CUDNN_TYPE_INT64, 2, spec.pre_pad, "conv pre padding"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
                              CUDNN_TYPE_INT64, 2, spec.post_pad, "conv post padding"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                              CUDNN_TYPE_INT64, 2, spec.stride, "conv strides"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->conv, CUDNN_ATTR_CONVOLUTION_DILATIONS,
                              CUDNN_TYPE_INT64, 2, spec.dilation, "conv dilations"));
  TFI_CUDNN(api, api.cudnnBackendFinalize(g->conv.get()));

  TFI_GPU_RETURN_IF_ERROR(BackendDesc::Create(
      api, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &g->op));
  const cudnnBackendDescriptor_t x = g->x.get(), w = g->w.get(), y = g->y.get(),
                                 c = g->conv.get();
  const float alpha = 1.0f, beta = 0.0f;
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "conv op x"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w, "conv op w"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "conv op y"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "conv op descriptor"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                              CUDNN_TYPE_FLOAT, 1, &alpha, "conv op alpha"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                              CUDNN_TYPE_FLOAT, 1, &beta, "conv op beta"));
  TFI_CUDNN(api, api.cudnnBackendFinalize(g->op.get()));

  TFI_GPU_RETURN_IF_ERROR(
      BackendDesc::Create(api, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph));
  const cudnnBackendDescriptor_t op = g->op.get();
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
                              CUDNN_TYPE_HANDLE, 1, &handle, "graph handle"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, "graph ops"));
  TFI_CUDNN(api, api.cudnnBackendFinalize(g->graph.get()));
  *out = std::move(g);
  return Status::Ok();
}

std::string EngineChoice::Name() const {
  return "eng" + std::to_string(engine_id) + "{" + knobs + "}";
}

namespace {

// Reads the engine of `cfg` and its notes into `choice`. Failures to read
// notes are not fatal (the choice keeps its defaults); a failure to read the
// engine is.
Status DescribeChoice(const GpuApi& api, EngineChoice* choice) {
  TFI_GPU_RETURN_IF_ERROR(
      BackendDesc::Create(api, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &choice->engine));
  cudnnBackendDescriptor_t engine = choice->engine.get();
  int64_t n = 0;
  TFI_CUDNN(api, api.cudnnBackendGetAttribute(choice->cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
  api.cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                               &choice->engine_id);

  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  if (api.cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                   CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                   &n, notes) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++i) {
      switch (notes[i]) {
        case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
          choice->nondeterministic = true;
          break;
        case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
          choice->inexact = true;
          choice->inexact_reason = "down-converts inputs";
          break;
        case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
          choice->inexact = true;
          choice->inexact_reason = "reduced-precision reduction";
          break;
        case CUDNN_NUMERICAL_NOTE_FFT:
          choice->inexact = true;
          choice->inexact_reason = "FFT";
          break;
        case CUDNN_NUMERICAL_NOTE_WINOGRAD:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13:
          choice->inexact = true;
          choice->inexact_reason = "Winograd";
          break;
        default:
          break;
      }
    }
  }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  n = 0;
  if (api.cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                                   CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n,
                                   behavior) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; ++i) {
      if (behavior[i] == CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER ||
          behavior[i] == CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER) {
        choice->requires_reorder = true;
      }
      if (behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) {
        choice->runtime_compiled = true;
      }
    }
  }

  // Knob choices, for the plan's name only.
  std::vector<BackendDesc> knobs(CUDNN_KNOB_TYPE_COUNTS);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (auto& k : knobs) {
    if (!BackendDesc::Create(api, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &k).ok()) return Status::Ok();
    raw.push_back(k.get());
  }
  n = 0;
  if (api.cudnnBackendGetAttribute(choice->cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   static_cast<int64_t>(raw.size()), &n,
                                   raw.data()) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n && i < static_cast<int64_t>(raw.size()); ++i) {
      cudnnBackendKnobType_t type{};
      int64_t value = 0, m = 0;
      if (api.cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                       CUDNN_TYPE_KNOB_TYPE, 1, &m, &type) != CUDNN_STATUS_SUCCESS ||
          api.cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                       CUDNN_TYPE_INT64, 1, &m, &value) != CUDNN_STATUS_SUCCESS) {
        continue;
      }
      if (!choice->knobs.empty()) choice->knobs += ",";
      choice->knobs += "k" + std::to_string(static_cast<int>(type)) + "=" + std::to_string(value);
    }
  }
  return Status::Ok();
}

}  // namespace

Status GetEngineChoices(const GpuApi& api, const GraphConv& graph, cudnnBackendHeurMode_t mode,
                        std::vector<std::unique_ptr<EngineChoice>>* out) {
  out->clear();
  BackendDesc heur;
  TFI_GPU_RETURN_IF_ERROR(BackendDesc::Create(api, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
  const cudnnBackendDescriptor_t g = graph.graph.get();
  TFI_GPU_RETURN_IF_ERROR(Set(api, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, "heuristics graph"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                              &mode, "heuristics mode"));
  TFI_CUDNN(api, api.cudnnBackendFinalize(heur.get()));
  int64_t count = 0;
  TFI_CUDNN(api, api.cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  if (count <= 0) return Status::Ok();
  std::vector<std::unique_ptr<EngineChoice>> choices(static_cast<size_t>(count));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (auto& c : choices) {
    c = std::make_unique<EngineChoice>();
    TFI_GPU_RETURN_IF_ERROR(BackendDesc::Create(api, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c->cfg));
    raw.push_back(c->cfg.get());
  }
  int64_t returned = 0;
  TFI_CUDNN(api, api.cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                              raw.data()));
  for (int64_t i = 0; i < returned && i < count; ++i) {
    if (!DescribeChoice(api, choices[i].get()).ok()) continue;
    out->push_back(std::move(choices[i]));
  }
  return Status::Ok();
}

Status FinalizePlan(const GpuApi& api, cudnnHandle_t handle, const EngineChoice& choice,
                    GraphPlan* out) {
  TFI_GPU_RETURN_IF_ERROR(
      BackendDesc::Create(api, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &out->plan));
  const cudnnBackendDescriptor_t cfg = choice.cfg.get();
  TFI_GPU_RETURN_IF_ERROR(Set(api, out->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                              CUDNN_TYPE_HANDLE, 1, &handle, "plan handle"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, out->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg, "plan engine config"));
  TFI_CUDNN(api, api.cudnnBackendFinalize(out->plan.get()));
  int64_t n = 0;
  TFI_CUDNN(api, api.cudnnBackendGetAttribute(out->plan.get(),
                                              CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &n, &out->workspace_bytes));
  if (out->workspace_bytes < 0) out->workspace_bytes = 0;
  return Status::Ok();
}

Status ExecutePlan(const GpuApi& api, cudnnHandle_t handle, const GraphPlan& plan,
                   const void* x, const void* w, void* y, void* workspace) {
  BackendDesc pack;
  TFI_GPU_RETURN_IF_ERROR(BackendDesc::Create(api, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
  void* ptrs[3] = {const_cast<void*>(x), const_cast<void*>(w), y};
  const int64_t uids[3] = {kUidX, kUidW, kUidY};
  TFI_GPU_RETURN_IF_ERROR(Set(api, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                              CUDNN_TYPE_VOID_PTR, 3, ptrs, "variant pack pointers"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3,
                              uids, "variant pack uids"));
  TFI_GPU_RETURN_IF_ERROR(Set(api, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                              1, &workspace, "variant pack workspace"));
  TFI_CUDNN(api, api.cudnnBackendFinalize(pack.get()));
  TFI_CUDNN(api, api.cudnnBackendExecute(handle, plan.plan.get(), pack.get()));
  return Status::Ok();
}

}  // namespace gpu
}  // namespace tf_fused_int8
