// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The scalar last step of the element-wise int8 ops (FusedInt8Quantize,
// FusedInt8ChannelScale, FusedInt8LayerNorm), shared by their portable loops
// and vector-body tails: a float32 value to int8, NaN -> 0, clipped to
// [-128, 127], rounded half to even without a library call. Compile with
// -ffp-contract=off.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_ROUND_INT8_H_
#define TF_FUSED_INT8_CC_CORE_CPU_ROUND_INT8_H_

#include <cstdint>

namespace tf_fused_int8 {
namespace cpu {

// 1.5 * 2^23: for |v| <= 2^22, (v + kRoundInt8Magic) - kRoundInt8Magic is v
// rounded to an integer in round to nearest even (TF's and the C++ default
// mode): the sum lies in [2^23, 2^24), where float32's spacing is exactly
// 1. (In the directed modes the sum's rounding is not v's: toward zero it
// rounds a negative v down, -2.7 to -3 where nearbyint gives -2.) Both
// additions are plain IEEE operations (no -ffast-math, and
// -ffp-contract=off, so they are not merged).
constexpr float kRoundInt8Magic = 12582912.0f;

inline int8_t RoundClipToInt8(float v) {
  v = v == v ? v : 0.0f;  // NaN -> 0
  v = v < -128.0f ? -128.0f : v;
  v = v > 127.0f ? 127.0f : v;
  v = (v + kRoundInt8Magic) - kRoundInt8Magic;  // |v| <= 128
  return static_cast<int8_t>(static_cast<int32_t>(v));
}

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_ROUND_INT8_H_
