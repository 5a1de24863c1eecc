// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AVX-512 (BW/VL) + VNNI: 16 channels per zmm, one
// VPDPWSSD per tap (sign-extended int8 activations times the widened
// weights of depthwise.h: exact int32 products, accumulated exactly). Output
// columns whose window lies inside the input run four at a time, so each
// weight vector is loaded once for four pixels and four independent
// accumulator chains hide the VPDPWSSD latency; border columns run one at a
// time over their valid taps. The epilogue is Epilogue16Natural.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/depthwise.h"
#include "cc/core/epilogue_avx512.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

inline __m512i LoadActivations(const int8_t* p, __mmask16 mask) {
  return _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p));
}

}  // namespace

void DepthwiseRowsAvx512Vnni(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pc = d.padded_c;
  const int64_t kw = g.filter_w;
  const int64_t sw = g.stride_w, dw = g.dilation_w;
  const int64_t pixel_step = sw * cc;  // input bytes between output columns
  const Epilogue512Consts k = MakeEpilogue512Consts(d.side_scale, d.lo, d.hi);
  for (int64_t r = d.row_begin; r < d.row_end; ++r) {
    const int64_t n = r / g.out_h, oy = r % g.out_h;
    const int64_t iy0 = oy * g.stride_h - g.pad_top;
    const int64_t ky0 = d.ky_range[2 * oy], ky1 = d.ky_range[2 * oy + 1];
    const int8_t* image = d.input + n * g.in_h * g.in_w * cc;
    int8_t* out_row = d.output + r * g.out_w * cc;
    const int8_t* side_row = d.side != nullptr ? d.side + r * g.out_w * cc : nullptr;
    for (int64_t c0 = 0; c0 < cc; c0 += 16) {
      const __mmask16 mask =
          cc - c0 >= 16 ? static_cast<__mmask16>(0xFFFF)
                        : static_cast<__mmask16>((1u << (cc - c0)) - 1);
      const float* scale = d.scale + c0;
      const float* bias = d.bias + c0;
      const int32_t* wide = d.wide + c0;
      int64_t ox = 0;
      while (ox < g.out_w) {
        const int64_t ix0 = ox * sw - g.pad_left;
        if (ox >= d.full_begin && ox + 4 <= d.full_end) {
          __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
          for (int64_t ky = ky0; ky < ky1; ++ky) {
            // Whole window inside: ix0 >= 0, every address in the image.
            const int8_t* row =
                image + ((iy0 + ky * g.dilation_h) * g.in_w + ix0) * cc + c0;
            const int32_t* w = wide + ky * kw * pc;
            for (int64_t kx = 0; kx < kw; ++kx) {
              const __m512i wv = _mm512_loadu_si512(w + kx * pc);
              const int8_t* p = row + kx * dw * cc;
              a0 = _mm512_dpwssd_epi32(a0, LoadActivations(p, mask), wv);
              a1 = _mm512_dpwssd_epi32(a1, LoadActivations(p + pixel_step, mask), wv);
              a2 = _mm512_dpwssd_epi32(a2, LoadActivations(p + 2 * pixel_step, mask), wv);
              a3 = _mm512_dpwssd_epi32(a3, LoadActivations(p + 3 * pixel_step, mask), wv);
            }
          }
          const __m512i accs[4] = {a0, a1, a2, a3};
          for (int i = 0; i < 4; ++i) {
            const int64_t o = (ox + i) * cc + c0;
            Epilogue16Natural(accs[i], scale, bias,
                              side_row != nullptr ? side_row + o : nullptr, k,
                              mask, out_row + o);
          }
          ox += 4;
          continue;
        }
        const int64_t kx0 = d.kx_range[2 * ox], kx1 = d.kx_range[2 * ox + 1];
        __m512i a0 = _mm512_setzero_si512();
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          // ix0 may be negative here: form each tap's offset before adding
          // it to the pointer (no out-of-object pointer arithmetic).
          const int64_t row_off = ((iy0 + ky * g.dilation_h) * g.in_w + ix0) * cc + c0;
          const int32_t* w = wide + ky * kw * pc;
          for (int64_t kx = kx0; kx < kx1; ++kx) {
            a0 = _mm512_dpwssd_epi32(
                a0, LoadActivations(image + (row_off + kx * dw * cc), mask),
                _mm512_loadu_si512(w + kx * pc));
          }
        }
        const int64_t o = ox * cc + c0;
        Epilogue16Natural(a0, scale, bias,
                          side_row != nullptr ? side_row + o : nullptr, k, mask,
                          out_row + o);
        ++ox;
      }
    }
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
