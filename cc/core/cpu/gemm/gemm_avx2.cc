// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX2 kernels (no VNNI): the ymm micro-kernel of gemm_ymm.h with int16
// operands: activations and weights sign-extended to int16, VPMADDWD sums
// two int16 products into each int32 lane exactly (|2 * 128 * 128| < 2^31;
// the saturating u8 x s8 VPMADDUBSW is deliberately not used), VPADDD
// accumulates. Built with -mavx2 -mfma -ffp-contract=off; everything but the
// IsaKernels table has internal linkage.
#include <immintrin.h>

#include "cc/core/cpu/gemm/gemm_ymm.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct MaddPolicy {
  static constexpr bool kInt16 = true;
  static __m256i Dot(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
};

}  // namespace

extern const IsaKernels kAvx2Kernels = {
    "avx2",
    kFormatYmmI16,
    /*block=*/kYmmBlock,
    /*k_per_group=*/2,
    /*kc_groups=*/kYmmKcGroups,
    /*mr=*/kYmmMr,
    /*u8_activations=*/false,
    PanelYmm<true>,
    GemmTileYmm<MaddPolicy>,
    /*lane_bytes=*/4,
    GemvYmm,
    /*kc_groups_cached=*/0,
    /*group_multiple=*/1,
    /*padded_input=*/false,
    /*split_blocks=*/1,
    /*rows_first=*/false,
    /*panel_major_bytes=*/0,
    /*rows_first_small_filter=*/true,
};

}  // namespace cpu
}  // namespace tf_fused_int8
