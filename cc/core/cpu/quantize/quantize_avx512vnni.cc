// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8Quantize, AVX-512 (the avx512vnni path; only AVX512F is used):
// 64 elements a step, VDIVPS on 16 lanes, the NaN lanes zeroed (an ordered
// compare as the zeroing mask), clipped, VCVTPS2DQ (MXCSR rounding, nearest
// even) and VPMOVSDB (its saturation never acts after the clip).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/quantize/quantize_kernels.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tf_fused_int8 {
namespace cpu {

int64_t QuantizeAvx512(const float* x, int64_t n, float scale, int8_t* q) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i + 16 * j), s);
      v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
      v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i + 16 * j),
                       _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)));
    }
  }
  return i;
}

}  // namespace cpu
}  // namespace tf_fused_int8
