// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Vector bodies of int8 max pooling (cc/core/pool.cc), one file per
// instruction set. A body sets out[c] = max(init, rows[0][c], ...,
// rows[count - 1][c]) for every c in [0, channels): the channels of one
// output pixel, `rows` its window cells in the input (count >= 0), `init`
// 0 when the window holds zero padding and -128 otherwise.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_POOL_POOL_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_POOL_POOL_KERNELS_H_

#include <cstdint>

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

#if defined(__x86_64__)
void MaxPoolAvx2(const int8_t* const* rows, int64_t count, int64_t channels,
                 int8_t init, int8_t* out);
void MaxPoolAvx512(const int8_t* const* rows, int64_t count, int64_t channels,
                   int8_t init, int8_t* out);
#endif

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_POOL_POOL_KERNELS_H_
