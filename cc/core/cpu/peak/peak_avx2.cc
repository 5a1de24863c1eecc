// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX2 throughput loops (peak.h). Inline assembly, so that the compiler can
// neither hoist the loop-invariant multiplies nor drop the unused sums.
#include "cc/core/cpu/peak/peak.h"
#include "cc/core/cpu/peak/peak_asm.h"

namespace tf_fused_int8 {
namespace cpu {

// 12 VPMADDWD (products of two int16 pairs, summed into int32 lanes) each
// followed by the VPADDD that accumulates it, as in the avx2 GEMM kernel:
// 6 accumulator chains (ymm0-5, one VPADDD latency each), 6 product
// registers (ymm6-11) renamed freely, operands in ymm14/ymm15.
void PeakVpmaddwdYmm(int64_t iters) {
#define TFI_MADD(t, acc)                      \
  "vpmaddwd %%ymm15, %%ymm14, %%ymm" #t "\n\t" \
  "vpaddd %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc "\n\t"
  __asm__ volatile(
      TFI_YMM_ONES(14) TFI_YMM_ONES(15)
      "1:\n\t"
      TFI_MADD(6, 0) TFI_MADD(7, 1) TFI_MADD(8, 2)
      TFI_MADD(9, 3) TFI_MADD(10, 4) TFI_MADD(11, 5)
      TFI_MADD(6, 0) TFI_MADD(7, 1) TFI_MADD(8, 2)
      TFI_MADD(9, 3) TFI_MADD(10, 4) TFI_MADD(11, 5)
      "dec %0\n\t"
      "jnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(iters)
      :
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm14", "xmm15");
#undef TFI_MADD
}

// 12 independent VFMADD231PS chains (latency 4-5 x 2 ports <= 12).
void PeakFmaYmm(int64_t iters) {
#define TFI_FMA(acc) "vfmadd231ps %%ymm15, %%ymm14, %%ymm" #acc "\n\t"
  TFI_YMM12_LOOP(TFI_YMM_ZERO, TFI_FMA, iters);
#undef TFI_FMA
}

}  // namespace cpu
}  // namespace tf_fused_int8
