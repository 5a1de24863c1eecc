// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AVX2 (the avx2 path; the avxvnni path runs it on the
// channels past its VPDPBUSD blocks, depthwise_avxvnni.cc): 16 channels as two
// ymm of int32, one PMADDWD + PADDD per tap and 8 channels (sign-extended
// int8 activations times the widened weights of depthwise.h: w * x
// exactly), or, in the interior of 3-, 5- and 7-wide windows, per two
// filter rows (LoadPair: the two rows' activations as int16 pairs times
// pair weights, both taps in one PMADDWD); a last block of fewer than 16
// channels goes through a zeroed 16-byte copy. The row walk is
// depthwise_rows.h; the epilogue is Epilogue16 / Epilogue16x2
// (epilogue_avx2.h, natural order).
//
// On an input known to be in [0, 127] (DepthwiseRowArgs::input_non_negative:
// a Relu step's output in the sequence op, as MobileNetV2's depthwise
// layers read), 3x3 layers at stride 1 or 2 run depthwise_blocks_ymm.h's
// 32-channel blocks with VPMADDUBSW + VPMADDWD by ones + VPADDD as their
// dot (MaddubsDot below: exact there only), the channels past the blocks
// this kernel. Against this kernel on every channel (bench_core, one Zen 4
// thread, avx2 forced, input told non-negative, 4 rotating filters, old and
// new alternated twice): 112x112x32 185-200 -> 92 us, 56x56x144 218-258 ->
// 124-129 (batch 8 2206-2314 -> 1387-1471), 112x112x96 / 2 220-230 ->
// 114-121, 56x56x144 / 2 91-100 -> 62-64, 28x28x192 90 -> 40-41, 14x14x576
// 71 -> 31-33, 7x7x960 36 -> 15. MobileNetV2's 17 depthwise steps in TF
// (step profiler, runner, one thread, avx2 forced, libraries alternated
// four times): 1.43-1.76 -> 0.89-1.04 ms of its 5.3-6.6 ms.
//
// Tried and dropped: running the two 8-channel halves of a block one after
// the other in the interior, so that 8 pixels' accumulators and the weights
// fit the 16 ymm registers (perf shows a seventh of the interior's samples
// on spills): no faster at stride 1 (0.98-1.03x the time), 1.13-1.21x at
// stride 2 and on 7x7x960 (bench_core, one Zen 5 thread, alternated).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/depthwise/depthwise_blocks_ymm.h"
#include "cc/core/cpu/depthwise/depthwise_ymm.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// Every channel's single-row (widened) weights too: borders and odd rows.
// Pairs against one row at a time (bench_core, one Zen 5 thread, forced
// avx2, 11 rounds alternated, median time ratio): 112x112x32 0.89,
// 56x56x144 0.94 (batch 8 0.97), 112x112x96 / 2 0.97, 56x56x144 / 2 0.95,
// 28x28x192 0.96, 14x14x384 0.99, 7x7x960 0.95.
// (A signed input runs this kernel on every channel, so the blocks'
// channels keep their widened and pair weights too.)
int64_t PairWideFrom(const DepthwiseRowArgs&) { return 0; }

// Four u8 x s8 products a dword lane for bytes in [0, 127] only: VPMADDUBSW
// sums two into an int16 lane, at most 2 * 127 * 128 = 32512 in magnitude
// (never saturating, as gemm_avx2.cc's non-negative kernel relies on), and
// VPMADDWD by ones sums two of those into the int32 lane, exactly.
struct MaddubsDot {
  static constexpr bool kAnyU8 = false;
  static __m256i Dot(__m256i acc, __m256i u8, __m256i s8) {
    const __m256i pairs = _mm256_maddubs_epi16(u8, s8);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

}  // namespace

extern const DepthwisePrep kDepthwisePrepAvx2 = {PrepBytes, PrepFill<MaddubsDot>,
                                                 PairWideFrom};

bool DepthwiseAvx2TakesNonNegative(const ConvGeometry& g) {
  DepthwiseRowArgs d;
  d.geo = &g;
  d.channels = g.out_c;
  return Use3x3Blocks(d);
}

void DepthwiseRowsAvx2(const DepthwiseRowArgs& d) { RowsWithBlocks<MaddubsDot>(d); }

}  // namespace cpu
}  // namespace tf_fused_int8
