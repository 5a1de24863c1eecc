// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX-VNNI throughput loop (peak.h): VEX-encoded VPDPBUSD on ymm.
#include "cc/core/cpu/peak/peak.h"

namespace tf_fused_int8 {
namespace cpu {

// 12 independent accumulator chains (latency 5 x 2 ports <= 12).
void PeakVpdpbusdYmm(int64_t iters) {
#define TFI_DP(acc) "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm" #acc "\n\t"
  __asm__ volatile(
      "vpcmpeqd %%ymm14, %%ymm14, %%ymm14\n\t"
      "vpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\t"
      "1:\n\t"
      TFI_DP(0) TFI_DP(1) TFI_DP(2) TFI_DP(3) TFI_DP(4) TFI_DP(5)
      TFI_DP(6) TFI_DP(7) TFI_DP(8) TFI_DP(9) TFI_DP(10) TFI_DP(11)
      "dec %0\n\t"
      "jnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(iters)
      :
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm14", "xmm15");
#undef TFI_DP
}

}  // namespace cpu
}  // namespace tf_fused_int8
