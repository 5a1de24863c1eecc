// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Entry points of the instruction-set GEMM kernels (one translation unit per
// instruction set: gemm_avx512vnni.cc, gemm_avxvnni.cc, gemm_avx2.cc on
// x86-64; gemm_neon.cc, gemm_dotprod.cc, gemm_i8mm.cc on aarch64) and the
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
//  * VNNI paths (avx512vnni, avxvnni): VPDPBUSD's A operand is uint8 (int8
//    XOR 0x80 = x + 128, a zero activation 0x80), B is int8; VPDPBUSD sums
//    four u8*s8 products per int32 lane. avxvnni stores A in that form;
//    avx512vnni stores the int8 activations (padding 0) and flips each
//    broadcast, so its pointwise rows are the input itself. The +128 shift is undone exactly by starting
//    every accumulator at -128 * sum_k B[k][c] (precomputed at pack time, or
//    accumulated with VPDPBUSD while packing on the fly).
//    int32 wraparound makes this exact even where the shifted sum itself
//    would exceed int32, because the true sum fits (ComputeGeometry checks).
//  * AVX2 path: A and B are int16 (sign-extended int8), VPMADDWD sums two
//    exact int16 products per int32 lane; for an input known to be in [0,
//    127], A is the input bytes and B int8 groups of 4 (kFormatYmmU8), and
//    VPMADDUBSW, which cannot saturate on such bytes, sums pairs of
//    products exactly (gemm_avx2.cc).
//  * aarch64 paths (neon, dotprod, i8mm): A and B are int8 as they are;
//    SMULL + SADALP (int8 products widened exactly to int16, pairs added
//    into int32), SDOT and SMMLA all multiply signed by signed, so there is
//    no shift and no column offset (col_offset is zero).
//
// Packed B ("packed weights", see packed_weights.h): Co is split into blocks
// of `block` channels (the last block zero-padded); K is padded with zero
// rows to a multiple of the group size (k_per_group: 4 int8 or 2 int16, i.e.
// 4 bytes, one int32 lane per channel; 8 int8 for i8mm, lane_bytes 8).
// Block b holds k_groups groups, each `block` lanes of lane_bytes bytes, so
// block b starts at data + b * k_groups * block * lane_bytes and a panel of
// groups [g0, g1) is contiguous. The A rows hold lane_bytes bytes per group
// as well. Lane order within a group:
//  * kFormatZmmU8: block 64, "lane-interleaved" order matching the 512-bit
//    unpack/pack instructions: lane position p = 16 * j + 4 * L + i (zmm j,
//    128-bit lane L, dword i) holds channel 16 * L + 4 * j + i. With this
//    order the epilogue's PACKSSDW/PACKSSWB pair yields the 64 outputs in
//    natural channel order without a permute, and packing is 8 unpacks.
//    A last block of at most 48 channels (Co % 64 in 1..48, e.g. Co = 16,
//    24, 96, 144, 160: MobileNet's narrow layers) is "narrow": its channels
//    are in natural order, 16 per zmm, and only its first ZmmNarrowZmms()
//    zmm of each group are used (the group stride stays 256 bytes, so every
//    offset above holds); the kernel then runs 1-3 zmm per row with taller
//    micro-tiles instead of 4 zmm of which most would be padding.
//  * kFormatYmmU8 (int8 groups of 4) and kFormatYmmI16 (int16 pairs): block
//    16, natural channel order.
//  * kFormatNeonS8x4 (neon and dotprod: the same bytes): int8 groups of 4,
//    block 16, natural channel order (the layout of kFormatYmmU8, without
//    the u8 column offsets).
//  * kFormatNeonS8x8 (i8mm): int8 groups of 8, block 16, natural channel
//    order: channel c's 8 weights at byte 8c of the group, so channels
//    (2j, 2j + 1) form the 2x8 B operand of one SMMLA.
//  * kFormatAmxS8 (amx): int8 groups of 4, block 16, natural channel order
//    (the bytes of kFormatNeonS8x4), with k_groups a multiple of 16
//    (IsaKernels::group_multiple; the groups past K are zero): 16 groups of
//    a block are one 16 x 64-byte B tile of TDPBSSD (signed x signed, no
//    shift, no column offset), contiguous, and a tile never reads past its
//    block.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_KERNELS_H_

#include <cstdint>

#include "cc/core/conv_params.h"
#include "cc/core/cpu/lut/lut_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

