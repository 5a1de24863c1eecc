// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX-512 throughput loops (peak.h): VPDPBUSD and VPDPWSSD (VNNI) and
// VFMADD231PS on zmm. 16 independent accumulator chains each (zmm0-15;
// operands in zmm30/zmm31), enough for latency 4-5 on two ports.
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

}  // namespace cpu
}  // namespace tf_fused_int8
