// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Vector bodies of int8 max and average pooling (cc/core/pool.cc), one
// file per instruction set and pooling. Each body computes the channels
// [0, channels) of one output pixel from `rows`, its window cells in the
// input (count >= 0):
//   max:     out[c] = max(init, rows[0][c], ..., rows[count - 1][c]), `init`
//            0 when the window holds zero padding and -128 otherwise;
//   average: out[c] = round_half_to_even((rows[0][c] + ... +
//            rows[count - 1][c]) / divisor), divisor >= 1 the window's cells
//            of X' (its zero padding cells add nothing to the sum).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_POOL_POOL_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_POOL_POOL_KERNELS_H_

#include <cstdint>
#include <type_traits>

namespace tf_fused_int8 {
namespace cpu {

using MaxPoolBody = void (*)(const int8_t* const* rows, int64_t count,
                             int64_t channels, int8_t init, int8_t* out);

// Channels [begin, channels) one at a time (the vector bodies' tail, and
// the portable body with begin = 0).
inline void MaxPoolChannels(const int8_t* const* rows, int64_t count,
                            int64_t begin, int64_t channels, int8_t init,
                            int8_t* out) {
  for (int64_t c = begin; c < channels; ++c) out[c] = init;
  for (int64_t j = 0; j < count; ++j) {
    const int8_t* r = rows[j];
    for (int64_t c = begin; c < channels; ++c) {
      out[c] = r[c] > out[c] ? r[c] : out[c];
    }
  }
}

// A run of `count` output pixels of one output row whose windows hold no
// zero padding cell and are not cut at the left or right (pool.cc's
// interior columns): pixel i's window is input rows [0, window_rows) from
// `first` (row_bytes apart), columns i * stride_w .. i * stride_w +
// window_w - 1 (channels bytes apart), window_rows >= 1; out[i * channels
// + c] = the max of those cells' channel c. One call per output row
// instead of one per pixel (MaxPoolBody): the per-pixel window setup was
// most of ResNet50's stem pool (pool.cc).
using MaxPoolRunBody = void (*)(const int8_t* first, int64_t window_rows,
                                int64_t row_bytes, int64_t window_w,
                                int64_t stride_w, int64_t count,
                                int64_t channels, int8_t* out);

// The max over one pixel's window (rows x cols cells from w, row_bytes and
// channels bytes apart) of the channel vectors load(cell) reads there,
// max(a, b) combining two: the window loop of the ISA run bodies. kRows x
// kCols when both are given (> 0: unrolled, WithMaxPoolRunShape), else
// rows x cols. (MaxPoolRunChannels below keeps its own loop, one channel at
// a time, which GCC compiles better as it is: through this template the
// portable body ran 1.27x slower.)
template <int kRows, int kCols, typename Load, typename Max>
__attribute__((always_inline)) inline auto WindowMax(const int8_t* w, int64_t rows,
                                                     int64_t cols, int64_t row_bytes,
                                                     int64_t channels, const Load& load,
                                                     const Max& max) {
  const int64_t nr = kRows > 0 ? kRows : rows, nc = kCols > 0 ? kCols : cols;
  auto m = load(w);
#pragma GCC unroll 4
  for (int64_t r = 0; r < nr; ++r) {
#pragma GCC unroll 4
    for (int64_t k = r == 0 ? 1 : 0; k < nc; ++k) {
      m = max(m, load(w + r * row_bytes + k * channels));
    }
  }
  return m;
}

// Channels [begin, channels) of such a run, one at a time (the vector
// bodies' tail, and the portable body with begin = 0).
inline void MaxPoolRunChannels(const int8_t* first, int64_t window_rows,
                               int64_t row_bytes, int64_t window_w,
                               int64_t stride_w, int64_t count, int64_t begin,
                               int64_t channels, int8_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    const int8_t* w = first + i * stride_w * channels;
    int8_t* o = out + i * channels;
    for (int64_t c = begin; c < channels; ++c) {
      int8_t m = w[c];
      for (int64_t r = 0; r < window_rows; ++r) {
        for (int64_t k = 0; k < window_w; ++k) {
          const int8_t v = w[r * row_bytes + k * channels + c];
          m = v > m ? v : m;
        }
      }
      o[c] = m;
    }
  }
}

// Calls run(rows, cols) with the window's shape as std::integral_constant
// when the run bodies unroll it (3x3: ResNet's stem pool), else with zeros
// (loops over window_rows x window_w): the one place that picks the
// unrolled shapes for every instruction set's run body.
template <typename Run>
inline void WithMaxPoolRunShape(int64_t window_rows, int64_t window_w, const Run& run) {
  if (window_rows == 3 && window_w == 3) {
    run(std::integral_constant<int, 3>{}, std::integral_constant<int, 3>{});
  } else {
    run(std::integral_constant<int, 0>{}, std::integral_constant<int, 0>{});
  }
}

using AvgPoolBody = void (*)(const int8_t* const* rows, int64_t count,
                             int64_t divisor, int64_t channels, int8_t* out);

// round_half_to_even(s / d) of the exact rational, d >= 1: floor division,
// then up when the remainder is over half of d, or half of it and the floor
// odd.
inline int64_t RoundedQuotient(int64_t s, int64_t d) {
  int64_t q = s / d, r = s % d;  // truncated toward zero
  if (r < 0) {
    q -= 1;
    r += d;
  }  // now s = q * d + r, 0 <= r < d
  if (2 * r > d || (2 * r == d && (q & 1) != 0)) ++q;
  return q;
}

// Channels [begin, channels) one at a time, exactly in int64 for any window
// (the vector bodies' tail and their fallback, and the portable body).
inline void AvgPoolChannels(const int8_t* const* rows, int64_t count,
                            int64_t divisor, int64_t begin, int64_t channels,
                            int8_t* out) {
  for (int64_t c = begin; c < channels; ++c) {
    int64_t s = 0;
    for (int64_t j = 0; j < count; ++j) s += rows[j][c];
    out[c] = static_cast<int8_t>(RoundedQuotient(s, divisor));
  }
}

// The vector average bodies sum in int16 and divide in float32, which is
// exact for these windows: |sum| <= 128 * 255 < 2^15, and the float32
// quotient of two exact integers with divisor < 2^16 rounds to the nearest
// integer as the exact rational does (pool.cc). Larger windows run
// AvgPoolChannels.
constexpr int64_t kAvgPoolVectorMaxCells = 255;

// Whether the vector bodies may multiply the sum by the float32 reciprocal
// of the divisor D (<= kAvgPoolVectorMaxCells) instead of dividing by D,
// with the same rounded result: D a power of two (1 / D is then exact, and
// so is S * (1 / D), ties included), or D odd. An odd D makes no ties (S /
// D = k + 1/2 would need 2S = D (2k + 1), even = odd), and puts S / D at
// least 1 / (2D) >= 2^-9 from every half-integer; fl(S * fl(1 / D)) lies
// within 2^-17 (1 / D's rounding, times |S / D| <= 128) + 2^-17 (the
// product's, half an ulp at 128 at most) = 2^-16 of S / D: on the same side
// of every half-integer, never on one, so it rounds to the same integer.
// The 3x3 windows of a SAME pooling have 9 cells inside (odd) and 4 at the
// corners (a power of two); only the edges' 6 divide (a VDIVPS costs
// several VMULPS of throughput).
inline bool AvgPoolReciprocalExact(int64_t divisor) {
  return (divisor & 1) != 0 || (divisor & (divisor - 1)) == 0;
}

#if defined(__x86_64__)
void AvgPoolAvx2(const int8_t* const* rows, int64_t count, int64_t divisor,
                 int64_t channels, int8_t* out);
void AvgPoolAvx512(const int8_t* const* rows, int64_t count, int64_t divisor,
                   int64_t channels, int8_t* out);
void MaxPoolAvx2(const int8_t* const* rows, int64_t count, int64_t channels,
                 int8_t init, int8_t* out);
void MaxPoolAvx512(const int8_t* const* rows, int64_t count, int64_t channels,
                   int8_t init, int8_t* out);
void MaxPoolRunAvx2(const int8_t* first, int64_t window_rows, int64_t row_bytes,
                    int64_t window_w, int64_t stride_w, int64_t count,
                    int64_t channels, int8_t* out);
void MaxPoolRunAvx512(const int8_t* first, int64_t window_rows, int64_t row_bytes,
                      int64_t window_w, int64_t stride_w, int64_t count,
                      int64_t channels, int8_t* out);
#endif

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_POOL_POOL_KERNELS_H_
