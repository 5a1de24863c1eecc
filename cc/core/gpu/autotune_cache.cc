// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/gpu/autotune_cache.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tf_fused_int8 {
namespace gpu {

const char* PathChoiceName(PathChoice p) {
  switch (p) {
    case PathChoice::kAuto: return "auto";
    case PathChoice::kGraph: return "graph";
    case PathChoice::kLegacy: return "legacy";
  }
  return "unknown";
}

const char* LayoutChoiceName(LayoutChoice l) {
  switch (l) {
    case LayoutChoice::kAuto: return "auto";
    case LayoutChoice::kX4: return "x4";
    case LayoutChoice::kX32: return "x32";
    case LayoutChoice::kNhwc: return "nhwc";
  }
  return "unknown";
}

namespace {

bool ParseBool(const std::string& v, bool* out) {
  if (v == "1" || v == "true" || v == "True" || v == "TRUE" || v == "on" || v == "yes") {
    *out = true;
    return true;
  }
  if (v == "0" || v == "false" || v == "False" || v == "FALSE" || v == "off" || v == "no") {
    *out = false;
    return true;
  }
  return false;
}

void Warn(std::string* warnings, const std::string& w) {
  if (!warnings->empty()) *warnings += "; ";
  *warnings += w;
}

}  // namespace

GpuOptions GpuOptions::FromEnvironment(
    bool deterministic, const std::function<const char*(const char*)>& getenv_fn) {
  auto get = [&](const char* name) -> const char* {
    return getenv_fn ? getenv_fn(name) : std::getenv(name);
  };
  GpuOptions o;
  o.deterministic = deterministic;

  const char* autotune = get("TF_FUSED_INT8_GPU_AUTOTUNE");
  const char* autotune_name = "TF_FUSED_INT8_GPU_AUTOTUNE";
  if (autotune == nullptr || *autotune == '\0') {
    autotune = get("TF_CUDNN_USE_AUTOTUNE");
    autotune_name = "TF_CUDNN_USE_AUTOTUNE";
  }
  if (autotune != nullptr && *autotune != '\0' && !ParseBool(autotune, &o.autotune)) {
    Warn(&o.warnings, std::string(autotune_name) + "='" + autotune +
                          "' is not 0/1/true/false; autotuning stays on");
    o.autotune = true;
  }

  const char* limit = get("TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB");
  if (limit != nullptr && *limit != '\0') {
    char* end = nullptr;
    errno = 0;
    const long long mb = std::strtoll(limit, &end, 10);
    if (errno != 0 || end == limit || *end != '\0' || mb < 0 || mb > (int64_t{1} << 40)) {
      Warn(&o.warnings, std::string("TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB='") + limit +
                            "' is not a number of MiB; using 4096");
    } else {
      o.workspace_limit_bytes = static_cast<int64_t>(mb) << 20;
    }
  }

  const char* path = get("TF_FUSED_INT8_GPU_PATH");
  if (path != nullptr && *path != '\0') {
    const std::string p = path;
    if (p == "auto") {
      o.path = PathChoice::kAuto;
    } else if (p == "graph") {
      o.path = PathChoice::kGraph;
    } else if (p == "legacy") {
      o.path = PathChoice::kLegacy;
    } else {
      Warn(&o.warnings, "TF_FUSED_INT8_GPU_PATH='" + p + "' is not auto/graph/legacy; using auto");
    }
  }

  const char* layout = get("TF_FUSED_INT8_GPU_LAYOUT");
  if (layout != nullptr && *layout != '\0') {
    const std::string l = layout;
    if (l == "auto") {
      o.layout = LayoutChoice::kAuto;
    } else if (l == "x4") {
      o.layout = LayoutChoice::kX4;
    } else if (l == "x32") {
      o.layout = LayoutChoice::kX32;
    } else if (l == "nhwc") {
      o.layout = LayoutChoice::kNhwc;
    } else {
      Warn(&o.warnings,
           "TF_FUSED_INT8_GPU_LAYOUT='" + l + "' is not auto/x4/x32/nhwc; using auto");
    }
  }
  return o;
}

ConvKey MakeConvKey(int device, int cc_major, int cc_minor, const ConvGeometry& g,
                    int64_t alignment, const GpuOptions& options) {
  ConvKey k;
  k.device = device;
  k.cc_major = cc_major;
  k.cc_minor = cc_minor;
  k.batch = g.batch;
  k.in_h = g.in_h;
  k.in_w = g.in_w;
  k.in_c = g.in_c;
  k.out_c = g.out_c;
  k.filter_h = g.filter_h;
  k.filter_w = g.filter_w;
  k.stride_h = g.stride_h;
  k.stride_w = g.stride_w;
  k.dilation_h = g.dilation_h;
  k.dilation_w = g.dilation_w;
  k.pad_top = g.pad_top;
  k.pad_bottom = g.pad_bottom;
  k.pad_left = g.pad_left;
  k.pad_right = g.pad_right;
  k.alignment = alignment;
  k.deterministic = options.deterministic;
  k.autotune = options.autotune;
  k.workspace_limit_bytes = options.workspace_limit_bytes;
  k.path = options.path;
  k.layout = options.layout;
  return k;
}

namespace {
// The fields in one place, for ==, hash and printing.
#define TFI_CONV_KEY_FIELDS(X)                                                  \
  X(device) X(cc_major) X(cc_minor) X(batch) X(in_h) X(in_w) X(in_c) X(out_c)   \
  X(filter_h) X(filter_w) X(stride_h) X(stride_w) X(dilation_h) X(dilation_w)   \
  X(pad_top) X(pad_bottom) X(pad_left) X(pad_right) X(alignment)                \
  X(deterministic) X(autotune) X(workspace_limit_bytes) X(path) X(layout)

void HashCombine(size_t* h, uint64_t v) {
  *h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (*h << 6) + (*h >> 2);
}
}  // namespace

bool ConvKey::operator==(const ConvKey& o) const {
#define TFI_EQ(f) if (f != o.f) return false;
  TFI_CONV_KEY_FIELDS(TFI_EQ)
#undef TFI_EQ
  return true;
}

size_t ConvKey::Hash() const {
  size_t h = 0;
#define TFI_HASH(f) HashCombine(&h, static_cast<uint64_t>(f));
  TFI_CONV_KEY_FIELDS(TFI_HASH)
#undef TFI_HASH
  return h;
}

std::string ConvKey::ToString() const {
  std::string s;
#define TFI_STR_FIELD(f)                 \
  s += (s.empty() ? "" : " ");           \
  s += #f "=" + std::to_string(static_cast<int64_t>(f));
  TFI_CONV_KEY_FIELDS(TFI_STR_FIELD)
#undef TFI_STR_FIELD
  return s;
}

}  // namespace gpu
}  // namespace tf_fused_int8
