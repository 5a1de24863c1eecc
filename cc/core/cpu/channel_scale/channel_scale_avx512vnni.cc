// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8ChannelScale, AVX-512 (the avx512vnni path): 16 channels a step
// (VPMOVSXBD, VCVTDQ2PS, VMULPS), the NaN lanes zeroed and clipped (not
// for plain multipliers: channel_scale_kernels.h), VCVTPS2DQ (MXCSR
// rounding, nearest even) and VPMOVSDB; the last partial step under a mask.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/channel_scale/channel_scale_kernels.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tf_fused_int8 {
namespace cpu {

namespace {

template <bool kPlain>
void Scale(const int8_t* x, int64_t pixels, int64_t channels, const float* m, int8_t* out) {
  const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
  auto scale16 = [&](__m128i bytes, __m512 mv) {
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), mv);
    if (!kPlain) {
      v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
      v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    }
    return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v));
  };
  // The int32 of four steps (64 channels) through one saturating PACKSSDW
  // / PACKSSWB chain (it saturates exactly as VPMOVSDB does) and VPERMD
  // from [lane L: channels 16j + 4L .. 16j + 4L + 3 for j = 0..3] to natural
  // order: one 64-byte store instead of four VPMOVSDB, which Zen 4 runs at
  // one per two cycles.
  auto int32_16 = [&](const int8_t* bytes, const float* mv) {
    __m512 v = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)))),
        _mm512_loadu_ps(mv));
    if (!kPlain) {
      v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
      v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    }
    return _mm512_cvtps_epi32(v);
  };
  const __m512i order =
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const int64_t full64 = channels / 64 * 64;
  const int64_t full = channels / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (channels - full)) - 1);
  for (int64_t p = 0; p < pixels; ++p) {
    const int8_t* xp = x + p * channels;
    int8_t* op = out + p * channels;
    for (int64_t c = 0; c < full64; c += 64) {
      const __m512i p01 = _mm512_packs_epi32(int32_16(xp + c, m + c),
                                             int32_16(xp + c + 16, m + c + 16));
      const __m512i p23 = _mm512_packs_epi32(int32_16(xp + c + 32, m + c + 32),
                                             int32_16(xp + c + 48, m + c + 48));
      _mm512_storeu_si512(op + c, _mm512_permutexvar_epi32(order, _mm512_packs_epi16(p01, p23)));
    }
    for (int64_t c = full64; c < full; c += 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(op + c),
                       scale16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xp + c)),
                               _mm512_loadu_ps(m + c)));
    }
    if (tail != 0) {
      _mm_mask_storeu_epi8(op + full, tail,
                           scale16(_mm_maskz_loadu_epi8(tail, xp + full),
                                   _mm512_maskz_loadu_ps(tail, m + full)));
    }
  }
}

}  // namespace

void ChannelScaleAvx512(const int8_t* x, int64_t pixels, int64_t channels,
                        const float* m, bool plain, int8_t* out) {
  if (plain) {
    Scale<true>(x, pixels, channels, m, out);
  } else {
    Scale<false>(x, pixels, channels, m, out);
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
