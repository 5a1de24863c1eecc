// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/gpu/host_emulation.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cc/core/gpu/device_kernels.h"

namespace tf_fused_int8 {
namespace gpu {

Status EmulateConvOutput(const GpuConvArgs& a, ConvLayout layout, std::vector<uint32_t>* y) {
  const ConvGeometry& g = a.geo;
  TFI_GPU_RETURN_IF_ERROR(ValidateGpuGeometry(g));
  if (layout == ConvLayout::kVect32 && g.in_c % 32 != 0 && !UsesDirectKernel(g)) {
    return InvalidArgument("an INT8x32 plan needs in_c % 32 == 0");
  }
  y->clear();
  if (UsesDirectKernel(g)) {
    // The direct kernel, one "thread" at a time, as the GPU runs it.
    std::vector<float> yf(static_cast<size_t>(g.OutputElements()));
    const DirectConvParams d = MakeDirectConvParams(g, a.input, a.filter, yf.data());
    for (uint32_t t = 0; t < d.elements; ++t) DirectConvElement(d, t);
    y->resize(yf.size());
    if (!yf.empty()) std::memcpy(y->data(), yf.data(), yf.size() * sizeof(float));
    return Status::Ok();
  }
  if (g.OutputElements() == 0) return Status::Ok();

  // Our conversion kernels (device_kernels.h), one "thread" at a time.
  const int8_t* x = a.input;
  const int8_t* w = a.filter;
  std::vector<uint32_t> xc, wc;
  if (layout == ConvLayout::kVect32 && g.in_c > 0) {
    xc = RunWordsOnHost(MakeActivationX32Params(g, a.input, nullptr), X4ToX32Word);
    wc = RunWordsOnHost(MakeFilterX32Params(g, a.filter, nullptr), X4ToX32Word);
  } else if (!LayoutIsVectorized(layout) && g.in_c > 0) {
    xc = RunWordsOnHost(MakeActivationNhwcParams(g, a.input, nullptr), TransposeWord);
    wc = RunWordsOnHost(MakeFilterNhwcParams(g, a.filter, nullptr), TransposeWord);
  }
  if (!xc.empty()) {
    x = reinterpret_cast<const int8_t*>(xc.data());
    w = reinterpret_cast<const int8_t*>(wc.data());
  }

  // cuDNN's part: y[n, co, oy, ox] = the exact int32 sum (or float32 of it),
  // x and w read through the tensor descriptions.
  const ConvSpec s = MakeConvSpec(g, layout, 16);
  y->assign(static_cast<size_t>(s.y.Bytes() / 4), 0u);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t co = 0; co < g.out_c; ++co)
      for (int64_t oy = 0; oy < g.out_h; ++oy)
        for (int64_t ox = 0; ox < g.out_w; ++ox) {
          int32_t acc = 0;
          for (int64_t ky = 0; ky < g.filter_h; ++ky) {
            const int64_t iy = oy * s.stride[0] - s.pre_pad[0] + ky * s.dilation[0];
            if (iy < 0 || iy >= g.in_h) continue;
            for (int64_t kx = 0; kx < g.filter_w; ++kx) {
              const int64_t ix = ox * s.stride[1] - s.pre_pad[1] + kx * s.dilation[1];
              if (ix < 0 || ix >= g.in_w) continue;
              for (int64_t ci = 0; ci < s.padded_in_c; ++ci) {
                acc += static_cast<int32_t>(x[s.x.ByteOffset(n, ci, iy, ix)]) *
                       static_cast<int32_t>(w[s.w.ByteOffset(co, ci, ky, kx)]);
              }
            }
          }
          uint32_t bits;
          if (s.y.type == ElementType::kInt32) {
            std::memcpy(&bits, &acc, 4);
          } else {
            const float f = static_cast<float>(acc);
            std::memcpy(&bits, &f, 4);
          }
          (*y)[static_cast<size_t>(s.y.ByteOffset(n, co, oy, ox) / 4)] = bits;
        }
  return Status::Ok();
}

namespace {
std::atomic<int64_t> depthwise_runs{0}, direct_runs{0}, cudnn_runs{0};
}  // namespace

EmulatedPathCounts GetEmulatedPathCounts() {
  EmulatedPathCounts c;
  c.depthwise = depthwise_runs.load();
  c.direct = direct_runs.load();
  c.cudnn = cudnn_runs.load();
  return c;
}

Status EmulateGpuPipeline(const GpuConvArgs& a, ConvLayout layout) {
  const ConvGeometry& g = a.geo;
  if (UsesDepthwiseKernel(g)) {
    // The fused kernel, one "thread" (output word) at a time, as the GPU runs
    // it: no y, no separate epilogue.
    TFI_GPU_RETURN_IF_ERROR(ValidateGpuGeometry(g));
    if (g.OutputElements() == 0) return Status::Ok();
    const DepthwiseConvParams d = MakeDepthwiseConvParams(a);
    for (uint32_t t = 0; t < d.epi.words; ++t) DepthwiseConvWord(d, t);
    ++depthwise_runs;
    return Status::Ok();
  }
  std::vector<uint32_t> y;
  TFI_GPU_RETURN_IF_ERROR(EmulateConvOutput(a, layout, &y));
  if (g.OutputElements() == 0) return Status::Ok();
  ++(UsesDirectKernel(g) ? direct_runs : cudnn_runs);
  const ConvSpec s = MakeConvSpec(g, UsesDirectKernel(g) ? ConvLayout::kVect4 : layout, 16);
  const EpilogueParams p = MakeEpilogueParams(a, s.Output(y.data()));
  for (uint32_t t = 0; t < p.words; ++t) EpilogueWord(p, t);
  return Status::Ok();
}

}  // namespace gpu
}  // namespace tf_fused_int8
