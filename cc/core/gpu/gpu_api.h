// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The table of every CUDA driver and cuDNN entry point the GPU backend calls.
//
// The backend never calls a CUDA or cuDNN function by name: it goes through a
// GpuApi, so that nothing under cc/core links against CUDA or cuDNN, and the
// op library still loads on machines without a GPU. Two ways to fill it:
//
//   * inside TensorFlow (cc/tf/gpu_kernel.cc): the addresses of the lazily
//     loading stubs that libtensorflow_framework.so.2 exports for every CUDA
//     driver / cuDNN function (they dlopen the libraries TF itself uses, on
//     first call); the op library gets no new DT_NEEDED entry;
//   * without TensorFlow (the GPU harness, tools/gpu_harness): LoadGpuApi()
//     below, which dlopen()s libcuda.so.1 and libcudnn.so.9.
//
// Only types, enums and prototypes come from cuda.h and cudnn.h (TF's pip
// wheel ships them under include/third_party/gpus; see //third_party/tf).
// No TensorFlow header may be included anywhere under cc/core/.
#ifndef TF_FUSED_INT8_CC_CORE_GPU_GPU_API_H_
#define TF_FUSED_INT8_CC_CORE_GPU_GPU_API_H_

#include <cuda.h>
#include <cudnn.h>

#include <string>

#include "cc/core/gpu/status.h"

namespace tf_fused_int8 {
namespace gpu {

// CUDA driver API. Several names are macros in cuda.h (cuMemAlloc ->
// cuMemAlloc_v2, ...); the table uses whatever the header maps them to, for
// the struct member, the stub address and the dlsym() name alike.
#define TFI_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuGetErrorString)                \
  X(cuInit)                          \
  X(cuDriverGetVersion)              \
  X(cuStreamGetCtx)                  \
  X(cuStreamSynchronize)             \
  X(cuCtxGetCurrent)                 \
  X(cuCtxPushCurrent)                \
  X(cuCtxPopCurrent)                 \
  X(cuCtxGetDevice)                  \
  X(cuDeviceGetAttribute)            \
  X(cuDeviceGetName)                 \
  X(cuModuleLoadDataEx)              \
  X(cuModuleGetFunction)             \
  X(cuLaunchKernel)                  \
  X(cuEventCreate)                   \
  X(cuEventRecord)                   \
  X(cuEventSynchronize)              \
  X(cuEventElapsedTime)              \
  X(cuEventDestroy)                  \
  X(cuMemsetD32Async)                \
  X(cuMemAlloc)                      \
  X(cuMemFree)                       \
  X(cuMemcpyDtoHAsync)

// cuDNN: the backend (graph) API, and the legacy convolution API used as the
// fallback path.
#define TFI_CUDNN_FUNCTIONS(X)                  \
  X(cudnnGetVersion)                            \
  X(cudnnGetErrorString)                        \
  X(cudnnGetLastErrorString)                    \
  X(cudnnCreate)                                \
  X(cudnnSetStream)                             \
  X(cudnnBackendCreateDescriptor)               \
  X(cudnnBackendDestroyDescriptor)              \
  X(cudnnBackendFinalize)                       \
  X(cudnnBackendSetAttribute)                   \
  X(cudnnBackendGetAttribute)                   \
  X(cudnnBackendExecute)                        \
  X(cudnnCreateTensorDescriptor)                \
  X(cudnnSetTensor4dDescriptor)                 \
  X(cudnnDestroyTensorDescriptor)               \
  X(cudnnCreateFilterDescriptor)                \
  X(cudnnSetFilter4dDescriptor)                 \
  X(cudnnDestroyFilterDescriptor)               \
  X(cudnnCreateConvolutionDescriptor)           \
  X(cudnnSetConvolution2dDescriptor)            \
  X(cudnnSetConvolutionMathType)                \
  X(cudnnGetConvolution2dForwardOutputDim)      \
  X(cudnnDestroyConvolutionDescriptor)          \
  X(cudnnGetConvolutionForwardAlgorithmMaxCount) \
  X(cudnnGetConvolutionForwardAlgorithm_v7)     \
  X(cudnnConvolutionForward)

struct GpuApi {
#define TFI_GPU_API_MEMBER(name) decltype(&::name) name = nullptr;
  TFI_CUDA_DRIVER_FUNCTIONS(TFI_GPU_API_MEMBER)
  TFI_CUDNN_FUNCTIONS(TFI_GPU_API_MEMBER)
#undef TFI_GPU_API_MEMBER

  // Where the entry points came from, for messages ("tensorflow stubs",
  // "dlopen libcudnn.so.9 + libcuda.so.1").
  std::string origin;

  // True when every entry is filled; otherwise `missing` lists the names.
  bool Complete(std::string* missing) const;
};

// Fills `api` by dlopen()ing the two libraries (RTLD_NOW | RTLD_LOCAL) and
// looking every function up. A library that the process has loaded already
// (TF, PyTorch) is found by its SONAME and shared, not loaded twice. Returns
// kUnavailable, naming the library and the loader's message, when a library
// or a symbol is missing; never aborts.
Status LoadGpuApi(const std::string& cudnn_library,
                  const std::string& cuda_library, GpuApi* api);

// Messages for CUDA driver / cuDNN error codes (uses the table's own
// cuGetErrorString / cudnnGetErrorString when they are there).
std::string CuErrorString(const GpuApi& api, CUresult r);
std::string CudnnErrorString(const GpuApi& api, cudnnStatus_t s);
// A cuDNN status as a Status naming the call that failed; TFI_CUDNN returns
// it from the enclosing function on failure.
Status CudnnCheck(const GpuApi& api, cudnnStatus_t s, const char* what);
#define TFI_CUDNN(api, call) \
  TFI_GPU_RETURN_IF_ERROR(::tf_fused_int8::gpu::CudnnCheck(api, (call), #call))

}  // namespace gpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_GPU_GPU_API_H_
