// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AMX-INT8 GEMM kernels (Intel Xeon 4th generation and later). TDPBSSD
// multiplies a 16 x 64-byte int8 A tile (16 output pixels, 64 bytes of K) by
// a 16 x 64-byte int8 B tile (16 k-groups of 4 bytes for 16 channels:
// kFormatAmxS8, gemm_kernels.h) into a 16 x 16 int32 C tile:
//   C[m][n] += sum_{g < 16, i < 4} A[m][4g + i] * B[g][4n + i],
// signed x signed, so there is no +128 shift and no column offset. The
// int32 sums wrap like every other path's, and the true sum fits int32
// (ComputeGeometry checks), so C is the exact accumulator.
//
// Micro-tile: up to 32 pixels x 32 channels, the eight tile registers as
// four C tiles (tmm0: rows 0-15 x block 0, tmm1: rows 0-15 x block 1, tmm2,
// tmm3: rows 16-31), two A tiles (tmm4, tmm5) and two B tiles (tmm6, tmm7);
// per 64 bytes of K, four TDPBSSD for four tile loads. A micro-tile with at
// most 16 rows, or an item's odd last block, runs the 1 x 2, 2 x 1 or 1 x 1
// subset. Rows past the tile's pixels (the A buffer holds whole micro-tiles)
// and channels past Co (zero weights) are computed and never stored.
//
// K: the packed blocks hold k_groups groups, a multiple of 16 (zero groups
// past K); A rows are read in place (a padded input's windows, see
// GemmTileArgs::padded, or pointwise layers' pixels where the reads stay
// inside the input) or gathered (Im2ColSlice, ZmmS8Copy), and their bytes
// past K meet those zero weights, so their values do not matter.
//
// Epilogue: a micro-tile's C tiles are stored to a scratch and put through
// epilogue_avx512.h (Epilogue16x4Natural: four rows of 16 natural-order
// channels at a time), bit for bit the contract as on avx512vnni, in two
// halves between the next micro-tile's K steps (Pending), without the upper
// clamp for blocks where UpperClampNeeded (epilogue.h) allows. Between K
// panels the C tiles go to and come back from GemmTileArgs::partial. The
// epilogue is most of a small-K layer's time: 56x56x64 -> 256 at batch 1
// (bench_core, one thread) ran 57 us with only the tile work and 89 us with
// only the epilogue, 140 us with both; they barely overlap.
//
// Tile state: every gemm_tile call loads the tile configuration at its start
// (LDTILECFG: eight tiles of 16 rows x 64 bytes) and releases the tiles
// (TILERELEASE) at its end. Nothing depends on what ran on the thread
// before (TF's own oneDNN kernels may configure tiles their way on the same
// pool threads), and the thread carries no tile state between calls.
//
// Built with the avx512vnni flags plus -mamx-tile -mamx-int8;
// everything but the IsaKernels table has internal linkage.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#include "cc/core/cpu/amx_tiles.h"
#include "cc/core/cpu/gemm/gemm_isa_common.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/epilogue.h"
#include "cc/core/epilogue_avx512.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tf_fused_int8 {
namespace cpu {
namespace {

constexpr int64_t kBlock = 16;                       // channels per block (one C tile wide)
constexpr int64_t kGroupBytes = kBlock * 4;          // one k-group of a block: a B tile row
constexpr int64_t kTileGroups = 16;                  // k-groups per B tile
constexpr int64_t kTileBytes = kTileGroups * kGroupBytes;  // 1 KiB
constexpr int64_t kTileK = 64;                       // bytes of K per A tile row
constexpr int kMr = 32;                              // micro-tile rows (two A tiles)
// K panel when packing on the fly: 128 groups, 8 KiB of weights a block.
constexpr int64_t kKcGroups = 128;
// K panel of cached weights: in practice all of K (no partial sums).
constexpr int64_t kKcGroupsCached = 4096;
// Cached weights: the first micro-tile to read each (panel, block pair)
// prefetches into L2 the weight tiles of the pair kPrefetchAhead pairs later
// (see set_prefetch in GemmTileAmx). At batch 1 the weights of the 14x14 and
// 7x7 layers come from memory once per call (ResNet50's 25 MB do not stay in L3
// from one call to the next), 16 streams of 8 KiB per panel that the hardware
// prefetchers start late on: ResNet50's chain at batch 1 on one thread
// (bench_sequence, the step profiler's steps, Intel Xeon with AMX, 2 MB L2) ran
// its 7x7 3x3 -> 512 layers 245-253 -> 181-185 us (about 9.4 -> 12.8 GB/s of
// weights; a plain read loop streams 13 GB/s from memory here), 1x1 -> 2048
// 1.22-1.32x, the 14x14 stage's 1x1 layers 1.13-1.21x, the whole chain
// 0.88-0.91x the time (in TF, the step profiler through the InferenceRunner,
// builds alternated seven times: steps 0.95x, 6 of 7 pairs faster); 1, 2 and 4
// pairs ahead measured alike. Only the first reader prefetches: every micro-
// tile doing so (the later ones find the weights in L2) made MobileNetV2
// 1.03-1.05x slower and ResNet50 on two threads 1.04-1.07x. Two threads at
// batch 1, MobileNetV2, and batch 8 measured unchanged (within 2-3%).
constexpr int64_t kPrefetchAhead = 2;

// ---------------------------------------------------------------- packing

// Group g of a block (16 channels from n0; `mask`: the channels < Co):
// filter rows 4g .. 4g + 3 (zero past k), channel c's four bytes at 4c.
inline __m512i PackedGroup(const int8_t* filter, int64_t k, int64_t co,
                           int64_t n0, __mmask16 mask, int64_t g) {
  __m128i r[4];
  for (int i = 0; i < 4; ++i) {
    const int64_t kk = 4 * g + i;
    r[i] = kk < k ? _mm_maskz_loadu_epi8(mask, filter + kk * co + n0)
                  : _mm_setzero_si128();
  }
  const __m128i t0 = _mm_unpacklo_epi8(r[0], r[1]);  // channels 0-7, rows 0, 1
  const __m128i t1 = _mm_unpackhi_epi8(r[0], r[1]);  // channels 8-15
  const __m128i t2 = _mm_unpacklo_epi8(r[2], r[3]);
  const __m128i t3 = _mm_unpackhi_epi8(r[2], r[3]);
  __m512i v = _mm512_castsi128_si512(_mm_unpacklo_epi16(t0, t2));  // 0-3
  v = _mm512_inserti32x4(v, _mm_unpackhi_epi16(t0, t2), 1);        // 4-7
  v = _mm512_inserti32x4(v, _mm_unpacklo_epi16(t1, t3), 2);        // 8-11
  return _mm512_inserti32x4(v, _mm_unpackhi_epi16(t1, t3), 3);     // 12-15
}

inline __mmask16 ChannelMask(int64_t n0, int64_t co) {
  const int64_t width = Min(kBlock, co - n0);
  return width >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << width) - 1);
}

