// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 max pooling body, AVX2: 32 channels per VPMAXSB (pool_kernels.h).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/pool/pool_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

void MaxPoolAvx2(const int8_t* const* rows, int64_t count, int64_t channels,
                 int8_t init, int8_t* out) {
  const __m256i start = _mm256_set1_epi8(init);
  int64_t c = 0;
  for (; c + 32 <= channels; c += 32) {
    __m256i m = start;
    for (int64_t j = 0; j < count; ++j) {
      m = _mm256_max_epi8(
          m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j] + c)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), m);
  }
  MaxPoolChannels(rows, count, c, channels, init, out);
}

}  // namespace cpu
}  // namespace tf_fused_int8
