// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Exact integer Winograd F(2x2, 3x3) for 3x3 convolutions with stride 1 and
// dilation 1 (any padding, EXPLICIT included; grouped calls run it per
// group). It needs 16 multiplications per input channel, output channel and
// 2x2 output tile where the direct GEMM needs 36: 2.25x fewer, and exact.
//
// The transforms (Lavin & Gray's F(2,3) matrices, G scaled by 2 so that
// every matrix is an integer one):
//
//   B^T = [1  0 -1  0]     G' = 2G = [2  0  0]     A^T = [1  1  1  0]
//         [0  1  1  0]               [1  1  1]           [0  1 -1 -1]
//         [0 -1  1  0]               [1 -1  1]
//         [0  1  0 -1]               [0  0  2]
//
//   V  = B^T d B      for each 4x4 input tile d and input channel,
//   U' = G' g G'^T    for each 3x3 filter g (= 4 U with U = G g G^T),
//   M  = sum over input channels of U' (.) V   (elementwise per position),
//   Y' = A^T M A      = 4 Y, Y the 2x2 outputs' exact int32 accumulators.
//
// Bounds (each entry of a transform is a fixed linear form of int8 values
// in [-128, 127]; a linear form over a box is extreme at a vertex, so the
// maxima below were also checked by enumerating all 2^16 / 2^9 vertices):
//  * V: a 1-D pass maps [-128, 127]^4 into [-256, 256] (d1 + d2 reaches
//    -256, the others stay within 255), the second pass adds or subtracts
//    two such values: |V| <= 512, an int16.
//  * U': a 1-D pass gives |2 g0| <= 256 or |g0 +- g1 + g2| <= 384, the
//    second pass sums at most three of those: |U'| <= 3 * 384 = 1152, int16.
//  * VPMADDWD of an int16 pair (V, V) x (U', U') is exact: |2 * 512 * 1152|
//    < 2^31 (it could only wrap for -32768 * -32768 twice).
//  * M is summed in int32 with wraparound and A^T M A uses only additions
//    and subtractions, so Y' is computed exactly modulo 2^32: the int32
//    result equals 4 Y whenever |4 Y| < 2^31. For a chunk of C input
//    channels |Y| <= 9 * 128 * 128 * C (9 taps, |x * w| <= 2^14), so
//    |4 Y| <= 589824 * C < 2^31 for C <= kWinogradMaxChunk = 3640
//    (589824 * 3640 = 2146959360 < 2147483648 <= 589824 * 3641). The input
//    channels are therefore split into chunks of at most 3640; each chunk's
//    Y' is divided by 4 (an arithmetic shift, exact: Y' is a multiple of 4)
//    and the chunks' Y are added in int32, exact because the total fits
//    (ComputeGeometry bounds 9 * Ci * 2^14 < 2^31). Then the contract
//    epilogue (cc/core/epilogue.h) as on every path.
//
// Work decomposition (winograd.cc, baseline code): the output is cut into
// 2x2 tiles (the last row / column of tiles is partial when out_h / out_w is
// odd; the missing outputs are computed from zero padding and dropped); a
// work item is a block of consecutive tiles (over batch, tile rows, tile
// columns) times a group of 16-channel output blocks. Per item and K panel
// (a slice of the chunk's input channels): the input transform writes V for
// the item's tiles (16 int16 matrices [tiles, channels], cache resident),
// then per output block and position one int16 GEMM (VPMADDWD + VPADDD,
// 6 tiles x 16 channels micro-tiles, as the direct AVX2 kernel) accumulates
// M; after the chunk's last panel the output transform and the epilogue
// write the block's outputs.
//
// Weights: U' packed once per filter into the packed-weight cache
// (packed_weights.h, format kFormatWinogradI16) and verified against the
// filter's current bytes on every call: the entry keeps the filter bytes
// U' was computed from, and each work item compares its share of the
// filter with them (a sequential byte compare, in slices between its
// GEMMs); a difference discards the results, repacks and recomputes, as for
// the GEMM's packed weights. (U' is 3.6x the filter's bytes and not a
// byte rearrangement of it, so unlike the GEMM's panels it cannot be
// checked by repacking cheaply. Measured on Zen 4, 1 thread: the compare
// is ~18% of a 7x7x512 batch-1 call, whose 16 tiles do little work per
// weight, and ~4% at 14x14x256; comparing 16-byte pieces block by block,
// scattered over the filter's rows, was 28% and 7%.)
//
// Declarations and plain structs only: this header is included by baseline
// and ISA translation units (see gemm/gemm_kernels.h for why no inline
// code).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_WINOGRAD_WINOGRAD_H_
#define TF_FUSED_INT8_CC_CORE_CPU_WINOGRAD_WINOGRAD_H_

