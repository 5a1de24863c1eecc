// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX-VNNI kernels (256-bit VEX VPDPBUSD, u8 x s8): the ymm micro-kernel of
// gemm_ymm.h with a VPDPBUSD policy, two operand forms:
//  * kAvxVnniKernels, any int8 input: activations are x ^ 0x80 and the
//    accumulators start at -128 * sum(w) (gemm_kernels.h);
//  * kAvxVnniNonNegativeKernels, an input in [0, 127] (chosen as on the
//    avx2 path, dispatch.cc): the input bytes are already valid u8, so no
//    flip and no column offset, and pointwise rows are read in place
//    (gemm_ymm.h), with no copy. VPDPBUSD itself is the same. bench_core,
//    one thread, a non-negative input, its scan included, alternated twice
//    (Xeon with AMX, KVM), shifted -> this: 56x56x144 -> 24 at batch 1
//    0.90x the time, at batch 8 0.97-0.99x; 28x28x192 -> 32 0.95x;
//    14x14x576 -> 96 0.97x; 56x56x64 -> 256 0.99x; 28x28x128 3x3 -> 128
//    (gathered rows, no flip) 0.96-0.97x.
// Built with -mavx2 -mfma -mavxvnni -ffp-contract=off (VPDPBUSD through
// avxvnni_dot.h, which core_test_emulated's build emulates);
// everything but the IsaKernels tables has internal linkage.
#include <immintrin.h>

#include "cc/core/cpu/avxvnni_dot.h"
#include "cc/core/cpu/gemm/gemm_ymm.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct VnniPolicy {
  static constexpr bool kInt16 = false;
  static constexpr bool kShift = true;
  static __m256i Dot(__m256i acc, __m256i a, __m256i b) {
    return DpbusdAvx(acc, a, b);
  }
};

// Inputs in [0, 127] only (see the top of this file).
struct VnniNonNegativePolicy {
  static constexpr bool kInt16 = false;
  static constexpr bool kShift = false;
  static __m256i Dot(__m256i acc, __m256i a, __m256i b) {
    return DpbusdAvx(acc, a, b);
  }
};

}  // namespace

extern const IsaKernels kAvxVnniKernels = YmmKernels<VnniPolicy>("avxvnni");

extern const IsaKernels kAvxVnniNonNegativeKernels = YmmKernels<VnniNonNegativePolicy>("avxvnni");

}  // namespace cpu
}  // namespace tf_fused_int8
