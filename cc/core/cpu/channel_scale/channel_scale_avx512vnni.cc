// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8ChannelScale, AVX-512 (the avx512vnni path): 16 channels a step
// (VPMOVSXBD, VCVTDQ2PS, VMULPS), the NaN lanes zeroed, clipped, VCVTPS2DQ
// (MXCSR rounding, nearest even) and VPMOVSDB; the last partial step under
// a mask.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/channel_scale/channel_scale_kernels.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tf_fused_int8 {
namespace cpu {

void ChannelScaleAvx512(const int8_t* x, int64_t pixels, int64_t channels,
                        const float* m, int8_t* out) {
  const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
  auto scale16 = [&](__m128i bytes, __m512 mv) {
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), mv);
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v));
  };
  const int64_t full = channels / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (channels - full)) - 1);
  for (int64_t p = 0; p < pixels; ++p) {
    const int8_t* xp = x + p * channels;
    int8_t* op = out + p * channels;
    for (int64_t c = 0; c < full; c += 16) {
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

}  // namespace cpu
}  // namespace tf_fused_int8