#include <cstdint>

#include "cc/core/conv_params.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

// The largest number of input channels whose 4 Y cannot leave int32 (see
// above). Even, so that channel pairs never straddle two chunks.
constexpr int64_t kWinogradMaxChunk = 3640;
static_assert(int64_t{9} * 128 * 128 * 4 * kWinogradMaxChunk < (int64_t{1} << 31),
              "a chunk's 4 * acc must fit int32");
static_assert(int64_t{9} * 128 * 128 * 4 * (kWinogradMaxChunk + 1) >= (int64_t{1} << 31),
              "kWinogradMaxChunk is the largest such chunk");
static_assert(kWinogradMaxChunk % 2 == 0, "chunks hold whole channel pairs");

// Packed U' (format kFormatWinogradI16, packed by PackedWeights::Pack with
// the kernels' `packing` table): for each 16-channel output block, 16
// positions xi = 4 * i + j (row i, column j of the 4x4 transform), each
// ceil(Ci / 2) channel pairs of 16 lanes x (int16 U'[c], int16 U'[c + 1])
// (the kFormatYmmI16 layout of a [Ci, Co] matrix, zero past Ci and Co):
// group xi * ceil(Ci / 2) + pair of the block. The entry also keeps the
// filter bytes U' was computed from (PackedView::filter_copy), which the
// verification compares with the filter. Groups (64 bytes) per block:
int64_t WinogradPackedGroups(int64_t in_c);

// Whether F(2x2, 3x3) computes g: groups == 1 (RunPerGroup hands it each
// group), 3x3, stride 1, dilation 1, at least one input channel.
bool WinogradEligible(const ConvGeometry& g);

// Whether the avx2 path (the automatic choice) prefers Winograd over the
// direct GEMM for g (an eligible geometry); see winograd.cc for what was
// measured. The VNNI paths do not use Winograd: VPDPBUSD sums four int8
// products per lane where an int16 Winograd's VPDPWSSD sums two, so 2.25x
// fewer multiplications are at most 1.125x fewer instructions before the
// transforms are paid for (so neither implemented nor measured there).
bool WinogradPreferredAvx2(const ConvGeometry& g);

// One work item: tiles [t0, t0 + tiles) x output blocks [block_begin,
// block_end), all input channels.
struct WinogradItemArgs {
  const int8_t* input;
  const ConvGeometry* geo;  // fields only (no member calls in ISA code)
  int64_t tiles_h, tiles_w;  // 2x2 tiles per image: ceil(out_h / 2) x ceil(out_w / 2)
  int64_t t0, tiles;
  int64_t block_begin, block_end;
  int64_t panel_channels;  // K panel (input channels, even)
  const PackedView* w;     // packed U'
  // Verification of the cached U' (see the header comment): filter bytes
  // [verify_begin, verify_end) are compared with w->filter_copy; the
  // item returns true on a difference. The driver's ranges cover the
  // filter once per call.
  const int8_t* filter;
  bool verify;
  int64_t verify_begin, verify_end;
  // Scratch (64-byte aligned):
  //  v: 16 matrices of tiles x v_ld int16, v_mat elements apart;
  //  m: M for one block, tiles x 16 positions x 16 lanes int32, or for
  //     every item block (m_block int32 apart) when a chunk has several
  //     panels (m_block = 0: one block's, reused);
  //  y: the chunk sums, item blocks x tiles x 4 pixels x 16 int32, when
  //     there are several chunks (else nullptr).
  int16_t* v;
  int64_t v_ld, v_mat;
  int32_t* m;
  int64_t m_block;
  int32_t* y;
  const EpilogueArgs* ep;
  int8_t* output;
};

// One instruction set's Winograd kernels.
struct WinogradKernels {
  const char* name;
  // The packed format (cache key; PackedWeights::Pack uses its block,
  // panel function and format; gemm_tile is null).
  const IsaKernels* packing;
  int64_t max_tiles;       // tiles per work item
  int64_t panel_channels;  // K panel (input channels)
  bool (*item)(const WinogradItemArgs&);
};

// winograd_avx2.cc
extern const WinogradKernels kWinogradAvx2;

// Runs an eligible call (WinogradEligible(args.geo)). cache_key: the
// filter's identity in the packed-weight cache (nullptr: args.filter).
void RunWinograd(const FusedConvArgs& args, const WinogradKernels& kernels,
                 const ParallelFor& parallel_for,
                 const int8_t* cache_key = nullptr);

// Tests only: how many RunWinograd calls this process has made (so that a
// test can tell that a forced path really ran Winograd).
int64_t WinogradCallsForTesting();

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_WINOGRAD_WINOGRAD_H_
