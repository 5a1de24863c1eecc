// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The kernels of device_kernels.h, for nvcc. NOT part of the Bazel build:
// tools/gpu_harness/gen_ptx.sh compiles this file to PTX and writes
// device_kernels_ptx.inc, which the build embeds. Edit device_kernels.h or this
// file, then rerun gen_ptx.sh (tests/test_gpu_build.py checks that the
// checked-in PTX was generated from the current sources).
#include "cc/core/gpu/device_kernels.h"

using tf_fused_int8::gpu::CompareParams;
using tf_fused_int8::gpu::DepthwiseConvParams;
using tf_fused_int8::gpu::DirectConvParams;
using tf_fused_int8::gpu::EpilogueParams;
using tf_fused_int8::gpu::SampleCheckParams;
using tf_fused_int8::gpu::TransposeParams;
using tf_fused_int8::gpu::VectParams;

namespace {
__device__ __forceinline__ uint32_t GlobalThread() {
  return blockIdx.x * blockDim.x + threadIdx.x;
}
}  // namespace

extern "C" __global__ void __launch_bounds__(256)
    tfi_epilogue_x4(const EpilogueParams p) {
  const uint32_t t = GlobalThread();
  if (t < p.words) tf_fused_int8::gpu::EpilogueWord(p, t);
}

extern "C" __global__ void __launch_bounds__(256)
    tfi_x4_to_x32(const VectParams p) {
  const uint32_t t = GlobalThread();
  if (t < p.words) tf_fused_int8::gpu::X4ToX32Word(p, t);
}

extern "C" __global__ void __launch_bounds__(256)
    tfi_transpose_words(const TransposeParams p) {
  const uint32_t t = GlobalThread();
  if (t < p.words) tf_fused_int8::gpu::TransposeWord(p, t);
}

extern "C" __global__ void __launch_bounds__(256)
    tfi_count_mismatch(const CompareParams p) {
  const uint32_t t = GlobalThread();
  if (t < p.elements && tf_fused_int8::gpu::ElementsDiffer(p, t)) {
    atomicAdd(p.mismatches, 1u);
  }
}

extern "C" __global__ void __launch_bounds__(256)
    tfi_check_sample(const SampleCheckParams p) {
  const uint32_t t = GlobalThread();
  int32_t want = 0;
  float got = 0;
  if (t < p.samples && tf_fused_int8::gpu::SampleDiffers(p, t, &want, &got)) {
    atomicAdd(&p.result[0], 1u);
    if (atomicCAS(&p.result[1], 0xffffffffu, t) == 0xffffffffu) {
      p.result[2] = static_cast<uint32_t>(want);
      p.result[3] = __float_as_uint(got);
    }
  }
}

// Grouped and depthwise convolutions (no cuDNN): y = float32(exact acc), one
// thread per output element; the epilogue kernel runs after it.
extern "C" __global__ void __launch_bounds__(256)
    tfi_direct_conv(const DirectConvParams p) {
  const uint32_t t = GlobalThread();
  if (t < p.elements) tf_fused_int8::gpu::DirectConvElement(p, t);
}

// Grouped convolutions with one input word per group (depthwise, groups of 4
// channels): exact acc and the epilogue fused, one thread per output word.
extern "C" __global__ void __launch_bounds__(256)
    tfi_depthwise_conv(const DepthwiseConvParams p) {
  const uint32_t t = GlobalThread();
  if (t < p.epi.words) tf_fused_int8::gpu::DepthwiseConvWord(p, t);
}
