// Copyright tf-fused-int8 authors. Apache 2.0.
//
// C API of the TF-free GPU backend and of the reference kernel, for
// tools/gpu_harness/harness.py (ctypes) and tests/test_gpu_build.py.
// No TensorFlow: Bazel builds it as //:libtfi_gpu_harness.so, and
// tools/gpu_check.sh builds the same sources with plain g++ on a GPU machine
// without TensorFlow. CUDA and cuDNN are dlopen()ed by tfi_init() only.
//
// Every function returns 0 on success, or a non-zero StatusCode with a
// message in `err` (never aborts).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"
#include "cc/core/gpu/autotune_cache.h"
#include "cc/core/gpu/fused_conv_gpu.h"
#include "cc/core/gpu/gpu_api.h"
#include "cc/core/gpu/host_emulation.h"
#include "cc/core/layout.h"
#include "cc/core/gpu/plan.h"

#define TFI_API extern "C" __attribute__((visibility("default")))

namespace tf_fused_int8 {
namespace gpu {

// Mirrored by harness.py's TfiConv (ctypes.Structure): keep in sync.
struct TfiConv {
  int64_t batch, in_h, in_w, in_c, out_c, filter_h, filter_w;
  int64_t stride_h, stride_w, dilation_h, dilation_w;
  int64_t groups;             // in_c / filter input depth (>= 1)
  int64_t pad_top, pad_bottom, pad_left, pad_right;  // padding == 2 only
  int32_t padding;            // 1: SAME, 0: VALID, 2: EXPLICIT (the pads above)
  int32_t relu;               // 1: Relu, 0: None
  int32_t per_channel_scale;  // conv_input_scale has out_c entries
  int32_t deterministic;      // GPU: drop non-deterministic engines
  float side_input_scale;
  int32_t has_lut;            // apply lut, the output lookup table
  int8_t lut[256];            // out = lut[q + 128]
};

namespace {

int Fail(const Status& s, char* err, int errlen) {
  if (err != nullptr && errlen > 0) {
    std::snprintf(err, static_cast<size_t>(errlen), "%s", s.ToString().c_str());
  }
  return s.ok() ? 0 : static_cast<int>(s.code());
}

Status Geometry(const TfiConv& c, ConvGeometry* g) {
  *g = ConvGeometry();
  g->batch = c.batch;
  g->in_h = c.in_h;
  g->in_w = c.in_w;
  g->in_c = c.in_c;
  g->out_c = c.out_c;
  g->filter_h = c.filter_h;
  g->filter_w = c.filter_w;
  g->stride_h = c.stride_h;
  g->stride_w = c.stride_w;
  g->dilation_h = c.dilation_h;
  g->dilation_w = c.dilation_w;
  g->groups = c.groups;
  if (c.padding < 0 || c.padding > 2) return InvalidArgument("padding must be 0, 1 or 2");
  if (c.padding == 2) {
    g->pad_top = c.pad_top;
    g->pad_bottom = c.pad_bottom;
    g->pad_left = c.pad_left;
    g->pad_right = c.pad_right;
  }
  const std::string e = ComputeGeometry(
      c.padding == 2 ? Padding::kExplicit : c.padding == 1 ? Padding::kSame : Padding::kValid, g);
  if (!e.empty()) return InvalidArgument(e);
  return Status::Ok();
}

GpuConvArgs VectArgs(const TfiConv& c, const ConvGeometry& g, const void* input,
                     const void* filter, const void* bias, const void* side, const void* scale,
                     void* output) {
  GpuConvArgs a;
  a.geo = g;
  a.input = static_cast<const int8_t*>(input);
  a.filter = static_cast<const int8_t*>(filter);
  a.bias = static_cast<const float*>(bias);
  a.side_input = static_cast<const int8_t*>(side);
  a.conv_input_scale = static_cast<const float*>(scale);
  a.per_channel_scale = c.per_channel_scale != 0;
  a.side_input_scale = c.side_input_scale;
  a.activation = c.relu ? Activation::kRelu : Activation::kNone;
  a.output_lut = c.has_lut ? c.lut : nullptr;
  a.output = static_cast<int8_t*>(output);
  return a;
}

std::string JsonString(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += ch;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      o += buf;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

std::string JsonNumber(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// The process's GpuApi (filled once by tfi_init).
std::mutex g_api_mu;
GpuApi* g_api = nullptr;

// Scratch for the harness: a growing arena of cuMemAlloc'ed chunks. All the
// chunks of one call stay valid until the next call, which first syncs the
// stream and, if the call needed more than one chunk, replaces them by one
// chunk big enough for everything (so steady-state calls allocate nothing).
class ArenaAllocator : public ScratchAllocator {
 public:
  void BeginCall(const GpuApi& api, CUstream stream) {
    api_ = &api;
    if (chunks_.size() > 1 || (chunks_.size() == 1 && high_water_ > chunks_[0].size)) {
      api.cuStreamSynchronize(stream);
      for (auto& c : chunks_) api.cuMemFree(c.ptr);
      chunks_.clear();
      Chunk c;
      c.size = high_water_;
      if (api.cuMemAlloc(&c.ptr, c.size) == CUDA_SUCCESS) chunks_.push_back(c);
    }
    current_ = 0;
    offset_ = 0;
    used_ = 0;
  }
  void* Allocate(size_t bytes) override {
    bytes = (bytes + 255) / 256 * 256;
    used_ += bytes;
    if (used_ > high_water_) high_water_ = used_;
    while (current_ < chunks_.size()) {
      Chunk& c = chunks_[current_];
      if (offset_ + bytes <= c.size) {
        void* p = reinterpret_cast<void*>(c.ptr + offset_);
        offset_ += bytes;
        return p;
      }
      ++current_;
      offset_ = 0;
    }
    Chunk c;
    c.size = bytes < (size_t{64} << 20) ? (size_t{64} << 20) : bytes;
    if (api_->cuMemAlloc(&c.ptr, c.size) != CUDA_SUCCESS) return nullptr;
    chunks_.push_back(c);
    current_ = chunks_.size() - 1;
    offset_ = bytes;
    return reinterpret_cast<void*>(c.ptr);
  }

 private:
  struct Chunk {
    CUdeviceptr ptr = 0;
    size_t size = 0;
  };
  const GpuApi* api_ = nullptr;
  std::vector<Chunk> chunks_;
  size_t current_ = 0, offset_ = 0, used_ = 0, high_water_ = 0;
};

std::mutex g_call_mu;  // one GPU call at a time (the arena is shared)
ArenaAllocator* g_arena = nullptr;

}  // namespace
}  // namespace gpu
}  // namespace tf_fused_int8

using namespace tf_fused_int8;       // NOLINT
using namespace tf_fused_int8::gpu;  // NOLINT

TFI_API int tfi_abi_version() { return 4; }

TFI_API int tfi_sizeof_conv() { return static_cast<int>(sizeof(TfiConv)); }

// Output height and width (TF's SAME/VALID rules) and the pads.
TFI_API int tfi_output_geometry(const TfiConv* c, int64_t* out_h, int64_t* out_w,
                                int64_t* pads /* top, bottom, left, right */, char* err,
                                int errlen) {
  ConvGeometry g;
  const Status s = Geometry(*c, &g);
  if (!s.ok()) return Fail(s, err, errlen);
  *out_h = g.out_h;
  *out_w = g.out_w;
  if (pads) {
    pads[0] = g.pad_top;
    pads[1] = g.pad_bottom;
    pads[2] = g.pad_left;
    pads[3] = g.pad_right;
  }
  return 0;
}

// The reference kernel of cc/core on NHWC / HWIO host buffers (side may be null).
TFI_API int tfi_reference_nhwc(const TfiConv* c, const int8_t* input, const int8_t* filter,
                               const float* bias, const int8_t* side, const float* scale,
                               int8_t* output, char* err, int errlen) {
  FusedConvArgs a;
  const Status s = Geometry(*c, &a.geo);
  if (!s.ok()) return Fail(s, err, errlen);
  a.input = input;
  a.filter = filter;
  a.bias = bias;
  a.side_input = side;
  a.conv_input_scale = scale;
  a.per_channel_scale = c->per_channel_scale != 0;
  a.side_input_scale = c->side_input_scale;
  a.activation = c->relu ? Activation::kRelu : Activation::kNone;
  a.output_lut = c->has_lut ? c->lut : nullptr;
  a.output = output;
  if (a.geo.OutputElements() > 0) RunReference(a);
  return 0;
}

// Layout codes of the C API: 0 x4, 1 x32, 2 nhwc-i32, 3 nhwc-f32 (ConvLayout order).
static Status LayoutFromCode(int code, ConvLayout* layout) {
  if (code < 0 || code > 3) return InvalidArgument("layout code must be 0..3");
  *layout = static_cast<ConvLayout>(code);
  return Status::Ok();
}

TFI_API const char* tfi_layout_name(int code) {
  ConvLayout l;
  return LayoutFromCode(code, &l).ok() ? ConvLayoutName(l) : "?";
}

// The GPU pipeline emulated on the host (NCHW_VECT_C host buffers).
TFI_API int tfi_emulate(const TfiConv* c, int layout_code, const int8_t* input,
                        const int8_t* filter, const float* bias, const int8_t* side,
                        const float* scale, int8_t* output, char* err, int errlen) {
  ConvGeometry g;
  ConvLayout layout;
  Status s = Geometry(*c, &g);
  if (s.ok()) s = LayoutFromCode(layout_code, &layout);
  if (s.ok()) {
    s = EmulateGpuPipeline(VectArgs(*c, g, input, filter, bias, side, scale, output), layout);
  }
  return Fail(s, err, errlen);
}

TFI_API void tfi_nhwc_to_nchw_vect_c(const int8_t* src, int64_t n, int64_t h, int64_t w,
                                     int64_t c, int64_t vect, int8_t* dst) {
  NhwcToNchwVectC(src, n, h, w, c, vect, dst);
}
TFI_API void tfi_nchw_vect_c_to_nhwc(const int8_t* src, int64_t n, int64_t padded_c, int64_t h,
                                     int64_t w, int64_t vect, int64_t c, int8_t* dst) {
  NchwVectCToNhwc(src, n, padded_c, h, w, vect, c, dst);
}
TFI_API void tfi_hwio_to_oihw_vect_i(const int8_t* src, int64_t kh, int64_t kw, int64_t in_c,
                                     int64_t out_c, int64_t vect, int8_t* dst) {
  HwioToOihwVectI(src, kh, kw, in_c, out_c, vect, dst);
}
TFI_API void tfi_oihw_vect_i_to_hwio(const int8_t* src, int64_t out_c, int64_t padded_in_c,
                                     int64_t kh, int64_t kw, int64_t vect, int64_t in_c,
                                     int8_t* dst) {
  OihwVectIToHwio(src, out_c, padded_in_c, kh, kw, vect, in_c, dst);
}

// How cuDNN is told about the tensors of `c` (for tests): for x, w, y in
// turn, 4 dims, 4 strides, the vector count (27 int64).
TFI_API int tfi_conv_spec(const TfiConv* c, int layout_code, int64_t* out, char* err,
                          int errlen) {
  ConvGeometry g;
  ConvLayout layout;
  Status s = Geometry(*c, &g);
  if (s.ok()) s = LayoutFromCode(layout_code, &layout);
  if (!s.ok()) return Fail(s, err, errlen);
  const ConvSpec spec = MakeConvSpec(g, layout, 16);
  const TensorSpec* ts[3] = {&spec.x, &spec.w, &spec.y};
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 4; ++i) {
      out[t * 9 + i] = ts[t]->dims[i];
      out[t * 9 + 4 + i] = ts[t]->strides[i];
    }
    out[t * 9 + 8] = ts[t]->vector_count;
  }
  return 0;
}

