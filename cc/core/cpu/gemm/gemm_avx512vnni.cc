// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX-512 VNNI kernels: u8 x s8 VPDPBUSD on zmm, micro-tile 6 pixels x 64
// channels (24 zmm accumulators, 4 zmm of weights, 1 broadcast), weights in
// kFormatZmmU8 (gemm_kernels.h), epilogue fused into the store
// (cc/core/epilogue_avx512.h). A narrow last block (<= 48 channels) runs
// NZ = 1-3 zmm per row with micro-tiles of kMrNarrow[NZ] rows (8, 12, 8:
// 8-24 accumulators), so that Co = 16 does not issue 4x the VPDPBUSDs it
// needs (MobileNetV2's 32 -> 16 pointwise layer: 1.9x faster, measured on
// Zen 4 with tools/bench). NZ = 1 had 16 rows: their 16 row offsets did
// not fit the general registers (GCC 12 kept some in xmm and on the
// stack inside the k loop); 8 rows ran 112x112x32 -> 16 in 60-62 us
// instead of 67-69 (bench_core, one thread, Zen 4, alternated), and 10 or
// 12 rows for NZ = 2 changed nothing. A narrow block whose last zmm holds
// at most 8 channels runs that zmm on ymm (MicroTileBody's kHalf: Co = 24
// 0.75-0.83x the time on Zen 4). Built with -mavx512f -mavx512bw -mavx512dq
// -mavx512vl -mavx512vnni -mfma -ffp-contract=off; everything but the
// IsaKernels table has internal linkage.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "cc/core/cpu/gemm/gemm_isa_common.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/epilogue.h"
#include "cc/core/epilogue_avx512.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tf_fused_int8 {
namespace cpu {
namespace {

constexpr int64_t kBlock = 64;             // channels per block (4 zmm)
constexpr int64_t kGroupBytes = kBlock * 4;  // one k-group of a block
constexpr int kMr = 6;                       // micro-tile rows (4 zmm)
constexpr int64_t kKcGroups = 96;            // K panel: 96 * 256 B = 24 KiB
// K panel of cached weights: in practice all of K (MicroTile reads the
// block's weights from L2, 256 B a group for 24 VPDPBUSD; no partial sums).
// One Zen 5 thread, bench_core, pinned filters, against 96: 14x14x256 3x3
// -> 256 b8 -4.5%, 28x28x128 3x3 b8 -6%, 7x7x512 3x3 b1 -6%, 7x7x2048 ->
// 512 b8 -8%, MobileNetV2's 7x7x960 -> 320 -5%.
constexpr int64_t kKcGroupsCached = 4096;
constexpr int64_t kMaxWindowedRows = 1024;   // tile rows of a windowed GEMM
// Output widths from which micro-tiles read their windows in place (most
// micro-tiles of a row then lie inside it, away from its borders). One Zen 5
// thread, bench_core, alternated with gathering every tile: 56x56x64 3x3
// -> 64 b1 315 -> 284 us, b8 2600 -> 2290 us; 28x28x128 -> 128 unchanged;
// 14x14x256 -> 256 and 7x7x512 -> 512, where few micro-tiles can, 4-7%
// slower (they then gather a tile at a time).
constexpr int64_t kMinWindowedWidth = 24;
// Pointwise depth (Ci) from which Intel CPUs gather pointwise rows instead
// of reading them in place (ReadInPlace).
constexpr int64_t kMinGatheredPointwiseK = 64;
// Micro-tile rows for NZ zmm per row (narrow blocks: NZ * rows <= 24).
constexpr int kMrNarrow[5] = {0, 8, 12, 8, kMr};
// How far ahead (panel rows) the epilogue's side input is prefetched.
constexpr int64_t kSideAheadRows = 16;
// How far ahead (panel rows) pointwise layers' output rows are prefetched
// (PrefetchOutputRows).
constexpr int64_t kOutputAheadRows = 16;

// ---------------------------------------------------------------- packing

// One k-group of a block: filter rows k .. k + 3 (`rows`, ld apart; rows
// past k_total read as zero), the block's channels (mask), interleaved into
// the group's four zmm in kFormatZmmU8 order: 8 unpacks.
inline void LoadGroupZmm(const int8_t* rows, int64_t ld, int64_t k,
                         int64_t k_total, __mmask64 mask, __m512i u[4]) {
  __m512i r[4];
  for (int i = 0; i < 4; ++i) {
    r[i] = k + i < k_total ? _mm512_maskz_loadu_epi8(mask, rows + i * ld)
                           : _mm512_setzero_si512();
  }
  const __m512i t0 = _mm512_unpacklo_epi8(r[0], r[1]);
  const __m512i t1 = _mm512_unpackhi_epi8(r[0], r[1]);
  const __m512i t2 = _mm512_unpacklo_epi8(r[2], r[3]);
  const __m512i t3 = _mm512_unpackhi_epi8(r[2], r[3]);
  u[0] = _mm512_unpacklo_epi16(t0, t2);
  u[1] = _mm512_unpackhi_epi16(t0, t2);
  u[2] = _mm512_unpacklo_epi16(t1, t3);
  u[3] = _mm512_unpackhi_epi16(t1, t3);
}

// The zmm per group a block uses: 4 (interleaved) or 1-3 (narrow, natural
// order; gemm_kernels.h).
inline int BlockZmms(int64_t block_channels) {
  const int64_t nz = ZmmNarrowZmms(block_channels);
  return nz == 0 ? 4 : static_cast<int>(nz);
}

// A narrow block's group: the interleaved u[0..3] (zmm j, 128-bit lane L =
// channels 16L + 4j .. 16L + 4j + 3) transposed by 128-bit lanes into
// natural order (zmm L = channels 16L .. 16L + 15).
inline void NaturalOrder(__m512i u[4]) {
  const __m512i t0 = _mm512_shuffle_i64x2(u[0], u[1], 0x44);
  const __m512i t1 = _mm512_shuffle_i64x2(u[0], u[1], 0xEE);
  const __m512i t2 = _mm512_shuffle_i64x2(u[2], u[3], 0x44);
  const __m512i t3 = _mm512_shuffle_i64x2(u[2], u[3], 0xEE);
  u[0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
  u[1] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
  u[2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
  u[3] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
}

// One group of a block in its packed form: u[0..nz) to store.
inline int PackedGroupZmm(const int8_t* rows, int64_t ld, int64_t k,
                          int64_t k_total, int64_t block_channels,
                          __m512i u[4]) {
  LoadGroupZmm(rows, ld, k, k_total, ByteMask(block_channels), u);
  const int nz = BlockZmms(block_channels);
  if (nz < 4) NaturalOrder(u);
  return nz;
}

bool PanelZmm(const PanelArgs& p) {
  const int64_t n0 = p.block_index * kBlock;
  const int64_t width = Min(kBlock, p.out_c - n0);
  int8_t* dst = p.panel;
  __m512i diff = _mm512_setzero_si512();
  for (int64_t g = p.g0; g < p.g1; ++g, dst += kGroupBytes) {
    __m512i u[4];
    const int nz = PackedGroupZmm(p.filter + 4 * g * p.out_c + n0, p.out_c,
                                  4 * g, p.k, width, u);
    if (p.verify) {
      for (int j = 0; j < nz; ++j) {
        diff = _mm512_or_si512(
            diff, _mm512_xor_si512(u[j], _mm512_loadu_si512(dst + 64 * j)));
      }
    } else {
      for (int j = 0; j < nz; ++j) _mm512_storeu_si512(dst + 64 * j, u[j]);
    }
  }
  return _mm512_test_epi64_mask(diff, diff) != 0;
}

// Packs groups [g0, g1) of blocks [nb0, nb1) row-major over the filter
// (contiguous filter rows, which the hardware prefetcher streams): block
// nb0 + j's panel goes to dst + j * panel_bytes.
void PackPanelsZmm(const int8_t* filter, int64_t k_total, int64_t co,
                   int64_t nb0, int64_t nb1, int64_t g0, int64_t g1,
                   int8_t* dst, int64_t panel_bytes) {
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t k = 4 * g;
    const int8_t* rows = filter + k * co;
    int8_t* out = dst + (g - g0) * kGroupBytes;
    for (int64_t nb = nb0; nb < nb1; ++nb, out += panel_bytes) {
      const int64_t n0 = nb * kBlock;
      __m512i u[4];
      const int nz =
          PackedGroupZmm(rows + n0, co, k, k_total, Min(kBlock, co - n0), u);
      for (int j = 0; j < nz; ++j) _mm512_storeu_si512(out + 64 * j, u[j]);
    }
  }
}

// ----------------------------------------------------------------- im2col

// VPDPBUSD's u8 operand is the activation x ^ 0x80 = x + 128 (the column
// offsets, -128 * sum w, undo the +128). A rows read in place (a pointwise
// layer's input, or windows: GemmTileZmm) are flipped by the micro-kernel,
// one VPXORD per broadcast; gathered rows are flipped once as they are
// copied (ZmmU8Copy), padding 0x80 (a zero activation), and the
// micro-kernel broadcasts them as they are. The VPXORDs took 6 of the 30
// vector uops per k-group of a 6 x 64 micro-tile. Gathered layers, one
// thread, bench_core, best of 3 alternated (Xeon with AMX, KVM): 14x14x256
// 3x3 -> 256 b1 375 -> 330 us, b8 3140 -> 2586; 7x7x512 3x3 b1 411 -> 361,
// b8 3016 -> 2610; ResNet-50's stem 526 -> 488; MobileNetV2's 224x224x3 3x3
// s2 -> 32 stem 112 -> 101.
//
// Whether rows are read in place at all (ReadInPlace) depends on the CPU.
// On this project's Intel Xeon with AMX (KVM, family 6 model 167) the XORs
// compete with the VPDPBUSDs (removing them, wrong results and all, ran
// 10-17% faster), and a contiguous copy per tile costs less than an XOR per
// broadcast per 64-channel block. Same Xeon, one thread, bench_core, in
// place -> gathered, two rounds alternated:
//   pointwise, K >= 64: 56x56x144 -> 24 60-62 -> 57-58 us, 14x14x96 -> 576
//   41-43 -> 38-39, 7x7x960 -> 320 47-49 -> 43-44, 56x56x256 -> 64 164-178
//   -> 154-157, 14x14x576 -> 96 39 -> 33-35, 28x28x192 -> 32 19-19.4 ->
//   16.4-16.5, 14x14x64 -> 384 21.5-22.5 -> 19.2-20.4, 28x28x64 -> 64 14.0
//   -> 13.3, 7x7x160 -> 960 28.4-29.1 -> 26.3-26.7, batch 8 14x14x384 ->
//   64 122-124 -> 117-119;
//   pointwise, K < 64 (short rows, several per cache line in place):
//   112x112x16 -> 96 157-163 -> 170-176 us, 56x56x24 -> 144 75-76 -> 74-79,
//   28x28x32 -> 192 26-26.5 -> 26.2-26.6, 28x28x48 -> 96 17.8-17.9 ->
//   17.0-18.4;
//   3x3 windows: 56x56x64 -> 64 339-363 -> 323-344 us, 28x28x128 -> 128
//   375-387 -> 349-361 (batch 8 3040-3130 -> 2807-2835), 56x56x144 -> 144
//   2119-2148 -> 1844-1897, 28x28x96 -> 96 229-232 -> 205-206, 28x28x32 ->
//   32 29.5-30 -> 27.5-28.3.
// So on Intel CPUs only pointwise layers with K < kMinGatheredPointwiseK
// read in place (not measured on Intel cores with one 512-bit multiply
// unit, Ice Lake client and Tiger Lake). AMD's Zen 4 and 5 have more vector
// pipes than their VPDPBUSDs use, and there the windows measured faster
// than gathering (kMinWindowedWidth, Zen 5, when gathered rows were XORed
// too), so they still read in place wherever they can. Measured again on
// Zen 5 (family 26 model 2, KVM) after the gathered rows lost their XOR
// (2026-12-04, bench_core BENCH_CORE_IN_PLACE=1 vs 2, pinned, 8 filters,
// one thread, best of 3 alternated, in place -> gathered): pointwise
// 56x56x144 -> 24 31.6 -> 38.6 us, 56x56x256 -> 64 104.5 -> 118.6,
// 14x14x576 -> 96 21.8 -> 24.8, 28x28x192 -> 32 10.2 -> 13.2, 28x28x64 ->
// 64 7.8 -> 8.9, batch 8 14x14x384 -> 64 73.8 -> 85.4, 112x112x16 -> 96
// 86.7 -> 105.6, 56x56x24 -> 144 40.3 -> 43.8, 28x28x32 -> 192 14.9 ->
// 15.7; 14x14x96 -> 576, 7x7x960 -> 320, 14x14x64 -> 384, 7x7x160 -> 960
// within 2%; 3x3 56x56x64 -> 64 228.8 -> 242.3, 28x28x128 -> 128 221.9 ->
// 231.2 (batch 8 1814 -> 1863); 14x14x256 and 7x7x512 3x3 and the stem
// within 2% (their rows are gathered either way). In place stays on AMD.
//
// Whether micro-tiles may read A rows in place: a pointwise layer's rows
// (pointwise, with Ci = k) or windows (im2col row length k); see above. An
// input known to be in [0, 127] (GemmTileArgs::non_negative) needs no XOR
// in place, no flip when gathered and no column offsets; on Intel its
// windows wider than one pixel (xor_free_windows) are then read in place
// too, and its pointwise rows on narrow items (xor_free_rows, below).
// bench_core, one thread, such an input (BENCH_CORE_INPUT=relu_known), 8
// filters, alternated three times (Xeon with AMX, KVM), before -> after:
// 56x56x64 3x3 -> 64 373-381 -> 353-356 us, 28x28x128 3x3 -> 128 377-378
// -> 370-371, 56x56x144 3x3 -> 144 2012-2025 -> 1971-1987; pointwise
// 112x112x16 -> 96 (in place) 171-172 -> 155-156, 56x56x24 -> 144 76-77 ->
// 70-71, 56x56x144 -> 24 (gathered) 62-67 -> 59. A 1x1 stride-2 layer's
// rows in place were slower (ResNet50 at batch 1, forced avx512vnni, step
// profiler, builds alternated four times: 56x56x256 -> 512 /2 1.06x,
// 28x28x512 -> 1024 /2 1.04x the time; its 3x3 steps 0.99x).
// Pointwise rows with K >= 64 of such an input (xor_free_rows) are read in
// place where the item has at most kMaxXorFreeInPlaceBlocks channel blocks:
// gathering costs a copy per micro-tile row that only wide items amortize.
// When measured first (2026-12-05) in place was 1-4% slower everywhere
// (56x56x256 -> 64, 14x14x384 -> 64 at batch 8); after the direct strips
// (DirectStrip) and the two-groups loop it is faster on narrow items.
// bench_core, one thread, BENCH_CORE_INPUT=relu_known, 8 filters, best of 3
// alternated (Xeon with AMX, KVM, 2026-12-06), gathered -> in place:
// MobileNetV2's projections 56x56x144 -> 24 61.2 -> 50.7 us, 56x56x96 -> 24
// 46.4 -> 38.4, 28x28x144 -> 32 15.4 -> 13.2, 28x28x192 -> 32 19.2 ->
// 16.4, 14x14x384 -> 64 15.9 -> 14.6, 14x14x576 -> 96 36.3 -> 32.9, 7x7x960
// -> 160 25.5 -> 24.7, 7x7x960 -> 320 51.8 -> 50.1; ResNet-50's 56x56x256
// -> 64 182 -> 163, 28x28x512 -> 128 167 -> 153, 14x14x1024 -> 256 164 ->
// 159; 14x14x256 -> 384 / 448 / 512 0.95x / 0.97x / 0.98x; batch 8
// 14x14x384 -> 64 0.91x, 56x56x256 -> 64 0.87x. Wider items gather: 8
// blocks (28x28x128 -> 512) 0.995x, 16 (14x14x256 -> 1024) 1.01x, 20
// (7x7x320 -> 1280) 1.05x, 32 (7x7x512 -> 2048) 1.02x.
constexpr int64_t kMaxXorFreeInPlaceBlocks = 8;

bool ReadInPlace(bool pointwise, int64_t k, bool xor_free_windows,
                 bool xor_free_rows) {
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  switch (InPlaceRowsModeForTesting()) {
    case 1: return true;
    case 2: return false;
    default:
      return !intel || (pointwise ? k < kMinGatheredPointwiseK || xor_free_rows
                                  : xor_free_windows);
  }
}

struct ZmmU8Copy : ZmmS8Copy {  // its loads; these stores
  static void Store(uint8_t* dst, Vec v) {
    _mm512_storeu_si512(dst, _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80))));
  }
  static void StorePad(uint8_t* dst) {
    _mm512_storeu_si512(dst, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static void Copy16(uint8_t* dst, const int8_t* src) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_xor_si128(v, _mm_set1_epi8(static_cast<char>(0x80))));
  }
  static void Copy32(uint8_t* dst, const int8_t* src) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                        _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))));
  }
};

