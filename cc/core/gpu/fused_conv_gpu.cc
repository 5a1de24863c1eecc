// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/gpu/fused_conv_gpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/gpu/cudnn_graph.h"
#include "cc/core/gpu/cudnn_legacy.h"
#include "cc/core/gpu/device_kernels.h"
#include "cc/core/layout.h"

namespace tf_fused_int8 {
namespace gpu {
namespace {

const char kPtx[] =
#include "cc/core/gpu/device_kernels_ptx.inc"
    ;

constexpr int kTimedRuns = 3;
constexpr size_t kMinCudnnVersion = 90000;  // cuDNN 9.0.0

Status CuCheck(const GpuApi& api, CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": " + CuErrorString(api, r));
}

#define TFI_CU(api, call) TFI_GPU_RETURN_IF_ERROR(CuCheck(api, (call), #call))

// Makes the stream's context current for the call and restores the previous
// one afterwards.
class ScopedContext {
 public:
  ScopedContext(const GpuApi& api, CUstream stream) : api_(api) {
    CUcontext ctx = nullptr;
    if (api.cuStreamGetCtx(stream, &ctx) != CUDA_SUCCESS || ctx == nullptr) {
      ctx = nullptr;
      api.cuCtxGetCurrent(&ctx);
    }
    if (ctx == nullptr) {
      status_ = Unavailable("no CUDA context owns the stream and none is current");
      return;
    }
    const CUresult r = api.cuCtxPushCurrent(ctx);
    if (r != CUDA_SUCCESS) {
      status_ = Internal("cuCtxPushCurrent: " + CuErrorString(api, r));
      return;
    }
    ctx_ = ctx;
  }
  ~ScopedContext() {
    if (ctx_ != nullptr) {
      CUcontext popped = nullptr;
      api_.cuCtxPopCurrent(&popped);
    }
  }
  const Status& status() const { return status_; }
  CUcontext context() const { return ctx_; }

 private:
  const GpuApi& api_;
  CUcontext ctx_ = nullptr;
  Status status_;
};

// Per CUDA context: the device, our kernels, one cuDNN handle.
struct DeviceState {
  Status status;
  int ordinal = -1;
  int cc_major = 0, cc_minor = 0;
  std::string name;
  size_t cudnn_version = 0;
  CUmodule module = nullptr;
  CUfunction epilogue = nullptr, x4_to_x32 = nullptr, transpose = nullptr,
             count_mismatch = nullptr, check_sample = nullptr, direct_conv = nullptr,
             depthwise_conv = nullptr;
  std::mutex handle_mu;  // guards every use of `handle`
  cudnnHandle_t handle = nullptr;

  std::string Describe() const {
    return name + " (sm_" + std::to_string(cc_major) + std::to_string(cc_minor) +
           ", device " + std::to_string(ordinal) + ")";
  }
};

Status InitDevice(const GpuApi& api, DeviceState* d) {
  api.cuInit(0);
  CUdevice dev = 0;
  TFI_CU(api, api.cuCtxGetDevice(&dev));
  d->ordinal = static_cast<int>(dev);
  TFI_CU(api, api.cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                       dev));
  TFI_CU(api, api.cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                       dev));
  char name[256] = {0};
  if (api.cuDeviceGetName(name, sizeof(name) - 1, dev) == CUDA_SUCCESS) d->name = name;
  if (d->cc_major * 10 + d->cc_minor < 61) {
    return Unimplemented("the int8 GPU kernel needs compute capability 6.1 or newer (dp4a); " +
                         d->Describe() + " has " + std::to_string(d->cc_major) + "." +
                         std::to_string(d->cc_minor) +
                         ". Run the op on the CPU (NHWC; tf_fused_int8.nchw_vect_c_to_nhwc)");
  }
  d->cudnn_version = api.cudnnGetVersion();
  if (d->cudnn_version < kMinCudnnVersion) {
    return Unimplemented("the int8 GPU kernel needs cuDNN 9 or newer, found version " +
                         std::to_string(d->cudnn_version));
  }
  char log[4096] = {0};
  CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[2] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(log) - 1))};
  const CUresult r = api.cuModuleLoadDataEx(&d->module, kPtx, 2, opts, vals);
  if (r != CUDA_SUCCESS) {
    return Internal("loading the embedded PTX (device_kernels_ptx.inc) failed: " +
                    CuErrorString(api, r) + ": " + log);
  }
  TFI_CU(api, api.cuModuleGetFunction(&d->epilogue, d->module, kEpilogueKernelName));
  TFI_CU(api, api.cuModuleGetFunction(&d->x4_to_x32, d->module, kX4ToX32KernelName));
  TFI_CU(api, api.cuModuleGetFunction(&d->transpose, d->module, kTransposeKernelName));
  TFI_CU(api, api.cuModuleGetFunction(&d->count_mismatch, d->module, kCountMismatchKernelName));
  TFI_CU(api, api.cuModuleGetFunction(&d->check_sample, d->module, kCheckSampleKernelName));
  TFI_CU(api, api.cuModuleGetFunction(&d->direct_conv, d->module, kDirectConvKernelName));
  TFI_CU(api, api.cuModuleGetFunction(&d->depthwise_conv, d->module, kDepthwiseConvKernelName));
  const cudnnStatus_t s = api.cudnnCreate(&d->handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    d->handle = nullptr;
    return Internal("cudnnCreate: " + CudnnErrorString(api, s));
  }
  return Status::Ok();
}

