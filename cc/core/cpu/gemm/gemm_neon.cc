// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Baseline AArch64 Advanced SIMD kernels (every ARMv8-A CPU): micro-tile 3
// pixels x 16 channels, weights in kFormatNeonS8x4 (gemm_kernels.h), the
// tile loop and epilogue of gemm_neon_tile.h. Built with no -march flag and
// -ffp-contract=off; everything but the IsaKernels table has internal
// linkage.
//
// Exact without any range restriction: SMULL multiplies eight int8 pairs
// into eight int16 lanes (|-128 * -128| = 2^14 fits int16), SADALP adds
// adjacent int16 lanes into the int32 accumulator lanes. (Summing two
// products in int16 first, the SMLAL trick of 7-bit weight schemes, would
// overflow at -128 * -128 + -128 * -128 = 2^15; it is not used.)
//
// With a row's four activations of a group broadcast to every 32-bit lane
// and a weight vector of four channels x four k (kFormatNeonS8x4), SMULL
// (low half) gives channels c, c + 1 and SMULL2 (high half) channels
// c + 2, c + 3, each as four int16 products in k order; SADALP leaves each
// channel's sum in two int32 lanes, (k0 + k1, k2 + k3). The micro-tile
// keeps these half-reduced accumulators (two int32x4 per four channels) and
// one ADDP per four channels at the end gives [c, c + 1, c + 2, c + 3]
// (ADDP adds adjacent lanes of its first, then of its second operand).
#include <arm_neon.h>

#include <cstdint>

#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/gemm/gemm_neon_tile.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct SmullKernel {
  static constexpr int64_t kKPerGroup = 4;
  static constexpr int64_t kGroupBytes = kNeonBlock * 4;
  // 3 rows x 16 channels x 2 half sums = 24 accumulator registers, 4 of
  // weights, 1 broadcast: 29 of the 32 vector registers.
  static constexpr int kMr = 3;
  static bool Panel(const PanelArgs& p) { return PanelS8x4(p); }

  template <int MR>
  static void MicroTile(const NeonTileContext& t) {
    // acc[i][2j]: row i, channels 4j, 4j + 1 as (k0 + k1, k2 + k3) each;
    // acc[i][2j + 1]: channels 4j + 2, 4j + 3.
    int32x4_t acc[MR][8];
    const int32x4_t zero = vdupq_n_s32(0);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        if (t.from_partial) {
          // [p0, p1, p2, p3] -> [p0, 0, p1, 0], [p2, 0, p3, 0]: the final
          // ADDP gives p + the new sums.
          const int32x4_t p = vld1q_s32(t.partial + i * t.partial_ld + 4 * j);
          acc[i][2 * j] = vzip1q_s32(p, zero);
          acc[i][2 * j + 1] = vzip2q_s32(p, zero);
        } else {
          acc[i][2 * j] = zero;
          acc[i][2 * j + 1] = zero;
        }
      }
    }
    const uint8_t* a = t.a;
    const int8_t* b = t.panel;
    const int64_t lda = t.lda;
    for (int64_t g = 0; g < t.groups; ++g) {
      const int8x16_t b0 = vld1q_s8(b);
      const int8x16_t b1 = vld1q_s8(b + 16);
      const int8x16_t b2 = vld1q_s8(b + 32);
      const int8x16_t b3 = vld1q_s8(b + 48);
      b += kGroupBytes;
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const int8x16_t av = vreinterpretq_s8_s32(vdupq_n_s32(LoadU32(a + i * lda)));
        const int8x8_t al = vget_low_s8(av);
        acc[i][0] = vpadalq_s16(acc[i][0], vmull_s8(al, vget_low_s8(b0)));
        acc[i][1] = vpadalq_s16(acc[i][1], vmull_high_s8(av, b0));
        acc[i][2] = vpadalq_s16(acc[i][2], vmull_s8(al, vget_low_s8(b1)));
        acc[i][3] = vpadalq_s16(acc[i][3], vmull_high_s8(av, b1));
        acc[i][4] = vpadalq_s16(acc[i][4], vmull_s8(al, vget_low_s8(b2)));
        acc[i][5] = vpadalq_s16(acc[i][5], vmull_high_s8(av, b2));
        acc[i][6] = vpadalq_s16(acc[i][6], vmull_s8(al, vget_low_s8(b3)));
        acc[i][7] = vpadalq_s16(acc[i][7], vmull_high_s8(av, b3));
      }
      a += 4;
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const int32x4_t row[4] = {vpaddq_s32(acc[i][0], acc[i][1]),
                                vpaddq_s32(acc[i][2], acc[i][3]),
                                vpaddq_s32(acc[i][4], acc[i][5]),
                                vpaddq_s32(acc[i][6], acc[i][7])};
      StoreNaturalRow(t, i, row);
    }
  }
};

}  // namespace

extern const IsaKernels kNeonKernels = {
    "neon",
    kFormatNeonS8x4,
    /*block=*/kNeonBlock,
    /*k_per_group=*/SmullKernel::kKPerGroup,
    /*kc_groups=*/256,  // K panel: 256 * 64 B = 16 KiB
    /*mr=*/SmullKernel::kMr,
    /*u8_activations=*/false,
    SmullKernel::Panel,
    GemmTileNeon<SmullKernel>,
    /*lane_bytes=*/4,
};

}  // namespace cpu
}  // namespace tf_fused_int8
