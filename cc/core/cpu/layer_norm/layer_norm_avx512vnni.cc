// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8LayerNorm, AVX-512 (the avx512vnni path). Sums: 32 values a step
// widened to int16 (VPMOVSXBW), VPMADDWD with themselves (sum of squares)
// and with ones (sum), in int32 lanes (|S2| <= 2^30 for C <= 65536). Then
// 16 channels a step: VPMOVSXBD, C * q - S1 (VPMULLD, VPSUBD, exact),
// VCVTDQ2PS (exact), VMULPS by r, VFMADD by gamma and beta, the NaN lanes
// zeroed, clipped, VCVTPS2DQ (nearest even) and VPMOVSDB; tails under masks.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/layer_norm/layer_norm_kernels.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tf_fused_int8 {
namespace cpu {

void LayerNormAvx512(const int8_t* x, int64_t rows, int64_t channels,
                     const float* gamma, const float* beta, float epsilon,
                     int8_t* out) {
  const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i cv = _mm512_set1_epi32(static_cast<int32_t>(channels));
  const int64_t full32 = channels / 32 * 32;
  const __mmask32 tail32 =
      static_cast<__mmask32>((uint64_t{1} << (channels - full32)) - 1);
  const int64_t full16 = channels / 16 * 16;
  const __mmask16 tail16 = static_cast<__mmask16>((1u << (channels - full16)) - 1);
  for (int64_t row = 0; row < rows; ++row) {
    const int8_t* xr = x + row * channels;
    int8_t* orow = out + row * channels;
    __m512i s1v = _mm512_setzero_si512(), s2v = _mm512_setzero_si512();
    for (int64_t c = 0; c < full32; c += 32) {
      const __m512i v = _mm512_cvtepi8_epi16(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + c)));
      s1v = _mm512_add_epi32(s1v, _mm512_madd_epi16(v, ones));
      s2v = _mm512_add_epi32(s2v, _mm512_madd_epi16(v, v));
    }
    if (tail32 != 0) {
      const __m512i v = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(tail32, xr + full32));
      s1v = _mm512_add_epi32(s1v, _mm512_madd_epi16(v, ones));
      s2v = _mm512_add_epi32(s2v, _mm512_madd_epi16(v, v));
    }
    const int32_t s1 = _mm512_reduce_add_epi32(s1v);
    const int32_t s2 = _mm512_reduce_add_epi32(s2v);
    const __m512 r = _mm512_set1_ps(LayerNormRowFactor(s1, s2, channels, epsilon));
    const __m512i s1b = _mm512_set1_epi32(s1);
    auto norm16 = [&](__m128i bytes, __m512 g, __m512 b) {
      const __m512i t = _mm512_sub_epi32(
          _mm512_mullo_epi32(_mm512_cvtepi8_epi32(bytes), cv), s1b);
      __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(t), r), g, b);
      y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), y);
      y = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
      return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(y));
    };
    for (int64_t c = 0; c < full16; c += 16) {
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(orow + c),
          norm16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xr + c)),
                 _mm512_loadu_ps(gamma + c), _mm512_loadu_ps(beta + c)));
    }
    if (tail16 != 0) {
      _mm_mask_storeu_epi8(orow + full16, tail16,
                           norm16(_mm_maskz_loadu_epi8(tail16, xr + full16),
                                  _mm512_maskz_loadu_ps(tail16, gamma + full16),
                                  _mm512_maskz_loadu_ps(tail16, beta + full16)));
    }
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
