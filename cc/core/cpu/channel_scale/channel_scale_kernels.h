// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Vector bodies of FusedInt8ChannelScale (cc/core/channel_scale.cc), one
// file per instruction set. A body scales `pixels` pixels of `channels`
// int8 values by m[c] exactly as ChannelScaleOne does per element
// (float32(x) * m[c], NaN to 0, clip to [-128, 127], round to nearest even
// in MXCSR's mode), every channel (its own tail included).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_CHANNEL_SCALE_CHANNEL_SCALE_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_CHANNEL_SCALE_CHANNEL_SCALE_KERNELS_H_

#include <cstdint>

#include "cc/core/cpu/round_int8.h"

namespace tf_fused_int8 {
namespace cpu {

using ChannelScaleBody = void (*)(const int8_t* x, int64_t pixels,
                                  int64_t channels, const float* m,
                                  int8_t* out);

inline int8_t ChannelScaleOne(int8_t x, float m) {
  return RoundClipToInt8(static_cast<float>(x) * m);
}

#if defined(__x86_64__)
void ChannelScaleAvx2(const int8_t* x, int64_t pixels, int64_t channels,
                      const float* m, int8_t* out);
void ChannelScaleAvx512(const int8_t* x, int64_t pixels, int64_t channels,
                        const float* m, int8_t* out);
#endif

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_CHANNEL_SCALE_CHANNEL_SCALE_KERNELS_H_