bool PanelAmx(const PanelArgs& p) {
  const int64_t n0 = p.block_index * kBlock;
  const __mmask16 mask = ChannelMask(n0, p.out_c);
  int8_t* dst = p.panel;
  __m512i diff = _mm512_setzero_si512();
  for (int64_t g = p.g0; g < p.g1; ++g, dst += kGroupBytes) {
    const __m512i v = PackedGroup(p.filter, p.k, p.out_c, n0, mask, g);
    if (p.verify) {
      diff = _mm512_or_si512(diff, _mm512_xor_si512(v, _mm512_loadu_si512(dst)));
    } else {
      _mm512_storeu_si512(dst, v);
    }
  }
  return _mm512_test_epi64_mask(diff, diff) != 0;
}

// Packs groups [g0, g1) of blocks [nb0, nb1) row-major over the filter
// (each group's four filter rows once for all the blocks): block nb0 + j's
// panel goes to dst + j * panel_bytes.
void PackPanelsAmx(const int8_t* filter, int64_t k, int64_t co, int64_t nb0,
                   int64_t nb1, int64_t g0, int64_t g1, int8_t* dst,
                   int64_t panel_bytes) {
  for (int64_t g = g0; g < g1; ++g) {
    int8_t* out = dst + (g - g0) * kGroupBytes;
    for (int64_t nb = nb0; nb < nb1; ++nb, out += panel_bytes) {
      const int64_t n0 = nb * kBlock;
      _mm512_storeu_si512(out, PackedGroup(filter, k, co, n0, ChannelMask(n0, co), g));
    }
  }
}

