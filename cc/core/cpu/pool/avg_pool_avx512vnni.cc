// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 average pooling body, AVX-512BW: 64 channels at a time, the window's
// cells summed in two zmm of int16 (VPMOVSXBW + VPADDW), then per 16
// channels int32 -> float32, one VDIVPS by the divisor (a VMULPS by its
// reciprocal where that is exact: AvgPoolReciprocalExact) and VCVTPS2DQ
// (round to nearest even, the default MXCSR), the last (partial) vector
// under a byte mask. Windows of at most kAvgPoolVectorMaxCells cells
// (pool_kernels.h: exact).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/pool/pool_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

void AvgPoolAvx512(const int8_t* const* rows, int64_t count, int64_t divisor,
                   int64_t channels, int8_t* out) {
  const __m512 d = _mm512_set1_ps(static_cast<float>(divisor));
  const bool reciprocal = AvgPoolReciprocalExact(divisor);
  const __m512 r = _mm512_set1_ps(1.0f / static_cast<float>(divisor));
  for (int64_t c = 0; c < channels; c += 64) {
    const int64_t n = channels - c;
    const __mmask64 mask = n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    for (int64_t j = 0; j < count; ++j) {
      const __m512i v = _mm512_maskz_loadu_epi8(mask, rows[j] + c);
      lo = _mm512_add_epi16(lo, _mm512_cvtepi8_epi16(_mm512_castsi512_si256(v)));
      hi = _mm512_add_epi16(hi, _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(v, 1)));
    }
    const __m256i sums[4] = {
        _mm512_castsi512_si256(lo), _mm512_extracti64x4_epi64(lo, 1),
        _mm512_castsi512_si256(hi), _mm512_extracti64x4_epi64(hi, 1)};
    for (int q = 0; q < 4 && 16 * q < n; ++q) {
      const __m512 s = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(sums[q]));
      const __m512i v = _mm512_cvtps_epi32(reciprocal ? _mm512_mul_ps(s, r)
                                                     : _mm512_div_ps(s, d));
      _mm_mask_storeu_epi8(out + c + 16 * q,
                           static_cast<__mmask16>(mask >> (16 * q)),
                           _mm512_cvtsepi32_epi8(v));
    }
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