enum PackFormatId : int {
  kFormatZmmU8 = 1,   // avx512vnni: int8 x4 groups, 64-channel blocks, interleaved
  kFormatYmmU8 = 2,   // avxvnni: int8 x4 groups, 16-channel blocks, natural
  kFormatYmmI16 = 3,  // avx2: int16 x2 groups, 16-channel blocks, natural
  kFormatNeonS8x4 = 4,  // neon, dotprod: int8 x4 groups, 16-channel blocks, natural
  kFormatNeonS8x8 = 5,  // i8mm: int8 x8 groups, 16-channel blocks, natural
  kFormatWinogradI16 = 6,  // avx2 Winograd U' (cpu/winograd/winograd.h), int16 x2
  kFormatAmxS8 = 7,  // amx: int8 x4 groups, 16-channel blocks, natural, groups % 16 == 0
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
  // Some filter byte is -128 (then no GEMV with
  // IsaKernels::gemv_packed_no_int8_min reads this packing).
  bool any_int8_min;
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
  int64_t lda;  // bytes, >= kc_groups * lane_bytes
  int64_t block_begin, block_end;
  int64_t k, k_groups, kc_groups;
  const PackedView* w;  // nullptr: pack on the fly
  const int8_t* filter;
  bool verify;
  int64_t verify_phase, verify_stride;
  int8_t* panel_buffer;  // kc_groups * lane_bytes per item channel (on the fly)
  int32_t* col_sums;     // (block_end - block_begin) * block (on the fly)
  int32_t* partial;
  const EpilogueArgs* ep;
  int8_t* output;
  int64_t out_c;
  // A padded copy of the input (IsaKernels::padded_input), or nullptr. Set
  // for a stride-1 convolution (PaddedInputFits): the input zero-padded to
  // padded_h x padded_w pixels per image, with the rows of the GEMM being
  // "virtual" pixels: image n's virtual pixel j (0 <= j < image_rows, a
  // multiple of 16) is the output at (y, x) = (j / padded_w, j % padded_w)
  // when y < out_h and x < out_w, and computed but never stored otherwise;
  // virtual row v = n * image_rows + j. Its window starts at padded pixel
  // (n, y, x), i.e. at byte (n * padded_h * padded_w + j) * Ci, so the
  // window rows of consecutive virtual pixels are Ci bytes apart and
  // kernels read them in place (p0 and rows count virtual rows then).
  const int8_t* padded = nullptr;
  int64_t padded_h = 0, padded_w = 0, image_rows = 0;
  // Cached weights in several K panels run panel by panel, each panel over
  // all the tile's micro-tiles (IsaKernels::panel_major_bytes), instead of
  // micro-tile by micro-tile. Only kernels that set panel_major_bytes read it.
  bool panel_major = false;
  // Every input byte is in [0, 127] (FusedConvArgs::input_non_negative, set
  // by dispatch.cc's NonNegativeInput): already a valid u8 operand. Only
  // avx512vnni reads it (no flip, no column offsets, rows in place).
  bool non_negative = false;
};

// Whether a convolution can run on a padded input (GemmTileArgs::padded):
// stride 1 and not pointwise (those read their rows in place already), and
// every 64 bytes of K (one AMX tile row) inside one window row: Kw * Ci a
// multiple of 64 with dilation 1 across, Ci a multiple of 64 otherwise.
bool PaddedInputFits(const ConvGeometry& g);

