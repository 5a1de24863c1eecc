// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The GPU pipeline of plan.h run on the host, step by step, with the same
// code the GPU runs for our own kernels (device_kernels.h) and an exact
// stand-in for cuDNN's part (the int32 accumulator, or float32(acc), written
// into the y that the ConvSpec describes, reading x and w through the
// ConvSpec's dims and strides). Tests compare it bit for bit with the reference kernel: that
// checks the tensor descriptions handed to cuDNN, the int8x32 conversion, the
// epilogue's indexing and its arithmetic, all without a GPU.
#ifndef TF_FUSED_INT8_CC_CORE_GPU_HOST_EMULATION_H_
#define TF_FUSED_INT8_CC_CORE_GPU_HOST_EMULATION_H_

#include <cstdint>
#include <vector>

#include "cc/core/gpu/plan.h"
#include "cc/core/gpu/status.h"

namespace tf_fused_int8 {
namespace gpu {

// args: host pointers; layout: how cuDNN would be asked (see ConvLayout;
// ignored for grouped convolutions, like the GPU path ignores it). Runs the
// path RunFusedConvGpu takes: for UsesDepthwiseKernel calls the fused kernel's
// code (DepthwiseConvWord) alone, for other grouped calls DirectConvElement +
// EpilogueWord, else the cuDNN stand-in + EpilogueWord.
Status EmulateGpuPipeline(const GpuConvArgs& args, ConvLayout layout);

// How many successful EmulateGpuPipeline calls (with a non-empty output) took
// each path since the process started, so tests can check that a path ran.
struct EmulatedPathCounts {
  int64_t depthwise = 0;  // tfi_depthwise_conv ("direct/depthwise")
  int64_t direct = 0;     // tfi_direct_conv + tfi_epilogue_x4 ("direct/grouped")
  int64_t cudnn = 0;      // the cuDNN stand-in + tfi_epilogue_x4
};
EmulatedPathCounts GetEmulatedPathCounts();

// The pipeline up to cuDNN's result: *y (words) as a right cuDNN answer would
// leave it, where MakeConvSpec(args.geo, layout, 16).Output(y->data()) finds
// each element (empty for an empty output). Grouped convolutions
// (UsesDirectKernel) never reach cuDNN on the GPU: for them *y is what the
// direct kernel's own code (DirectConvElement) writes, float32 NCHW (the
// kVect4 y), whatever `layout` says. (For UsesDepthwiseKernel calls the GPU
// writes no y and EmulateGpuPipeline does not call this; tests use it to
// compare the fast path with the direct kernel + epilogue.)
Status EmulateConvOutput(const GpuConvArgs& args, ConvLayout layout, std::vector<uint32_t>* y);

// Runs one of our conversion kernels (device_kernels.h: X4ToX32Word,
// TransposeWord) on the host: `word` for every one of p.words output words
// ("threads" in order), into a new buffer that p.out is pointed at.
template <class Params>
std::vector<uint32_t> RunWordsOnHost(Params p, void (*word)(const Params&, uint32_t)) {
  std::vector<uint32_t> out(p.words);
  p.out = out.data();
  for (uint32_t t = 0; t < p.words; ++t) word(p, t);
  return out;
}

}  // namespace gpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_GPU_HOST_EMULATION_H_
