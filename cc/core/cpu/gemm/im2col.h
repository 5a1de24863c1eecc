// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Gathers the convolution windows of a run of output pixels into rows of a
// matrix (im2col), so that a kernel can treat the convolution as a GEMM:
// row m holds the Kh*Kw*Ci inputs of output pixel p0+m in HWC order, which
// is the row order of the HWIO filter viewed as a [Kh*Kw*Ci, Co] matrix.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_GEMM_IM2COL_H_
#define TF_FUSED_INT8_CC_CORE_CPU_GEMM_IM2COL_H_

#include <cstdint>
#include <cstring>

#include "cc/core/conv_params.h"

namespace tf_fused_int8 {

// True when output pixel p's window is the input pixel p itself (1x1 filter,
// stride 1, no padding): the input is then already the im2col matrix.
inline bool IsPointwise(const ConvGeometry& g) {
  return g.filter_h == 1 && g.filter_w == 1 && g.stride_h == 1 &&
         g.stride_w == 1 && g.pad_top == 0 && g.pad_left == 0 &&
         g.out_h == g.in_h && g.out_w == g.in_w;
}

// Writes rows for output pixels [p0, p0 + count) (pixels numbered over
// batch * out_h * out_w) into dst, row stride ld >= Kh*Kw*Ci. Padding reads
// as `pad_value`; every byte is XORed with `flip` (0x80 turns int8 into the
// uint8 "+128" form, with pad_value then 0x80 for a zero).
inline void Im2ColRows(const int8_t* input, const ConvGeometry& g, int64_t p0,
                       int64_t count, int8_t* dst, int64_t ld,
                       uint8_t flip = 0) {
  const int64_t ci = g.in_c;
  if (ci == 0) return;  // empty rows (and dst may be null)
  const int8_t pad = static_cast<int8_t>(flip);
  for (int64_t m = 0; m < count; ++m) {
    const int64_t p = p0 + m;
    const int64_t ox = p % g.out_w;
    const int64_t oy = (p / g.out_w) % g.out_h;
    const int64_t n = p / (g.out_w * g.out_h);
    int8_t* row = dst + m * ld;
    for (int64_t ky = 0; ky < g.filter_h; ++ky) {
      const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
      for (int64_t kx = 0; kx < g.filter_w; ++kx) {
        int8_t* out = row + (ky * g.filter_w + kx) * ci;
        const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
        if (iy < 0 || iy >= g.in_h || ix < 0 || ix >= g.in_w) {
          std::memset(out, pad, static_cast<size_t>(ci));
          continue;
        }
        const int8_t* in = input + ((n * g.in_h + iy) * g.in_w + ix) * ci;
        if (flip == 0) {
          std::memcpy(out, in, static_cast<size_t>(ci));
        } else {
          for (int64_t c = 0; c < ci; ++c) {
            out[c] = static_cast<int8_t>(static_cast<uint8_t>(in[c]) ^ flip);
          }
        }
      }
    }
  }
}

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_GEMM_IM2COL_H_
