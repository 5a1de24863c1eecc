// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Public entry point of the TF-free GPU backend: the fused int8 convolution
// for NCHW_VECT_C / OIHW_VECT_I tensors on a CUDA stream, bit for bit the
// contract of cc/core/epilogue.h. Used by cc/tf/gpu_kernel.cc (TensorFlow) and
// tools/gpu_harness (no TensorFlow).
#ifndef TF_FUSED_INT8_CC_CORE_GPU_FUSED_CONV_GPU_H_
#define TF_FUSED_INT8_CC_CORE_GPU_FUSED_CONV_GPU_H_

#include <cstddef>
#include <string>
#include <vector>

#include "cc/core/gpu/autotune_cache.h"
#include "cc/core/gpu/gpu_api.h"
#include "cc/core/gpu/plan.h"
#include "cc/core/gpu/status.h"

namespace tf_fused_int8 {
namespace gpu {

// Device scratch memory for one call (TF: OpKernelContext::allocate_temp).
// Memory must stay valid until RunFusedConvGpu returns and may be reused by
// work enqueued later on the same stream (stream-ordered, like TF's GPU
// allocator). Returns nullptr when out of memory; every buffer is at least
// 16-byte aligned.
class ScratchAllocator {
 public:
  virtual ~ScratchAllocator() = default;
  virtual void* Allocate(size_t bytes) = 0;
};

struct CandidateReport {
  std::string name;     // "graph/x4/eng12{k2=3}" or "legacy/x4/IMPLICIT_PRECOMP_GEMM(1)"
  std::string outcome;  // "ok", or why it was dropped
  double time_ms = -1;  // median of the timed runs (x32: includes the conversions)
  int64_t workspace_bytes = 0;
};

struct GpuRunInfo {
  std::string device;      // "NVIDIA H200 (sm_90, device 0)"
  std::string plan;        // the plan that ran ("direct/depthwise": groups of one
                           // int8x4 word, "direct/grouped": other groups > 1)
  bool tuned_now = false;  // this call ran the autotuning
  double plan_time_ms = -1;
  std::vector<CandidateReport> candidates;  // when tuned_now
  std::string warnings;    // from the options
  std::string cache_key;
};

// Runs the fused convolution on `stream` (a CUstream of the current process;
// its context is made current for the call). `args` holds device pointers,
// except side_input_scale. Grouped and depthwise convolutions (groups > 1) run
// our direct kernels instead of cuDNN (info->plan "direct/depthwise" for groups
// of 4 input channels, UsesDepthwiseKernel; "direct/grouped" otherwise). Returns
// kInvalidArgument for channel counts that are not multiples of 4 or groups
// that do not divide them (ValidateGpuGeometry), kUnimplemented on GPUs below
// compute capability 6.1 (no dp4a) or cuDNN < 9, kUnavailable when `api` is incomplete,
// kResourceExhausted when scratch memory runs out, kNotFound when no cuDNN
// engine or algorithm runs the convolution exactly, kInternal for a failed
// CUDA/cuDNN call. Never aborts.
Status RunFusedConvGpu(const GpuApi& api, CUstream stream, const GpuConvArgs& args,
                       const GpuOptions& options, ScratchAllocator* scratch,
                       GpuRunInfo* info = nullptr);

// The process-wide autotuning cache.
AutotuneStats GpuAutotuneStats();
void ClearGpuAutotuneCache();

// The embedded PTX of device_kernels.h (for tests and the harness).
const char* EmbeddedPtx();

}  // namespace gpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_GPU_FUSED_CONV_GPU_H_
