// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 max pooling bodies, AVX2: 32 channels per VPMAXSB (pool_kernels.h).
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

namespace {

template <int kRows, int kCols>
void Run(const int8_t* first, int64_t rows, int64_t row_bytes, int64_t cols,
         int64_t stride_w, int64_t count, int64_t channels, int8_t* out) {
  const int64_t nr = kRows > 0 ? kRows : rows, nc = kCols > 0 ? kCols : cols;
  const int64_t step = stride_w * channels;
  const int64_t vec_end = channels / 32 * 32;
  for (int64_t i = 0; i < count; ++i) {
    const int8_t* w = first + i * step;
    int8_t* o = out + i * channels;
    for (int64_t c = 0; c < vec_end; c += 32) {
      const __m256i m = WindowMax<kRows, kCols>(
          w + c, nr, nc, row_bytes, channels,
          [](const int8_t* p) __attribute__((always_inline)) {
            return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
          },
          [](__m256i a, __m256i b) __attribute__((always_inline)) {
            return _mm256_max_epi8(a, b);
          });
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + c), m);
    }
  }
  if (vec_end < channels) {
    MaxPoolRunChannels(first, nr, row_bytes, nc, stride_w, count, vec_end, channels, out);
  }
}

}  // namespace

void MaxPoolRunAvx2(const int8_t* first, int64_t window_rows, int64_t row_bytes,
                    int64_t window_w, int64_t stride_w, int64_t count,
                    int64_t channels, int8_t* out) {
  WithMaxPoolRunShape(window_rows, window_w, [&](auto rows, auto cols) {
    Run<decltype(rows)::value, decltype(cols)::value>(first, window_rows, row_bytes, window_w,
                                                      stride_w, count, channels, out);
  });
}

}  // namespace cpu
}  // namespace tf_fused_int8
