// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8LayerNorm, AVX2 (the avx2 and avxvnni paths). Sums: 16 values a
// step widened to int16 (VPMOVSXBW), VPMADDWD with themselves and with ones,
// in int32 lanes. Then 8 channels a step: VPMOVSXBD, C * q - S1 (exact),
// VCVTDQ2PS, VMULPS by r, VFMADD by gamma and beta, the NaN lanes zeroed,
// clipped, VCVTPS2DQ (nearest even) and packed; the tails (fewer than 16 /
// 8 channels) element by element with the same operations (LayerNormOne).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/layer_norm/layer_norm_kernels.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

inline int32_t HorizontalSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void LayerNormAvx2(const int8_t* x, int64_t rows, int64_t channels,
                   const float* gamma, const float* beta, float epsilon,
                   int8_t* out) {
  const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i cv = _mm256_set1_epi32(static_cast<int32_t>(channels));
  const int64_t full16 = channels / 16 * 16;
  const int64_t full8 = channels / 8 * 8;
  for (int64_t row = 0; row < rows; ++row) {
    const int8_t* xr = x + row * channels;
    int8_t* orow = out + row * channels;
    __m256i s1v = _mm256_setzero_si256(), s2v = _mm256_setzero_si256();
    for (int64_t c = 0; c < full16; c += 16) {
      const __m256i v = _mm256_cvtepi8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(xr + c)));
      s1v = _mm256_add_epi32(s1v, _mm256_madd_epi16(v, ones));
      s2v = _mm256_add_epi32(s2v, _mm256_madd_epi16(v, v));
    }
    int32_t s1 = HorizontalSum(s1v), s2 = HorizontalSum(s2v);
    for (int64_t c = full16; c < channels; ++c) {
      s1 += xr[c];
      s2 += static_cast<int32_t>(xr[c]) * xr[c];
    }
    const float rs = LayerNormRowFactor(s1, s2, channels, epsilon);
    const __m256 r = _mm256_set1_ps(rs);
    const __m256i s1b = _mm256_set1_epi32(s1);
    for (int64_t c = 0; c < full8; c += 8) {
      const __m256i q = _mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(xr + c)));
      const __m256i t = _mm256_sub_epi32(_mm256_mullo_epi32(q, cv), s1b);
      __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(t), r),
                                 _mm256_loadu_ps(gamma + c), _mm256_loadu_ps(beta + c));
      y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q));  // NaN -> 0
      y = _mm256_min_ps(_mm256_max_ps(y, lo), hi);
      const __m256i i32 = _mm256_cvtps_epi32(y);
      const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32),
                                          _mm256_extracti128_si256(i32, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(orow + c), _mm_packs_epi16(i16, i16));
    }
    for (int64_t c = full8; c < channels; ++c) {
      orow[c] = LayerNormOne(static_cast<int32_t>(channels) * xr[c] - s1, rs,
                             gamma[c], beta[c]);
    }
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