// A GEMV for few output pixels (M <= kGemvMaxRows: a Dense layer at batch
// 1 or 2, say) and a filter too large for the cache's copy check
// (PackedWeights::kCopyCheckMaxBytes), straight from the [K, Co] filter with
// no packing, no cache and nothing to verify: the filter is read once per
// call, which is all a GEMV needs (a pinned filter on avx512vnni takes its
// cached packing instead: IsaKernels::gemv_unpinned_only; on avx2 a GEMV
// over its byte packing: IsaKernels::gemv_packed). Blocks
// [block_begin, block_end) of 64 channels.
constexpr int64_t kGemvMaxRows = 2;
constexpr int64_t kGemvBlock = 64;
struct GemvArgs {
  const int8_t* a;  // [rows, k] int8 activations, lda apart (im2col rows)
  int64_t lda;
  int64_t rows;  // 1 .. kGemvMaxRows
  int64_t k;
  const int8_t* filter;  // [k, out_c]
  int64_t out_c;
  int64_t block_begin, block_end;
  const EpilogueArgs* ep;
  int8_t* output;  // [rows, out_c]
  // IsaKernels::gemv_packed only: the filter's packing in its
  // gemv_packing's format (filter is then unused).
  const PackedView* packed = nullptr;
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
  // Bytes per channel (B) and per row (A) of one k-group: 4 (4 int8 or 2
  // int16) everywhere but i8mm (8 int8). Last, with a default, so the x86
  // tables need not name it.
  int64_t lane_bytes = 4;
  // The GEMV for M <= kGemvMaxRows, or nullptr (the GEMM then runs).
  void (*gemv)(const GemvArgs&) = nullptr;
  // K panel size (groups) when the weights come packed from the cache
  // (0: kc_groups). Larger than kc_groups where the micro-kernel streams a
  // block's whole weight panel from L2 faster than it stores and reloads
  // partial sums between panels; on-the-fly packing keeps kc_groups.
  int64_t kc_groups_cached = 0;
  // k_groups (and so every K panel) is a multiple of this: the packed
  // blocks hold zero groups up to it (amx: 16 groups, one B tile).
  int64_t group_multiple = 1;
  // gemm_tile reads a padded input in place (GemmTileArgs::padded) where
  // PaddedInputFits: the driver builds it.
  bool padded_input = false;
  // A channel split across threads gives each item a multiple of this many
  // blocks (amx: 2, its micro-tile's width; an item of one block runs
  // half-width micro-tiles).
  int64_t split_blocks = 1;
  // Split rows across threads before channels wherever each thread gets at
  // least two micro-tile rows, weight-heavy layers included while out_c <=
  // 2 x pixels (14x14x256 -> 1024 ran 6% slower split by rows: each thread
  // then streams all of its 256 KiB of weights). The others split channels
  // first for weight-heavy layers and small images (MakePlan in
  // gemm_driver.cc). amx sets both: before, two threads ran
  // MobileNetV2's 14x14 pointwise layers slower than one (channel items of
  // one block, every row read by each thread). bench_core, amx, batch 1,
  // two threads, best of 5 alternated (Xeon with AMX, KVM): 14x14x384 ->
  // 64 9.0 -> 5.3 us (one thread 6.0), 14x14x192 -> 64 7.7 -> 3.8,
  // 14x14x64 -> 384 16.2 -> 12.2, 14x14x576 -> 96 12.6 -> 9.5; the 7x7
  // layers (two micro-tile rows) unchanged. In TF (step profiler,
  // MobileNetV2 batch 1, two threads) its 14 pointwise 14x14 steps went
  // 267 -> 199 us. On avx512vnni rows first measured the same as now
  // (14x14x384 -> 64, 192 -> 64, 576 -> 96, 384 -> 96; one layer repeated,
  // bench_core), so this rule stays off there: the x86 paths split by the
  // filter's size instead (rows_first_small_filter, measured on chains).
  bool rows_first = false;
  // Cached weights whose item packing exceeds this many bytes (0: never)
  // run in kc_groups panels, panel-major (GemmTileArgs::panel_major): each
  // panel's weights are read from L2 by every micro-tile of the tile, where
  // micro-tile-major order streams the whole packing from L3 once per
  // micro-tile. amx: 1 MiB. bench_core, amx, best of 3 alternated (Xeon
  // with AMX, KVM), ResNet-50's 7x7x512 3x3 -> 512 (2.4 MiB packed): batch
  // 8 1070 -> 709 us on one thread, 524 -> 373 on two; batch 1 178 -> 154
  // and 94 -> 77. Layers with less (14x14x256 3x3: 590 KiB; 7x7x2048 1x1
  // -> 512 at batch 8, two threads: 512 KiB an item) ran 5-20% slower
  // panel-major, so they keep one panel of all of K.
  int64_t panel_major_bytes = 0;
  // Split rows first too wherever the filter (K x out_c bytes) is no
  // larger than the layer's rows in and out (pixels x (K + out_c)): each
  // thread then reads the whole filter, shared and clean, where a channel
  // split would make it read every input row, half of them written by the
  // other core one step before, and would leave half of its output rows in
  // the wrong core for the next step (MobileNetV2's 14x14 expand layers
  // feed a depthwise layer split by rows). One layer repeated (bench_core)
  // cannot show that; a chain of layers can (tools/bench/bench_sequence.cc,
  // MobileNetV2's 53 steps at batch 1, two threads, Zen 5 VM, builds
  // alternated, medians of per-step ratios). avx512vnni: in slow periods
  // of the VM 8 runs' sums 0.95x (the 14x14 depthwise layers 0.75x), in
  // fast ones 0.99x (14x14x384 depthwise 6.5 -> 6.0 us, 14x14x576 9.6 ->
  // 8.9, 14x14x96 -> 576 14.4 -> 14.1; 14x14x64 -> 384 6.5 -> 7.1 slower);
  // avxvnni 0.94x and avx2 0.97x (slow periods; the 14x14x384 -> 64 and
  // 576 -> 96 projections 0.65-0.78x, which split channels four ways before,
  // the 14x14 expansions 1.04-1.24x slower). ResNet-50's layers at batch 1
  // keep their split (the filter outweighs the rows from 14x14x256 -> 1024
  // on); the 7x7 layers of MobileNetV2 too (7x7x160 -> 960 ran 1.13x slower
  // split by rows: 154 KB of filter for 49 pixels). amx has it beside
  // rows_first, which leaves MobileNetV2's 14x14x96 -> 576 expansions
  // (576 channels > 2 x 196 pixels) to a channel split: bench_sequence,
  // batch 1, two threads, Xeon with AMX, builds alternated five times,
  // medians of per-step ratios, those expansions 0.80-0.88x and the
  // depthwise layers after them 0.76-0.78x, the sum of the steps 0.96x
  // (0.94-1.04). The ARM paths were not measured with it.
  bool rows_first_small_filter = false;
  // Row tiles (MakePlan) are multiples of this many rows (0: mr). amx: 16,
  // one A tile: a 32-row micro-tile's last 16 rows may be left out (a
  // 16-row micro-tile, MicroTile<1, NT>), so tiles of 16-row multiples
  // split the rows between threads more evenly. Two threads, batch 1, Xeon
  // with AMX (KVM): MobileNetV2's 196-row layers split 128 : 68 rows (4
  // micro-tiles against 2.5) before, 112 : 84 (3.5 against 3) now, and
  // ResNet50's 3136 rows 1664 : 1472 before, 1600 : 1536 now.
  // bench_sequence, builds alternated three times: MobileNetV2's 14x14
  // pointwise steps 176-183 -> 154-169 us; ResNet50's chain 3324-3498 ->
  // 3191-3287 us. In TF (step profiler, InferenceRunner, the two .so
  // alternated): MobileNetV2's steps 0.94-0.95x (three pairs, whole calls
  // 0.94-0.96x); ResNet50's steps 0.93-1.04x (seven pairs: within the
  // VM's noise), its 14x14 1024 -> 256 layers (split by rows) 0.96x in
  // each of four pairs. One thread: unchanged (the tiles differ only where
  // their micro-tile counts do not).
  int64_t tile_row_granule = 0;
  // The GEMV only for filters without a pin (FusedConvArgs::filter_pin);
  // a pinned filter's few rows run the GEMM on its cached packing, which a
  // pinned call uses with no check: a contiguous stream with a quarter of
  // the GEMV's VPDPBUSDs (each of which uses one byte of four), where the
  // GEMV reads 64-channel column strips of the [K, Co] filter, 1000 bytes
  // apart for a 1000-class head. avx512vnni, bench_core, pinned filters
  // cycled (16 of them: from L3; 32: from memory), Zen 4 VM, GEMV ->
  // packed GEMM: 1x1x1280 -> 1000 at batch 1 61-68 -> 38-39 us (16) and
  // 112-133 -> 57-63 us (32) on one thread, 25 -> 16 and 54 -> 28 on two;
  // 1x1x2048 -> 1000 162-182 -> 79-88 and 208-221 -> 110-113 on one, 69 ->
  // 37 and 119 -> 67 on two; batch 2 1.7-2.3x as fast. On the avx2 path the
  // same switch took 0.70-1.41x the GEMV's time (slower at batch 2: its GEMM
  // widens the rows to int16 per panel), so the ymm paths keep the GEMV; amx (which shares avx512vnni's
  // GEMV) was not measured (no AMX on that CPU) and keeps it too.
  bool gemv_unpinned_only = false;
  // A GEMV over a pinned filter's cached packing in gemv_packing's format
  // (GemvArgs::packed), run in place of gemv (and of the packed GEMM that
  // gemv_unpinned_only picks) for pinned filters, or nullptr. avx2, both
  // tables: gemm_avx2.cc's GemvBytes over kFormatYmmU8, the packing its
  // VPMADDUBSW GEMM reads for inputs in [0, 127]. Signed inputs, bench_core,
  // one Zen 4 thread, avx2 forced, 16 pinned filters cycled, weights in
  // [-127, 127], 3 rounds alternated, GemvYmm -> GemvBytes: 1x1x1024 ->
  // 1000 108 -> 29 us, 576 -> 1024 68 -> 12, 1280 -> 1000 151 -> 51 (batch
  // 2 269 -> 76), 960 -> 1280 206 -> 53, 2048 -> 1000 350 -> 104; two
  // threads 0.17-0.24x the time.
  void (*gemv_packed)(const GemvArgs&) = nullptr;
  const IsaKernels* gemv_packing = nullptr;
  // gemv_packed cannot take a -128 weight (PackedView::any_int8_min): such
  // filters keep gemv.
  bool gemv_packed_no_int8_min = false;
};

