// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8Quantize, AVX2 (the avx2 and avxvnni paths): 32 elements a step,
// VDIVPS on 8 lanes (twice the SSE2 baseline's width), the NaN lanes zeroed
// (VCMPPS ordered), clipped, VCVTPS2DQ (MXCSR rounding, nearest even), then
// packed; the packs cannot saturate after the clip. The lane order the
// 256-bit packs leave is undone by one VPERMD.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/quantize/quantize_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

int64_t QuantizeAvx2(const float* x, int64_t n, float scale, int8_t* q) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
  auto eight = [&](const float* p) {
    __m256 v = _mm256_div_ps(_mm256_loadu_ps(p), s);
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    return _mm256_cvtps_epi32(v);
  };
  // packs work per 128-bit lane: bytes come out as dwords 0 4 1 5 2 6 3 7.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = _mm256_packs_epi32(eight(x + i), eight(x + i + 8));
    const __m256i b = _mm256_packs_epi32(eight(x + i + 16), eight(x + i + 24));
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), bytes);
  }
  return i;
}

}  // namespace cpu
}  // namespace tf_fused_int8