// The options the GPU backend would use now (environment), as JSON.
TFI_API int tfi_options_json(int deterministic, char* out, int len) {
  const GpuOptions o = GpuOptions::FromEnvironment(deterministic != 0);
  const std::string j = std::string("{\"autotune\": ") + (o.autotune ? "true" : "false") +
                        ", \"deterministic\": " + (o.deterministic ? "true" : "false") +
                        ", \"workspace_limit_bytes\": " + std::to_string(o.workspace_limit_bytes) +
                        ", \"path\": " + JsonString(PathChoiceName(o.path)) +
                        ", \"layout\": " + JsonString(LayoutChoiceName(o.layout)) +
                        ", \"warnings\": " + JsonString(o.warnings) + "}";
  std::snprintf(out, static_cast<size_t>(len), "%s", j.c_str());
  return static_cast<int>(j.size()) < len ? 0 : 1;
}

TFI_API const char* tfi_embedded_ptx() { return EmbeddedPtx(); }

// dlopen()s cuDNN and the CUDA driver. Safe to call again (no-op once loaded).
TFI_API int tfi_init(const char* cudnn_library, const char* cuda_library, char* err, int errlen) {
  std::lock_guard<std::mutex> lock(g_api_mu);
  if (g_api != nullptr) return 0;
  auto* api = new GpuApi;
  const Status s = LoadGpuApi(cudnn_library ? cudnn_library : "libcudnn.so.9",
                              cuda_library ? cuda_library : "libcuda.so.1", api);
  if (!s.ok()) {
    delete api;
    return Fail(s, err, errlen);
  }
  g_api = api;
  return 0;
}