// The k-groups of a K-deep GEMM in `isa`'s packed layout: ceil(K /
// k_per_group), rounded up to isa.group_multiple.
int64_t PackedGroups(const IsaKernels& isa, int64_t k);

// Defined in the ISA translation units. Only the ones for the target CPU
// are built (BUILD selects them); dispatch.cc refers to them under the same
// #if defined(__x86_64__) / defined(__aarch64__) conditions.
extern const IsaKernels kAvx512VnniKernels;
extern const IsaKernels kAvxVnniKernels;
// avxvnni for an input known to be in [0, 127] (gemm_avxvnni.cc).
extern const IsaKernels kAvxVnniNonNegativeKernels;
extern const IsaKernels kAvx2Kernels;
// avx2 for an input whose every byte is in [0, 127] (gemm_avx2.cc).
extern const IsaKernels kAvx2NonNegativeKernels;
extern const IsaKernels kNeonKernels;
extern const IsaKernels kDotprodKernels;
extern const IsaKernels kI8mmKernels;
extern const IsaKernels kAmxKernels;

// Whether every one of the n bytes at x is in [0, 127] (gemm_avx2.cc,
// AVX2 code: call only where the avx2 path runs).
bool InputNonNegativeAvx2(const int8_t* x, int64_t n);

// avx512vnni's GEMV (gemm_avx512vnni.cc), which the amx path shares: it
// reads the filter in place, so it has no tiles to gain.
void GemvAvx512Vnni(const GemvArgs& t);

