// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AVX2 (the avx2 and avxvnni paths): 16 channels as two
// ymm of int32, one PMADDWD + PADDD per tap and 8 channels (sign-extended
// int8 activations times the widened weights of depthwise.h: w * x exactly).
// Interior output columns run four at a time (weights loaded once for four
// pixels, eight independent accumulators), border columns one at a time
// over their valid taps. The epilogue is Epilogue16 (natural order).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cc/core/cpu/depthwise.h"
#include "cc/core/epilogue_avx2.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// 16 activations (or `count` < 16, zero-filled) as two ymm of int32.
inline void Load16(const int8_t* p, int64_t count, __m256i* lo, __m256i* hi) {
  __m128i v;
  if (count >= 16) {
    v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else {
    alignas(16) int8_t tmp[16] = {0};
    std::memcpy(tmp, p, static_cast<size_t>(count));
    v = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
  }
  *lo = _mm256_cvtepi8_epi32(v);
  *hi = _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8));
}

struct Acc16 {
  __m256i lo, hi;
};

inline void Mac16(const int8_t* p, int64_t count, __m256i w_lo, __m256i w_hi,
                  Acc16* a) {
  __m256i x_lo, x_hi;
  Load16(p, count, &x_lo, &x_hi);
  a->lo = _mm256_add_epi32(a->lo, _mm256_madd_epi16(x_lo, w_lo));
  a->hi = _mm256_add_epi32(a->hi, _mm256_madd_epi16(x_hi, w_hi));
}

}  // namespace

void DepthwiseRowsAvx2(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pc = d.padded_c;
  const int64_t kw = g.filter_w;
  const int64_t sw = g.stride_w, dw = g.dilation_w;
  const int64_t pixel_step = sw * cc;
  const Epilogue256Consts k = MakeEpilogue256Consts(d.side_scale, d.lo, d.hi);
  for (int64_t r = d.row_begin; r < d.row_end; ++r) {
    const int64_t n = r / g.out_h, oy = r % g.out_h;
    const int64_t iy0 = oy * g.stride_h - g.pad_top;
    const int64_t ky0 = d.ky_range[2 * oy], ky1 = d.ky_range[2 * oy + 1];
    const int8_t* image = d.input + n * g.in_h * g.in_w * cc;
    int8_t* out_row = d.output + r * g.out_w * cc;
    const int8_t* side_row = d.side != nullptr ? d.side + r * g.out_w * cc : nullptr;
    for (int64_t c0 = 0; c0 < cc; c0 += 16) {
      const int64_t count = cc - c0 < 16 ? cc - c0 : 16;
      const float* scale = d.scale + c0;
      const float* bias = d.bias + c0;
      const int32_t* wide = d.wide + c0;
      int64_t ox = 0;
      while (ox < g.out_w) {
        const int64_t ix0 = ox * sw - g.pad_left;
        if (ox >= d.full_begin && ox + 4 <= d.full_end) {
          Acc16 a[4];
          for (Acc16& x : a) x.lo = x.hi = _mm256_setzero_si256();
          for (int64_t ky = ky0; ky < ky1; ++ky) {
            // Whole window inside: ix0 >= 0, every address in the image.
            const int8_t* row =
                image + ((iy0 + ky * g.dilation_h) * g.in_w + ix0) * cc + c0;
            const int32_t* w = wide + ky * kw * pc;
            for (int64_t kx = 0; kx < kw; ++kx) {
              const __m256i w_lo = _mm256_loadu_si256(
                  reinterpret_cast<const __m256i*>(w + kx * pc));
              const __m256i w_hi = _mm256_loadu_si256(
                  reinterpret_cast<const __m256i*>(w + kx * pc + 8));
              const int8_t* p = row + kx * dw * cc;
              Mac16(p, count, w_lo, w_hi, &a[0]);
              Mac16(p + pixel_step, count, w_lo, w_hi, &a[1]);
              Mac16(p + 2 * pixel_step, count, w_lo, w_hi, &a[2]);
              Mac16(p + 3 * pixel_step, count, w_lo, w_hi, &a[3]);
            }
          }
          for (int i = 0; i < 4; ++i) {
            const int64_t o = (ox + i) * cc + c0;
            Epilogue16(a[i].lo, a[i].hi, scale, bias,
                       side_row != nullptr ? side_row + o : nullptr, k,
                       static_cast<int>(count), out_row + o);
          }
          ox += 4;
          continue;
        }
        const int64_t kx0 = d.kx_range[2 * ox], kx1 = d.kx_range[2 * ox + 1];
        Acc16 a;
        a.lo = a.hi = _mm256_setzero_si256();
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          // ix0 may be negative here: form each tap's offset before adding
          // it to the pointer (no out-of-object pointer arithmetic).
          const int64_t row_off = ((iy0 + ky * g.dilation_h) * g.in_w + ix0) * cc + c0;
          const int32_t* w = wide + ky * kw * pc;
          for (int64_t kx = kx0; kx < kx1; ++kx) {
            Mac16(image + (row_off + kx * dw * cc), count,
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kx * pc)),
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kx * pc + 8)),
                  &a);
          }
        }
        const int64_t o = ox * cc + c0;
        Epilogue16(a.lo, a.hi, scale, bias,
                   side_row != nullptr ? side_row + o : nullptr, k,
                   static_cast<int>(count), out_row + o);
        ++ox;
      }
    }
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
