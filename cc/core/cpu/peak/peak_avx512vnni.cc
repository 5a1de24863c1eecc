// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX-512 throughput loops (peak.h): VPDPBUSD and VPDPWSSD (VNNI) and
// VFMADD231PS on zmm. 16 independent accumulator chains each (zmm0-15;
// operands in zmm30/zmm31), enough for latency 4-5 on two ports.
#include "cc/core/cpu/peak/peak.h"

namespace tf_fused_int8 {
namespace cpu {

#define TFI_ZMM_LOOP(INSN, ITERS)                                           \
  __asm__ volatile(                                                         \
      "vpternlogd $0xff, %%zmm30, %%zmm30, %%zmm30\n\t"                     \
      "vpternlogd $0xff, %%zmm31, %%zmm31, %%zmm31\n\t"                     \
      "1:\n\t" INSN(0) INSN(1) INSN(2) INSN(3) INSN(4) INSN(5) INSN(6)      \
          INSN(7) INSN(8) INSN(9) INSN(10) INSN(11) INSN(12) INSN(13)       \
              INSN(14) INSN(15) "dec %0\n\t"                                \
                                "jnz 1b\n\t"                                \
                                "vzeroupper\n\t"                            \
      : "+r"(ITERS)                                                         \
      :                                                                     \
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",       \
        "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",         \
        "xmm14", "xmm15", "xmm30", "xmm31")

void PeakVpdpbusdZmm(int64_t iters) {
#define TFI_DP(acc) "vpdpbusd %%zmm31, %%zmm30, %%zmm" #acc "\n\t"
  TFI_ZMM_LOOP(TFI_DP, iters);
#undef TFI_DP
}

void PeakVpdpwssdZmm(int64_t iters) {
#define TFI_DP(acc) "vpdpwssd %%zmm31, %%zmm30, %%zmm" #acc "\n\t"
  TFI_ZMM_LOOP(TFI_DP, iters);
#undef TFI_DP
}

void PeakFmaZmm(int64_t iters) {
#define TFI_DP(acc) "vfmadd231ps %%zmm31, %%zmm30, %%zmm" #acc "\n\t"
  TFI_ZMM_LOOP(TFI_DP, iters);
#undef TFI_DP
}

#undef TFI_ZMM_LOOP

}  // namespace cpu
}  // namespace tf_fused_int8