// The state of the current context (created once; lives as long as the
// process: modules and handles are never unloaded, like TF's own).
DeviceState* GetDeviceState(const GpuApi& api, CUcontext ctx) {
  static std::mutex* mu = new std::mutex;
  static auto* states = new std::map<CUcontext, std::unique_ptr<DeviceState>>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = states->find(ctx);
  if (it != states->end()) return it->second.get();
  auto d = std::make_unique<DeviceState>();
  d->status = InitDevice(api, d.get());
  DeviceState* raw = d.get();
  states->emplace(ctx, std::move(d));
  return raw;
}

// At most this many engine configurations per operation graph and heuristics
// mode are considered (in the heuristics' order): bounds the first call's
// autotuning time (plans of runtime-compiled engines take long to build).
constexpr size_t kMaxEnginesPerGraph = 8;

// One way to run the convolution: a finalized graph plan or a legacy
// algorithm, for one ConvLayout.
struct Candidate {
  bool legacy = false;
  ConvLayout layout = ConvLayout::kVect4;
  std::shared_ptr<GraphConv> graph;
  std::unique_ptr<EngineChoice> engine;
  GraphPlan plan;
  std::shared_ptr<LegacyConv> lconv;
  LegacyAlgo algo;
  int64_t workspace = 0;
  std::string name;
};

AutotuneCache<Candidate>& Cache() {
  static auto* cache = new AutotuneCache<Candidate>();
  return *cache;
}

Status RunConv(const GpuApi& api, DeviceState* dev, CUstream stream, const Candidate& c,
               const void* x, const void* w, void* y, void* workspace) {
  std::lock_guard<std::mutex> lock(dev->handle_mu);
  const cudnnStatus_t s = api.cudnnSetStream(dev->handle, stream);
  if (s != CUDNN_STATUS_SUCCESS) return Internal("cudnnSetStream: " + CudnnErrorString(api, s));
  if (c.legacy) return ExecuteLegacy(api, dev->handle, *c.lconv, c.algo, x, w, y, workspace);
  return ExecutePlan(api, dev->handle, c.plan, x, w, y, workspace);
}

Status Launch(const GpuApi& api, CUfunction f, uint32_t words, void** params, CUstream stream) {
  if (words == 0) return Status::Ok();
  TFI_CU(api, api.cuLaunchKernel(f, BlocksFor(words), 1, 1, kThreadsPerBlock, 1, 1, 0, stream,
                                 params, nullptr));
  return Status::Ok();
}

// Converts x and w for `layout` into xc and wc (nothing for kVect4).
Status ConvertOperands(const GpuApi& api, DeviceState* dev, CUstream stream,
                       const ConvGeometry& g, ConvLayout layout, const void* x, const void* w,
                       void* xc, void* wc) {
  if (layout == ConvLayout::kVect4 || g.in_c == 0) return Status::Ok();
  if (layout == ConvLayout::kVect32) {
    VectParams px = MakeActivationX32Params(g, x, xc);
    void* ax[] = {&px};
    TFI_GPU_RETURN_IF_ERROR(Launch(api, dev->x4_to_x32, px.words, ax, stream));
    VectParams pw = MakeFilterX32Params(g, w, wc);
    void* aw[] = {&pw};
    return Launch(api, dev->x4_to_x32, pw.words, aw, stream);
  }
  TransposeParams px = MakeActivationNhwcParams(g, x, xc);
  void* ax[] = {&px};
  TFI_GPU_RETURN_IF_ERROR(Launch(api, dev->transpose, px.words, ax, stream));
  TransposeParams pw = MakeFilterNhwcParams(g, w, wc);
  void* aw[] = {&pw};
  return Launch(api, dev->transpose, pw.words, aw, stream);
}

