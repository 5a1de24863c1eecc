// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Entry points of the instruction-set GEMM kernels (one translation unit per
// instruction set: gemm_avx512vnni.cc, gemm_avxvnni.cc, gemm_avx2.cc) and the
// plain structs they take. This header is included by baseline code (the
// driver, the weight cache) and by the ISA files, so it holds no intrinsics
// and no inline code: an inline function or template instantiated in an ISA
// translation unit could be merged by the linker with the baseline copy and
// run ISA instructions on a CPU without them. The ISA files keep everything
// they define in an anonymous namespace except the functions declared here.
//
// The convolution is computed as a GEMM: C[M, Co] = A[M, K] * B[K, Co] with
// M = batch * out_h * out_w output pixels, K = Kh * Kw * Ci (HWC order, the
// row order of the HWIO filter) and the contract epilogue fused into the
// store of C.
//
// Operand forms:
//  * VNNI paths (avx512vnni, avxvnni): A is uint8 (int8 XOR 0x80 = x + 128,
//    padding 0x80 = a zero activation), B is int8; VPDPBUSD sums four u8*s8
//    products per int32 lane. The +128 shift is undone exactly by starting
//    every accumulator at -128 * sum_k B[k][c] (precomputed at pack time, or
//    accumulated with VPDPBUSD while packing on the fly).
//    int32 wraparound makes this exact even where the shifted sum itself
//    would exceed int32, because the true sum fits (ComputeGeometry checks).
//  * AVX2 path: A and B are int16 (sign-extended int8), VPMADDWD sums two
//    exact int16 products per int32 lane (never the saturating VPMADDUBSW).
//
// Packed B ("packed weights", see packed_weights.h): Co is split into blocks
// of `block` channels (the last block zero-padded); K is padded with zero
// rows to a multiple of the group size (4 int8 or 2 int16, i.e. 4 bytes, one
// int32 lane per channel). Block b holds k_groups groups, each `block` lanes
// of 4 bytes, so block b starts at data + b * k_groups * block * 4 and a
// panel of groups [g0, g1) is contiguous. Lane order within a group:
//  * kFormatZmmU8: block 64, "lane-interleaved" order matching the 512-bit
//    unpack/pack instructions: lane position p = 16 * j + 4 * L + i (zmm j,
//    128-bit lane L, dword i) holds channel 16 * L + 4 * j + i. With this
//    order the epilogue's PACKSSDW/PACKSSWB pair yields the 64 outputs in
//    natural channel order without a permute, and packing is 8 unpacks.
//  * kFormatYmmU8 (int8 groups of 4) and kFormatYmmI16 (int16 pairs): block
//    16, natural channel order.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_KERNELS_H_

#include <cstdint>

#include "cc/core/conv_params.h"

