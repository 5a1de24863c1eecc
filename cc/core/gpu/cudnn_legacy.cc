// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/gpu/cudnn_legacy.h"

#include <string>
#include <vector>

#include "cc/core/layout.h"

namespace tf_fused_int8 {
namespace gpu {
namespace {

const char* AlgoName(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "ALGO";
  }
}

}  // namespace

LegacyConv::~LegacyConv() {
  if (api == nullptr) return;
  if (x) api->cudnnDestroyTensorDescriptor(x);
  if (y) api->cudnnDestroyTensorDescriptor(y);
  if (w) api->cudnnDestroyFilterDescriptor(w);
  if (conv) api->cudnnDestroyConvolutionDescriptor(conv);
}

std::string LegacyAlgo::Name() const {
  return std::string(AlgoName(algo)) + "(" + std::to_string(static_cast<int>(algo)) +
         (math == CUDNN_TENSOR_OP_MATH ? ",tensor_op" : "") + ")";
}

Status BuildLegacyConv(const GpuApi& api, const ConvGeometry& g, ConvLayout layout,
                       std::unique_ptr<LegacyConv>* out) {
  if (g.pad_top != g.pad_bottom || g.pad_left != g.pad_right) {
    return Unimplemented("the legacy cuDNN API needs symmetric padding");
  }
  auto c = std::make_unique<LegacyConv>();
  c->api = &api;
  c->layout = layout;
  const bool vect = LayoutIsVectorized(layout);
  const cudnnDataType_t dt = layout == ConvLayout::kVect32  ? CUDNN_DATA_INT8x32
                             : layout == ConvLayout::kVect4 ? CUDNN_DATA_INT8x4
                                                            : CUDNN_DATA_INT8;
  const cudnnTensorFormat_t in_format = vect ? CUDNN_TENSOR_NCHW_VECT_C : CUDNN_TENSOR_NHWC;
  const cudnnTensorFormat_t out_format = vect ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
  const cudnnDataType_t out_type =
      layout == ConvLayout::kNhwcInt32 ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT;
  const int in_c = static_cast<int>(
      layout == ConvLayout::kVect32 ? RoundUp(g.in_c, 32) : g.in_c);
  TFI_CUDNN(api, api.cudnnCreateTensorDescriptor(&c->x));
  TFI_CUDNN(api, api.cudnnSetTensor4dDescriptor(c->x, in_format, dt, static_cast<int>(g.batch),
                                                in_c, static_cast<int>(g.in_h),
                                                static_cast<int>(g.in_w)));
  TFI_CUDNN(api, api.cudnnCreateFilterDescriptor(&c->w));
  TFI_CUDNN(api, api.cudnnSetFilter4dDescriptor(c->w, dt, in_format, static_cast<int>(g.out_c),
                                                in_c, static_cast<int>(g.filter_h),
                                                static_cast<int>(g.filter_w)));
  TFI_CUDNN(api, api.cudnnCreateTensorDescriptor(&c->y));
  TFI_CUDNN(api, api.cudnnSetTensor4dDescriptor(c->y, out_format, out_type,
                                                static_cast<int>(g.batch),
                                                static_cast<int>(g.out_c),
                                                static_cast<int>(g.out_h),
                                                static_cast<int>(g.out_w)));
  TFI_CUDNN(api, api.cudnnCreateConvolutionDescriptor(&c->conv));
  TFI_CUDNN(api, api.cudnnSetConvolution2dDescriptor(
                     c->conv, static_cast<int>(g.pad_top), static_cast<int>(g.pad_left),
                     static_cast<int>(g.stride_h), static_cast<int>(g.stride_w),
                     static_cast<int>(g.dilation_h), static_cast<int>(g.dilation_w),
                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_INT32));
  int n = 0, ch = 0, h = 0, w = 0;
  TFI_CUDNN(api, api.cudnnGetConvolution2dForwardOutputDim(c->conv, c->x, c->w, &n, &ch, &h, &w));
  if (n != g.batch || ch != g.out_c || h != g.out_h || w != g.out_w) {
    return Internal("cuDNN's legacy output shape [" + std::to_string(n) + "," +
                    std::to_string(ch) + "," + std::to_string(h) + "," + std::to_string(w) +
                    "] differs from the op's");
  }
  *out = std::move(c);
  return Status::Ok();
}

Status GetLegacyAlgos(const GpuApi& api, cudnnHandle_t handle, const LegacyConv& conv,
                      std::vector<LegacyAlgo>* out) {
  out->clear();
  int max_count = 0;
  TFI_CUDNN(api, api.cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count));
  if (max_count <= 0) return Status::Ok();
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max_count));
  int returned = 0;
  TFI_CUDNN(api, api.cudnnGetConvolutionForwardAlgorithm_v7(handle, conv.x, conv.w, conv.conv,
                                                            conv.y, max_count, &returned,
                                                            perf.data()));
  for (int i = 0; i < returned && i < max_count; ++i) {
    const auto& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    LegacyAlgo a;
    a.algo = p.algo;
    a.math = p.mathType;
    a.workspace_bytes = static_cast<int64_t>(p.memory);
    a.nondeterministic = p.determinism == CUDNN_NON_DETERMINISTIC;
    a.inexact = p.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
                p.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
                p.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
                p.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    bool seen = false;
    for (const LegacyAlgo& o : *out) seen |= (o.algo == a.algo && o.math == a.math);
    if (!seen) out->push_back(a);
  }
  return Status::Ok();
}

Status SetLegacyMath(const GpuApi& api, const LegacyConv& conv, const LegacyAlgo& algo) {
  TFI_CUDNN(api, api.cudnnSetConvolutionMathType(conv.conv, algo.math));
  return Status::Ok();
}

Status ExecuteLegacy(const GpuApi& api, cudnnHandle_t handle, const LegacyConv& conv,
                     const LegacyAlgo& algo, const void* x, const void* w, void* y,
                     void* workspace) {
  const float alpha = 1.0f, beta = 0.0f;
  TFI_CUDNN(api, api.cudnnConvolutionForward(handle, &alpha, conv.x, x, conv.w, w, conv.conv,
                                             algo.algo, workspace,
                                             static_cast<size_t>(algo.workspace_bytes), &beta,
                                             conv.y, y));
  return Status::Ok();
}

}  // namespace gpu
}  // namespace tf_fused_int8