// Times `fn` (work enqueued on `stream`) kTimedRuns times; the median in ms.
Status TimeRuns(const GpuApi& api, CUstream stream, const std::function<Status()>& fn,
                double* median_ms) {
  CUevent start = nullptr, stop = nullptr;
  TFI_CU(api, api.cuEventCreate(&start, CU_EVENT_DEFAULT));
  Status status;
  std::vector<double> times;
  if (api.cuEventCreate(&stop, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    api.cuEventDestroy(start);
    return Internal("cuEventCreate failed");
  }
  for (int i = 0; i < kTimedRuns && status.ok(); ++i) {
    status = CuCheck(api, api.cuEventRecord(start, stream), "cuEventRecord");
    if (status.ok()) status = fn();
    if (status.ok()) status = CuCheck(api, api.cuEventRecord(stop, stream), "cuEventRecord");
    if (status.ok()) status = CuCheck(api, api.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    if (status.ok()) status = CuCheck(api, api.cuEventElapsedTime(&ms, start, stop),
                                      "cuEventElapsedTime");
    if (status.ok()) times.push_back(ms);
  }
  api.cuEventDestroy(start);
  api.cuEventDestroy(stop);
  if (!status.ok()) return status;
  std::sort(times.begin(), times.end());
  *median_ms = times[times.size() / 2];
  return Status::Ok();
}

struct TuneInputs {
  const GpuApi* api;
  DeviceState* dev;
  CUstream stream;
  const GpuConvArgs* args;
  const GpuOptions* options;
  ScratchAllocator* scratch;
  void* y;
  int64_t alignment;
  std::vector<CandidateReport>* reports;
};

// Lists every candidate that builds and passes the filters, in order: graph
// heuristics (AutoLayouts, or the forced layout), legacy algorithms (same
// layouts); graph fallback engines only if none of those is left.
Status ListCandidates(const TuneInputs& in, std::vector<std::unique_ptr<Candidate>>* out,
                      bool* allocation_failed) {
  const GpuApi& api = *in.api;
  DeviceState* dev = in.dev;
  const ConvGeometry& g = in.args->geo;
  const GpuOptions& opt = *in.options;
  *allocation_failed = false;
  if (opt.path == PathChoice::kLegacy && !SymmetricPadding(g)) {
    // Asymmetric padding (SAME with an odd total, or EXPLICIT) runs on the
    // graph path only.
    return Unimplemented(
        "the legacy cuDNN path (forced) needs symmetric padding, got top/bottom " +
        std::to_string(g.pad_top) + "/" + std::to_string(g.pad_bottom) +
        " left/right " + std::to_string(g.pad_left) + "/" +
        std::to_string(g.pad_right) + "; use the graph or auto path");
  }
  std::vector<ConvLayout> layouts;
  switch (opt.layout) {
    case LayoutChoice::kX32:
      if (g.in_c % 32 != 0) {
        return Unimplemented("TF_FUSED_INT8_GPU_LAYOUT=x32 needs an input depth that is a "
                             "multiple of 32, got " + std::to_string(g.in_c));
      }
      layouts = {ConvLayout::kVect32};
      break;
    case LayoutChoice::kX4:
      layouts = {ConvLayout::kVect4};
      break;
    case LayoutChoice::kNhwc:
      layouts = {ConvLayout::kNhwcInt32, ConvLayout::kNhwcFloat};
      break;
    case LayoutChoice::kAuto:
      layouts = AutoLayouts(g, dev->cc_major, dev->cc_minor);
      break;
  }
  auto report = [&](const std::string& name, const std::string& outcome, int64_t ws = 0) {
    in.reports->push_back(CandidateReport{name, outcome, -1, ws});
  };
  const bool use_graph = opt.path != PathChoice::kLegacy;
  const bool use_legacy = opt.path != PathChoice::kGraph;

  // Finalizes one engine configuration into a candidate.
  auto finalize = [&](ConvLayout layout, const std::shared_ptr<GraphConv>& graph,
                      std::unique_ptr<EngineChoice> choice, const std::string& name) {
    auto c = std::make_unique<Candidate>();
    Status s;
    {
      std::lock_guard<std::mutex> lock(dev->handle_mu);
      s = FinalizePlan(api, dev->handle, *choice, &c->plan);
    }
    if (!s.ok()) {
      report(name, "dropped: plan does not build: " + s.message());
      return;
    }
    if (c->plan.workspace_bytes > opt.workspace_limit_bytes) {
      report(name, "dropped: workspace over the limit", c->plan.workspace_bytes);
      return;
    }
    c->layout = layout;
    c->graph = graph;
    c->engine = std::move(choice);
    c->workspace = c->plan.workspace_bytes;
    c->name = name;
    out->push_back(std::move(c));
  };
  // Runtime-compiled engines (NVRTC; seconds to build a plan) are kept for
  // when no precompiled engine or legacy algorithm works.
  struct Deferred {
    ConvLayout layout;
    std::shared_ptr<GraphConv> graph;
    std::unique_ptr<EngineChoice> choice;
    std::string name;
  };
  std::vector<Deferred> deferred;

  auto add_graph = [&](ConvLayout layout, cudnnBackendHeurMode_t mode, const char* suffix) {
    const std::string prefix = std::string("graph/") + ConvLayoutName(layout) + "/";
    std::unique_ptr<GraphConv> built;
    std::vector<std::unique_ptr<EngineChoice>> choices;
    Status s;
    {
      std::lock_guard<std::mutex> lock(dev->handle_mu);
      s = BuildConvGraph(api, dev->handle, MakeConvSpec(g, layout, in.alignment), &built);
      if (s.ok()) s = GetEngineChoices(api, *built, mode, &choices);
    }
    if (!s.ok()) {
      report(prefix + suffix, "no graph: " + s.message());
      return;
    }
    if (choices.empty()) report(prefix + suffix, "heuristics returned no engine");
    std::shared_ptr<GraphConv> graph(std::move(built));
    size_t tried = 0;
    for (auto& choice : choices) {
      const std::string name = prefix + choice->Name() + suffix;
      if (choice->inexact) {
        report(name, "dropped: not exact (" + choice->inexact_reason + ")");
        continue;
      }
      if (choice->requires_reorder) {
        report(name, "dropped: needs INT8x32-reordered filters");
        continue;
      }
      if (opt.deterministic && choice->nondeterministic) {
        report(name, "dropped: non-deterministic (op determinism is on)");
        continue;
      }
      if (choice->runtime_compiled) {
        deferred.push_back(Deferred{layout, graph, std::move(choice), name});
        continue;
      }
      if (tried == kMaxEnginesPerGraph) {
        report(name, "not tried (beyond the first " + std::to_string(kMaxEnginesPerGraph) +
                         " usable heuristic choices)");
        continue;
      }
      ++tried;
      finalize(layout, graph, std::move(choice), name);
    }
  };

  auto add_legacy = [&](ConvLayout layout) {
    const std::string prefix = std::string("legacy/") + ConvLayoutName(layout) + "/";
    std::unique_ptr<LegacyConv> built;
    std::vector<LegacyAlgo> algos;
    Status s = BuildLegacyConv(api, g, layout, &built);
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(dev->handle_mu);
      s = GetLegacyAlgos(api, dev->handle, *built, &algos);
    }
    if (!s.ok()) {
      report(prefix, "not used: " + s.message());
      return;
    }
    if (algos.empty()) report(prefix, "no algorithm for this configuration");
    std::shared_ptr<LegacyConv> conv(std::move(built));
    for (const LegacyAlgo& a : algos) {
      const std::string name = prefix + a.Name();
      if (a.inexact) {
        report(name, "dropped: not exact (FFT/Winograd)");
        continue;
      }
      if (opt.deterministic && a.nondeterministic) {
        report(name, "dropped: non-deterministic (op determinism is on)");
        continue;
      }
      if (a.workspace_bytes > opt.workspace_limit_bytes) {
        report(name, "dropped: workspace over the limit", a.workspace_bytes);
        continue;
      }
      auto c = std::make_unique<Candidate>();
      c->legacy = true;
      c->layout = layout;
      c->lconv = conv;
      c->algo = a;
      c->workspace = a.workspace_bytes;
      c->name = name;
      out->push_back(std::move(c));
    }
  };

  if (use_graph) {
    for (ConvLayout l : layouts) add_graph(l, CUDNN_HEUR_MODE_A, "");
  }
  if (use_legacy) {
    for (ConvLayout l : layouts) add_legacy(l);
  }
  // Runtime-compiled engines only when nothing precompiled is left, at most
  // kMaxEnginesPerGraph of them.
  auto try_deferred = [&] {
    const bool have_precompiled = !out->empty();
    size_t tried = 0;
    for (Deferred& d : deferred) {
      if (d.choice == nullptr) continue;
      if (have_precompiled || tried == kMaxEnginesPerGraph) {
        report(d.name, "not tried (runtime-compiled; only used when nothing precompiled works)");
      } else {
        ++tried;
        finalize(d.layout, d.graph, std::move(d.choice), d.name);
      }
      d.choice.reset();
    }
  };
  try_deferred();
  if (out->empty() && use_graph) {
    for (ConvLayout l : layouts) add_graph(l, CUDNN_HEUR_MODE_FALLBACK, "/fallback");
    try_deferred();
  }
  return Status::Ok();
}

std::string Summary(const std::vector<CandidateReport>& reports) {
  std::string s;
  for (const auto& r : reports) {
    if (!s.empty()) s += "; ";
    s += r.name + ": " + r.outcome;
  }
  return s.empty() ? "no candidates" : s;
}

// The absolute check of one candidate's result `out` (SampleCheckParams):
// sets *wrong to why it is wrong, or leaves it empty when every sampled
// element equals float32 of its exact accumulator. `result`: 4 device words.
Status CheckSample(const TuneInputs& in, const Candidate& c, const void* out, uint32_t* result,
                   std::string* wrong) {
  const GpuApi& api = *in.api;
  const ConvGeometry& g = in.args->geo;
  wrong->clear();
  SampleCheckParams q = MakeSampleCheckParams(
      g, MakeConvSpec(g, c.layout, in.alignment).Output(out), in.args->input, in.args->filter,
      result);
  TFI_CU(api, api.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(result), 0, 1, in.stream));
  TFI_CU(api, api.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(result + 1), 0xffffffffu, 1,
                                   in.stream));
  void* params[] = {&q};
  TFI_GPU_RETURN_IF_ERROR(Launch(api, in.dev->check_sample, q.samples, params, in.stream));
  uint32_t host[4] = {0, 0, 0, 0};
  TFI_CU(api, api.cuMemcpyDtoHAsync(host, reinterpret_cast<CUdeviceptr>(result), sizeof(host),
                                    in.stream));
  TFI_CU(api, api.cuStreamSynchronize(in.stream));
  if (host[0] == 0) return Status::Ok();
  // Name the first element that reported, as (n, c, oy, ox).
  uint32_t n, ch, p;
  SampleElement(q, host[1], &n, &ch, &p);
  float got = 0;
  std::memcpy(&got, &host[3], sizeof(got));
  *wrong = "wrong: " + std::to_string(host[0]) + " of " + std::to_string(q.samples) +
           " sampled values differ from float32 of the exact sum; at (n, c, oy, ox) = (" +
           std::to_string(n) + ", " + std::to_string(ch) + ", " + std::to_string(p / q.ops.out_w) +
           ", " + std::to_string(p % q.ops.out_w) + ") it wrote " + std::to_string(got) +
           ", the exact sum is " + std::to_string(static_cast<int32_t>(host[2]));
  return Status::Ok();
}

