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
// past K); A rows are gathered (Im2ColSlice, ZmmS8Copy) or read in place
// (pointwise layers whose reads stay inside the input), and their bytes
// past K meet those zero weights, so their values do not matter.
//
// Epilogue: a C tile is stored to a 1 KiB scratch and put through
// epilogue_avx512.h (Epilogue16x4Natural: four rows of 16 natural-order
// channels at a time), bit for bit the contract as on avx512vnni. Between K
// panels the C tiles go to and come back from GemmTileArgs::partial.
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

#include "cc/core/cpu/amx_tiles.h"
#include "cc/core/cpu/gemm/gemm_isa_common.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
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

// The epilogue constants of one block: 16 scales (the scalar repeated) and
// 16 biases, zero past Co.
struct alignas(64) BlockConsts {
  float scale[kBlock];
  float bias[kBlock];
};

inline void FillBlockConsts(const EpilogueArgs& ep, int64_t n0, int64_t co,
                            BlockConsts* bc) {
  for (int64_t i = 0; i < kBlock; ++i) {
    const int64_t c = n0 + i;
    const bool real = c < co;
    bc->scale[i] = ep.per_channel_scale ? (real ? ep.scale[c] : 0.f) : ep.scale[0];
    bc->bias[i] = real ? ep.bias[c] : 0.f;
  }
}

// One micro-tile's operands.
struct TileContext {
  const uint8_t* a;     // row 0 of the A tile pair at this panel's first byte
  int64_t lda;          // bytes between A rows
  const int8_t* b[2];   // the two blocks' weights at this panel's first group
  int64_t steps;        // B tiles (16 groups each) in the panel
  int32_t* partial;     // row 0, block 0 of the partial sums
  int64_t partial_ld;   // int32 between partial rows
  bool from_partial;    // start from the partial sums (else zero)
  bool last;            // the last panel: epilogue (else store the partial sums)
  int64_t rows;         // valid rows (1 .. 32)
  const BlockConsts* bc[2];
  __mmask16 mask[2];    // the blocks' channels < Co
  const int8_t* side;   // side input of row 0, block 0 (Co apart), or nullptr
  int8_t* out;          // output of row 0, block 0 (Co apart)
  int64_t ldo;          // Co
  const Epilogue512Consts* ec;
};

// The epilogue of the 16 x 16 int32 C tile at `c` (rows 16 apart, `rows`
// of them valid), channels of block j of the micro-tile, rows from r0.
inline void TileEpilogue(const int32_t* c, int64_t rows, const TileContext& t,
                         int j, int64_t r0) {
  const BlockConsts& bc = *t.bc[j];
  const int64_t col = j * kBlock;
  int8_t* out = t.out + r0 * t.ldo + col;
  const int8_t* side = t.side != nullptr ? t.side + r0 * t.ldo + col : nullptr;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    Epilogue16x4Natural(_mm512_load_si512(c + 16 * r), _mm512_load_si512(c + 16 * (r + 1)),
                        _mm512_load_si512(c + 16 * (r + 2)), _mm512_load_si512(c + 16 * (r + 3)),
                        bc.scale, bc.bias, side != nullptr ? side + r * t.ldo : nullptr,
                        t.ldo, *t.ec, t.mask[j], out + r * t.ldo);
  }
  for (; r < rows; ++r) {
    Epilogue16Natural(_mm512_load_si512(c + 16 * r), bc.scale, bc.bias,
                      side != nullptr ? side + r * t.ldo : nullptr, *t.ec,
                      t.mask[j], out + r * t.ldo);
  }
}

