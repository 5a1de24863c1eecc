// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The ymm depthwise blocks (depthwise_blocks_ymm.h: 32 channels a block)
// on the avx512vnni and amx paths, with the EVEX form of VPDPBUSD on ymm
// (AVX-512VL + VNNI) as their dot, for the calls where the zmm kernels'
// 64-channel blocks leave many lanes idle, on CPUs that run a zmm
// instruction as two 256-bit halves (DepthwiseYmmBlocksAvx512, below;
// dispatch.cc then runs the call with DepthwiseRowsYmmAvx512Vnni and
// kDepthwisePrepYmmAvx512Vnni instead of depthwise_avx512vnni.cc's).
// Otherwise the same kernels as the avxvnni path's (depthwise_avxvnni.cc:
// VPDPBUSD is exact on every u8 byte, so they take any input flipped,
// x ^ 0x80, and an input known to be in [0, 127] as it is; the channels
// past the blocks run the AVX2 kernel). Built with the avx512vnni flags
// (BUILD: *_avx512vnni.cc), in a file of its own so that the ymm header's
// names (kBlock, InteriorKxK, ...) stay apart from the zmm kernels' of the
// same names.
#include <immintrin.h>

#include <atomic>
#include <cstdint>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/depthwise/depthwise_blocks_ymm.h"
#include "cc/core/cpu/depthwise/depthwise_ymm.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// EVEX VPDPBUSD on ymm: exact on every u8 byte.
struct EvexVnniDot {
  static constexpr bool kAnyU8 = true;
  static __m256i Dot(__m256i acc, __m256i u8, __m256i s8) {
    return _mm256_dpbusd_epi32(acc, u8, s8);
  }
};

std::atomic<int> g_mode{0};

// AMD family 0x19 with AVX-512: Zen 4, whose 512-bit instructions run as
// two 256-bit halves (the only such CPU measured; Zen 5 and Intel's cores
// have 512-bit units and were not measured with these blocks).
bool Zen4() {
  static const bool zen4 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amdfam19h") != 0;
  }();
  return zen4;
}

}  // namespace

// Which calls (a square 3x3, 5x5 or 7x7 filter, stride 1 or 2 across,
// dilation 1, channels cc): those where the zmm kernels' blocks use at most
// about three quarters of their lanes, cc = 64n + r with 16 < r <= 32
// (depthwise_avx512vnni.cc: fewer than 64 channels run one partial block,
// 64 lanes; otherwise full blocks and one overlapping the last 64 channels
// where more than 16 are past them), which the ymm blocks cover with
// 32 (2n + 1) lanes. bench_core, one Zen 4 thread, batch 1 unless said, best of
// 4-5 rounds alternated, ymm / zmm time, input in [0, 127] told (signed
// alike where measured):
//   7x7: 32 channels 56x56 0.47 (signed 0.47), 111x111 / 2 at batch 8
//     0.43-0.44, 28x28 / 2 0.46; 88 channels 28x28 / 2 at batch 8 0.72-0.76;
//     96 channels 56x56 (ConvNeXt's) 0.65-0.67, 14x14 / 2 at batch 8 0.79;
//     160 14x14 0.72; 224 14x14 0.72; 352 7x7 0.97;
//   5x5: 32 channels 28x28 0.60, 111x111 / 2 at batch 8 0.55-0.58; 96
//     channels 28x28 0.93, / 2 at batch 8 0.84-0.85; 160 14x14 0.95-0.96;
//     224 14x14 1.00; 352 7x7 at batch 8 1.23;
//   3x3: 32 channels 112x112 0.84 (signed 0.90, batch 8 0.90), 56x56 / 2
//     0.67; 88 28x28 0.82; 96 28x28 0.92, 112x112 / 2 1.21 (the zmm
//     kernel's stride-2 runs reuse a pair's loads, PairsS2: the ymm
//     blocks do not);
//   where the zmm blocks fill their lanes as well or better: 7x7 64 and 80
//     channels 0.96-0.98, 176 / 2 at batch 8 1.27; 5x5 40 channels 1.19,
//     44 1.24, 240 1.37, 672 1.17; 3x3 144 1.34, 384 1.29.
// So 7x7 at every such count, 5x5 up to 96 channels, 3x3 at 32.
// NASNetMobile's 111x111x32 stem cells, its 7x7 layers of 88 and 352
// channels, ConvNeXt's first stage and MobileNet's first depthwise layer
// take them. mode (SetDepthwiseYmmBlocksForTesting; bench_core's
// BENCH_CORE_DW_YMM, to measure the rule on another CPU): 0 these calls on
// Zen 4 only, 1 these calls on any CPU, 2 none.
bool DepthwiseYmmBlocksAvx512(const ConvGeometry& g) {
  const int mode = g_mode.load(std::memory_order_relaxed);
  if (mode == 2 || (mode == 0 && !Zen4())) return false;
  const int64_t k = BlocksFilterSize(g), cc = g.out_c;
  if (!g.IsDepthwise() || k == 0) return false;
  const int64_t rest = cc % 64;
  if (cc < 32 || rest <= 16 || rest > 32) return false;
  return k == 7 || (k == 5 && cc <= 96) || (k == 3 && cc == 32);
}

void SetDepthwiseYmmBlocksForTesting(int mode) { g_mode.store(mode); }

extern const DepthwisePrep kDepthwisePrepYmmAvx512Vnni = {PrepBytes, PrepFill<EvexVnniDot>,
                                                          BlocksWideFrom};

void DepthwiseRowsYmmAvx512Vnni(const DepthwiseRowArgs& d) {
  RowsWithBlocks<EvexVnniDot, FlippedBlocks<EvexVnniDot>>(d);
}

}  // namespace cpu
}  // namespace tf_fused_int8