// Lane position -> channel offset within a block of `format` that holds
// `block_channels` real channels (the last block may hold fewer).
int64_t BlockLaneChannel(PackFormatId format, int64_t block_channels,
                         int64_t position);
// kFormatZmmU8: the zmm per group a block of `block_channels` channels uses
// in natural order (1-3 for 1-48 channels), or 0 for a full interleaved
// block (49-64 channels).
int64_t ZmmNarrowZmms(int64_t block_channels);

// The driver (gemm_driver.cc, baseline code): packs/caches the weights,
// tiles, gathers and runs `isa`'s kernels over parallel_for. groups == 1
// only (grouped calls are split by grouped.h first). cache_key: the
// filter's identity in the packed-weight cache (nullptr: args.filter).
// lut_body: when given, the driver applies args.output_lut itself with it,
// to each work item's output right after the item wrote it (still in
// cache); nullptr: the caller applies it.
void RunGemmConv(const FusedConvArgs& args, const IsaKernels& isa,
                 const ParallelFor& parallel_for,
                 const int8_t* cache_key = nullptr,
                 LutBody lut_body = nullptr);

// Tests only: where the weights come from. 0: automatic (the GEMV for at
// most kGemvMaxRows output pixels and a filter larger than
// PackedWeights::kCopyCheckMaxBytes where the ISA has one, unpinned where
// it has gemv_unpinned_only; otherwise cached, except such a large filter
// with one M tile and no pin, packed on the fly),
// 1: always cached, 2: always on the fly (1 and 2 never take the GEMV). Not
// thread-safe with concurrent convolutions.
void SetWeightModeForTesting(int mode);
// Tests only: whether ISAs with IsaKernels::padded_input run convolutions
// that fit it (PaddedInputFits) on a padded input. 0: automatic (where its
// rows are few enough against gathered ones: gemm_driver.cc), 1: always,
// 2: never. Not thread-safe with concurrent convolutions.
void SetPaddedInputForTesting(int mode);
// Tests only: where the avx512vnni micro-tiles may read their A rows in
// place (a pointwise layer's input, or windows of it: gemm_avx512vnni.cc,
// ReadInPlace). 0: automatic, 1: wherever they can, 2: never (every row
// gathered). Not thread-safe with concurrent convolutions.
void SetInPlaceRowsForTesting(int mode);
int InPlaceRowsModeForTesting();
// Tests only: the GEMV calls so far (RunGemmConv calls that took isa.gemv).
int64_t GemvCallsForTesting();
// Of those, the calls of IsaKernels::gemv_packed.
int64_t GemvPackedCallsForTesting();

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_KERNELS_H_