// ------------------------------------------------------------------- GEMM

// A block's scales and biases: gemm_isa_common.h's Block16Consts.
static_assert(kBlock == 16, "Block16Consts holds 16 channels");

// One micro-tile's operands.
struct TileContext {
  const uint8_t* a[2];  // rows 0 and 16 of the A tiles at this panel's first byte
  int64_t lda;          // bytes between A rows
  const int64_t* koff;  // byte offset of K step s from a[0] / a[1]
  const int8_t* b[2];   // the two blocks' weights at this panel's first group
  int64_t steps;        // K steps (B tiles of 16 groups) in the panel
  int32_t* partial;     // row 0, block 0 of the partial sums
  int64_t partial_ld;   // int32 between partial rows
  bool from_partial;    // start from the partial sums (else zero)
  bool last;            // the last panel: epilogue (else store the partial sums)
  int64_t first;        // the first row's pixel (or virtual pixel: padded input)
  int64_t rows;         // rows of the micro-tile (1 .. 32)
  int64_t b0;           // the first block's index within the item
  // Cached weights: the two blocks' tiles of a later micro-tile
  // (kPrefetchAhead), prefetched into L2 one K step's tiles per K step,
  // for the first pf_steps steps (0: none).
  const int8_t* pf[2];
  int64_t pf_steps;
};

// A finished micro-tile whose C tiles wait in `c` for their epilogue, which
// runs between the next micro-tile's K steps (MicroTile; in program order
// they are independent), so that the vector epilogue can overlap the TMUL.
struct Pending {
  alignas(64) int32_t c[4][16 * 16];  // tile (m, n) at c[2 * m + n], rows 16 apart
  int mt = 0, nt = 0;                 // 0: nothing pending
  int64_t first = 0, rows = 0, b0 = 0;
};

// What the epilogue needs besides a pending micro-tile.
struct EpilogueContext {
  const Block16Consts* consts;  // the item's blocks
  const uint8_t* clamp_hi;      // per item block: Epilogue512Consts::clamp_hi
  int64_t block_begin;        // the item's first block
  const int8_t* side;         // EpilogueArgs::side (null: none)
  int8_t* output;
  int64_t co;
  const Epilogue512Consts* ec;
  // Padded input (GemmTileArgs::padded): virtual pixels to outputs.
  bool padded;
  int64_t image_rows, padded_w, out_h, out_w;
};