// MT A tiles (16 rows each) x NT blocks. Tile numbers are literals in the
// intrinsics (GCC pastes them into the instruction), hence the spelled-out
// cases.
template <int MT, int NT>
void MicroTile(const TileContext& t) {
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
  const uint8_t* a0 = t.a;
  const uint8_t* a1 = t.a + 16 * t.lda;
  const int8_t* b0 = t.b[0];
  const int8_t* b1 = t.b[1];
  for (int64_t s = 0; s < t.steps; ++s) {
    _tile_loadd(6, b0 + s * kTileBytes, kGroupBytes);
    if constexpr (NT == 2) _tile_loadd(7, b1 + s * kTileBytes, kGroupBytes);
    _tile_loadd(4, a0 + s * kTileK, t.lda);
    _tile_dpbssd(0, 4, 6);
    if constexpr (NT == 2) _tile_dpbssd(1, 4, 7);
    if constexpr (MT == 2) {
      _tile_loadd(5, a1 + s * kTileK, t.lda);
      _tile_dpbssd(2, 5, 6);
      if constexpr (NT == 2) _tile_dpbssd(3, 5, 7);
    }
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
  alignas(64) int32_t c[16 * 16];
  const int64_t rows0 = Min(16, t.rows);
  const int64_t rows1 = t.rows - rows0;
  _tile_stored(0, c, 64);
  TileEpilogue(c, rows0, t, 0, 0);
  if constexpr (NT == 2) {
    _tile_stored(1, c, 64);
    TileEpilogue(c, rows0, t, 1, 0);
  }
  if constexpr (MT == 2) {
    if (rows1 > 0) {
      _tile_stored(2, c, 64);
      TileEpilogue(c, rows1, t, 0, 16);
      if constexpr (NT == 2) {
        _tile_stored(3, c, 64);
        TileEpilogue(c, rows1, t, 1, 16);
      }
    }
  }
}

inline void RunMicroTile(int mt, int nt, const TileContext& t) {
  if (mt == 2) {
    if (nt == 2) {
      MicroTile<2, 2>(t);
    } else {
      MicroTile<2, 1>(t);
    }
  } else if (nt == 2) {
    MicroTile<1, 2>(t);
  } else {
    MicroTile<1, 1>(t);
  }
}

// Loop order: K panels outer, pairs of channel blocks, then micro-tiles of
// 32 rows. Per panel, the first block pair gathers each micro-tile's A
// rows just before using them (later pairs read them from the buffer),
// except pointwise rows read in place. Cached weights: the panels this
// tile verifies (verify_phase) are compared with the filter for all the
// item's blocks before they are used. On the fly: each panel of all the
// item's blocks is packed into panel_buffer before its first pair.
bool GemmTileAmx(const GemmTileArgs& t) {
  LoadTileConfig16x64();
  const EpilogueArgs& ep = *t.ep;
  const ConvGeometry& geo = *t.geo;
  const int64_t co = t.out_c;
  const int64_t groups = t.k_groups;
  const int64_t kc = t.kc_groups;
  const bool cached = t.w != nullptr;
  const int64_t nblocks = t.block_end - t.block_begin;
  const int64_t partial_ld = nblocks * kBlock;
  const Epilogue512Consts ec = MakeEpilogue512Consts(ep.side_scale, ep.lo, ep.hi);
  bool stale = false;
  // Pointwise rows in place (A row m = input pixel m): for micro-tiles
  // whose whole reads, 16-row tiles and 64-byte rows included, stay inside
  // the input; the others gather.
  const bool direct = IsDirectGemm(geo);
  const int64_t input_bytes = geo.batch * geo.in_h * geo.in_w * geo.in_c;
  BlockConsts bc[2];
  TileContext tc;
  tc.partial_ld = partial_ld;
  tc.ldo = co;
  tc.ec = &ec;
  tc.bc[0] = &bc[0];
  tc.bc[1] = &bc[1];
  const int64_t mtiles = (t.rows + kMr - 1) / kMr;
  for (int64_t g0 = 0; g0 < groups; g0 += kc) {
    const int64_t g1 = Min(groups, g0 + kc);
    tc.steps = (g1 - g0) / kTileGroups;
    tc.from_partial = g0 > 0;
    tc.last = g1 == groups;
    const int64_t panel_bytes = kc * kGroupBytes;  // on the fly, per block
    if (cached) {
      if (t.verify && (g0 / kc) % t.verify_stride == t.verify_phase) {
        PanelArgs pa;
        pa.filter = t.filter;
        pa.k = t.k;
        pa.out_c = co;
        pa.g0 = g0;
        pa.g1 = g1;
        pa.verify = true;
        for (int64_t nb = t.block_begin; nb < t.block_end; ++nb) {
          pa.block_index = nb;
          pa.panel = const_cast<int8_t*>(t.w->data + (nb * groups + g0) * kGroupBytes);
          stale |= PanelAmx(pa);
        }
      }
    } else {
      PackPanelsAmx(t.filter, t.k, co, t.block_begin, t.block_end, g0, g1,
                    t.panel_buffer, panel_bytes);
    }
    for (int64_t b = 0; b < nblocks; b += 2) {
      const int nt = b + 1 < nblocks ? 2 : 1;
      for (int j = 0; j < nt; ++j) {
        const int64_t nb = t.block_begin + b + j;
        tc.b[j] = cached ? t.w->data + (nb * groups + g0) * kGroupBytes
                         : t.panel_buffer + (b + j) * panel_bytes;
        if (tc.last) FillBlockConsts(ep, nb * kBlock, co, &bc[j]);
        tc.mask[j] = ChannelMask(nb * kBlock, co);
      }
      if (nt == 1) tc.b[1] = tc.b[0];
      const int64_t n0 = (t.block_begin + b) * kBlock;
      for (int64_t m = 0; m < mtiles; ++m) {
        const int64_t r = m * kMr;
        const int64_t h = Min(kMr, t.rows - r);
        const int mt = h > 16 ? 2 : 1;
        const int64_t pixel = t.p0 + r;
        if (direct && (pixel + 16 * mt - 1) * geo.in_c + 4 * g1 <= input_bytes) {
          tc.a = reinterpret_cast<const uint8_t*>(t.input) + pixel * geo.in_c + 4 * g0;
          tc.lda = geo.in_c;
        } else {
          if (b == 0) Im2ColSlice<ZmmS8Copy>(t, t.a + r * t.lda, r, h, 4 * g0, 4 * g1);
          tc.a = t.a + r * t.lda;
          tc.lda = t.lda;
        }
        tc.rows = h;
        tc.partial = t.partial != nullptr ? t.partial + r * partial_ld + b * kBlock : nullptr;
        tc.side = ep.side != nullptr ? ep.side + pixel * co + n0 : nullptr;
        tc.out = t.output + pixel * co + n0;
        CompilerBarrier();
        RunMicroTile(mt, nt, tc);
      }
    }
  }
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
};

}  // namespace cpu
}  // namespace tf_fused_int8