namespace tf_fused_int8 {
namespace cpu {

enum PackFormatId : int {
  kFormatZmmU8 = 1,   // avx512vnni: int8 x4 groups, 64-channel blocks, interleaved
  kFormatYmmU8 = 2,   // avxvnni: int8 x4 groups, 16-channel blocks, natural
  kFormatYmmI16 = 3,  // avx2: int16 x2 groups, 16-channel blocks, natural
  kFormatWinogradI16 = 6,  // avx2 Winograd U' (cpu/winograd/winograd.h), int16 x2
};

// Packs or verifies groups [g0, g1) of channel block `block_index` of the
// HWIO filter viewed as [K, Co]. verify=false writes the panel; verify=true
// compares the stored panel with what packing would write and returns true
// on any difference (the filter changed since it was packed).
struct PanelArgs {
  const int8_t* filter;  // [K, Co]
  int64_t k;             // reduction depth K
  int64_t out_c;         // Co
  int64_t block_index;
  int64_t g0, g1;
  int8_t* panel;  // start of group g0 of the block (read-only when verify)
  bool verify;
};
using PanelFn = bool (*)(const PanelArgs&);

// The packed weights as the kernels see them (owned by PackedWeights).
struct PackedView {
  const int8_t* data;
  // Initial accumulator per padded channel, in the block's lane order:
  // -128 * sum_k B[k][c] for the u8 formats, zeros for int16.
  const int32_t* col_offset;
  int64_t k_groups;  // groups per block (K padded / group size)
  int64_t out_c;
  int64_t block;     // channels per block
  // kFormatWinogradI16 only (else null): the filter bytes the panels were
  // computed from, which its calls compare with the filter (winograd.h).
  const int8_t* filter_copy;
};

// The contract epilogue's operands (cc/core/epilogue.h), for one call.
struct EpilogueArgs {
  const float* scale;  // [1] or [Co]
  bool per_channel_scale;
  const float* bias;       // [Co]
  const int8_t* side;      // [M, Co] or nullptr (no side input)
  float side_scale;        // used when side != nullptr
  int8_t lo, hi;           // output range (OutputBounds, conv_params.h)
};

// Bytes a kernel's gather may write past the last row of its A buffer
// (whole-vector stores); the buffer must have that slack.
constexpr int64_t kIm2ColSlack = 64;

// One work item: output pixels [p0, p0 + rows) x channel blocks
// [block_begin, block_end). K is processed in panels of kc_groups groups
// (panel q = groups [q * kc_groups, ...)); for each panel the kernel gathers
// the panel's slice of the tile's im2col rows into `a` (K-sliced im2col:
// the A buffer holds rows x one panel, not rows x K) and multiplies it with
// the weight panel of each block, the epilogue fused into the last panel's
// store to output[p * Co + c]. Between panels the int32 partial sums go to
// `partial` (rows x (block_end - block_begin) * block int32).
//
// Weights come from one of two sources:
//  * w != nullptr: cached packed weights (packed_weights.h). If `verify`,
//    the packed panels q with q % verify_stride == verify_phase of the
//    item's blocks are compared with `filter` while computing, and the
//    return value is true if any differed (results stale: the caller
//    repacks and recomputes). The driver assigns phases so that every
//    (block, panel) is verified by exactly one tile per call.
//  * w == nullptr: each panel is packed from `filter` into `panel_buffer`
//    right before use, all the item's blocks at once (contiguous filter
//    rows); used when each panel has exactly one consumer, so
//    reading the filter once beats reading a packed copy and verifying it);
//    the -128 * sum(w) offsets are accumulated in `col_sums` meanwhile.
struct GemmTileArgs {
  const int8_t* input;
  const ConvGeometry* geo;  // fields only (no member calls in ISA code)
  int64_t p0, rows;
  uint8_t* a;   // A panel buffer, rows * lda bytes + kIm2ColSlack
  int64_t lda;  // bytes, >= kc_groups * 4
  int64_t block_begin, block_end;
  int64_t k, k_groups, kc_groups;
  const PackedView* w;  // nullptr: pack on the fly
  const int8_t* filter;
  bool verify;
  int64_t verify_phase, verify_stride;
  int8_t* panel_buffer;  // kc_groups * 4 bytes per item channel (on the fly)
  int32_t* col_sums;     // (block_end - block_begin) * block (on the fly)
  int32_t* partial;
  const EpilogueArgs* ep;
  int8_t* output;
  int64_t out_c;
};

// One instruction set's kernels and tile parameters.
struct IsaKernels {
  const char* name;
  PackFormatId format;
  int64_t block;         // channels per packed block
  int64_t k_per_group;   // 4 (int8) or 2 (int16)
  int64_t kc_groups;     // K panel size (groups) that keeps B in L1
  int64_t mr;            // micro-tile rows
  bool u8_activations;   // A is x ^ 0x80 (col_offset = -128 * sum w)
  PanelFn panel;
  bool (*gemm_tile)(const GemmTileArgs&);
};

// Defined in the ISA translation units.
extern const IsaKernels kAvx512VnniKernels;
extern const IsaKernels kAvxVnniKernels;
extern const IsaKernels kAvx2Kernels;

// Lane position -> channel offset within a block for `format`.
int64_t BlockLaneChannel(PackFormatId format, int64_t position);

// The driver (gemm_driver.cc, baseline code): packs/caches the weights,
// tiles, gathers and runs `isa`'s kernels over parallel_for. groups == 1
// only (grouped calls are split by grouped.h first). cache_key: the
// filter's identity in the packed-weight cache (nullptr: args.filter).
void RunGemmConv(const FusedConvArgs& args, const IsaKernels& isa,
                 const ParallelFor& parallel_for,
                 const int8_t* cache_key = nullptr);

// Tests only: where the weights come from. 0: automatic (cached with several
// M tiles, packed on the fly with one), 1: always cached, 2: always on the
// fly. Not thread-safe with concurrent convolutions.
void SetWeightModeForTesting(int mode);

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_KERNELS_H_
