// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX-512 throughput loops (peak.h): VPDPBUSD and VPDPWSSD (VNNI) and
// VFMADD231PS on zmm. 16 independent accumulator chains each (zmm0-15;
// operands in zmm30/zmm31), enough for latency 4-5 on two ports. And the
// contract epilogue on zmm accumulators (PeakEpilogueZmm).
#include "cc/core/cpu/peak/peak.h"
#include "cc/core/cpu/peak/peak_asm.h"

namespace tf_fused_int8 {
namespace cpu {

void PeakVpdpbusdZmm(int64_t iters) {
#define TFI_DP(acc) "vpdpbusd %%zmm31, %%zmm30, %%zmm" #acc "\n\t"
  TFI_ZMM16_LOOP(TFI_DP, iters);
#undef TFI_DP
}

void PeakVpdpwssdZmm(int64_t iters) {
#define TFI_DP(acc) "vpdpwssd %%zmm31, %%zmm30, %%zmm" #acc "\n\t"
  TFI_ZMM16_LOOP(TFI_DP, iters);
#undef TFI_DP
}

void PeakFmaZmm(int64_t iters) {
#define TFI_DP(acc) "vfmadd231ps %%zmm31, %%zmm30, %%zmm" #acc "\n\t"
  TFI_ZMM16_LOOP(TFI_DP, iters);
#undef TFI_DP
}

// The contract epilogue on zmm (peak.h; epilogue_avx512.h's
// Epilogue64Bytes: 64 outputs in the interleaved order, no VPERMD) from the
// accumulators in zmm0-3, four times a block into zmm4-7 ... zmm16-19
// (renamed freely); scale, bias and the int8 lower bound in zmm28-30.
void PeakEpilogueZmm(int64_t iters) {
  static const float kScale = 0.0123f, kBias = 1.5f;
#define TFI_EPI(a, b, c, d)               \
  TFI_EPI_BODY("zmm", a, b, c, d, 28, 29) \
  "vpmaxsb %%zmm30, %%zmm" #a ", %%zmm" #a "\n\t"
  __asm__ volatile(
      "vpternlogd $0xff, %%zmm0, %%zmm0, %%zmm0\n\t"
      "vpabsd %%zmm0, %%zmm1\n\t"
      "vpaddd %%zmm1, %%zmm1, %%zmm2\n\t"
      "vpaddd %%zmm2, %%zmm1, %%zmm3\n\t"
      "vbroadcastss %1, %%zmm28\n\t"
      "vbroadcastss %2, %%zmm29\n\t"
      "vpxord %%zmm30, %%zmm30, %%zmm30\n\t"
      "1:\n\t" TFI_EPI(4, 5, 6, 7) TFI_EPI(8, 9, 10, 11) TFI_EPI(12, 13, 14, 15)
          TFI_EPI(16, 17, 18, 19)
      TFI_LOOP_END
      : "+r"(iters)
      : "m"(kScale), "m"(kBias)
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",
        "xmm16", "xmm17", "xmm18", "xmm19", "xmm28", "xmm29", "xmm30");
#undef TFI_EPI
}

}  // namespace cpu
}  // namespace tf_fused_int8
