// Copyright tf-fused-int8 authors. Apache 2.0.
//
// ARMv8.2 dot-product kernels (SDOT, FEAT_DotProd: HWCAP_ASIMDDP): micro-tile
// 6 pixels x 16 channels (24 int32x4 accumulators, 4 of weights, 1
// broadcast), weights in kFormatNeonS8x4 (gemm_kernels.h: the same bytes as
// the neon path), the tile loop and epilogue of gemm_neon_tile.h. Built with
// -march=armv8.2-a+dotprod -ffp-contract=off; everything but the IsaKernels
// table has internal linkage.
//
// SDOT Vd.4S, Vn.16B, Vm.16B adds to each int32 lane the four products of
// the lane's four signed bytes of both operands, exactly (|4 * 2^14| fits
// easily): with a row's four activations of a group broadcast to every lane
// and the weights of four channels x four k, one SDOT is 16 exact MACs, and
// signed x signed needs no +128 shift or column offset (VNNI's VPDPBUSD is
// unsigned x signed).
#include <arm_neon.h>

#include <cstdint>

#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/gemm/gemm_neon_tile.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "gemm_dotprod.cc needs -march=armv8.2-a+dotprod (BUILD, tools/arm64_check.sh)"
#endif

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct SdotKernel {
  static constexpr int64_t kKPerGroup = 4;
  static constexpr int64_t kGroupBytes = kNeonBlock * 4;
  static constexpr int kMr = 6;
  static bool Panel(const PanelArgs& p) { return PanelS8x4(p); }

  template <int MR>
  static void MicroTile(const NeonTileContext& t) {
    int32x4_t acc[MR][4];
    LoadNatural<MR>(t, acc);
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
        acc[i][0] = vdotq_s32(acc[i][0], b0, av);
        acc[i][1] = vdotq_s32(acc[i][1], b1, av);
        acc[i][2] = vdotq_s32(acc[i][2], b2, av);
        acc[i][3] = vdotq_s32(acc[i][3], b3, av);
      }
      a += 4;
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) StoreNaturalRow(t, i, acc[i]);
  }
};

}  // namespace

extern const IsaKernels kDotprodKernels = {
    "dotprod",
    kFormatNeonS8x4,
    /*block=*/kNeonBlock,
    /*k_per_group=*/SdotKernel::kKPerGroup,
    /*kc_groups=*/256,  // K panel: 256 * 64 B = 16 KiB
    /*mr=*/SdotKernel::kMr,
    /*u8_activations=*/false,
    SdotKernel::Panel,
    GemmTileNeon<SdotKernel>,
    /*lane_bytes=*/4,
};

}  // namespace cpu
}  // namespace tf_fused_int8
