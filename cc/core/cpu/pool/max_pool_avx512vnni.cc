// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 max pooling body, AVX-512BW: 64 channels per VPMAXSB, the last
// (partial) vector under a byte mask (pool_kernels.h).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/pool/pool_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

void MaxPoolAvx512(const int8_t* const* rows, int64_t count, int64_t channels,
                   int8_t init, int8_t* out) {
  const __m512i start = _mm512_set1_epi8(init);
  for (int64_t c = 0; c < channels; c += 64) {
    const int64_t n = channels - c;
    const __mmask64 mask = n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
    __m512i m = start;
    for (int64_t j = 0; j < count; ++j) {
      m = _mm512_max_epi8(m, _mm512_maskz_loadu_epi8(mask, rows[j] + c));
    }
    _mm512_mask_storeu_epi8(out + c, mask, m);
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
