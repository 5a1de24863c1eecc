// Copyright tf-fused-int8 authors. Apache 2.0.
//
// ARMv8.6 int8 matrix-multiply kernels (SMMLA, FEAT_I8MM: HWCAP2_I8MM; run
// only where dot product exists too, dispatch.cc): micro-tile 6 pixels (3
// row pairs) x 16 channels (8 channel pairs) in 24 int32x4 accumulators,
// weights in kFormatNeonS8x8 (gemm_kernels.h), the tile loop and epilogue of
// gemm_neon_tile.h. Built with -march=armv8.2-a+dotprod+i8mm
// -ffp-contract=off; everything but the IsaKernels table has internal
// linkage.
//
// SMMLA Vd.4S, Vn.16B, Vm.16B multiplies the 2x8 signed bytes of Vn (row
// i = bytes 8i .. 8i + 7) by the transpose of the 2x8 signed bytes of Vm
// (row j = bytes 8j .. 8j + 7) and adds the exact 2x2 int32 result to Vd,
// in the order [00, 01, 10, 11]: 32 MACs per instruction, twice SDOT's 16.
// Vn is 8 k of two A rows (two 8-byte loads of the row-major A panel), Vm
// 8 k of two adjacent channels (16 consecutive bytes of kFormatNeonS8x8).
// So K groups are 8 deep (lane_bytes 8; K padded with zero weight rows). An
// odd micro-tile height pairs its last row with itself; that duplicate's
// sums are dropped.
//
// Accumulator acc[p][j] holds rows 2p, 2p + 1 x channels 2j, 2j + 1 as
// [r0 c0, r0 c1, r1 c0, r1 c1]; acc[p][2q] and acc[p][2q + 1] together hold
// channels 4q .. 4q + 3 of both rows, and one ZIP1 / ZIP2 of their 64-bit
// halves gives row 2p / row 2p + 1 in natural order (and back, for partial
// sums carried between K panels).
#include <arm_neon.h>

#include <cstdint>

#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/gemm/gemm_neon_tile.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "gemm_i8mm.cc needs -march=armv8.2-a+dotprod+i8mm (BUILD, tools/arm64_check.sh)"
#endif

namespace tf_fused_int8 {
namespace cpu {
namespace {

constexpr int64_t kS8x8GroupBytes = kNeonBlock * 8;  // one 8-deep group of a block

inline int8x16_t ZipLo64(int32x4_t a, int32x4_t b) {
  return vreinterpretq_s8_s64(
      vzip1q_s64(vreinterpretq_s64_s32(a), vreinterpretq_s64_s32(b)));
}
inline int8x16_t ZipHi64(int32x4_t a, int32x4_t b) {
  return vreinterpretq_s8_s64(
      vzip2q_s64(vreinterpretq_s64_s32(a), vreinterpretq_s64_s32(b)));
}

// kFormatNeonS8x8: per group (filter rows 8g .. 8g + 7) 16 channels x 8
// bytes, channel c's eight weights at byte 8c: an 8 x 16 byte transpose in
// three zip stages (bytes of row pairs, int16 of row quads, int32 halves).
bool PanelS8x8(const PanelArgs& p) {
  const int64_t n0 = p.block_index * kNeonBlock;
  int8_t* dst = p.panel;
  uint8x16_t diff = vdupq_n_u8(0);
  for (int64_t g = p.g0; g < p.g1; ++g, dst += kS8x8GroupBytes) {
    int8x16_t r[8];
    for (int i = 0; i < 8; ++i) r[i] = LoadFilterRow16(p, 8 * g + i, n0);
    int16x8_t s[8];  // s[2m]: rows (2m, 2m + 1) of channels 0-7, s[2m + 1]: 8-15
    for (int m = 0; m < 4; ++m) {
      s[2 * m] = vreinterpretq_s16_s8(vzip1q_s8(r[2 * m], r[2 * m + 1]));
      s[2 * m + 1] = vreinterpretq_s16_s8(vzip2q_s8(r[2 * m], r[2 * m + 1]));
    }
    // u[q]: channels 4q .. 4q + 3, rows 0-3 (one int32 lane per channel);
    // w[q]: rows 4-7.
    const int32x4_t u[4] = {
        vreinterpretq_s32_s16(vzip1q_s16(s[0], s[2])), vreinterpretq_s32_s16(vzip2q_s16(s[0], s[2])),
        vreinterpretq_s32_s16(vzip1q_s16(s[1], s[3])), vreinterpretq_s32_s16(vzip2q_s16(s[1], s[3]))};
    const int32x4_t w[4] = {
        vreinterpretq_s32_s16(vzip1q_s16(s[4], s[6])), vreinterpretq_s32_s16(vzip2q_s16(s[4], s[6])),
        vreinterpretq_s32_s16(vzip1q_s16(s[5], s[7])), vreinterpretq_s32_s16(vzip2q_s16(s[5], s[7]))};
    for (int q = 0; q < 4; ++q) {
      // [c rows 0-3, c rows 4-7, c + 1 rows 0-3, c + 1 rows 4-7], c = 4q / 4q + 2.
      PutOrCompare(dst + 32 * q, vreinterpretq_s8_s32(vzip1q_s32(u[q], w[q])), p.verify, &diff);
      PutOrCompare(dst + 32 * q + 16, vreinterpretq_s8_s32(vzip2q_s32(u[q], w[q])), p.verify,
                   &diff);
    }
  }
  return vmaxvq_u8(diff) != 0;
}

struct SmmlaKernel {
  static constexpr int64_t kKPerGroup = 8;
  static constexpr int64_t kGroupBytes = kS8x8GroupBytes;
  static constexpr int kMr = 6;
  static bool Panel(const PanelArgs& p) { return PanelS8x8(p); }

