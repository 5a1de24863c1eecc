// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX-512 VNNI kernels: u8 x s8 VPDPBUSD on zmm, micro-tile 6 pixels x 64
// channels (24 zmm accumulators, 4 zmm of weights, 1 broadcast), weights in
// kFormatZmmU8 (kernels.h), epilogue fused into the store
// (cc/core/epilogue_avx512.h). Built with -mavx512f -mavx512bw -mavx512dq
// -mavx512vl -mavx512vnni -mfma -ffp-contract=off; everything but the
// IsaKernels table has internal linkage.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cc/core/cpu/kernels.h"
#include "cc/core/epilogue_avx512.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tf_fused_int8 {
namespace cpu {
namespace {

constexpr int64_t kBlock = 64;             // channels per block (4 zmm)
constexpr int64_t kGroupBytes = kBlock * 4;  // one k-group of a block
constexpr int kMr = 6;                       // micro-tile rows
constexpr int64_t kKcGroups = 96;            // K panel: 96 * 256 B = 24 KiB

inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t Max(int64_t a, int64_t b) { return a > b ? a : b; }

inline __mmask64 ByteMask(int64_t n) {
  return n >= 64 ? ~__mmask64{0} : ((__mmask64{1} << n) - 1);
}

// kernels.h, kFormatZmmU8: lane position p = 16j + 4L + i holds channel
// 16L + 4j + i of the block.
constexpr int64_t LaneChannel(int64_t p) {
  return 16 * ((p / 4) % 4) + 4 * (p / 16) + p % 4;
}


inline int32_t LoadU32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---------------------------------------------------------------- packing

bool PanelZmm(const PanelArgs& p) {
  const int64_t n0 = p.block_index * kBlock;
  const __mmask64 mask = ByteMask(p.out_c - n0);
  const int8_t* src = p.filter + n0;
  int8_t* dst = p.panel;
  __m512i diff = _mm512_setzero_si512();
  for (int64_t g = p.g0; g < p.g1; ++g, dst += kGroupBytes) {
    __m512i r[4];
    for (int i = 0; i < 4; ++i) {
      const int64_t k = 4 * g + i;
      r[i] = k < p.k ? _mm512_maskz_loadu_epi8(mask, src + k * p.out_c)
                     : _mm512_setzero_si512();
    }
    const __m512i t0 = _mm512_unpacklo_epi8(r[0], r[1]);
    const __m512i t1 = _mm512_unpackhi_epi8(r[0], r[1]);
    const __m512i t2 = _mm512_unpacklo_epi8(r[2], r[3]);
    const __m512i t3 = _mm512_unpackhi_epi8(r[2], r[3]);
    const __m512i u[4] = {
        _mm512_unpacklo_epi16(t0, t2), _mm512_unpackhi_epi16(t0, t2),
        _mm512_unpacklo_epi16(t1, t3), _mm512_unpackhi_epi16(t1, t3)};
    if (p.verify) {
      for (int j = 0; j < 4; ++j) {
        diff = _mm512_or_si512(
            diff, _mm512_xor_si512(u[j], _mm512_loadu_si512(dst + 64 * j)));
      }
    } else {
      for (int j = 0; j < 4; ++j) _mm512_storeu_si512(dst + 64 * j, u[j]);
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
      const __mmask64 mask = ByteMask(co - n0);
      __m512i r[4];
      for (int i = 0; i < 4; ++i) {
        r[i] = k + i < k_total
                   ? _mm512_maskz_loadu_epi8(mask, rows + i * co + n0)
                   : _mm512_setzero_si512();
      }
      const __m512i t0 = _mm512_unpacklo_epi8(r[0], r[1]);
      const __m512i t1 = _mm512_unpackhi_epi8(r[0], r[1]);
      const __m512i t2 = _mm512_unpacklo_epi8(r[2], r[3]);
      const __m512i t3 = _mm512_unpackhi_epi8(r[2], r[3]);
      _mm512_storeu_si512(out, _mm512_unpacklo_epi16(t0, t2));
      _mm512_storeu_si512(out + 64, _mm512_unpackhi_epi16(t0, t2));
      _mm512_storeu_si512(out + 128, _mm512_unpacklo_epi16(t1, t3));
      _mm512_storeu_si512(out + 192, _mm512_unpackhi_epi16(t1, t3));
    }
  }
}

// ----------------------------------------------------------------- im2col
//
// Gathers one K panel's slice [k0, k1) of the tile's im2col rows (the HWC
// window of each output pixel, XOR 0x80; padding 0x80 = a zero activation).
// Pieces are written front to back in whole 64-byte stores that may run
// past the piece: the overrun lands on bytes written later (the rest of the
// row, the next row) or in the buffer's slack (kIm2ColSlack). Bytes past
// K meet zero weight rows, so their values do not matter.

// Copies n >= 0 bytes XOR 0x80. Reads stay below src_end; writes may run up
// to 63 bytes past dst + n.
inline void CopyXor(uint8_t* dst, const int8_t* src, int64_t n,
                    const int8_t* src_end) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < n; i += 64) {
    const int8_t* s = src + i;
    const __m512i v = s + 64 <= src_end
                          ? _mm512_loadu_si512(s)
                          : _mm512_maskz_loadu_epi8(ByteMask(src_end - s), s);
    _mm512_storeu_si512(dst + i, _mm512_xor_si512(v, flip));
  }
}

