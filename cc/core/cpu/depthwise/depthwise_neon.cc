// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AArch64 Advanced SIMD (the neon, dotprod and i8mm
// paths; nothing here needs more than ARMv8-A): 16 channels as four int32x4
// accumulators, per tap two SXTL (activations to int16) and four SMLAL /
// SMLAL2 (int16 x int16 products added to int32 lanes: w * x exactly). The
// widened weights of depthwise.h hold each int8 weight as an int16 in the
// low half of an int32 lane; UZP1 of two such vectors picks those halves
// (little-endian: the even int16 lanes) into eight int16 weights. A last
// block of fewer than 16 channels is loaded with LoadBytesNeon16Inline
// (epilogue_neon.h: one to four plain moves at constant offsets, in line:
// it runs per tap).
// The row walk is depthwise_rows.h; the epilogue is EpilogueNeon16
// (epilogue_neon.h, natural order).
#include <arm_neon.h>

#include <cstdint>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/epilogue_neon.h"
#include "cc/core/cpu/depthwise/depthwise_rows.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct Neon16 {
  struct Acc {
    int32x4_t v[4];  // channels 4j .. 4j + 3
  };
  struct X {
    int16x8_t lo, hi;  // channels 0-7, 8-15
  };
  using W = X;
  using Tail = int64_t;  // valid channels, 1..16
  using Consts = EpilogueNeonConsts;

  static Tail MakeTail(int64_t count) { return count; }
  static Acc Zero() {
    const int32x4_t z = vdupq_n_s32(0);
    return Acc{{z, z, z, z}};
  }
  static Acc Add(const Acc& a, const Acc& b) {
    return Acc{{vaddq_s32(a.v[0], b.v[0]), vaddq_s32(a.v[1], b.v[1]),
                vaddq_s32(a.v[2], b.v[2]), vaddq_s32(a.v[3], b.v[3])}};
  }
  template <bool kFull>
  static X Load(const int8_t* p, Tail count) {
    const int8x16_t v =
        kFull ? vld1q_s8(p) : LoadBytesNeon16Inline(p, count >= 16 ? 16 : static_cast<int>(count));
    return X{vmovl_s8(vget_low_s8(v)), vmovl_high_s8(v)};
  }
  static W LoadW(const int32_t* w) {
    return W{vuzp1q_s16(vreinterpretq_s16_s32(vld1q_s32(w)),
                        vreinterpretq_s16_s32(vld1q_s32(w + 4))),
             vuzp1q_s16(vreinterpretq_s16_s32(vld1q_s32(w + 8)),
                        vreinterpretq_s16_s32(vld1q_s32(w + 12)))};
  }
  static void Mac(Acc* a, const X& x, const W& w) {
    a->v[0] = vmlal_s16(a->v[0], vget_low_s16(x.lo), vget_low_s16(w.lo));
    a->v[1] = vmlal_high_s16(a->v[1], x.lo, w.lo);
    a->v[2] = vmlal_s16(a->v[2], vget_low_s16(x.hi), vget_low_s16(w.hi));
    a->v[3] = vmlal_high_s16(a->v[3], x.hi, w.hi);
  }
  static Consts MakeConsts(const DirectRowArgs& d) {
    return MakeEpilogueNeonConsts(d.side_scale, d.lo, d.hi);
  }
  static void Store(const Acc& a, const float* scale, const float* bias,
                    const int8_t* side, const Consts& k, Tail count, int8_t* out) {
    EpilogueNeon16(a.v, scale, bias, side, k, static_cast<int>(count), out);
  }
  // 32 vector registers: 4 pixels (16 accumulators) + up to 5 taps' weights
  // (10) + one activation (2) for every interior block.
  template <int kKw, int kSw>
  static constexpr int Pixels() {
    return 4;
  }
};

}  // namespace

void DepthwiseRowsNeon(const DepthwiseRowArgs& d) {
  DepthwiseRowKernel<Neon16>::Rows(d);
}

}  // namespace cpu
}  // namespace tf_fused_int8
