// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 max pooling bodies, AVX-512BW: 64 channels per VPMAXSB, the last
// (partial) vector under a byte mask (pool_kernels.h).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/pool/pool_kernels.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// The bytes of channels [c, c + 64) that exist: n = channels - c of them.
inline __mmask64 ChannelMask(int64_t n) {
  return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}

}  // namespace

void MaxPoolAvx512(const int8_t* const* rows, int64_t count, int64_t channels,
                   int8_t init, int8_t* out) {
  const __m512i start = _mm512_set1_epi8(init);
  for (int64_t c = 0; c < channels; c += 64) {
    const __mmask64 mask = ChannelMask(channels - c);
    __m512i m = start;
    for (int64_t j = 0; j < count; ++j) {
      m = _mm512_max_epi8(m, _mm512_maskz_loadu_epi8(mask, rows[j] + c));
    }
    _mm512_mask_storeu_epi8(out + c, mask, m);
  }
}

namespace {

template <int kRows, int kCols>
void Run(const int8_t* first, int64_t rows, int64_t row_bytes, int64_t cols,
         int64_t stride_w, int64_t count, int64_t channels, int8_t* out) {
  const int64_t step = stride_w * channels;
  for (int64_t i = 0; i < count; ++i, first += step, out += channels) {
    for (int64_t c = 0; c < channels; c += 64) {
      const __mmask64 mask = ChannelMask(channels - c);
      const __m512i m = WindowMax<kRows, kCols>(
          first + c, rows, cols, row_bytes, channels,
          [mask](const int8_t* p) __attribute__((always_inline)) {
            return _mm512_maskz_loadu_epi8(mask, p);
          },
          [](__m512i a, __m512i b) __attribute__((always_inline)) {
            return _mm512_max_epi8(a, b);
          });
      _mm512_mask_storeu_epi8(out + c, mask, m);
    }
  }
}

}  // namespace

void MaxPoolRunAvx512(const int8_t* first, int64_t window_rows, int64_t row_bytes,
                      int64_t window_w, int64_t stride_w, int64_t count,
                      int64_t channels, int8_t* out) {
  WithMaxPoolRunShape(window_rows, window_w, [&](auto rows, auto cols) {
    Run<decltype(rows)::value, decltype(cols)::value>(first, window_rows, row_bytes, window_w,
                                                      stride_w, count, channels, out);
  });
}

}  // namespace cpu
}  // namespace tf_fused_int8