// Runs the GPU kernel on device buffers (NCHW_VECT_C), enqueued on `stream`.
// `info` receives a JSON object: device, plan, tuned_now, plan_time_ms,
// candidates [{name, outcome, time_ms, workspace_bytes}], warnings, key.
TFI_API int tfi_gpu_conv(const TfiConv* c, const void* input, const void* filter,
                         const void* bias, const void* side, const void* scale, void* output,
                         void* stream, char* info, int info_len, char* err, int errlen) {
  GpuApi* api = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_api_mu);
    api = g_api;
  }
  if (api == nullptr) return Fail(Unavailable("call tfi_init first"), err, errlen);
  ConvGeometry g;
  Status s = Geometry(*c, &g);
  if (!s.ok()) return Fail(s, err, errlen);
  const GpuConvArgs args = VectArgs(*c, g, input, filter, bias, side, scale, output);
  const GpuOptions options = GpuOptions::FromEnvironment(c->deterministic != 0);
  GpuRunInfo ri;
  {
    std::lock_guard<std::mutex> lock(g_call_mu);
    if (g_arena == nullptr) g_arena = new ArenaAllocator;
    g_arena->BeginCall(*api, static_cast<CUstream>(stream));
    s = RunFusedConvGpu(*api, static_cast<CUstream>(stream), args, options, g_arena, &ri);
  }
  if (info != nullptr && info_len > 0) {
    std::string j = "{\"device\": " + JsonString(ri.device) + ", \"plan\": " + JsonString(ri.plan) +
                    ", \"tuned_now\": " + (ri.tuned_now ? "true" : "false") +
                    ", \"plan_time_ms\": " + JsonNumber(ri.plan_time_ms) +
                    ", \"warnings\": " + JsonString(ri.warnings) +
                    ", \"key\": " + JsonString(ri.cache_key) + ", \"candidates\": [";
    for (size_t i = 0; i < ri.candidates.size(); ++i) {
      const auto& r = ri.candidates[i];
      j += std::string(i ? ", " : "") + "{\"name\": " + JsonString(r.name) +
           ", \"outcome\": " + JsonString(r.outcome) + ", \"time_ms\": " + JsonNumber(r.time_ms) +
           ", \"workspace_bytes\": " + std::to_string(r.workspace_bytes) + "}";
    }
    j += "]}";
    if (static_cast<int>(j.size()) >= info_len) j = "{\"truncated\": true}";
    std::snprintf(info, static_cast<size_t>(info_len), "%s", j.c_str());
  }
  return Fail(s, err, errlen);
}

// lookups, hits, tunes, evictions, size
TFI_API void tfi_cache_stats(int64_t* out) {
  const AutotuneStats s = GpuAutotuneStats();
  out[0] = s.lookups;
  out[1] = s.hits;
  out[2] = s.tunes;
  out[3] = s.evictions;
  out[4] = s.size;
}

TFI_API void tfi_cache_clear() { ClearGpuAutotuneCache(); }