// The epilogue of `count` rows of the C tile from row `row` (rows 16
// int32 apart), which are the consecutive output pixels from `pixel`, for
// item block ib.
inline void EpilogueRun(const int32_t* c, int64_t row, int64_t count,
                        int64_t pixel, int64_t ib, const EpilogueContext& e) {
  // Local copies: the int8 output stores may alias any memory, so loads
  // through e would be repeated after every store.
  const Block16Consts bc = e.consts[ib];
  const Epilogue512Consts ec = *e.ec;
  const int64_t n0 = (e.block_begin + ib) * kBlock;
  const __mmask16 mask = ChannelMask(n0, e.co);
  const int64_t ldo = e.co;
  int8_t* out = e.output + pixel * ldo + n0;
  const int8_t* side = e.side != nullptr ? e.side + pixel * ldo + n0 : nullptr;
  c += 16 * row;
  WithClampHi(e.clamp_hi[ib] != 0, [&](auto clamp_hi) {
    constexpr bool kClampHi = decltype(clamp_hi)::value;
    int64_t r = 0;
    for (; r + 4 <= count; r += 4) {
      Epilogue16x4Natural<kClampHi>(
          _mm512_load_si512(c + 16 * r), _mm512_load_si512(c + 16 * (r + 1)),
          _mm512_load_si512(c + 16 * (r + 2)), _mm512_load_si512(c + 16 * (r + 3)),
          bc.scale, bc.bias, side != nullptr ? side + r * ldo : nullptr, ldo, ec, mask,
          out + r * ldo);
    }
    for (; r < count; ++r) {
      Epilogue16Natural<kClampHi>(_mm512_load_si512(c + 16 * r), bc.scale, bc.bias,
                                  side != nullptr ? side + r * ldo : nullptr, ec, mask,
                                  out + r * ldo);
    }
  });
}

// The epilogue of one C tile: rows [0, rows) from (virtual) pixel `first`.
inline void TileEpilogue(const int32_t* c, int64_t first, int64_t rows,
                         int64_t ib, const EpilogueContext& e) {
  if (!e.padded) {
    EpilogueRun(c, 0, rows, first, ib, e);
    return;
  }
  // Virtual pixels: runs of consecutive outputs within one output row.
  int64_t i = 0;
  while (i < rows) {
    const int64_t v = first + i;
    const int64_t n = v / e.image_rows, j = v % e.image_rows;
    const int64_t y = j / e.padded_w, x = j % e.padded_w;
    if (y >= e.out_h) break;  // the image's rows past its outputs
    const int64_t in_row = Min(rows - i, e.padded_w - x);  // rows left in this output row
    if (x < e.out_w) {
      EpilogueRun(c, i, Min(in_row, e.out_w - x), (n * e.out_h + y) * e.out_w + x, ib, e);
    }
    i += in_row;
  }
}

// Runs the epilogue of p's tiles [t0, t1) (in the order (0, 0), (0, 1),
// (1, 0), (1, 1) of those it has).
inline void RunPendingTiles(const Pending& p, int t0, int t1, const EpilogueContext& e) {
  int i = 0;
  for (int m = 0; m < p.mt; ++m) {
    const int64_t rows = Min(16, p.rows - 16 * m);
    for (int n = 0; n < p.nt; ++n, ++i) {
      if (i >= t0 && i < t1) TileEpilogue(p.c[2 * m + n], p.first + 16 * m, rows, p.b0 + n, e);
    }
  }
}

// Runs p's epilogue (if any) and marks it done.
inline void FinishPending(Pending* p, const EpilogueContext& e) {
  if (p->mt == 0) return;
  RunPendingTiles(*p, 0, 4, e);
  p->mt = 0;
}

