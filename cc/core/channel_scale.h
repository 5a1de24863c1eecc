// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 x per-image, per-channel float multiplier -> int8 (FusedInt8ChannelScale:
// a squeeze-excite gate applied to an int8 tensor), in one pass:
//
//   out[n, p, c] = clip(round_half_to_even(float32(x[n, p, c]) * m[n, c]),
//                       -128, 127)                        NaN -> 0
//
// with one IEEE float32 multiply (correctly rounded), so the result is bit
// for bit what tf.cast(x, float32) * m, rounded, clipped and cast gives.
#ifndef TF_FUSED_INT8_CC_CORE_CHANNEL_SCALE_H_
#define TF_FUSED_INT8_CC_CORE_CHANNEL_SCALE_H_

#include <cstdint>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {

struct ChannelScaleArgs {
  const int8_t* x = nullptr;  // [batch, pixels, channels]
  const float* m = nullptr;   // [batch, channels]
  int8_t* out = nullptr;      // [batch, pixels, channels]
  int64_t batch = 0, pixels = 0, channels = 0;
};

// On the CPU path that TF_FUSED_INT8_CPU_KERNEL forces, or the best this
// CPU has; every path gives the same bits. `path`: a given one (tests); an
// unsupported one runs the baseline loop.
void RunChannelScale(const ChannelScaleArgs& a, const ParallelFor& parallel_for);
void RunChannelScale(const ChannelScaleArgs& a, const ParallelFor& parallel_for,
                     KernelPath path);

// One element, written the obvious way (the test's reference).
int8_t ChannelScaleOneReference(int8_t x, float m);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CHANNEL_SCALE_H_
