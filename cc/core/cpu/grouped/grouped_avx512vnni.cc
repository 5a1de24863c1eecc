// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Narrow-group row kernel, AVX-512 (BW/VL) + VNNI (see grouped.h): per
// output pixel, block of 16 output channels and tap, the block's input span
// (<= 32 channels) is loaded once under a byte mask and sign-extended to
// int16 (VPMOVSXBW); per pair of group input channels one VPERMW gathers
// each lane's pair and one VPDPWSSD adds both exact products. Interior
// columns run four pixels at a time (each permutation index and weight
// vector loaded once for the four), border columns one at a time over
// their valid taps. The epilogue is Epilogue16Natural.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/grouped/grouped.h"
#include "cc/core/epilogue_avx512.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

inline __m512i LoadSpan(const int8_t* p, __mmask32 mask) {
  return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, p));
}

// kP pixels from column ox over taps ky in [ky0, ky1), kx in [kx0, kx1);
// `offset(p, ky, kx)` is the input byte offset of pixel p's span at a tap.
template <int kP, class Offset>
inline void Pixels(const NarrowRowArgs& d, const int8_t* image, int64_t b,
                   int64_t ky0, int64_t ky1, int64_t kx0, int64_t kx1,
                   const Offset& offset, __m512i* acc) {
  const ConvGeometry& g = *d.geo;
  const __mmask32 span_mask = d.span_mask[b];
  const int16_t* perms = d.perms + b * d.pairs * 32;
  const int32_t* weights = d.weights + b * d.taps * d.pairs * 16;
  for (int p = 0; p < kP; ++p) acc[p] = _mm512_setzero_si512();
  for (int64_t ky = ky0; ky < ky1; ++ky) {
    for (int64_t kx = kx0; kx < kx1; ++kx) {
      __m512i xs[kP];
      for (int p = 0; p < kP; ++p) {
        xs[p] = LoadSpan(image + offset(p, ky, kx), span_mask);
      }
      const int32_t* w = weights + (ky * g.filter_w + kx) * d.pairs * 16;
      for (int64_t j = 0; j < d.pairs; ++j) {
        const __m512i perm = _mm512_loadu_si512(perms + j * 32);
        const __m512i wv = _mm512_loadu_si512(w + j * 16);
        for (int p = 0; p < kP; ++p) {
          acc[p] = _mm512_dpwssd_epi32(acc[p], _mm512_permutexvar_epi16(perm, xs[p]), wv);
        }
      }
    }
  }
}

}  // namespace

void NarrowGroupRowsAvx512Vnni(const NarrowRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t ci = g.in_c, co = g.out_c;
  const Epilogue512Consts k = MakeEpilogue512Consts(d.side_scale, d.lo, d.hi);
  for (int64_t r = d.row_begin; r < d.row_end; ++r) {
    const int64_t n = r / g.out_h, oy = r % g.out_h;
    const int64_t iy0 = oy * g.stride_h - g.pad_top;
    const int64_t ky0 = d.ky_range[2 * oy], ky1 = d.ky_range[2 * oy + 1];
    const int8_t* image = d.input + n * g.in_h * g.in_w * ci;
    int8_t* out_row = d.output + r * g.out_w * co;
    const int8_t* side_row = d.side != nullptr ? d.side + r * g.out_w * co : nullptr;
    for (int64_t b = 0; b < d.blocks; ++b) {
      const int64_t c0 = b * kNarrowLanes;
      const int64_t count = co - c0 < 16 ? co - c0 : 16;
      const __mmask16 mask = count == 16 ? static_cast<__mmask16>(0xFFFF)
                                         : static_cast<__mmask16>((1u << count) - 1);
      const int64_t span = d.span_begin[b];
      auto store = [&](const __m512i& acc, int64_t ox) {
        const int64_t o = ox * co + c0;
        Epilogue16Natural(acc, d.scale + c0, d.bias + c0,
                          side_row != nullptr ? side_row + o : nullptr, k, mask,
                          out_row + o);
      };
      int64_t ox = 0;
      while (ox < g.out_w) {
        // Input byte offset of pixel ox + p's span at tap (ky, kx); may be
        // negative only for taps outside the input, which are never used.
        auto offset = [&](int p, int64_t ky, int64_t kx) {
          return ((iy0 + ky * g.dilation_h) * g.in_w + (ox + p) * g.stride_w -
                  g.pad_left + kx * g.dilation_w) * ci + span;
        };
        if (ox >= d.full_begin && ox + 4 <= d.full_end) {
          __m512i acc[4];
          Pixels<4>(d, image, b, ky0, ky1, 0, g.filter_w, offset, acc);
          for (int p = 0; p < 4; ++p) store(acc[p], ox + p);
          ox += 4;
        } else {
          __m512i acc[1];
          Pixels<1>(d, image, b, ky0, ky1, d.kx_range[2 * ox], d.kx_range[2 * ox + 1],
                    offset, acc);
          store(acc[0], ox);
          ++ox;
        }
      }
    }
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
