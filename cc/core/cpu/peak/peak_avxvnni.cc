// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX-VNNI throughput loop (peak.h): VEX-encoded VPDPBUSD on ymm.
#include "cc/core/cpu/peak/peak.h"
#include "cc/core/cpu/peak/peak_asm.h"

namespace tf_fused_int8 {
namespace cpu {

// 12 independent accumulator chains (latency 5 x 2 ports <= 12).
void PeakVpdpbusdYmm(int64_t iters) {
#define TFI_DP(acc) "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm" #acc "\n\t"
  TFI_YMM12_LOOP(TFI_YMM_ONES, TFI_DP, iters);
#undef TFI_DP
}

}  // namespace cpu
}  // namespace tf_fused_int8
