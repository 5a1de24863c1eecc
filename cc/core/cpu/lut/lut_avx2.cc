// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Output lookup table, AVX2 (lut_kernels.h): 16 VPSHUFBs per 32 bytes.
//
// VPSHUFB looks up 16 entries and gives 0 where the index byte is negative.
// Row s of the table (entries 16 s .. 16 s + 15, i = q + 128) is reached by
// two index chains stepped down 16 at a time with signed saturation:
//  * upper half (i >= 128, q >= 0): x = q, q - 16, ... For q = 16 h + l
//    (h < 8) the steps s <= h look up entry l of their row, the later ones
//    are negative (0); a negative q stays negative (saturation: never wraps
//    back to a positive index) and contributes 0 everywhere.
//  * lower half (q < 0): the same chain from q ^ 0x80 = q + 128, which is
//    negative for q >= 0.
// The rows are stored as differences, D_0 = R_0 and D_s = R_s ^ R_(s-1), so
// that the XOR of the steps s <= h is R_h: entry l of row h, the table value.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/lut/lut_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

void LutAvx2(const int8_t* lut, int8_t* data, int64_t n) {
  __m256i lo_rows[8], hi_rows[8];
  __m128i prev_lo = _mm_setzero_si128(), prev_hi = _mm_setzero_si128();
  for (int s = 0; s < 8; ++s) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lut + 16 * s));
    const __m128i hi =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(lut + 128 + 16 * s));
    lo_rows[s] = _mm256_broadcastsi128_si256(_mm_xor_si128(lo, prev_lo));
    hi_rows[s] = _mm256_broadcastsi128_si256(_mm_xor_si128(hi, prev_hi));
    prev_lo = lo;
    prev_hi = hi;
  }
  const __m256i step = _mm256_set1_epi8(16);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i* p = reinterpret_cast<__m256i*>(data + i);
    __m256i hi = _mm256_loadu_si256(p);
    __m256i lo = _mm256_xor_si256(hi, flip);
    __m256i r = _mm256_xor_si256(_mm256_shuffle_epi8(lo_rows[0], lo),
                                 _mm256_shuffle_epi8(hi_rows[0], hi));
    for (int s = 1; s < 8; ++s) {
      lo = _mm256_subs_epi8(lo, step);
      hi = _mm256_subs_epi8(hi, step);
      r = _mm256_xor_si256(r, _mm256_shuffle_epi8(lo_rows[s], lo));
      r = _mm256_xor_si256(r, _mm256_shuffle_epi8(hi_rows[s], hi));
    }
    _mm256_storeu_si256(p, r);
  }
  LutBytes(lut, data, i, n);
}

}  // namespace cpu
}  // namespace tf_fused_int8
