// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 average pooling body, AVX2: 32 channels at a time, the window's
// cells summed in two ymm of int16 (VPMOVSXBW + VPADDW), then per 8
// channels int32 -> float32, one VDIVPS by the divisor (a VMULPS by its
// reciprocal where that is exact: AvgPoolReciprocalExact) and VCVTPS2DQ
// (round to nearest even, the default MXCSR); the last 8-31 channels the
// same way from zero-padded copies, fewer one at a time.
// Windows of at most kAvgPoolVectorMaxCells cells (pool_kernels.h: exact).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cc/core/cpu/pool/pool_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

void AvgPoolAvx2(const int8_t* const* rows, int64_t count, int64_t divisor,
                 int64_t channels, int8_t* out) {
  const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
  const bool reciprocal = AvgPoolReciprocalExact(divisor);
  const __m256 r = _mm256_set1_ps(1.0f / static_cast<float>(divisor));
  // The 32 channels from `at` of the cells `cells` into dst.
  auto block = [&](const int8_t* const* cells, int64_t at, int8_t* dst) {
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    for (int64_t j = 0; j < count; ++j) {
      const __m256i v =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cells[j] + at));
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
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), b);
  };
  int64_t c = 0;
  for (; c + 32 <= channels; c += 32) block(rows, c, out + c);
  const int64_t rest = channels - c;
  // The last 8-31 channels: each cell's copied into a zeroed 32-byte row
  // (no load past the caller's bytes), the same vector step, the bytes
  // wanted copied out. One channel at a time (AvgPoolChannels, an int64
  // division each) they took NASNetMobile's 44-channel 3x3 average 3-4x
  // this (bench_core BENCH_CORE_POOL=avg, one Zen 4 thread, batch 8,
  // alternated twice: 28x28x44 1185-1253 -> 340-477 us, 14x14x88 477-565 ->
  // 90-124); fewer than 8 stay one at a time (3 channels: the copies took
  // 2.5x the time).
  if (rest < 8) {
    AvgPoolChannels(rows, count, divisor, c, channels, out);
    return;
  }
  alignas(32) int8_t copies[kAvgPoolVectorMaxCells][32];
  const int8_t* cells[kAvgPoolVectorMaxCells];
  for (int64_t j = 0; j < count; ++j) {
    std::memset(copies[j], 0, sizeof(copies[j]));
    std::memcpy(copies[j], rows[j] + c, static_cast<size_t>(rest));
    cells[j] = copies[j];
  }
  alignas(32) int8_t result[32];
  block(cells, 0, result);
  std::memcpy(out + c, result, static_cast<size_t>(rest));
}

}  // namespace cpu
}  // namespace tf_fused_int8