TuneResult<Candidate> Tune(const TuneInputs& in) {
  TuneResult<Candidate> result;
  const GpuApi& api = *in.api;
  DeviceState* dev = in.dev;
  const ConvGeometry& g = in.args->geo;
  std::vector<std::unique_ptr<Candidate>> cands;
  bool allocation_failed = false;
  result.status = ListCandidates(in, &cands, &allocation_failed);
  if (!result.status.ok()) return result;
  if (cands.empty()) {
    result.status = NotFound("no cuDNN engine or algorithm runs this int8 convolution exactly (" +
                             Summary(*in.reports) + ")");
    return result;
  }
  const bool autotune = in.options->autotune;

  // Buffers: converted operands per layout, a second output for the check
  // against the baseline, 4 words for the sample check, the largest workspace
  // that can be had (within the limit). Without autotuning, candidates run in
  // the heuristics' order, untimed, until one passes the sample check.
  ScratchAllocator* scratch = in.scratch;
  struct Converted {
    void* x = nullptr;
    void* w = nullptr;
    double ms = 0;  // conversion time, added to each candidate of the layout
  };
  std::map<ConvLayout, Converted> converted;
  for (auto& c : cands) {
    if (!c || c->layout == ConvLayout::kVect4 || converted.count(c->layout)) continue;
    Converted cv;
    cv.x = scratch->Allocate(static_cast<size_t>(ConvertedInputBytes(g, c->layout)));
    cv.w = scratch->Allocate(static_cast<size_t>(ConvertedFilterBytes(g, c->layout)));
    Status s = (cv.x && cv.w) ? Status::Ok()
                              : ResourceExhausted("no scratch for the converted operands");
    if (s.ok()) {
      s = TimeRuns(api, in.stream, [&] {
        return ConvertOperands(api, dev, in.stream, g, c->layout, in.args->input,
                               in.args->filter, cv.x, cv.w);
      }, &cv.ms);
    }
    if (s.ok()) {
      converted[c->layout] = cv;
      continue;
    }
    allocation_failed |= s.code() == StatusCode::kResourceExhausted;
    const ConvLayout dropped = c->layout;
    for (auto& d : cands) {
      if (d && d->layout == dropped) {
        in.reports->push_back({d->name, "dropped: " + s.message(), -1, d->workspace});
        d.reset();
      }
    }
  }
  cands.erase(std::remove(cands.begin(), cands.end(), nullptr), cands.end());
  const size_t y_bytes = static_cast<size_t>(g.OutputElements()) * sizeof(float);
  void* y2 = autotune ? scratch->Allocate(y_bytes) : nullptr;
  uint32_t* counter = static_cast<uint32_t*>(scratch->Allocate(sizeof(uint32_t)));
  uint32_t* sample_result = static_cast<uint32_t*>(scratch->Allocate(4 * sizeof(uint32_t)));
  if (sample_result == nullptr) {
    result.status = ResourceExhausted("no scratch for the autotuning check (16 bytes)");
    result.transient = true;
    return result;
  }
  int64_t ws_have = 0;
  void* workspace = nullptr;
  {
    std::vector<int64_t> sizes;
    for (auto& c : cands) {
      if (c) sizes.push_back(c->workspace);
    }
    std::sort(sizes.rbegin(), sizes.rend());
    for (int64_t s : sizes) {
      if (s == 0) {
        ws_have = 0;
        break;
      }
      workspace = scratch->Allocate(static_cast<size_t>(s));
      if (workspace != nullptr) {
        ws_have = s;
        break;
      }
      allocation_failed = true;
    }
  }

  const Candidate* baseline = nullptr;
  const Candidate* best = nullptr;
  double best_ms = 0;
  const uint32_t elements = static_cast<uint32_t>(g.OutputElements());
  for (auto& cp : cands) {
    if (!cp) continue;
    Candidate& c = *cp;
    CandidateReport rep{c.name, "", -1, c.workspace};
    if (c.workspace > ws_have) {
      rep.outcome = "dropped: could not allocate its workspace";
      in.reports->push_back(rep);
      continue;
    }
    const bool conv_operands = c.layout != ConvLayout::kVect4;
    const void* x = conv_operands ? converted[c.layout].x : in.args->input;
    const void* w = conv_operands ? converted[c.layout].w : in.args->filter;
    void* out = (baseline == nullptr || y2 == nullptr) ? static_cast<void*>(in.y) : y2;
    Status s;
    if (c.legacy) {
      std::lock_guard<std::mutex> lock(dev->handle_mu);
      s = SetLegacyMath(api, *c.lconv, c.algo);
    }
    if (s.ok()) s = RunConv(api, dev, in.stream, c, x, w, out, workspace);
    if (s.ok()) s = CuCheck(api, api.cuStreamSynchronize(in.stream), "cuStreamSynchronize");
    if (!s.ok()) {
      rep.outcome = "dropped: execution failed: " + s.message();
      in.reports->push_back(rep);
      continue;
    }
    std::string wrong;
    s = CheckSample(in, c, out, sample_result, &wrong);
    if (!s.ok() || !wrong.empty()) {
      rep.outcome = s.ok() ? "dropped: " + wrong : "dropped: sample check failed: " + s.message();
      in.reports->push_back(rep);
      continue;
    }
    if (!autotune) {
      // The heuristics' first choice that is right, not timed.
      rep.outcome = "chosen (autotuning off)";
      in.reports->push_back(rep);
      best = &c;
      break;
    }
    if (baseline != nullptr && y2 != nullptr && counter != nullptr) {
      uint32_t mismatches = 0;
      s = CuCheck(api, api.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(counter), 0, 1,
                                            in.stream), "cuMemsetD32Async");
      CompareParams q{};
      q.a = MakeConvSpec(g, baseline->layout, in.alignment).Output(in.y);
      q.b = MakeConvSpec(g, c.layout, in.alignment).Output(y2);
      q.mismatches = counter;
      q.channels = static_cast<uint32_t>(g.out_c);
      q.pixels = static_cast<uint32_t>(g.out_h * g.out_w);
      q.elements = elements;
      void* params[] = {&q};
      if (s.ok()) s = Launch(api, dev->count_mismatch, elements, params, in.stream);
      if (s.ok()) {
        s = CuCheck(api, api.cuMemcpyDtoHAsync(&mismatches, reinterpret_cast<CUdeviceptr>(counter),
                                               sizeof(mismatches), in.stream),
                    "cuMemcpyDtoHAsync");
      }
      if (s.ok()) s = CuCheck(api, api.cuStreamSynchronize(in.stream), "cuStreamSynchronize");
      if (!s.ok() || mismatches != 0) {
        rep.outcome = s.ok() ? "dropped: float32(acc) differs from " + baseline->name + " in " +
                                   std::to_string(mismatches) + " of " + std::to_string(elements) +
                                   " values"
                             : "dropped: check failed: " + s.message();
        in.reports->push_back(rep);
        continue;
      }
    }
    double ms = 0;
    s = TimeRuns(api, in.stream,
                 [&] { return RunConv(api, dev, in.stream, c, x, w, out, workspace); }, &ms);
    if (!s.ok()) {
      rep.outcome = "dropped: timing failed: " + s.message();
      in.reports->push_back(rep);
      continue;
    }
    if (conv_operands) ms += converted[c.layout].ms;
    rep.time_ms = ms;
    rep.outcome = baseline == nullptr ? "ok (baseline)" : "ok";
    in.reports->push_back(rep);
    if (baseline == nullptr) baseline = &c;
    if (best == nullptr || ms < best_ms) {
      best = &c;
      best_ms = ms;
    }
  }
  if (best == nullptr) {
    result.status = NotFound("no cuDNN engine or algorithm ran this int8 convolution (" +
                             Summary(*in.reports) + ")");
    result.transient = allocation_failed;
    return result;
  }
  for (auto& cp : cands) {
    if (cp.get() == best) {
      if (cp->legacy) {
        std::lock_guard<std::mutex> lock(dev->handle_mu);
        result.status = SetLegacyMath(api, *cp->lconv, cp->algo);
        if (!result.status.ok()) return result;
      }
      result.value = std::shared_ptr<const Candidate>(std::move(cp));
      break;
    }
  }
  return result;
}

}  // namespace