// ------------------------------------------------------------------- GEMM

struct alignas(64) BlockConsts {
  float scale[kBlock];  // the block's lane order (interleaved or natural)
  float bias[kBlock];
};

// The scales and biases of the block at channel n0 in its lane order
// (interleaved, or natural for a narrow block); zero past Co. Vectorized:
// masked loads in natural order (zmm L = channels 16L .. 16L + 15), then,
// for the interleaved order (zmm j, 128-bit lane L = channels 16L + 4j ..
// 16L + 4j + 3: ZmmU8LaneChannel), the 128-bit-lane transpose NaturalOrder
// (its own inverse). GemmTileZmm fills a block per (K panel, block) of
// every work item: the scalar loop was 3-4% of 112x112x16 -> 96 (perf,
// bench_core, one Zen 5 thread: 25 row tiles x 2 blocks).
inline void FillBlockConsts(const EpilogueArgs& ep, int64_t n0, int64_t co,
                            bool interleaved, BlockConsts* bc) {
  // One bit per channel in [n0, Co), zmm j's 16 from bit 16j (as the
  // micro-tiles split the block's mask).
  const __mmask64 channels = ByteMask(Min(kBlock, co - n0));
  __m512i s[4], b[4];
  const __m512 scalar = _mm512_set1_ps(ep.scale[0]);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __mmask16 m = static_cast<__mmask16>(channels >> (16 * j));
    const __m512 sj = ep.per_channel_scale
                          ? _mm512_maskz_loadu_ps(m, ep.scale + n0 + 16 * j)
                          : _mm512_maskz_mov_ps(m, scalar);
    s[j] = _mm512_castps_si512(sj);
    b[j] = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, ep.bias + n0 + 16 * j));
  }
  if (interleaved) {
    NaturalOrder(s);
    NaturalOrder(b);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    _mm512_store_si512(bc->scale + 16 * j, s[j]);
    _mm512_store_si512(bc->bias + 16 * j, b[j]);
  }
}

