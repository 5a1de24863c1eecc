// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8ChannelScale, AVX2: 8 channels a step (VPMOVSXBD, VCVTDQ2PS,
// VMULPS), the NaN lanes zeroed and clipped (not for plain multipliers:
// channel_scale_kernels.h), VCVTPS2DQ (nearest even) and two saturating
// packs (the clip, for plain multipliers); the channels past the last
// whole step one at a time.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/channel_scale/channel_scale_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

namespace {

template <bool kPlain>
void Scale(const int8_t* x, int64_t pixels, int64_t channels, const float* m, int8_t* out) {
  const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
  // The int32 of four steps (32 channels) through one saturating PACKSSDW
  // / PACKSSWB chain and VPERMD from [lane L: channels 8j + 4L .. 8j + 4L +
  // 3 for j = 0..3] to natural order: one 32-byte store.
  auto int32_8 = [&](const int8_t* bytes, const float* mv) {
    __m256 v = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)))),
        _mm256_loadu_ps(mv));
    if (!kPlain) {
      v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
      v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    }
    return _mm256_cvtps_epi32(v);
  };
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int64_t full32 = channels / 32 * 32;
  const int64_t full = channels / 8 * 8;
  for (int64_t p = 0; p < pixels; ++p) {
    const int8_t* xp = x + p * channels;
    int8_t* op = out + p * channels;
    for (int64_t c = 0; c < full32; c += 32) {
      const __m256i p01 = _mm256_packs_epi32(int32_8(xp + c, m + c),
                                             int32_8(xp + c + 8, m + c + 8));
      const __m256i p23 = _mm256_packs_epi32(int32_8(xp + c + 16, m + c + 16),
                                             int32_8(xp + c + 24, m + c + 24));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(op + c),
                          _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), order));
    }
    for (int64_t c = full32; c < full; c += 8) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(xp + c));
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)),
                               _mm256_loadu_ps(m + c));
      if (!kPlain) {
        v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
      }
      const __m256i i32 = _mm256_cvtps_epi32(v);
      const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32),
                                          _mm256_extracti128_si256(i32, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(op + c), _mm_packs_epi16(i16, i16));
    }
    for (int64_t c = full; c < channels; ++c) op[c] = ChannelScaleOne(xp[c], m[c]);
  }
}

}  // namespace

void ChannelScaleAvx2(const int8_t* x, int64_t pixels, int64_t channels,
                      const float* m, bool plain, int8_t* out) {
  if (plain) {
    Scale<true>(x, pixels, channels, m, out);
  } else {
    Scale<false>(x, pixels, channels, m, out);
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