// MT A tiles (16 rows each) x NT blocks: accumulates the panel into C
// tiles while it finishes `prev` (the previous micro-tile's epilogue, in
// two halves between the K steps), then stores the C tiles: to the partial sums, or, in
// the last panel, to `next` for its epilogue later. Tile numbers are
// literals in the intrinsics (GCC pastes them into the instruction), hence
// the spelled-out cases.
template <int MT, int NT>
void MicroTile(const TileContext& t, Pending* prev, Pending* next,
               const EpilogueContext& e) {
  const int64_t pld = t.partial_ld * 4;  // bytes
  int32_t* p0 = t.partial;
  int32_t* p1 = t.partial + 16 * t.partial_ld;
  if (t.from_partial) {
    CompilerBarrier();
    _tile_loadd(0, p0, pld);
    if constexpr (NT == 2) _tile_loadd(1, p0 + kBlock, pld);
    if constexpr (MT == 2) {
      _tile_loadd(2, p1, pld);
      if constexpr (NT == 2) _tile_loadd(3, p1 + kBlock, pld);
    }
  } else {
    _tile_zero(0);
    if constexpr (NT == 2) _tile_zero(1);
    if constexpr (MT == 2) {
      _tile_zero(2);
      if constexpr (NT == 2) _tile_zero(3);
    }
  }
  const uint8_t* a0 = t.a[0];
  const uint8_t* a1 = t.a[1];
  const int8_t* b0 = t.b[0];
  const int8_t* b1 = t.b[1];
  const int64_t* koff = t.koff;
  const int8_t* pf0 = t.pf[0];
  const int8_t* pf1 = t.pf[1];
  const int64_t pf_steps = t.pf_steps;
  auto step = [&](int64_t s) {
    if (s < pf_steps) {
      for (int i = 0; i < kTileGroups; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(pf0 + s * kTileBytes + kGroupBytes * i),
                     _MM_HINT_T1);
      }
      for (int i = 0; i < kTileGroups; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(pf1 + s * kTileBytes + kGroupBytes * i),
                     _MM_HINT_T1);
      }
    }
    _tile_loadd(6, b0 + s * kTileBytes, kGroupBytes);
    if constexpr (NT == 2) _tile_loadd(7, b1 + s * kTileBytes, kGroupBytes);
    _tile_loadd(4, a0 + koff[s], t.lda);
    _tile_dpbssd(0, 4, 6);
    if constexpr (NT == 2) _tile_dpbssd(1, 4, 7);
    if constexpr (MT == 2) {
      _tile_loadd(5, a1 + koff[s], t.lda);
      _tile_dpbssd(2, 5, 6);
      if constexpr (NT == 2) _tile_dpbssd(3, 5, 7);
    }
  };
  // The previous micro-tile's epilogue in two halves, after the first
  // half of the K steps and after the rest: more of it then overlaps the
  // TMUL (the reorder buffer holds a part of a whole one behind the
  // TDPBSSDs). One Sapphire Rapids-class thread, bench_core best of 5,
  // against the whole epilogue after the K loop: ResNet-50's 14x14x256 3x3
  // -> 256 85 -> 75 us at batch 1, 655 -> 599 at batch 8; 28x28x128 3x3
  // 90 -> 86; 56x56x64 3x3, 7x7x512 3x3 and 1x1 layers unchanged (+-2%).
  // Per-step slices of it (a list of 4-row segments) were slower.
  const int64_t half = (t.steps + 1) / 2;
  for (int64_t s = 0; s < half; ++s) step(s);
  if (prev->mt != 0) RunPendingTiles(*prev, 0, prev->mt * prev->nt / 2, e);
  for (int64_t s = half; s < t.steps; ++s) step(s);
  if (prev->mt != 0) {
    RunPendingTiles(*prev, prev->mt * prev->nt / 2, 4, e);
    prev->mt = 0;
  }
  if (!t.last) {
    _tile_stored(0, p0, pld);
    if constexpr (NT == 2) _tile_stored(1, p0 + kBlock, pld);
    if constexpr (MT == 2) {
      _tile_stored(2, p1, pld);
      if constexpr (NT == 2) _tile_stored(3, p1 + kBlock, pld);
    }
    return;
  }
  _tile_stored(0, next->c[0], 64);
  if constexpr (NT == 2) _tile_stored(1, next->c[1], 64);
  if constexpr (MT == 2) {
    _tile_stored(2, next->c[2], 64);
    if constexpr (NT == 2) _tile_stored(3, next->c[3], 64);
  }
  next->mt = MT;
  next->nt = NT;
  next->first = t.first;
  next->rows = t.rows;
  next->b0 = t.b0;
}