struct TileContext {
  const uint8_t* a;  // the micro-tile's first A row (int8 activations)
  int64_t lda;
  const int8_t* panel;
  int64_t groups;
  // A rows in segments (windowed direct rows: one window row of kw * Ci
  // bytes each, read in place): the first segment has seg_left groups, the
  // others seg_groups, and seg_jump bytes lie between the end of one and
  // the start of the next. Gathered or pointwise rows: one segment of all
  // the groups (seg_left = groups, seg_jump = 0).
  int64_t seg_left;
  int64_t seg_groups;
  int64_t seg_jump;
  // Starting accumulators: `init` (64 int32) or, when from_partial, the
  // partial sums plus `add` (64 int32) if not null. Then: the epilogue when
  // `last`, else store to the partial sums.
  const int32_t* init;
  bool from_partial;
  const int32_t* add;
  bool last;
  int32_t* partial;           // the micro-tile's first row, this block
  int64_t partial_ld;         // int32 between partial rows
  const BlockConsts* bc;
  const Epilogue512Consts* ec;
  const int8_t* side;  // first row's side input at the block, or nullptr
  int8_t* out;         // first row's output at the block
  const int8_t* pf = nullptr;  // lines to prefetch into L2 during the K loop
  int64_t pf_lines = 0;        // (the next panel's, GemmTileZmm), one per k-group
  bool flip;           // A rows are int8 (read in place), not u8 (gathered)
  int64_t ldo;         // Co
  __mmask64 mask;      // the block's channels (bytes)
};

