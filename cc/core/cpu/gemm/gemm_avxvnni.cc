// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX-VNNI kernels (256-bit VEX VPDPBUSD, u8 x s8): the ymm micro-kernel of
// gemm_ymm.h with a VPDPBUSD policy; activations are x ^ 0x80 and the
// accumulators start at -128 * sum(w) (gemm_kernels.h). Built with -mavx2 -mfma
// -mavxvnni -ffp-contract=off; everything but the IsaKernels table has
// internal linkage.
#include <immintrin.h>

#include "cc/core/cpu/gemm/gemm_ymm.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct VnniPolicy {
  static constexpr bool kInt16 = false;
  static constexpr bool kShift = true;
  static __m256i Dot(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpbusd_avx_epi32(acc, a, b);
  }
};

}  // namespace

extern const IsaKernels kAvxVnniKernels = {
    "avxvnni",
    kFormatYmmU8,
    /*block=*/kYmmBlock,
    /*k_per_group=*/4,
    /*kc_groups=*/kYmmKcGroups,
    /*mr=*/kYmmMr,
    /*u8_activations=*/true,
    PanelYmm<false>,
    GemmTileYmm<VnniPolicy>,
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