// n bytes of 0x80 (a zero activation); may write up to 63 bytes past n.
inline void FillPad(uint8_t* dst, int64_t n) {
  const __m512i pad = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < n; i += 64) _mm512_storeu_si512(dst + i, pad);
}

// Writes the part of window segment [seg0, seg1) (offsets within the ky
// run) that falls in [s, e) to row_out + offset - s; src (or pad when null)
// holds the segment's bytes.
inline void CopySegment(uint8_t* out, int64_t s, int64_t e, int64_t seg0,
                        int64_t seg1, const int8_t* src, const int8_t* end) {
  const int64_t a = Max(s, seg0), b = Min(e, seg1);
  if (a >= b) return;
  if (src == nullptr) {
    FillPad(out + (a - s), b - a);
  } else {
    CopyXor(out + (a - s), src + (a - seg0), b - a, end);
  }
}

// Rows [r0, r0 + rows) of the tile (pixels p0 + r0 ...), elements [k0, k1),
// written to dst (lda apart).
__attribute__((noinline)) void Im2ColSliceZmm(const GemmTileArgs& t,
                                              uint8_t* dst, int64_t r0,
                                              int64_t rows, int64_t k0,
                                              int64_t k1) {
  const ConvGeometry& g = *t.geo;
  const int64_t ci = g.in_c, kw = g.filter_w;
  const int64_t k = g.filter_h * kw * ci;
  k1 = Min(k1, k);
  if (k1 <= k0) return;
  const int8_t* end = t.input + g.batch * g.in_h * g.in_w * ci;
  const bool pointwise = g.filter_h == 1 && kw == 1 && g.stride_h == 1 &&
                         g.stride_w == 1 && g.pad_top == 0 &&
                         g.pad_left == 0 && g.out_h == g.in_h &&
                         g.out_w == g.in_w;
  const int64_t p0 = t.p0 + r0;
  if (pointwise) {  // direct GEMM: the rows are the input pixels
    const int8_t* src = t.input + p0 * ci + k0;
    if (k0 == 0 && k1 == ci && t.lda == ci) {
      CopyXor(dst, src, rows * ci, end);
    } else {
      for (int64_t m = 0; m < rows; ++m) {
        CopyXor(dst + m * t.lda, src + m * ci, k1 - k0, end);
      }
    }
    return;
  }
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int64_t run = kw * ci;
  const int64_t row_bytes = g.in_w * ci;
  const int64_t span_h = (g.filter_h - 1) * g.dilation_h;
  const int64_t ky_step = g.dilation_h * row_bytes;
  const int64_t ky0 = k0 / run, ky1 = (k1 - 1) / run;  // rows of the window
  const bool whole = k0 == 0 && k1 == k;  // the panel holds all of K
  int64_t ox = p0 % g.out_w;
  int64_t oy = (p0 / g.out_w) % g.out_h;
  int64_t n = p0 / (g.out_w * g.out_h);
  for (int64_t m = 0; m < rows; ++m) {
    uint8_t* row = dst + m * t.lda;
    const int64_t image = n * g.in_h * row_bytes;
    const int64_t iy0 = oy * g.stride_h - g.pad_top;
    const int64_t ix0 = ox * g.stride_w - g.pad_left;
    // Columns [lo, hi) of the window are inside the image (dilation 1).
    const int64_t lo = g.dilation_w == 1 ? Min(kw, Max(0, -ix0)) : 0;
    const int64_t hi = g.dilation_w == 1 ? Max(lo, Min(kw, g.in_w - ix0)) : 0;
    // Offset of the window's first byte (meaningful when inside).
    const int64_t first = image + iy0 * row_bytes + ix0 * ci;
    if (g.dilation_w == 1 && lo == 0 && hi == kw && iy0 >= 0 &&
        iy0 + span_h < g.in_h &&
        first + span_h * row_bytes + run + 64 <= end - t.input) {
      // Interior window: each ky is one contiguous run; whole vectors.
      if (whole) {
        const int8_t* src = t.input + first;
        uint8_t* out = row;
        for (int64_t ky = 0; ky < g.filter_h; ++ky) {
          for (int64_t i = 0; i < run; i += 64) {
            _mm512_storeu_si512(out + i, _mm512_xor_si512(
                                             _mm512_loadu_si512(src + i), flip));
          }
          src += ky_step;
          out += run;
        }
      } else {
      for (int64_t ky = ky0; ky <= ky1; ++ky) {
        const int64_t s = Max(k0, ky * run), e = Min(k1, (ky + 1) * run);
        const int8_t* src = t.input + first + ky * ky_step + (s - ky * run);
        uint8_t* out = row + (s - k0);
        for (int64_t i = 0; i < e - s; i += 64) {
          _mm512_storeu_si512(out + i, _mm512_xor_si512(
                                           _mm512_loadu_si512(src + i), flip));
        }
      }
      }
    } else {
      for (int64_t ky = ky0; ky <= ky1; ++ky) {
        const int64_t base = ky * run;
        const int64_t s = Max(k0, base) - base, e = Min(k1, base + run) - base;
        uint8_t* out = row + (base + s - k0);
        const int64_t iy = iy0 + ky * g.dilation_h;
        if (iy < 0 || iy >= g.in_h) {
          FillPad(out, e - s);
          continue;
        }
        const int8_t* in_row = t.input + image + iy * row_bytes;
        if (g.dilation_w == 1) {
          CopySegment(out, s, e, 0, lo * ci, nullptr, end);
          CopySegment(out, s, e, lo * ci, hi * ci, in_row + (ix0 + lo) * ci, end);
          CopySegment(out, s, e, hi * ci, run, nullptr, end);
        } else {
          for (int64_t kx = s / ci; kx <= (e - 1) / ci; ++kx) {
            const int64_t ix = ix0 + kx * g.dilation_w;
            const bool inside = ix >= 0 && ix < g.in_w;
            CopySegment(out, s, e, kx * ci, (kx + 1) * ci,
                        inside ? in_row + ix * ci : nullptr, end);
          }
        }
      }
    }
    if (++ox == g.out_w) {
      ox = 0;
      if (++oy == g.out_h) {
        oy = 0;
        ++n;
      }
    }
  }
}