// MR rows x NZ zmm of accumulators (NZ = 4: a full interleaved block; 1-3:
// a narrow block in natural order, 16 channels per zmm). kHalf (narrow
// blocks whose last zmm holds at most 8 channels: Co = 24, 40, 8, ...):
// that zmm's products run on its low 256 bits (EVEX VPDPBUSD ymm; its
// upper lanes are never stored: the epilogues' masks end at the block's
// width). Zen 4 runs a ymm VPDPBUSD in half the time of a zmm one.
template <int MR, int NZ, bool kFlip, bool kHalf = false>
__attribute__((always_inline)) inline void MicroTileBody(const TileContext& t) {
  static_assert(!kHalf || NZ < 4, "half zmm only in narrow blocks");
  __m512i acc[MR][NZ];
  if (!t.from_partial) {
#pragma GCC unroll 4
    for (int j = 0; j < NZ; ++j) {
      const __m512i c = _mm512_load_si512(t.init + 16 * j);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) acc[i][j] = c;
    }
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NZ; ++j) {
        acc[i][j] = _mm512_load_si512(t.partial + i * t.partial_ld + 16 * j);
      }
    }
    if (t.add != nullptr) {
#pragma GCC unroll 4
      for (int j = 0; j < NZ; ++j) {
        const __m512i c = _mm512_load_si512(t.add + 16 * j);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_add_epi32(acc[i][j], c);
      }
    }
  }
  const uint8_t* a = t.a;
  const int8_t* b = t.panel;
  const int64_t lda = t.lda;
  const int8_t* pf = t.pf;
  int64_t pf_left = t.pf_lines;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // One k-group: NZ zmm of weights at bg, MR broadcast rows at ag.
  // No software prefetch of the panel: prefetcht0 of the group 8, 16 or 32
  // groups ahead measured 0.98-1.02x (bench_core, one and two Zen 5
  // threads, 8 filters cycled so that the weights come from L3: 7x7x512
  // 3x3 -> 512 at batch 1 and 8, 14x14x256 3x3, 7x7x512 1x1 -> 2048;
  // alternated, 7-9 rounds).
  auto group = [&](const uint8_t* ag, const int8_t* bg)
                   __attribute__((always_inline)) {
    __m512i bv[NZ];
#pragma GCC unroll 4
    for (int j = 0; j < NZ; ++j) {
      bv[j] = kHalf && j == NZ - 1
                  ? _mm512_castsi256_si512(
                        _mm256_load_si256(reinterpret_cast<const __m256i*>(bg + 64 * j)))
                  : _mm512_load_si512(bg + 64 * j);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      // int8 x -> u8 x + 128 in place; gathered rows hold x + 128.
      const __m512i raw = _mm512_set1_epi32(LoadU32(ag + i * lda));
      const __m512i av = kFlip ? _mm512_xor_si512(raw, flip) : raw;
#pragma GCC unroll 4
      for (int j = 0; j < NZ; ++j) {
        if (kHalf && j == NZ - 1) {
          acc[i][j] = _mm512_castsi256_si512(_mm256_dpbusd_epi32(
              _mm512_castsi512_si256(acc[i][j]), _mm512_castsi512_si256(av),
              _mm512_castsi512_si256(bv[j])));
        } else {
          acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], av, bv[j]);
        }
      }
    }
  };
  int64_t g = 0, seg_end = Min(t.groups, t.seg_left);
  for (;;) {
    if constexpr (NZ == 4) {
      // Full blocks: the groups with a line of the next panel to prefetch
      // each first, then the rest two at a time, so that the prefetch
      // test, the pointer increments and the loop branch come once per
      // two groups (before: about 11 scalar uops a group beside its 24
      // VPDPBUSD, some on the VPDPBUSD ports). One thread, bench_core,
      // pinned, Xeon with AMX (KVM), alternated, best of 3: 14x14x256 and
      // 28x28x128 3x3 at batch 1 -6 to -8%, 14x14x256 3x3 at batch 8 -6%,
      // 7x7x960 -> 320 -4%, 14x14x1024 -> 256 -5%, 7x7x512 3x3 -2%; on two
      // threads -1 to -12%. In a chain (tools/bench/bench_sequence,
      // ResNet50's 53 layers at batch 1, alternated twice): one thread
      // 15.9-16.0 -> 15.4-15.8 ms, two threads within 1%; MobileNetV2 on
      // two threads 1.37-1.39 -> 1.36-1.39 ms.
      int64_t n = seg_end - g;
      const int64_t with_pf = Min(n, pf_left);
      for (int64_t e = 0; e < with_pf; ++e) {
        _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T1);
        pf += 64;
        group(a, b);
        a += 4;
        b += kGroupBytes;
      }
      pf_left -= with_pf;
      n -= with_pf;
      for (; n >= 2; n -= 2) {
        group(a, b);
        // Keeps the second group's weight loads after the first group's
        // products (hoisted, they need 8 weight registers beside the 24
        // accumulators).
        asm volatile("" ::: "memory");
        group(a + 4, b + kGroupBytes);
        a += 8;
        b += 2 * kGroupBytes;
      }
      if (n > 0) {
        group(a, b);
        a += 4;
        b += kGroupBytes;
      }
    } else {
      // Narrow blocks (8-12 rows, more row offsets to keep in registers):
      // one group an iteration; the loop above ran 112x112x32 -> 16
      // (NZ = 1, 8 groups) 6-9% slower.
      for (int64_t k = g; k < seg_end; ++k) {
        if (pf_left > 0) {
          _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T1);
          pf += 64;
          --pf_left;
        }
        group(a, b);
        a += 4;
        b += kGroupBytes;
      }
    }
    g = seg_end;
    if (g >= t.groups) break;
    a += t.seg_jump;
    seg_end = Min(t.groups, g + t.seg_groups);
  }
  if (t.last) {
    // The epilogue with or without the upper clamp (Epilogue512Consts::
    // clamp_hi), chosen once per micro-tile.
    auto epilogue = [&](auto clamp_hi) {
      constexpr bool kClampHi = decltype(clamp_hi)::value;
      if constexpr (NZ == 4) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          Epilogue64<kClampHi>(acc[i][0], acc[i][1], acc[i][2], acc[i][3],
                               t.bc->scale, t.bc->bias,
                               t.side ? t.side + i * t.ldo : nullptr, *t.ec,
                               t.mask, t.out + i * t.ldo);
        }
      } else {
        // Narrow blocks: four rows per epilogue (Epilogue16x4Natural), the
        // rest one by one. One Zen 5 thread, bench_core, alternated:
        // 112x112x32 -> 16 b1 43 -> 32 us, b8 351 -> 274 us; 56x56x96 -> 24
        // -8%; 112x112x16 -> 96 and the 3x3x3 -> 32 stem about -10%.
        constexpr int kQuads = MR / 4;
        const int8_t* side = t.side;
        int8_t* out = t.out;
        const int64_t ldo = t.ldo;
#pragma GCC unroll 4
        for (int q = 0; q < kQuads; ++q) {
#pragma GCC unroll 4
          for (int j = 0; j < NZ; ++j) {
            Epilogue16x4Natural<kClampHi>(
                acc[4 * q][j], acc[4 * q + 1][j], acc[4 * q + 2][j],
                acc[4 * q + 3][j], t.bc->scale + 16 * j, t.bc->bias + 16 * j,
                side ? side + 4 * q * ldo + 16 * j : nullptr, ldo, *t.ec,
                static_cast<__mmask16>(t.mask >> (16 * j)),
                out + 4 * q * ldo + 16 * j);
          }
        }
#pragma GCC unroll 4
        for (int i = 4 * kQuads; i < MR; ++i) {
#pragma GCC unroll 4
          for (int j = 0; j < NZ; ++j) {
            Epilogue16Natural<kClampHi>(
                acc[i][j], t.bc->scale + 16 * j, t.bc->bias + 16 * j,
                side ? side + i * ldo + 16 * j : nullptr, *t.ec,
                static_cast<__mmask16>(t.mask >> (16 * j)), out + i * ldo + 16 * j);
          }
        }
      }
    };
    WithClampHi(t.ec->clamp_hi, epilogue);
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NZ; ++j) {
        _mm512_store_si512(t.partial + i * t.partial_ld + 16 * j, acc[i][j]);
      }
    }
  }
}

template <int MR, int NZ, bool kFlip, bool kHalf>
void MicroTile(const TileContext& t) {
  MicroTileBody<MR, NZ, kFlip, kHalf>(t);
}

using MicroTileFn = void (*)(const TileContext&);

// MicroTile<h, NZ, kFlip, kHalf> for h = 1 .. kMrNarrow[NZ], indexed by h - 1.
template <int NZ, bool kFlip, bool kHalf, int... H>
constexpr std::array<MicroTileFn, sizeof...(H)> MicroTiles(
    std::integer_sequence<int, H...>) {
  return {&MicroTile<H + 1, NZ, kFlip, kHalf>...};
}
template <bool kFlip>
struct TileTable {
  template <int NZ, bool kHalf>
  static constexpr auto Tiles() {
    return MicroTiles<NZ, kFlip, kHalf>(std::make_integer_sequence<int, kMrNarrow[NZ]>());
  }
  static constexpr auto k1 = Tiles<1, false>();
  static constexpr auto k2 = Tiles<2, false>();
  static constexpr auto k3 = Tiles<3, false>();
  static constexpr auto k4 = Tiles<4, false>();
  static constexpr auto k1h = Tiles<1, true>();
  static constexpr auto k2h = Tiles<2, true>();
  static constexpr auto k3h = Tiles<3, true>();
  static void Run(int nz, bool half, int64_t h, const TileContext& tc) {
    switch (nz) {
      case 1: (half ? k1h : k1)[h - 1](tc); return;
      case 2: (half ? k2h : k2)[h - 1](tc); return;
      case 3: (half ? k3h : k3)[h - 1](tc); return;
      default: k4[h - 1](tc); return;
    }
  }
};

// Whether a block of `width` channels (nz = BlockZmms(width)) runs its last
// zmm as a half (MicroTileBody's kHalf). bench_core, Zen 4 VM, one thread,
// pinned, builds alternated three times: 56x56x144 -> 24 72-75 -> 55-62 us
// (with side input 76-79 -> 61-62; two threads 41 -> 34), 56x56x96 -> 24
// 54-57 -> 39-44 us (batch 8 410-431 -> 332-351), 28x28x144 -> 40 27-28
// -> 23-24 us; MobileNetV2's two 24-channel steps in TF (step profiler,
// runner, the .so alternated three times) 51-53 -> 41-45 and 78-80 -> 63-70
// us. On Intel a ymm VPDPBUSD shares the zmm one's port while 512-bit uops
// run, so there it should cost what the zmm did (not measured).
inline bool HalfLastZmm(int nz, int64_t width) {
  return nz < 4 && width <= 16 * (nz - 1) + 8;
}

