// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The fallback cuDNN path: the legacy convolution API (cudnnConvolutionForward)
// in the configurations of ConvLayout: INT8x4_EXT / INT8x32_EXT (NCHW_VECT_C
// int8 x and w, float32 NCHW y = float32(acc)), INT8_CONFIG (NHWC int8 x and
// w, int32 NHWC y) and INT8_EXT_CONFIG (float32 NHWC y); int32 compute,
// alpha 1, beta 0. It takes one padding per dimension, so it only serves
// symmetric padding (SAME with an odd total padding, e.g. stride 2 on even
// sizes, is graph-path only).
//
// cudnnConvolutionBiasActivationForward is NOT used: its epilogue
// (alpha1 * conv + alpha2 * z + bias, then activation, then int8 conversion)
// has a scalar alpha1 only (no per-channel scale) and unspecified rounding
// order; our own epilogue kernel runs after the convolution instead.
#ifndef TF_FUSED_INT8_CC_CORE_GPU_CUDNN_LEGACY_H_
#define TF_FUSED_INT8_CC_CORE_GPU_CUDNN_LEGACY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/gpu/gpu_api.h"
#include "cc/core/gpu/plan.h"
#include "cc/core/gpu/status.h"

namespace tf_fused_int8 {
namespace gpu {

struct LegacyConv {
  const GpuApi* api = nullptr;
  ConvLayout layout = ConvLayout::kVect4;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~LegacyConv();
};

// kUnimplemented for asymmetric padding.
Status BuildLegacyConv(const GpuApi& api, const ConvGeometry& g, ConvLayout layout,
                       std::unique_ptr<LegacyConv>* out);

struct LegacyAlgo {
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  int64_t workspace_bytes = 0;
  bool nondeterministic = false;
  bool inexact = false;  // FFT / Winograd: never used
  std::string Name() const;
};

// cuDNN's heuristic list for the convolution (cudnnGetConvolutionForwardAlgorithm_v7),
// only the entries whose status is success, in cuDNN's order.
Status GetLegacyAlgos(const GpuApi& api, cudnnHandle_t handle, const LegacyConv& conv,
                      std::vector<LegacyAlgo>* out);

// Sets the algorithm's math type on the descriptor (not thread-safe: call it
// while tuning, before the convolution is shared).
Status SetLegacyMath(const GpuApi& api, const LegacyConv& conv, const LegacyAlgo& algo);

Status ExecuteLegacy(const GpuApi& api, cudnnHandle_t handle, const LegacyConv& conv,
                     const LegacyAlgo& algo, const void* x, const void* w, void* y,
                     void* workspace);

}  // namespace gpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_GPU_CUDNN_LEGACY_H_
