// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AVX-VNNI (the avxvnni path: VEX VPDPBUSD on ymm, as
// on Intel's client cores from Alder Lake on, which have no AVX-512).
//
// 3x3, 5x5 and 7x7, stride 1 or 2, dilation 1 (MobileNet's, EfficientNet's
// and NASNet's depthwise layers), blocks of 32 channels: depthwise_blocks_ymm.h's kernels
// with VPDPBUSD as their dot, which is exact on every u8 byte, so they take
// any input flipped (x ^ 0x80) and an input known to be in [0, 127] as it
// is. The channels past the last 32-channel block, and every other
// geometry, run the AVX2 kernel (depthwise_ymm.h: PMADDWD, pair weights).
// The 5x5 blocks (2026-12-06) and 7x7 blocks (2026-12-07) were measured on
// the avx2 path only (1.1-2x and 1.4-4x there, depthwise_avx2.cc): no CPU
// with AVX-VNNI was at hand; their bits are tested by core_test_emulated.
//
// Against that AVX2 kernel on every channel (bench_core, one Zen 5 thread,
// avxvnni forced, 7 rounds alternated, median time ratio): 112x112x32 0.52,
// 56x56x144 0.59 (batch 8 0.53), 112x112x96 / 2 0.68, 56x56x144 / 2 0.62,
// 28x28x192 0.51, 14x14x384 0.46, 7x7x960 0.41. Stride-1 runs of full
// pairs keep the byte unpacks of the pair's last two columns for the next
// pair (PairsS1, as in the avx512vnni file): one Zen 5 thread, avxvnni
// forced, bench_core, old and new alternated twice: 56x56x144 81 -> 73 us,
// 112x112x32 64 -> 55 us, 28x28x192 25.0 -> 22.8 us, 14x14x576 18.8-19.2
// -> 18.5-18.7 us. Not ported from the avx512vnni file (measure first): its
// half / quarter blocks for the channels past the full blocks, and the
// stride-2 runs that reuse a pair's D as the next pair's E (PairsS2).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/avxvnni_dot.h"
#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/depthwise/depthwise_blocks_ymm.h"
#include "cc/core/cpu/depthwise/depthwise_ymm.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// VEX VPDPBUSD: exact on every u8 byte (the flipped form of any input).
struct VnniDot {
  static constexpr bool kAnyU8 = true;
  static __m256i Dot(__m256i acc, __m256i u8, __m256i s8) {
    return DpbusdAvx(acc, u8, s8);
  }
};

}  // namespace

extern const DepthwisePrep kDepthwisePrepAvxVnni = {PrepBytes, PrepFill<VnniDot>,
                                                    BlocksWideFrom};

void DepthwiseRowsAvxVnni(const DepthwiseRowArgs& d) {
  RowsWithBlocks<VnniDot, FlippedBlocks<VnniDot>>(d);
}

}  // namespace cpu
}  // namespace tf_fused_int8