inline void RunMicroTile(int nz, bool half, int64_t h, const TileContext& tc) {
  if (tc.flip) {
    TileTable<true>::Run(nz, half, h, tc);
  } else {
    TileTable<false>::Run(nz, half, h, tc);
  }
}

// Adds sum_k w[k][c] of a packed panel's first nz zmm to sums (lane order):
// VPDPBUSD with all-ones u8 sums each lane's four int8 weights exactly.
inline void AddPanelSums(const int8_t* panel, int64_t groups, int nz,
                         int32_t* sums) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i s[4];
  for (int j = 0; j < nz; ++j) s[j] = _mm512_load_si512(sums + 16 * j);
  for (int64_t g = 0; g < groups; ++g, panel += kGroupBytes) {
    for (int j = 0; j < nz; ++j) {
      s[j] = _mm512_dpbusd_epi32(s[j], ones, _mm512_load_si512(panel + 64 * j));
    }
  }
  for (int j = 0; j < nz; ++j) _mm512_store_si512(sums + 16 * j, s[j]);
}

// Whether the h pixels from `pixel` lie in one output row with each of
// their windows inside the image (dilation 1 across); if so, points tc at
// their A rows in place for the panel starting at byte k0 of the im2col
// row: row i is pixel + i's window, stride * Ci bytes after row i - 1; the
// window rows (kw * Ci bytes, a multiple of 4) are segments dilation_h
// input rows apart.
inline bool WindowTile(const ConvGeometry& g, const int8_t* input,
                       int64_t pixel, int64_t h, int64_t k0, TileContext* tc) {
  const int64_t ox = pixel % g.out_w;
  if (ox + h > g.out_w) return false;
  const int64_t oy = (pixel / g.out_w) % g.out_h;
  const int64_t n = pixel / (g.out_w * g.out_h);
  const int64_t iy0 = oy * g.stride_h - g.pad_top;
  const int64_t ix0 = ox * g.stride_w - g.pad_left;
  if (iy0 < 0 || iy0 + (g.filter_h - 1) * g.dilation_h >= g.in_h) return false;
  if (ix0 < 0 || (ox + h - 1) * g.stride_w - g.pad_left + g.filter_w > g.in_w) {
    return false;
  }
  const int64_t run = g.filter_w * g.in_c;
  const int64_t row_bytes = g.in_w * g.in_c;
  const int64_t ky = k0 / run, off = k0 - ky * run;
  tc->a = reinterpret_cast<const uint8_t*>(input) +
          (n * g.in_h + iy0 + ky * g.dilation_h) * row_bytes + ix0 * g.in_c + off;
  tc->lda = g.stride_w * g.in_c;
  tc->seg_groups = run / 4;
  tc->seg_left = (run - off) / 4;
  tc->seg_jump = g.dilation_h * row_bytes - run;
  return true;
}

// The next (panel, block)'s lines for micro-tile mt of a (panel, block)
// (its TileLineShare), one per k-group inside the tile's K loop
// (MicroTile), any beyond its groups here. At batch 1 the
// weights come from L3 or DRAM (a model's 25 MB), and one burst per tile
// before it was hidden worse. One Zen 5 thread, bench_core, 48 filters
// cycled, burst -> in the loop: 14x14x256 3x3 -> 256 296 -> 248 us,
// 7x7x512 3x3 -> 512 345 -> 314 us, 7x7x2048 -> 512 161 -> 118 us; 8
// filters at batch 8 (compute bound) within 0-3%, either way. ResNet50
// batch 1 through the sequence op (step profiler, alternated): the steps
// 6-7% faster on one thread, 4-9% on two; batch 8 2%; MobileNetV2 0-5%.
inline void SetTilePrefetch(const int8_t* next, TileLineShare* share, int64_t mt,
                            TileContext* tc) {
  tc->pf = nullptr;
  tc->pf_lines = 0;
  if (next == nullptr) return;
  int64_t first;
  const int64_t lines = share->Take(mt, &first);
  tc->pf = next + 64 * first;
  tc->pf_lines = Min(lines, tc->groups);
  PrefetchL2(tc->pf + 64 * tc->pf_lines, lines - tc->pf_lines);
}

// The side input kSideAheadRows rows past panel rows [r, r + h) of block
// b (n0, width), into the next block's rows past the panel's end.
__attribute__((always_inline)) inline void PrefetchSideAhead(const GemmTileArgs& t, const EpilogueArgs& ep, int64_t r,
                              int64_t h, int64_t b, int64_t nblocks, int64_t n0,
                              int64_t width) {
  const int64_t co = t.out_c;
  const int64_t s0 = r + kSideAheadRows, s1 = s0 + h;
  if (s0 < t.rows) {
    PrefetchSideRows(ep.side, t.p0, s0, Min(s1, t.rows), co, n0, width);
  }
  if (s1 > t.rows && b + 1 < nblocks) {
    PrefetchSideRows(ep.side, t.p0, Max(s0, t.rows) - t.rows, s1 - t.rows, co,
                     n0 + kBlock, Min(kBlock, co - n0 - kBlock));
  }
}

// What DirectTiles' tiles share: the (panel, block) and its prefetches.
struct DirectPass {
  const GemmTileArgs* t;
  const EpilogueArgs* ep;
  TileLineShare* share;
  const int8_t* next;   // the next (panel, block), or nullptr
  bool side_ahead;      // PrefetchSideAhead
  bool out_ahead;       // PrefetchOutputRows
  int64_t b, nblocks, n0, width, in_c, co;
  const uint8_t* a;     // row 0's A bytes at the panel
  int8_t* out;          // row 0's output at the block
  const int8_t* side;   // row 0's side input at the block, or nullptr
  int32_t* partial;     // row 0's partial sums at the block
};

// One tile of height h at panel row r (micro-tile mt): its prefetches and
// where it reads and writes.
__attribute__((always_inline)) inline void DirectTileSetup(const DirectPass& d, int64_t mt,
                                                           int64_t r, int64_t h,
                                                           TileContext* tc) {
  SetTilePrefetch(d.next, d.share, mt, tc);
  if (d.side_ahead) PrefetchSideAhead(*d.t, *d.ep, r, h, d.b, d.nblocks, d.n0, d.width);
  if (d.out_ahead) PrefetchOutputRows(*d.t, r + kOutputAheadRows, r + kOutputAheadRows + h);
  tc->a = d.a + r * d.in_c;
  tc->partial = d.partial + r * tc->partial_ld;
  tc->side = d.side ? d.side + r * d.co : nullptr;
  tc->out = d.out + r * d.co;
}

// `count` tiles of height MR from micro-tile mt0 at panel row r0, in one
// loop with the micro-tile inlined: no call, table lookup or TileContext
// reload per tile (MR x NZ is the block's full micro-tile or one row
// less, which is what DirectTiles' even heights give all but the
// smallest panels). At small K the per-tile call was much of the work
// (perf: 11% of 112x112x16 -> 96 in DirectTiles, outside the
// micro-tiles). One Zen 5 thread, bench_core, medians of 7 alternated,
// per-tile calls -> strips: 112x112x16 -> 96 86.6 -> 82.4 us, 56x56x24 ->
// 144 37.9 -> 35.0, 28x28x32 -> 192 13.9 -> 13.3, 14x14x64 -> 384 11.2 ->
// 10.9, 56x56x96 -> 24, 28x28x144 -> 32 and 7x7x160 -> 960 within 1%; two
// threads 112x112x16 -> 96 44.0 -> 41.8, 56x56x24 -> 144 21.2 -> 20.1.
// Not for NZ = 1 (8 rows): inside the loop GCC 12 kept its row offsets in
// xmm registers, and 112x112x32 -> 16 ran 27.6 -> 30.0 us.
template <int MR, int NZ, bool kFlip, bool kHalf = false>
__attribute__((noinline)) void DirectStrip(const DirectPass& d, TileContext tc, int64_t mt0,
                                           int64_t r0, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    DirectTileSetup(d, mt0 + i, r0 + i * MR, MR, &tc);
    MicroTileBody<MR, NZ, kFlip, kHalf>(tc);
  }
}