const char* EmbeddedPtx() { return kPtx; }

AutotuneStats GpuAutotuneStats() { return Cache().stats(); }
void ClearGpuAutotuneCache() { Cache().Clear(); }

Status RunFusedConvGpu(const GpuApi& api, CUstream stream, const GpuConvArgs& args,
                       const GpuOptions& options, ScratchAllocator* scratch, GpuRunInfo* info) {
  GpuRunInfo local_info;
  if (info == nullptr) info = &local_info;
  info->warnings = options.warnings;
  std::string missing;
  if (!api.Complete(&missing)) {
    return Unavailable("CUDA/cuDNN entry points missing (" + missing + ")");
  }
  const ConvGeometry& g = args.geo;
  TFI_GPU_RETURN_IF_ERROR(ValidateGpuGeometry(g));
  if (g.OutputElements() == 0) return Status::Ok();
  if (scratch == nullptr) return InvalidArgument("RunFusedConvGpu needs a scratch allocator");

  ScopedContext scoped(api, stream);
  TFI_GPU_RETURN_IF_ERROR(scoped.status());
  DeviceState* dev = GetDeviceState(api, scoped.context());
  info->device = dev->Describe();
  TFI_GPU_RETURN_IF_ERROR(dev->status);

  if (UsesDepthwiseKernel(g)) {
    // One input word per group (depthwise, groups of 4 channels): the fused
    // kernel forms the exact sums and applies the epilogue in one pass, one
    // thread per output word; no float32 y, no scratch, no cuDNN, no
    // autotuning. Bit for bit what tfi_direct_conv + tfi_epilogue_x4 write
    // (DepthwiseConvParams). The forced path/layout options do not apply.
    DepthwiseConvParams d = MakeDepthwiseConvParams(args);
    void* dparams[] = {&d};
    info->plan = kDepthwisePlanName;
    return Launch(api, dev->depthwise_conv, d.epi.words, dparams, stream);
  }

  void* y = scratch->Allocate(static_cast<size_t>(g.OutputElements()) * sizeof(float));
  if (y == nullptr) {
    return ResourceExhausted("could not allocate " + std::to_string(g.OutputElements() * 4) +
                             " bytes of GPU scratch for the convolution's float32 output");
  }

  // Float32 NCHW unless the plan says otherwise.
  ConvOutput conv_out = MakeConvSpec(g, ConvLayout::kVect4, 16).Output(y);
  if (UsesDirectKernel(g)) {
    // Other grouped calls (groups of 8+ input channels): our direct kernel
    // writes float32(exact acc) into the float32 NCHW y; no cuDNN, no
    // autotuning (nothing to choose), no cache entry. The forced path/layout
    // options do not apply.
    DirectConvParams d = MakeDirectConvParams(g, args.input, args.filter, static_cast<float*>(y));
    void* dparams[] = {&d};
    TFI_GPU_RETURN_IF_ERROR(Launch(api, dev->direct_conv, d.elements, dparams, stream));
    info->plan = kDirectPlanName;
  } else if (g.in_c == 0) {
    // No input channels: every accumulator is 0; only the epilogue runs.
    TFI_CU(api, api.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(y), 0,
                                     static_cast<size_t>(g.OutputElements()), stream));
    info->plan = "none (no input channels)";
  } else {
    const int64_t alignment = AlignmentOf({args.input, args.filter});
    const ConvKey key =
        MakeConvKey(dev->ordinal, dev->cc_major, dev->cc_minor, g, alignment, options);
    info->cache_key = key.ToString();
    std::vector<CandidateReport> reports;
    TuneInputs in{&api, dev, stream, &args, &options, scratch, y, alignment, &reports};
    bool tuned_now = false;
    TuneResult<Candidate> r =
        Cache().GetOrTune(key, [&] { return Tune(in); }, &tuned_now);
    info->tuned_now = tuned_now;
    if (tuned_now) info->candidates = reports;
    TFI_GPU_RETURN_IF_ERROR(r.status);
    const Candidate& c = *r.value;
    info->plan = c.name;
    for (const auto& rep : reports) {
      if (rep.name == c.name) info->plan_time_ms = rep.time_ms;
    }

    const void* x = args.input;
    const void* w = args.filter;
    if (c.layout != ConvLayout::kVect4) {
      void* xc = scratch->Allocate(static_cast<size_t>(ConvertedInputBytes(g, c.layout)));
      void* wc = scratch->Allocate(static_cast<size_t>(ConvertedFilterBytes(g, c.layout)));
      if (xc == nullptr || wc == nullptr) {
        return ResourceExhausted("could not allocate GPU scratch for the converted operands");
      }
      TFI_GPU_RETURN_IF_ERROR(ConvertOperands(api, dev, stream, g, c.layout, x, w, xc, wc));
      x = xc;
      w = wc;
    }
    conv_out = MakeConvSpec(g, c.layout, alignment).Output(y);
    void* workspace = nullptr;
    if (c.workspace > 0) {
      workspace = scratch->Allocate(static_cast<size_t>(c.workspace));
      if (workspace == nullptr) {
        return ResourceExhausted("could not allocate the " + std::to_string(c.workspace) +
                                 "-byte cuDNN workspace of " + c.name);
      }
    }
    TFI_GPU_RETURN_IF_ERROR(RunConv(api, dev, stream, c, x, w, y, workspace));
  }

  EpilogueParams p = MakeEpilogueParams(args, conv_out);
  void* params[] = {&p};
  return Launch(api, dev->epilogue, p.words, params, stream);
}

}  // namespace gpu
}  // namespace tf_fused_int8