// ------------------------------------------------------------------- GEMM

struct alignas(64) BlockConsts {
  float scale[kBlock];  // interleaved lane order
  float bias[kBlock];
};

struct TileContext {
  const uint8_t* a;
  int64_t lda;
  const int8_t* panel;
  int64_t groups;
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
  int64_t ldo;         // Co
  __mmask64 mask;
};

template <int MR>
inline void MicroTile(const TileContext& t) {
  __m512i acc[MR][4];
  if (!t.from_partial) {
    const __m512i c0 = _mm512_load_si512(t.init);
    const __m512i c1 = _mm512_load_si512(t.init + 16);
    const __m512i c2 = _mm512_load_si512(t.init + 32);
    const __m512i c3 = _mm512_load_si512(t.init + 48);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = c0;
      acc[i][1] = c1;
      acc[i][2] = c2;
      acc[i][3] = c3;
    }
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        acc[i][j] = _mm512_load_si512(t.partial + i * t.partial_ld + 16 * j);
      }
    }
    if (t.add != nullptr) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m512i c = _mm512_load_si512(t.add + 16 * j);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_add_epi32(acc[i][j], c);
      }
    }
  }
  const uint8_t* a = t.a;
  const int8_t* b = t.panel;
  const int64_t lda = t.lda;
  for (int64_t g = 0; g < t.groups; ++g) {
    const __m512i b0 = _mm512_load_si512(b);
    const __m512i b1 = _mm512_load_si512(b + 64);
    const __m512i b2 = _mm512_load_si512(b + 128);
    const __m512i b3 = _mm512_load_si512(b + 192);
    b += kGroupBytes;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i av = _mm512_set1_epi32(LoadU32(a + i * lda));
      acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], av, b0);
      acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], av, b1);
      acc[i][2] = _mm512_dpbusd_epi32(acc[i][2], av, b2);
      acc[i][3] = _mm512_dpbusd_epi32(acc[i][3], av, b3);
    }
    a += 4;
  }
  if (t.last) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      Epilogue64(acc[i][0], acc[i][1], acc[i][2], acc[i][3], t.bc->scale,
                 t.bc->bias, t.side ? t.side + i * t.ldo : nullptr, *t.ec,
                 t.mask, t.out + i * t.ldo);
    }
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        _mm512_store_si512(t.partial + i * t.partial_ld + 16 * j, acc[i][j]);
      }
    }
  }
}

