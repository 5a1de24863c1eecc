// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Vector bodies of FusedInt8ChannelScale (cc/core/channel_scale.cc), one
// file per instruction set. A body scales `pixels` pixels of `channels`
// int8 values by m[c] exactly as ChannelScaleOne does per element
// (float32(x) * m[c], NaN to 0, clip to [-128, 127], round to nearest even
// in MXCSR's mode), every channel (its own tail included).
//
// `plain` (PlainMultipliers below, once per image) says every m[c] is
// finite with |m[c]| < 2^24, so |m[c]| <= 2^24 - 1 (the float below 2^24):
// then each product float32(x) * m[c] is finite, its exact value at most
// 128 * (2^24 - 1) = 2^31 - 128 in magnitude, a float itself, so the
// rounded product stays inside (-2^31, 2^31) and VCVTPS2DQ rounds it to
// nearest even without overflow, and the int8 saturation that follows (VPMOVSDB, or
// PACKSSDW + PACKSSWB) is the clip (clip and round commute for the integer
// bounds -128 and 127; no NaN can arise): the bodies then leave out the
// NaN mask and the float clip, four of ten vector instructions a step.
// Every squeeze-excite gate is such a multiplier (a sigmoid's output in
// [0, 1] times a scale ratio).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_CHANNEL_SCALE_CHANNEL_SCALE_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_CHANNEL_SCALE_CHANNEL_SCALE_KERNELS_H_

#include <cstdint>

#include "cc/core/cpu/round_int8.h"

namespace tf_fused_int8 {
namespace cpu {

using ChannelScaleBody = void (*)(const int8_t* x, int64_t pixels,
                                  int64_t channels, const float* m, bool plain,
                                  int8_t* out);

// Whether every m[c], c < channels, is finite with |m[c]| < 2^24 (NaN
// fails the comparison). A running AND, not an early exit, so that the
// compiler vectorizes it.
inline bool PlainMultipliers(const float* m, int64_t channels) {
  bool plain = true;
  for (int64_t c = 0; c < channels; ++c) plain &= (m[c] < 16777216.0f) & (m[c] > -16777216.0f);
  return plain;
}

inline int8_t ChannelScaleOne(int8_t x, float m) {
  return RoundClipToInt8(static_cast<float>(x) * m);
}

#if defined(__x86_64__)
void ChannelScaleAvx2(const int8_t* x, int64_t pixels, int64_t channels,
                      const float* m, bool plain, int8_t* out);
void ChannelScaleAvx512(const int8_t* x, int64_t pixels, int64_t channels,
                        const float* m, bool plain, int8_t* out);
#endif

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_CHANNEL_SCALE_CHANNEL_SCALE_KERNELS_H_
