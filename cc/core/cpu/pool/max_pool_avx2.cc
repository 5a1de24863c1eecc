// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 max pooling bodies, AVX2: 32 channels per VPMAXSB (pool_kernels.h).
// The channels past the last 32: where there are 32 or more channels, one
// more vector over the last 32 (overlapping the one before it: the same
// bytes computed and stored twice, by the same thread); under 32 channels
// (NASNet's 11 and 22), one vector whose loads and stores move only the
// channels' bytes (LoadBytes32 / Store32, epilogue_avx2.h). They ran one
// channel at a time before (MaxPoolChannels, MaxPoolRunChannels).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/pool/pool_kernels.h"
#include "cc/core/epilogue_avx2.h"

namespace tf_fused_int8 {
namespace cpu {

void MaxPoolAvx2(const int8_t* const* rows, int64_t count, int64_t channels,
                 int8_t init, int8_t* out) {
  const __m256i start = _mm256_set1_epi8(init);
  // The `n` channels from c (n = 32: whole vectors).
  auto block = [&](int64_t c) {
    __m256i m = start;
    for (int64_t j = 0; j < count; ++j) {
      m = _mm256_max_epi8(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j] + c)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), m);
  };
  int64_t c = 0;
  for (; c + 32 <= channels; c += 32) block(c);
  if (c == channels) return;
  if (channels >= 32) {
    block(channels - 32);
    return;
  }
  const int n = static_cast<int>(channels);
  __m256i m = start;
  for (int64_t j = 0; j < count; ++j) m = _mm256_max_epi8(m, LoadBytes32(rows[j], n));
  Store32(m, n, out);
}

namespace {

template <int kRows, int kCols>
void Run(const int8_t* first, int64_t rows, int64_t row_bytes, int64_t cols,
         int64_t stride_w, int64_t count, int64_t channels, int8_t* out) {
  const int64_t nr = kRows > 0 ? kRows : rows, nc = kCols > 0 ? kCols : cols;
  const int64_t step = stride_w * channels;
  const int64_t vec_end = channels / 32 * 32;
  const auto max = [](__m256i a, __m256i b) __attribute__((always_inline)) {
    return _mm256_max_epi8(a, b);
  };
  const auto load = [](const int8_t* p) __attribute__((always_inline)) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  };
  for (int64_t i = 0; i < count; ++i) {
    const int8_t* w = first + i * step;
    int8_t* o = out + i * channels;
    for (int64_t c = 0; c < vec_end; c += 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + c),
                          WindowMax<kRows, kCols>(w + c, nr, nc, row_bytes, channels, load, max));
    }
  }
  if (vec_end == channels) return;
  // The channels past the whole vectors, in a loop of their own (in the
  // one above, the stem's 64 channels ran 1.1-1.25x slower): the last 32
  // again, or all of them (fewer than 32) through partial loads.
  if (channels >= 32) {
    const int64_t at = channels - 32;
    for (int64_t i = 0; i < count; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i * channels + at),
                          WindowMax<kRows, kCols>(first + i * step + at, nr, nc, row_bytes,
                                                  channels, load, max));
    }
    return;
  }
  const int n = static_cast<int>(channels);
  const auto partial = [n](const int8_t* p) __attribute__((always_inline)) {
    return LoadBytes32(p, n);
  };
  for (int64_t i = 0; i < count; ++i) {
    Store32(WindowMax<kRows, kCols>(first + i * step, nr, nc, row_bytes, channels, partial, max),
            n, out + i * channels);
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