// Prefetches `lines` 64-byte lines from p into L2.
inline void PrefetchL2(const int8_t* p, int64_t lines) {
  for (int64_t l = 0; l < lines; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + 64 * l), _MM_HINT_T1);
  }
}

// Adds sum_k w[k][c] of a packed panel to sums[64] (lane order): VPDPBUSD
// with all-ones u8 sums each lane's four int8 weights exactly.
inline void AddPanelSums(const int8_t* panel, int64_t groups, int32_t* sums) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i s[4];
  for (int j = 0; j < 4; ++j) s[j] = _mm512_load_si512(sums + 16 * j);
  for (int64_t g = 0; g < groups; ++g, panel += kGroupBytes) {
    for (int j = 0; j < 4; ++j) {
      s[j] = _mm512_dpbusd_epi32(s[j], ones, _mm512_load_si512(panel + 64 * j));
    }
  }
  for (int j = 0; j < 4; ++j) _mm512_store_si512(sums + 16 * j, s[j]);
}

// Loop order: K panels (kc groups) outer, channel blocks inner, micro-tiles
// innermost. Per panel the tile's A slice is gathered once (rows x 384 B,
// micro-tile by micro-tile during the first block) and reused by every
// block; the weight panel (kc groups x 64 channels,
// 24 KiB) stays in L1 while the micro-tiles stream past it. Cached weights:
// when verifying, panel q's filter rows are compared with the packed panels
// of all the item's blocks (contiguous filter rows) in slices spread over
// the first block's micro-tiles, each slice's rows prefetched one micro-tile
// ahead; the next (panel, block) is prefetched into L2 likewise. On-the-fly
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
  const Epilogue512Consts ec = MakeEpilogue512Consts(ep.side_scale, ep.lo, ep.hi);
  bool stale = false;
  // Micro-tiles of even heights <= kMr.
  const int64_t tiles = (t.rows + kMr - 1) / kMr;
  const int64_t base = t.rows / tiles, extra = t.rows % tiles;
  BlockConsts bc;
  alignas(64) int32_t offset[kBlock];  // -128 * sum(w), on the fly
  alignas(64) static const int32_t kZeros[kBlock] = {0};
  if (!cached) {
    for (int64_t i = 0; i < nblocks * kBlock; ++i) t.col_sums[i] = 0;
  }
  TileContext tc;
  tc.lda = t.lda;
  tc.bc = &bc;
  tc.ec = &ec;
  tc.ldo = co;
  tc.partial_ld = partial_ld;
  for (int64_t g0 = 0; g0 < groups; g0 += kc) {
    const int64_t g1 = Min(groups, g0 + kc);
    const bool first = g0 == 0;
    tc.groups = g1 - g0;
    tc.last = g1 == groups;
    const bool verify_panel =
        verify && (g0 / kc) % t.verify_stride == t.verify_phase;
    // Filter rows of this panel, verified over the first block's tiles.
    const int64_t k_begin = 4 * g0, k_end = Min(4 * g1, t.k);
    const int64_t vrows = k_end - k_begin;
    const int64_t vslice = ((vrows + tiles - 1) / tiles + 3) / 4 * 4;
    const int64_t row_lines = (c_end - c_begin + 63) / 64 + 1;
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t nb = t.block_begin + b;
      const int64_t n0 = nb * kBlock;
      for (int64_t p = 0; p < kBlock; ++p) {
        const int64_t c = n0 + LaneChannel(p);
        const bool in = c < co;
        bc.scale[p] = in ? ep.scale[ep.per_channel_scale ? c : 0] : 0.0f;
        bc.bias[p] = in ? ep.bias[c] : 0.0f;
      }
      tc.mask = ByteMask(Min(kBlock, co - n0));
      const int8_t* next = nullptr;
      int64_t next_lines = 0;
      const int8_t* next_filter = nullptr;
      int64_t next_filter_rows = 0;
      if (cached) {
        const int8_t* data = t.w->data;
        tc.panel = data + (nb * groups + g0) * kGroupBytes;
        tc.init = t.w->col_offset + n0;
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
        AddPanelSums(panel, g1 - g0, sums);
        if (tc.last) {
          for (int64_t p = 0; p < kBlock; ++p) {
            offset[p] = static_cast<int32_t>(
                0u - (static_cast<uint32_t>(sums[p]) << 7));
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
      int64_t r = 0;
      for (int64_t mt = 0; mt < tiles; ++mt) {
        if (next != nullptr) {
          const int64_t l0 = next_lines * mt / tiles;
          PrefetchL2(next + 64 * l0, next_lines * (mt + 1) / tiles - l0);
        }
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
        // The panel's A rows are gathered just before their first use (the
        // stores overlap the multiply; the rows are in L1 when used) and
        // reused from the A buffer by the other blocks. With one block they
        // are used once: a micro-tile's worth of scratch (L1) is enough.
        uint8_t* a_rows = single_block ? t.a : t.a + r * t.lda;
        if (b == 0) Im2ColSliceZmm(t, a_rows, r, h, 4 * g0, 4 * g1);
        tc.a = a_rows;
        tc.partial = t.partial + r * partial_ld + b * kBlock;
        tc.side = ep.side ? ep.side + pixel * co + n0 : nullptr;
        tc.out = t.output + pixel * co + n0;
        switch (h) {
          case 6: MicroTile<6>(tc); break;
          case 5: MicroTile<5>(tc); break;
          case 4: MicroTile<4>(tc); break;
          case 3: MicroTile<3>(tc); break;
          case 2: MicroTile<2>(tc); break;
          default: MicroTile<1>(tc); break;
        }
        r += h;
        if (verifying && v1 > v0) {
          // Rows [v0, v1) are whole groups except at the panel's end.
          PanelArgs pa;
          pa.filter = t.filter;
          pa.k = t.k;
          pa.out_c = co;
          pa.verify = true;
          pa.g0 = v0 / 4;
          pa.g1 = (v1 + 3) / 4;
          for (int64_t vb = t.block_begin; vb < t.block_end; ++vb) {
            pa.block_index = vb;
            pa.panel = const_cast<int8_t*>(t.w->data + (vb * groups + pa.g0) *
                                                           kGroupBytes);
            stale |= PanelZmm(pa);
          }
        }
      }
    }
  }
  return stale;
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
};

}  // namespace cpu
}  // namespace tf_fused_int8