using DirectStripFn = void (*)(const DirectPass&, TileContext, int64_t, int64_t, int64_t);

// DirectStrip for tiles of height h of a block of nz zmm (the last a half
// where `half`), or nullptr (h neither kMrNarrow[nz] nor one less).
template <bool kFlip>
inline DirectStripFn DirectStripFor(int nz, bool half, int64_t h) {
  static constexpr DirectStripFn kFull[5] = {
      nullptr, nullptr, &DirectStrip<kMrNarrow[2], 2, kFlip>,
      &DirectStrip<kMrNarrow[3], 3, kFlip>, &DirectStrip<kMrNarrow[4], 4, kFlip>};
  static constexpr DirectStripFn kLess[5] = {
      nullptr, nullptr, &DirectStrip<kMrNarrow[2] - 1, 2, kFlip>,
      &DirectStrip<kMrNarrow[3] - 1, 3, kFlip>, &DirectStrip<kMrNarrow[4] - 1, 4, kFlip>};
  static constexpr DirectStripFn kFullHalf[4] = {
      nullptr, nullptr, &DirectStrip<kMrNarrow[2], 2, kFlip, true>,
      &DirectStrip<kMrNarrow[3], 3, kFlip, true>};
  static constexpr DirectStripFn kLessHalf[4] = {
      nullptr, nullptr, &DirectStrip<kMrNarrow[2] - 1, 2, kFlip, true>,
      &DirectStrip<kMrNarrow[3] - 1, 3, kFlip, true>};
  if (h == kMrNarrow[nz]) return half ? kFullHalf[nz] : kFull[nz];
  if (h == kMrNarrow[nz] - 1) return half ? kLessHalf[nz] : kLess[nz];
  return nullptr;
}

// The micro-tiles of one (panel, block) of a pointwise layer that reads its
// rows from the input in place (GemmTileZmm's `direct`) with nothing to
// verify (cached weights): GemmTileZmm's tile loop without its gather,
// window and verify branches, plus the output rows' prefetch
// (PrefetchOutputRows), in a function of its own
// (in the big loop most of its values lived on the stack; perf put 15% of
// 112x112x16 -> 96 in that loop, outside the micro-tiles). One Zen 5
// thread, bench_core, three rounds alternated, with the division-free
// prefetch split before -> after: 112x112x16 -> 96 93-99 -> 89-91 us,
// 112x112x32 -> 16 29-31 -> 27-30 us, 56x56x24 -> 144 and 28x28x32 -> 192
// 0-5%, 56x56x64 -> 256 0-7% (the division-free split alone: 112x112x16
// -> 96 96-101 -> 93-97 us). The tiles of each height run as one strip
// (DirectStrip) where the height is the block's micro-tile height or one
// less, one call each otherwise.
__attribute__((noinline)) void DirectTiles(const GemmTileArgs& t, const EpilogueArgs& ep,
                                           TileContext tc, int nz, int64_t g0, int64_t b,
                                           int64_t nblocks, int64_t n0, int64_t width,
                                           int64_t tiles, int64_t base, int64_t extra,
                                           const int8_t* next, int64_t next_lines) {
  const int64_t co = t.out_c, in_c = t.geo->in_c;
  TileLineShare share(next_lines, tiles);
  DirectPass d;
  d.t = &t;
  d.ep = &ep;
  d.share = &share;
  d.next = next;
  d.side_ahead = tc.last && ep.side != nullptr;
  // Whole output rows, once (the first block's pass, the last K panel).
  d.out_ahead = tc.last && b == 0 && HoldsWholeRows(t, kBlock);
  d.b = b;
  d.nblocks = nblocks;
  d.n0 = n0;
  d.width = width;
  d.in_c = in_c;
  d.co = co;
  d.a = reinterpret_cast<const uint8_t*>(t.input) + t.p0 * in_c + 4 * g0;
  d.out = t.output + t.p0 * co + n0;
  d.side = ep.side ? ep.side + t.p0 * co + n0 : nullptr;
  d.partial = t.partial + b * kBlock;
  tc.flip = !t.non_negative;  // int8 rows in place, unless already u8
  const bool half = HalfLastZmm(nz, width);
  // Tiles [0, extra) have base + 1 rows, the rest base.
  int64_t mt = 0, r = 0;
  for (const auto& [count, h] : {std::pair<int64_t, int64_t>{extra, base + 1},
                                 std::pair<int64_t, int64_t>{tiles - extra, base}}) {
    if (count <= 0 || h <= 0) continue;
    if (const DirectStripFn strip =
            tc.flip ? DirectStripFor<true>(nz, half, h) : DirectStripFor<false>(nz, half, h)) {
      strip(d, tc, mt, r, count);
      mt += count;
      r += count * h;
      continue;
    }
    for (int64_t i = 0; i < count; ++i, ++mt, r += h) {
      DirectTileSetup(d, mt, r, h, &tc);
      RunMicroTile(nz, half, h, tc);
    }
  }
}

