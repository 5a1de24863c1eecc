// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX2 kernels (no VNNI): the ymm micro-kernel of gemm_ymm.h, two operand
// forms.
//
//  * kAvx2Kernels, any int8 input: activations and weights sign-extended to
//    int16, VPMADDWD sums two int16 products into each int32 lane exactly
//    (|2 * 128 * 128| < 2^31), VPADDD accumulates.
//  * kAvx2NonNegativeKernels, an input whose every byte is in [0, 127] (a
//    Relu layer's output: FusedConvArgs::input_non_negative, or checked by
//    InputNonNegativeAvx2): VPMADDUBSW reads those bytes as u8 against the
//    int8 weights and sums two products into an int16 lane, at most 2 * 127
//    * 128 = 32512 <= 32767 in magnitude (127 * -128 * 2 = -32512 >=
//    -32768), so it never saturates and is exact; VPMADDWD by ones then
//    sums two such int16 into an int32 lane (four products, exact) and
//    VPADDD accumulates. Four products per lane in three instructions where
//    the int16 form takes four for the same work; the weights are the
//    4-byte groups of kFormatYmmU8 (avxvnni's packing, shared with it in
//    the cache). The same VPMADDUBSW on any other input (a byte >= 128 as
//    u8) can saturate and is never used for one.
//    Measured (bench_core, one thread, pinned weights, avx2 forced on a
//    Xeon with AMX under KVM, 2026-12-05), int16 -> this kernel on a
//    non-negative input, its check included: ResNet-50's 1x1 layers
//    56x56x64 -> 256 796-822 -> 634-640 us (batch 8 6.6 -> 5.3 ms),
//    56x56x256 -> 64 738 -> 556, 28x28x512 -> 128 713 -> 528, 14x14x1024
//    -> 256 710 -> 515, 7x7x2048 -> 512 734 -> 519: 1.26-1.42x (it also
//    broadcasts once per four k instead of two). The check itself cost
//    0-2% (against the same input marked known). In TF (step profiler,
//    InferenceRunner, builds alternated three times, avx2 forced): ResNet50
//    batch 1, one thread, the steps' sum 46.0-48.2 -> 39.4-41.1 ms;
//    MobileNetV2 6.23-6.31 -> 5.79-5.82 ms (its expansions read signed
//    inputs and keep the int16 kernels). The 6 x 16 micro-tile keeps one of
//    its 12 accumulators on the stack (the ones vector of VPMADDWD takes
//    the 16th register); a 5-row one with none there ran the same
//    (bench_core, avx2_direct, 1x1 and 3x3 layers, within 2%).
//
// Built with -mavx2 -mfma -ffp-contract=off; everything but the IsaKernels
// tables and InputNonNegativeAvx2 has internal linkage.
#include <immintrin.h>

#include "cc/core/cpu/gemm/gemm_ymm.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct MaddPolicy {
  static constexpr bool kInt16 = true;
  static constexpr bool kShift = false;
  static __m256i Dot(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
};

// Inputs in [0, 127] only (see the top of this file).
struct NonNegativePolicy {
  static constexpr bool kInt16 = false;
  static constexpr bool kShift = false;
  static __m256i Dot(__m256i acc, __m256i a, __m256i b) {
    const __m256i pairs = _mm256_maddubs_epi16(a, b);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

}  // namespace

bool InputNonNegativeAvx2(const int8_t* x, int64_t n) {
  // 256 bytes a step, OR-ed, so the sign bits are tested once per step; a
  // signed input usually stops at its first step.
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
#pragma GCC unroll 7
    for (int j = 1; j < 8; ++j) {
      v = _mm256_or_si256(
          v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 32 * j)));
    }
    if (_mm256_movemask_epi8(v) != 0) return false;
  }
  int8_t any = 0;
  for (; i < n; ++i) any |= x[i];
  return any >= 0;
}

extern const IsaKernels kAvx2Kernels = YmmKernels<MaddPolicy>("avx2");

extern const IsaKernels kAvx2NonNegativeKernels = YmmKernels<NonNegativePolicy>("avx2");

}  // namespace cpu
}  // namespace tf_fused_int8