  template <int MR>
  static void MicroTile(const NeonTileContext& t) {
    constexpr int kPairs = (MR + 1) / 2;
    int32x4_t acc[kPairs][8];
    const uint8_t* row0[kPairs];
    const uint8_t* row1[kPairs];
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) {
      row0[p] = t.a + 2 * p * t.lda;
      row1[p] = 2 * p + 1 < MR ? row0[p] + t.lda : row0[p];
    }
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        if (t.from_partial) {
          const int32_t* p0 = t.partial + 2 * p * t.partial_ld + 4 * q;
          const int32x4_t r0 = vld1q_s32(p0);
          const int32x4_t r1 = 2 * p + 1 < MR ? vld1q_s32(p0 + t.partial_ld) : vdupq_n_s32(0);
          acc[p][2 * q] = vreinterpretq_s32_s8(ZipLo64(r0, r1));
          acc[p][2 * q + 1] = vreinterpretq_s32_s8(ZipHi64(r0, r1));
        } else {
          acc[p][2 * q] = vdupq_n_s32(0);
          acc[p][2 * q + 1] = vdupq_n_s32(0);
        }
      }
    }
    const int8_t* b = t.panel;
    for (int64_t g = 0; g < t.groups; ++g) {
      int8x16_t av[kPairs];
#pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p) {
        av[p] = vcombine_s8(vld1_s8(reinterpret_cast<const int8_t*>(row0[p]) + 8 * g),
                            vld1_s8(reinterpret_cast<const int8_t*>(row1[p]) + 8 * g));
      }
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const int8x16_t bj = vld1q_s8(b + 16 * j);
#pragma GCC unroll 4
        for (int p = 0; p < kPairs; ++p) acc[p][j] = vmmlaq_s32(acc[p][j], av[p], bj);
      }
      b += kGroupBytes;
    }
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) {
      int32x4_t r0[4], r1[4];
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        r0[q] = vreinterpretq_s32_s8(ZipLo64(acc[p][2 * q], acc[p][2 * q + 1]));
        r1[q] = vreinterpretq_s32_s8(ZipHi64(acc[p][2 * q], acc[p][2 * q + 1]));
      }
      StoreNaturalRow(t, 2 * p, r0);
      if (2 * p + 1 < MR) StoreNaturalRow(t, 2 * p + 1, r1);
    }
  }
};

}  // namespace

extern const IsaKernels kI8mmKernels = {
    "i8mm",
    kFormatNeonS8x8,
    /*block=*/kNeonBlock,
    /*k_per_group=*/SmmlaKernel::kKPerGroup,
    /*kc_groups=*/128,  // K panel: 128 * 128 B = 16 KiB
    /*mr=*/SmmlaKernel::kMr,
    /*u8_activations=*/false,
    SmmlaKernel::Panel,
    GemmTileNeon<SmmlaKernel>,
    /*lane_bytes=*/8,
};

}  // namespace cpu
}  // namespace tf_fused_int8