// Loop order: K panels (kc groups) outer, channel blocks inner, micro-tiles
// innermost. Per panel the tile's A slice is gathered once (a few
// micro-tiles at a time during the first block, GatherRows) and reused by
// every block, except for micro-tiles that read their windows in place
// (WindowTile) or a pointwise layer's rows (direct). The weight panel
// (kc groups x 64 channels) stays in L1 while the micro-tiles stream past
// it with 96-group panels (24 KiB, on-the-fly packing), in L2 with cached
// weights' wide panels (kKcGroupsCached). Cached weights:
// when verifying, panel q's filter rows are compared with the packed panels
// of all the item's blocks (contiguous filter rows) in slices spread over
// the first block's micro-tiles, each slice's rows prefetched one micro-tile
// ahead; the next (panel, block) is prefetched into L2 inside the micro-tiles
// (SetTilePrefetch). On-the-fly
// weights: each (panel, block) is packed into panel_buffer just before use.
bool GemmTileZmm(const GemmTileArgs& t) {
  const EpilogueArgs& ep = *t.ep;
  const int64_t co = t.out_c;
  const int64_t groups = t.k_groups;
  const int64_t kc = t.kc_groups;
  const bool cached = t.w != nullptr;
  const bool verify = cached && t.verify;
  const int64_t nblocks = t.block_end - t.block_begin;
  const int64_t c_begin = t.block_begin * kBlock;
  const int64_t c_end = Min(co, t.block_end * kBlock);
  const int64_t partial_ld = nblocks * kBlock;
  const bool single_block = nblocks == 1;
  // clamp_hi is set per block below (UpperClampNeeded).
  Epilogue512Consts ec = MakeEpilogue512Consts(ep.side_scale, ep.lo, ep.hi);
  bool stale = false;
  BlockConsts bc;
  alignas(64) int32_t offset[kBlock];  // -128 * sum(w), on the fly
  alignas(64) static const int32_t kZeros[kBlock] = {0};
  if (!cached) {
    for (int64_t i = 0; i < nblocks * kBlock; ++i) t.col_sums[i] = 0;
  }
  // A pointwise layer whose rows hold whole groups (Ci % 4 == 0: no group
  // straddles two pixels, and the last group ends at the input's end) reads
  // its A rows from the input itself; the others gather them into t.a.
  // Neither where the CPU runs gathered rows faster (ReadInPlace).
  const bool pointwise = IsDirectGemm(*t.geo);
  const bool in_place =
      ReadInPlace(pointwise, t.k, t.non_negative && t.geo->filter_w > 1,
                  t.non_negative && nblocks <= kMaxXorFreeInPlaceBlocks);
  const bool direct = in_place && pointwise && t.geo->in_c % 4 == 0;
  // Windowed direct rows: a micro-tile whose pixels lie in one output row
  // with every window inside the image reads its A rows in place, one
  // window row (kw * Ci contiguous bytes) per segment, lda = stride * Ci
  // apart, instead of gathering them (WindowTile). The others gather.
  const ConvGeometry& geo = *t.geo;
  const int64_t run = geo.filter_w * geo.in_c;  // bytes of one window row
  const bool windowed = in_place && !direct && geo.dilation_w == 1 && run % 4 == 0 &&
                        geo.out_w >= kMinWindowedWidth &&
                        t.rows <= kMaxWindowedRows;
  // Windowed: which rows of the panel are gathered in the A buffer (the
  // blocks' micro-tiles differ when the last block is narrow, so a tile
  // that cannot read in place may cover rows block 0 read in place).
  uint8_t ready[kMaxWindowedRows];
  TileContext tc{};
  tc.lda = direct ? t.geo->in_c : t.lda;
  tc.seg_jump = 0;
  tc.seg_groups = 0;
  tc.bc = &bc;
  tc.ec = &ec;
  tc.ldo = co;
  tc.partial_ld = partial_ld;
  for (int64_t g0 = 0; g0 < groups; g0 += kc) {
    const int64_t g1 = Min(groups, g0 + kc);
    const bool first = g0 == 0;
    tc.groups = g1 - g0;
    tc.seg_left = tc.groups;
    if (windowed) std::fill(ready, ready + t.rows, uint8_t{0});
    tc.last = g1 == groups;
    const bool verify_panel =
        verify && (g0 / kc) % t.verify_stride == t.verify_phase;
    // Filter rows of this panel, verified over the first block's tiles.
    const int64_t k_begin = 4 * g0, k_end = Min(4 * g1, t.k);
    const int64_t vrows = k_end - k_begin;
    const int64_t row_lines = (c_end - c_begin + 63) / 64 + 1;
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t nb = t.block_begin + b;
      const int64_t n0 = nb * kBlock;
      const int64_t width = Min(kBlock, co - n0);
      const int nz = BlockZmms(width);
      const bool half = HalfLastZmm(nz, width);
      // Micro-tiles of even heights <= the block's micro-tile rows.
      const int64_t mr = kMrNarrow[nz];
      const int64_t tiles = (t.rows + mr - 1) / mr;
      const int64_t base = t.rows / tiles, extra = t.rows % tiles;
      const int64_t vslice = ((vrows + tiles - 1) / tiles + 3) / 4 * 4;
      // Read only by the last panel's epilogue.
      if (tc.last) {
        FillBlockConsts(ep, n0, co, nz == 4, &bc);
        ec.clamp_hi = BlockUpperClampNeeded(ep, groups * 4, AbsMax64IgnoringNaN(bc.scale),
                                            AbsMax64IgnoringNaN(bc.bias));
      }
      tc.mask = ByteMask(width);
      const int8_t* next = nullptr;
      int64_t next_lines = 0;
      const int8_t* next_filter = nullptr;
      int64_t next_filter_rows = 0;
      if (cached) {
        const int8_t* data = t.w->data;
        tc.panel = data + (nb * groups + g0) * kGroupBytes;
        tc.init = t.non_negative ? kZeros : t.w->col_offset + n0;
        tc.from_partial = !first;
        tc.add = nullptr;
        // The next (panel, block) in loop order, prefetched over the tiles.
        if (b + 1 < nblocks) {
          next = data + ((nb + 1) * groups + g0) * kGroupBytes;
          next_lines = (g1 - g0) * (kGroupBytes / 64);
        } else if (g1 < groups) {
          next = data + (t.block_begin * groups + g1) * kGroupBytes;
          next_lines = (Min(groups, g1 + kc) - g1) * (kGroupBytes / 64);
        }
      } else {
        // On the fly: all the item's blocks of this panel are packed at its
        // first block (one row-major pass over the filter rows).
        if (b == 0) {
          PackPanelsZmm(t.filter, t.k, co, t.block_begin, t.block_end, g0, g1,
                        t.panel_buffer, kc * kGroupBytes);
        }
        const int8_t* panel = t.panel_buffer + b * kc * kGroupBytes;
        int32_t* sums = t.col_sums + b * kBlock;
        if (!t.non_negative) AddPanelSums(panel, g1 - g0, nz, sums);
        if (tc.last) {
          for (int64_t p = 0; p < kBlock; ++p) {
            offset[p] = static_cast<int32_t>(
                0u - (static_cast<uint32_t>(sums[p]) << 7));  // 0 if non_negative
          }
        }
        tc.panel = panel;
        tc.init = first && tc.last ? offset : kZeros;
        tc.from_partial = !first;
        tc.add = !first && tc.last ? offset : nullptr;
        // The next panel's filter rows (the item's channels) are prefetched
        // over the last block's micro-tiles.
        if (b + 1 == nblocks && g1 < groups) {
          next_filter = t.filter + 4 * g1 * co + c_begin;
          next_filter_rows = Min(4 * Min(groups, g1 + kc), t.k) - 4 * g1;
        }
      }
      const bool verifying = verify_panel && b == 0;
      if (direct && !verifying && next_filter == nullptr) {
        DirectTiles(t, ep, tc, nz, g0, b, nblocks, n0, width, tiles, base, extra, next,
                    next_lines);
        continue;
      }
      int64_t r = 0;
      TileLineShare share(next_lines, tiles);
      // Gathered rows: x ^ 0x80, or an input in [0, 127] as it is.
      PanelRows<ZmmU8Copy> rows_u8(t, b == 0, single_block, 4 * g0, 4 * g1);
      PanelRows<ZmmS8Copy> rows_as_is(t, b == 0, single_block, 4 * g0, 4 * g1);
      for (int64_t mt = 0; mt < tiles; ++mt) {
        SetTilePrefetch(next, &share, mt, &tc);
        if (next_filter != nullptr) {
          for (int64_t k = next_filter_rows * mt / tiles;
               k < next_filter_rows * (mt + 1) / tiles; ++k) {
            PrefetchL2(next_filter + k * co, row_lines);
          }
        }
        const int64_t v0 = k_begin + Min(vrows, mt * vslice);
        const int64_t v1 = k_begin + Min(vrows, (mt + 1) * vslice);
        if (verifying) {
          for (int64_t k = v0; k < v1; ++k) {
            PrefetchL2(t.filter + k * co + c_begin, row_lines);
          }
        }
        const int64_t h = base + (mt < extra ? 1 : 0);
        const int64_t pixel = t.p0 + r;
        tc.flip = !t.non_negative;  // read in place, unless gathered below
        if (direct) {
          tc.a = reinterpret_cast<const uint8_t*>(t.input) +
                 pixel * t.geo->in_c + 4 * g0;
        } else if (windowed && WindowTile(geo, t.input, pixel, h, 4 * g0, &tc)) {
          // tc.a, lda and the segments set for this tile.
        } else {
          tc.flip = false;
          tc.lda = t.lda;
          tc.seg_left = tc.groups;
          tc.seg_jump = 0;
          if (windowed) {
            // Only the tiles that cannot read in place gather, one at a
            // time, each row once per panel.
            if (!std::all_of(ready + r, ready + r + h, [](uint8_t x) { return x != 0; })) {
              if (t.non_negative) {
                Im2ColSlice<ZmmS8Copy>(t, t.a + r * t.lda, r, h, 4 * g0, 4 * g1);
              } else {
                Im2ColSlice<ZmmU8Copy>(t, t.a + r * t.lda, r, h, 4 * g0, 4 * g1);
              }
              std::fill(ready + r, ready + r + h, uint8_t{1});
              // Im2ColSlice's last vector may run into the next row (up to
              // one vector past the slice, gemm_isa_common.h): a row
              // gathered before, for another block's micro-tiles (a narrow
              // last block's are taller), is no longer whole.
              if (r + h < t.rows) ready[r + h] = 0;
            }
            tc.a = t.a + r * t.lda;
          } else {
            tc.a = t.non_negative ? rows_as_is.Rows(mt, tiles, base, extra, r)
                                  : rows_u8.Rows(mt, tiles, base, extra, r);
          }
        }
        if (tc.last && ep.side != nullptr) {
          PrefetchSideAhead(t, ep, r, h, b, nblocks, n0, width);
        }
        tc.partial = t.partial + r * partial_ld + b * kBlock;
        tc.side = ep.side ? ep.side + pixel * co + n0 : nullptr;
        tc.out = t.output + pixel * co + n0;
        RunMicroTile(nz, half, h, tc);
        r += h;
        if (verifying && v1 > v0) {
          stale |= VerifyPanelRows<PanelZmm>(t, v0, v1, 4, kGroupBytes);
        }
      }
    }
  }
  return stale;
}