inline void RunMicroTile(int mt, int nt, const TileContext& t, Pending* prev,
                         Pending* next, const EpilogueContext& e) {
  if (mt == 2) {
    if (nt == 2) {
      MicroTile<2, 2>(t, prev, next, e);
    } else {
      MicroTile<2, 1>(t, prev, next, e);
    }
  } else if (nt == 2) {
    MicroTile<1, 2>(t, prev, next, e);
  } else {
    MicroTile<1, 1>(t, prev, next, e);
  }
}

// A 64-byte aligned buffer that grows to the largest size asked of it.
class ScratchBytes {
 public:
  ~ScratchBytes() { std::free(data_); }
  uint8_t* Get(size_t bytes) {
    if (bytes > size_) {
      std::free(data_);
      size_ = (bytes + 4095) / 4096 * 4096;
      data_ = static_cast<uint8_t*>(std::aligned_alloc(64, size_));
      if (data_ == nullptr) throw std::bad_alloc();
    }
    return data_;
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Per-thread scratch: the epilogue constants of the item's blocks, the two
// pending micro-tiles, the A buffer and the K step offsets.
struct AmxScratch {
  std::vector<Block16Consts> consts;
  std::vector<uint8_t> clamp_hi;  // per block: Epilogue512Consts::clamp_hi
  Pending pending[2];
  ScratchBytes a;
  std::vector<int64_t> koff;  // K step offsets of one panel
};
thread_local AmxScratch t_amx;

// Work units: (micro-tile m of 32 rows, K panel q). Cached weights run them
// m-major (a micro-tile's panels in a row, so its A rows stay near), unless
// t.panel_major (packings over IsaKernels::panel_major_bytes: each panel's
// weights then come from L2 for every micro-tile); weights packed on the
// fly run q-major too (each panel packed once for all the item's blocks into
// panel_buffer, just before its first unit). Every unit runs
// all the item's block pairs on its A rows, which are read in place (a
// padded input's windows, or a pointwise layer's pixels) or gathered just
// before the unit into the A buffer (one buffer: with B it fits L1, two do
// not; gathering the next unit's rows between this unit's pairs was slower
// too). Cached weights: the panels this tile verifies (verify_phase) are
// compared with the filter for all the item's blocks before the first unit.
bool GemmTileAmx(const GemmTileArgs& t) {
  LoadTileConfig16x64();
  const EpilogueArgs& ep = *t.ep;
  const ConvGeometry& geo = *t.geo;
  const int64_t co = t.out_c;
  const int64_t ci = geo.in_c;
  const int64_t groups = t.k_groups;
  const int64_t kc = t.kc_groups;
  const bool cached = t.w != nullptr;
  const int64_t nblocks = t.block_end - t.block_begin;
  const int64_t npairs = (nblocks + 1) / 2;
  const int64_t partial_ld = nblocks * kBlock;
  const int64_t panel_bytes = kc * kGroupBytes;  // on the fly, per block
  const Epilogue512Consts ec = MakeEpilogue512Consts(ep.side_scale, ep.lo, ep.hi);
  AmxScratch& scratch = t_amx;
  scratch.consts.resize(static_cast<size_t>(nblocks));
  scratch.clamp_hi.resize(static_cast<size_t>(nblocks));
  for (int64_t b = 0; b < nblocks; ++b) {
    Block16Consts& bc = scratch.consts[b];
    FillBlock16Consts(ep, (t.block_begin + b) * kBlock, co, &bc);
    scratch.clamp_hi[b] = BlockUpperClampNeeded(ep, groups * 4,
                                                AbsMaxIgnoringNaN(bc.scale, kBlock),
                                                AbsMaxIgnoringNaN(bc.bias, kBlock));
  }
  const bool padded = t.padded != nullptr;
  EpilogueContext e;
  e.consts = scratch.consts.data();
  e.clamp_hi = scratch.clamp_hi.data();
  e.block_begin = t.block_begin;
  e.side = ep.side;
  e.output = t.output;
  e.co = co;
  e.ec = &ec;
  e.padded = padded;
  e.image_rows = t.image_rows;
  e.padded_w = t.padded_w;
  e.out_h = geo.out_h;
  e.out_w = geo.out_w;
  Pending* prev = &scratch.pending[0];
  Pending* next = &scratch.pending[1];
  prev->mt = next->mt = 0;
  uint8_t* abuf = padded ? nullptr : scratch.a.Get(static_cast<size_t>(kMr * t.lda + kIm2ColSlack));
  // K step offsets of one panel (kc / 16 steps): s * 64 for rows gathered
  // or pointwise; for a padded input, the step's window row and offset in
  // it (PaddedInputFits: a step never straddles two window rows).
  if (scratch.koff.size() < static_cast<size_t>(kc / kTileGroups)) {
    scratch.koff.resize(static_cast<size_t>(kc / kTileGroups));
  }
  int64_t* koff = scratch.koff.data();
  auto fill_koff = [&](int64_t g0, int64_t g1) {
    for (int64_t s = 0; s < (g1 - g0) / kTileGroups; ++s) {
      const int64_t k0 = 4 * g0 + kTileK * s;
      if (!padded) {
        koff[s] = k0 - 4 * g0;
        continue;
      }
      const int64_t run = geo.filter_w * ci;  // one window row
      const int64_t ky = k0 / run, rem = k0 % run;
      const int64_t kx = rem / ci, c = rem % ci;
      koff[s] = (ky * geo.dilation_h * t.padded_w + kx * geo.dilation_w) * ci + c;
    }
  };
  bool stale = false;
  // Pointwise rows in place (A row m = input pixel m): for micro-tiles
  // whose whole reads, 16-row tiles and 64-byte rows included, stay inside
  // the input; the others gather.
  const bool direct = !padded && IsDirectGemm(geo);
  const int64_t input_bytes = geo.batch * geo.in_h * geo.in_w * ci;
  const int64_t mtiles = (t.rows + kMr - 1) / kMr;
  const int64_t panels = (groups + kc - 1) / kc;
  const int64_t units = mtiles * panels;
  const bool m_major = cached && !t.panel_major;
  // Verifies (cached) or packs (on the fly) panel q for all the item's blocks.
  auto prepare_panel = [&](int64_t q) {
    const int64_t g0 = q * kc, g1 = Min(groups, g0 + kc);
    if (!cached) {
      PackPanelsAmx(t.filter, t.k, co, t.block_begin, t.block_end, g0, g1,
                    t.panel_buffer, panel_bytes);
      return;
    }
    if (t.verify && q % t.verify_stride == t.verify_phase) {
      stale |= VerifyPanelRows<PanelAmx>(t, 4 * g0, 4 * g1, 4, kGroupBytes);
    }
  };

  if (cached) {
    for (int64_t q = 0; q < panels; ++q) prepare_panel(q);
  }
  // Micro-tile m = 0 is the first to read each (panel, pair) of cached
  // weights: its call on (panel q, pair) prefetches into tc->pf the
  // weights of the first reader `ahead` pairs later, in q-major order
  // (none past the item's last).
  auto set_prefetch = [&](int64_t m, int64_t q, int64_t pair, int64_t ahead,
                          TileContext* tc) {
    tc->pf_steps = 0;
    const int64_t pos = q * npairs + pair + ahead;
    if (!cached || m != 0 || pos >= panels * npairs) return;
    const int64_t pq = pos / npairs, pb = 2 * (pos % npairs);
    const int64_t pg0 = pq * kc;
    for (int j = 0; j < 2; ++j) {
      const int64_t bj = Min(pb + j, nblocks - 1);
      tc->pf[j] = t.w->data + ((t.block_begin + bj) * groups + pg0) * kGroupBytes;
    }
    tc->pf_steps = (Min(groups, pg0 + kc) - pg0) / kTileGroups;
  };
  TileContext tc;
  tc.partial_ld = partial_ld;
  tc.koff = koff;
  int64_t koff_panel = -1;
  for (int64_t u = 0; u < units; ++u) {
    const int64_t m = m_major ? u / panels : u % mtiles;
    const int64_t q = m_major ? u % panels : u / mtiles;
    if (!cached && m == 0) prepare_panel(q);
    const int64_t g0 = q * kc, g1 = Min(groups, g0 + kc);
    if (q != koff_panel) {
      fill_koff(g0, g1);
      koff_panel = q;
    }
    const int64_t r = m * kMr;
    const int64_t h = Min(kMr, t.rows - r);
    const int mt = h > 16 ? 2 : 1;
    const int64_t first = t.p0 + r;
    if (padded) {
      // Each 16-row A tile lies in one image (image_rows % 16 == 0).
      for (int i = 0; i < 2; ++i) {
        const int64_t v = first + 16 * Min(i, mt - 1);
        const int64_t n = v / t.image_rows, j = v % t.image_rows;
        tc.a[i] = reinterpret_cast<const uint8_t*>(t.padded) +
                  (n * t.padded_h * t.padded_w + j) * ci;
      }
      tc.lda = ci;
    } else if (direct && (first + 16 * mt - 1) * ci + 4 * g1 <= input_bytes) {
      tc.a[0] = reinterpret_cast<const uint8_t*>(t.input) + first * ci + 4 * g0;
      tc.a[1] = tc.a[0] + 16 * ci;
      tc.lda = ci;
    } else {
      Im2ColSlice<ZmmS8Copy>(t, abuf, r, h, 4 * g0, 4 * g1);
      tc.a[0] = abuf;
      tc.a[1] = abuf + 16 * t.lda;
      tc.lda = t.lda;
    }
    tc.steps = (g1 - g0) / kTileGroups;
    tc.from_partial = q > 0;
    tc.last = q + 1 == panels;
    tc.first = first;
    tc.rows = h;
    for (int64_t pair = 0; pair < npairs; ++pair) {
      const int64_t b = 2 * pair;
      const int nt = b + 1 < nblocks ? 2 : 1;
      for (int j = 0; j < 2; ++j) {
        const int64_t bj = b + (j < nt ? j : 0);
        tc.b[j] = cached ? t.w->data + ((t.block_begin + bj) * groups + g0) * kGroupBytes
                         : t.panel_buffer + bj * panel_bytes;
      }
      tc.b0 = b;
      set_prefetch(m, q, pair, kPrefetchAhead, &tc);
      tc.partial = t.partial != nullptr ? t.partial + r * partial_ld + b * kBlock : nullptr;
      CompilerBarrier();
      RunMicroTile(mt, nt, tc, prev, next, e);
      if (tc.last) std::swap(prev, next);
    }
  }
  FinishPending(prev, e);
  _tile_release();
  return stale;
}

}  // namespace

extern const IsaKernels kAmxKernels = {
    "amx",
    kFormatAmxS8,
    /*block=*/kBlock,
    /*k_per_group=*/4,
    /*kc_groups=*/kKcGroups,
    /*mr=*/kMr,
    /*u8_activations=*/false,
    PanelAmx,
    GemmTileAmx,
    /*lane_bytes=*/4,
    GemvAvx512Vnni,
    /*kc_groups_cached=*/kKcGroupsCached,
    /*group_multiple=*/kTileGroups,
    /*padded_input=*/true,
    /*split_blocks=*/2,
    /*rows_first=*/true,
    /*panel_major_bytes=*/int64_t{1} << 20,
    /*rows_first_small_filter=*/true,
    /*tile_row_granule=*/16,
};

}  // namespace cpu
}  // namespace tf_fused_int8
