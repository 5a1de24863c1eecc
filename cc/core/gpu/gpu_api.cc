// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/gpu/gpu_api.h"

#include <dlfcn.h>

#include <string>

namespace tf_fused_int8 {
namespace gpu {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

bool GpuApi::Complete(std::string* missing) const {
  std::string m;
#define TFI_CHECK_MEMBER(name) \
  if (name == nullptr) m += std::string(m.empty() ? "" : ", ") + #name;
  TFI_CUDA_DRIVER_FUNCTIONS(TFI_CHECK_MEMBER)
  TFI_CUDNN_FUNCTIONS(TFI_CHECK_MEMBER)
#undef TFI_CHECK_MEMBER
  if (missing) *missing = m;
  return m.empty();
}

namespace {

// Stringizes after macro expansion: cuMemAlloc -> "cuMemAlloc_v2".
#define TFI_STR2(x) #x
#define TFI_STR(x) TFI_STR2(x)

std::string DlError() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

}  // namespace

Status LoadGpuApi(const std::string& cudnn_library,
                  const std::string& cuda_library, GpuApi* api) {
  *api = GpuApi();
  dlerror();
  void* cuda = dlopen(cuda_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    return Unavailable("could not load the CUDA driver library " +
                       cuda_library + ": " + DlError() +
                       " (no NVIDIA driver on this machine?)");
  }
  void* cudnn = dlopen(cudnn_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (cudnn == nullptr) {
    return Unavailable("could not load cuDNN " + cudnn_library + ": " +
                       DlError() +
                       " (install cuDNN 9 or put its lib directory on "
                       "LD_LIBRARY_PATH)");
  }
  std::string missing;
#define TFI_LOAD(lib, name)                                              \
  api->name = reinterpret_cast<decltype(api->name)>(dlsym(lib, TFI_STR(name))); \
  if (api->name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + TFI_STR(name);
#define TFI_LOAD_CUDA(name) TFI_LOAD(cuda, name)
#define TFI_LOAD_CUDNN(name) TFI_LOAD(cudnn, name)
  TFI_CUDA_DRIVER_FUNCTIONS(TFI_LOAD_CUDA)
  TFI_CUDNN_FUNCTIONS(TFI_LOAD_CUDNN)
#undef TFI_LOAD_CUDNN
#undef TFI_LOAD_CUDA
#undef TFI_LOAD
  if (!missing.empty()) {
    *api = GpuApi();
    return Unavailable("missing entry points in " + cuda_library + " / " +
                       cudnn_library + ": " + missing);
  }
  // The handles stay open for the life of the process on purpose.
  api->origin = "dlopen " + cudnn_library + " + " + cuda_library;
  return Status::Ok();
}

std::string CuErrorString(const GpuApi& api, CUresult r) {
  const char* s = nullptr;
  if (api.cuGetErrorString != nullptr) api.cuGetErrorString(r, &s);
  return "CUDA error " + std::to_string(static_cast<int>(r)) +
         (s ? std::string(" (") + s + ")" : std::string());
}

Status CudnnCheck(const GpuApi& api, cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": " + CudnnErrorString(api, s));
}

std::string CudnnErrorString(const GpuApi& api, cudnnStatus_t s) {
  std::string out = "cuDNN status " + std::to_string(static_cast<int>(s));
  if (api.cudnnGetErrorString != nullptr) {
    out += std::string(" (") + api.cudnnGetErrorString(s) + ")";
  }
  if (api.cudnnGetLastErrorString != nullptr) {
    char buf[512] = {0};
    api.cudnnGetLastErrorString(buf, sizeof(buf));
    if (buf[0] != '\0') out += std::string(": ") + buf;
  }
  return out;
}

}  // namespace gpu
}  // namespace tf_fused_int8
