// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The row walk of an identity depthwise call (depthwise.h,
// DepthwiseIdentityRows*): a 1x1 depthwise convolution, no padding, every
// weight 1, scale 1 and bias 0, no side input (a channel multiplier M > 1
// reads the driver's expanded input, whose channel j is channel j / M). Then
// the contract gives y = float32(x) * 1 + 0 = x exactly (|x| <= 128) and
// out = clip(round(y), lo, hi) = clip(x, lo, hi): the input's pixels at the
// stride, clipped to the output range, byte for byte. quantize_model runs an
// Int8ReLU as such a call (quantization.py; NASNetMobile's 1x1 depthwise
// steps, most of them ReLUs, were 13.5% of its steps' time at batch 8 run
// as convolutions).
//
// Each instruction set's file instantiates IdentityRows with its clip body
// clip(src, n, lo, hi, dst): dst[i] = min(max(src[i], lo), hi), i < n.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_IDENTITY_H_
#define TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_IDENTITY_H_

#include <cstdint>

#include "cc/core/conv_params.h"
#include "cc/core/cpu/depthwise/depthwise.h"

namespace tf_fused_int8 {
namespace cpu {

// Bytes [begin, n) one at a time: the portable body and the vector bodies'
// tails.
inline void ClipBytes(const int8_t* src, int64_t begin, int64_t n, int8_t lo, int8_t hi,
                      int8_t* dst) {
  for (int64_t i = begin; i < n; ++i) {
    const int8_t v = src[i] < lo ? lo : src[i];
    dst[i] = v > hi ? hi : v;
  }
}

// Output rows [d.row_begin, d.row_end) of an identity call: a whole row in
// one clip where the stride is 1 across (the input row is then the output
// row), else pixel by pixel.
template <typename Clip>
inline void IdentityRows(const DepthwiseRowArgs& d, const Clip& clip) {
  const ConvGeometry& g = *d.geo;
  const int64_t c = d.channels;
  for (int64_t r = d.row_begin; r < d.row_end; ++r) {
    const int64_t n = r / g.out_h, oy = r % g.out_h;
    const int8_t* src = d.input + (n * g.in_h + oy * g.stride_h) * g.in_w * c;
    int8_t* dst = d.output + r * g.out_w * c;
    if (g.stride_w == 1) {
      clip(src, g.out_w * c, d.lo, d.hi, dst);
    } else {
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        clip(src + ox * g.stride_w * c, c, d.lo, d.hi, dst + ox * c);
      }
    }
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_IDENTITY_H_