// ------------------------------------------------------------------- GEMV
//
// Few output pixels (gemm_kernels.h, GemvArgs): the [K, Co] filter is read
// in place, one row of 64 channels per zmm, with no packing. VPDPBUSD's u8
// operand is the weight row ^ 0x80 (w + 128) and its s8 operand is the
// activation x_k in byte i of every dword (zero elsewhere), so lane d of
// accumulator i gains x_k * (w[k][4d + i] + 128): four VPDPBUSDs per row
// cover all 64 channels, with no interleaving of filter rows. Summed over k:
//   acc_i[d] = sum_k x_k w[k][4d + i] + 128 * sum_k x_k,
// so every lane starts at -128 * sum_k x_k (one value per pixel); int32
// wraparound keeps this exact as in the GEMM (the true sum fits int32).
// Channel 4d + i = 16L + 4j + i for dword d = 4L + j: a 4x4 dword transpose
// per 128-bit lane turns acc_0..3 into Epilogue64's interleaved order.

constexpr int64_t kGemvPrefetchRows = 16;

// sum_k x_k of one row of k int8 activations.
inline int32_t RowSum(const int8_t* x, int64_t k) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i s = _mm512_setzero_si512();
  for (int64_t i = 0; i < k; i += 64) {
    const __mmask64 m = ByteMask(k - i);
    const __m512i u = _mm512_maskz_mov_epi8(
        m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, x + i), flip));
    s = _mm512_add_epi64(s, _mm512_sad_epu8(u, _mm512_setzero_si512()));
  }
  // sum (x + 128) - 128 k
  return static_cast<int32_t>(_mm512_reduce_add_epi64(s) - 128 * k);
}

// R rows x NB blocks starting at block nb0 (all inside the call's blocks);
// init[r]: row r's starting accumulator, -128 * sum_k x_k.
template <int R, int NB>
void GemvPass(const GemvArgs& t, int64_t nb0, int64_t nb_count,
              const Epilogue512Consts& ec, const int32_t* init) {
  const int64_t co = t.out_c;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i byte_mask[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) byte_mask[i] = _mm512_set1_epi32(0xff << (8 * i));
  __mmask64 mask[NB];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) {
    const int64_t width = b < nb_count ? Min(kBlock, co - (nb0 + b) * kBlock) : 0;
    mask[b] = ByteMask(width);
  }
  __m512i acc[R][NB][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m512i start = _mm512_set1_epi32(init[r]);
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) acc[r][b][i] = start;
    }
  }
  const int8_t* w = t.filter + nb0 * kBlock;
  // The pass reads a column strip of the filter (NB * 64 bytes of every
  // row, co bytes apart), which the hardware prefetchers do not follow:
  // each row's lines are prefetched kGemvPrefetchRows rows ahead.
  const int64_t strip_lines = (Min(co - nb0 * kBlock, NB * kBlock) + 63) / 64 + 1;
  for (int64_t k = 0; k < t.k; ++k, w += co) {
    if (k + kGemvPrefetchRows < t.k) {
      const int8_t* pf = w + kGemvPrefetchRows * co;
      for (int64_t l = 0; l < strip_lines; ++l) {  // NB + 1 lines at most
        _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * l), _MM_HINT_T0);
      }
    }
    __m512i wv[NB];
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      wv[b] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask[b], w + b * kBlock), flip);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512i x = _mm512_set1_epi8(t.a[r * t.lda + k]);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m512i xi = _mm512_and_si512(x, byte_mask[i]);
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) {
          acc[r][b][i] = _mm512_dpbusd_epi32(acc[r][b][i], wv[b], xi);
        }
      }
    }
  }
  const EpilogueArgs& ep = *t.ep;
  // Compile-time indices only, so that the accumulators stay in registers.
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) {
    if (b >= nb_count) break;
    const int64_t n0 = (nb0 + b) * kBlock;
    BlockConsts bc;
    FillBlockConsts(ep, n0, co, /*interleaved=*/true, &bc);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512i* a = acc[r][b];
      const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]);
      const __m512i t1 = _mm512_unpackhi_epi32(a[0], a[1]);
      const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]);
      const __m512i t3 = _mm512_unpackhi_epi32(a[2], a[3]);
      Epilogue64(_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                 _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3),
                 bc.scale, bc.bias, ep.side ? ep.side + r * co + n0 : nullptr,
                 ec, mask[b], t.output + r * co + n0);
    }
  }
}

// Passes of NB blocks for R rows: 16 accumulators at most (R * NB * 4).
template <int R, int NB>
void GemvRows(const GemvArgs& t, const Epilogue512Consts& ec,
              const int32_t* init) {
  for (int64_t nb = t.block_begin; nb < t.block_end; nb += NB) {
    GemvPass<R, NB>(t, nb, Min(NB, t.block_end - nb), ec, init);
  }
}

void GemvZmmImpl(const GemvArgs& t) {
  const EpilogueArgs& ep = *t.ep;
  const Epilogue512Consts ec = MakeEpilogue512Consts(ep.side_scale, ep.lo, ep.hi);
  static_assert(kGemvMaxRows == 2, "GemvZmmImpl instantiates 1 and 2 rows");
  // Once per call, not per pass.
  int32_t init[kGemvMaxRows];
  for (int64_t r = 0; r < t.rows; ++r) {
    const int32_t sum = RowSum(t.a + r * t.lda, t.k);
    init[r] = static_cast<int32_t>(0u - (static_cast<uint32_t>(sum) << 7));
  }
  if (t.rows == 1) {
    GemvRows<1, 4>(t, ec, init);
  } else {
    GemvRows<2, 2>(t, ec, init);
  }
}

}  // namespace

extern const IsaKernels kAvx512VnniKernels = {
    "avx512vnni",
    kFormatZmmU8,
    /*block=*/kBlock,
    /*k_per_group=*/4,
    /*kc_groups=*/kKcGroups,
    /*mr=*/kMr,
    /*u8_activations=*/true,
    PanelZmm,
    GemmTileZmm,
    /*lane_bytes=*/4,
    GemvAvx512Vnni,
    /*kc_groups_cached=*/kKcGroupsCached,
    /*group_multiple=*/1,
    /*padded_input=*/false,
    /*split_blocks=*/1,
    /*rows_first=*/false,
    /*panel_major_bytes=*/0,
    /*rows_first_small_filter=*/true,
    /*tile_row_granule=*/0,
    /*gemv_unpinned_only=*/true,
};

void GemvAvx512Vnni(const GemvArgs& t) { GemvZmmImpl(t); }

}  // namespace cpu
}  // namespace tf_fused_int8
