// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 average pooling body, AVX2: 32 channels at a time, the window's
// cells summed in two ymm of int16 (VPMOVSXBW + VPADDW), then per 8
// channels int32 -> float32, one VDIVPS by the divisor (a VMULPS by its
// reciprocal where that is exact: AvgPoolReciprocalExact) and VCVTPS2DQ
// (round to nearest even, the default MXCSR). The channels past the last 32:
// where there are 32 or more channels, one more block over the last 32
// (overlapping the one before it: the same bytes computed and stored
// twice, by the same thread); under 32 channels, one block whose loads and
// stores move only the channels' bytes (LoadBytes32 / Store32,
// epilogue_avx2.h).
// Windows of at most kAvgPoolVectorMaxCells cells (pool_kernels.h: exact).
#include <immintrin.h>

#include <cstdint>
#include "cc/core/cpu/pool/pool_kernels.h"
#include "cc/core/epilogue_avx2.h"

namespace tf_fused_int8 {
namespace cpu {

void AvgPoolAvx2(const int8_t* const* rows, int64_t count, int64_t divisor,
                 int64_t channels, int8_t* out) {
  const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
  const bool reciprocal = AvgPoolReciprocalExact(divisor);
  const __m256 r = _mm256_set1_ps(1.0f / static_cast<float>(divisor));
  // The n channels (32: a whole vector) from `at` of every cell into out.
  auto block = [&](int64_t at, int n) {
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    for (int64_t j = 0; j < count; ++j) {
      const __m256i v = LoadBytes32(rows[j] + at, n);
      lo = _mm256_add_epi16(lo, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)));
      hi = _mm256_add_epi16(hi, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)));
    }
    __m256i q[4];
    const __m128i sums[4] = {
        _mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1),
        _mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1)};
    for (int k = 0; k < 4; ++k) {
      const __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(sums[k]));
      q[k] = _mm256_cvtps_epi32(reciprocal ? _mm256_mul_ps(s, r) : _mm256_div_ps(s, d));
    }
    // int32 -> int16 -> int8 (values in [-128, 127]; packs work per 128-bit
    // lane, VPERMQ restores the order).
    const __m256i w01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
    const __m256i w23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xD8);
    const __m256i b = _mm256_permute4x64_epi64(_mm256_packs_epi16(w01, w23), 0xD8);
    Store32(b, n, out + at);
  };
  int64_t c = 0;
  for (; c + 32 <= channels; c += 32) block(c, 32);
  if (c == channels) return;
  // The rest ran from zero-padded copies of each cell (8-31 channels) or
  // one at a time (fewer, AvgPoolChannels: an int64 division each) before.
  if (channels >= 32) {
    block(channels - 32, 32);
  } else {
    block(0, static_cast<int>(channels));
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
