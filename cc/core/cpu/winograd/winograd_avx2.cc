// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Winograd F(2x2, 3x3) kernels for AVX2 (winograd.h has the math, the
// bounds and the work decomposition): int16 transforms in ymm (16 channels
// a vector), the 16 per-position GEMMs with VPMADDWD + VPADDD (exact int16
// pair sums; never the saturating VPMADDUBSW) in 6-tile x 16-channel
// micro-tiles, the int32 output transform, the exact division by 4 and the
// contract epilogue of epilogue_avx2.h. Built with -mavx2 -mfma
// -ffp-contract=off; everything but the kernel table has internal linkage.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cc/core/cpu/gemm/gemm_isa_common.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/winograd/winograd.h"
#include "cc/core/epilogue_avx2.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

constexpr int64_t kBlock = 16;        // output channels per block (2 ymm)
constexpr int64_t kGroupBytes = 64;   // one channel pair of a block
constexpr int64_t kMTile = 16 * kBlock;  // int32 of M per tile and block
constexpr int kMr = 6;
// Panels of this many input channels (V of 48 tiles: 16 x 48 x 512 x 2 B =
// 768 KiB at most; less for the tile counts the driver picks).
constexpr int64_t kPanelChannels = 512;
constexpr int64_t kMaxTiles = 48;

// ------------------------------------------------------------ packed layout
//
// Per 16-channel block (winograd.h: groups of 64 bytes): the U' matrices,
// group xi * cg + pair (cg = ceil(Ci / 2) pairs per position).

int64_t PairGroups(int64_t in_c) { return (in_c + 1) / 2; }

// 16 filter bytes of tap `tap`, input channel ci, output channels [n0,
// n0 + 16): zeros past Co and for ci >= Ci.
inline __m128i LoadFilter16(const int8_t* filter, int64_t in_c, int64_t out_c,
                            int64_t tap, int64_t ci, int64_t n0) {
  if (ci >= in_c) return _mm_setzero_si128();
  const int8_t* src = filter + (tap * in_c + ci) * out_c + n0;
  const int64_t valid = out_c - n0;
  if (valid >= 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  alignas(16) int8_t tmp[16] = {0};
  std::memcpy(tmp, src, static_cast<size_t>(valid));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
}

// U' = G' g G'^T of one input channel, 16 output channels (int16 lanes).
// g[3 * ky + kx]; u[4 * i + j]. |u| <= 1152 (winograd.h).
inline void FilterTransform(const __m256i g[9], __m256i u[16]) {
  __m256i t[3][4];  // t[ky][j] = (g G'^T)[ky][j]
  for (int ky = 0; ky < 3; ++ky) {
    const __m256i g0 = g[3 * ky], g1 = g[3 * ky + 1], g2 = g[3 * ky + 2];
    const __m256i g02 = _mm256_add_epi16(g0, g2);
    t[ky][0] = _mm256_add_epi16(g0, g0);
    t[ky][1] = _mm256_add_epi16(g02, g1);
    t[ky][2] = _mm256_sub_epi16(g02, g1);
    t[ky][3] = _mm256_add_epi16(g2, g2);
  }
  for (int j = 0; j < 4; ++j) {
    const __m256i t02 = _mm256_add_epi16(t[0][j], t[2][j]);
    u[j] = _mm256_add_epi16(t[0][j], t[0][j]);
    u[4 + j] = _mm256_add_epi16(t02, t[1][j]);
    u[8 + j] = _mm256_sub_epi16(t02, t[1][j]);
    u[12 + j] = _mm256_add_epi16(t[2][j], t[2][j]);
  }
}

// U' of the pairs of block b (cg = ceil(Ci / 2) pairs per position) from
// the filter, written to (verify false) or compared with (verify true) the
// block's panels; true on a difference.
bool TransformBlock(const int8_t* filter, int64_t in_c, int64_t out_c,
                    int64_t b, int8_t* block, bool verify) {
  const int64_t cg = PairGroups(in_c);
  const int64_t n0 = b * kBlock;
  __m256i diff = _mm256_setzero_si256();
  for (int64_t q = 0; q < cg; ++q) {
    __m256i u0[16], u1[16];
    {
      __m256i g0[9], g1[9];
      for (int tap = 0; tap < 9; ++tap) {
        g0[tap] = _mm256_cvtepi8_epi16(LoadFilter16(filter, in_c, out_c, tap, 2 * q, n0));
        g1[tap] = _mm256_cvtepi8_epi16(LoadFilter16(filter, in_c, out_c, tap, 2 * q + 1, n0));
      }
      FilterTransform(g0, u0);
      FilterTransform(g1, u1);
    }
    for (int xi = 0; xi < 16; ++xi) {
      // Pairs (U'[2q][c], U'[2q + 1][c]) in channel order: unpack works per
      // 128-bit lane (channels 0-3 | 8-11 and 4-7 | 12-15), the permutes
      // put the halves back in order.
      const __m256i lo = _mm256_unpacklo_epi16(u0[xi], u1[xi]);
      const __m256i hi = _mm256_unpackhi_epi16(u0[xi], u1[xi]);
      const __m256i p0 = _mm256_permute2x128_si256(lo, hi, 0x20);
      const __m256i p1 = _mm256_permute2x128_si256(lo, hi, 0x31);
      int8_t* dst = block + (xi * cg + q) * kGroupBytes;
      if (verify) {
        diff = _mm256_or_si256(
            diff, _mm256_or_si256(
                      _mm256_xor_si256(p0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst))),
                      _mm256_xor_si256(p1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + 32)))));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), p0);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), p1);
      }
    }
  }
  return !_mm256_testz_si256(diff, diff);
}

// The packed-weight cache's panel function: PackedWeights::Pack calls it
// once per block with the whole block (p.k = 9 * Ci; p.filter is the copy
// the entry keeps). Verify mode recomputes and compares (not used by the
// calls, which compare the filter with the kept copy: VerifyBytes).
bool PanelWinograd(const PanelArgs& p) {
  return TransformBlock(p.filter, p.k / 9, p.out_c, p.block_index, p.panel,
                        p.verify);
}

// Compares n bytes of a and b; true on any difference.
bool VerifyBytes(const int8_t* a, const int8_t* b, int64_t n) {
  __m256i diff = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    diff = _mm256_or_si256(
        diff, _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i))));
  }
  bool differ = !_mm256_testz_si256(diff, diff);
  for (; i < n; ++i) differ |= a[i] != b[i];
  return differ;
}

// --------------------------------------------------------- input transform

// The tile after (img, ty, tx) in the item's order (batch, tile rows, tile
// columns).
inline void NextTile(const WinogradItemArgs& t, int64_t* img, int64_t* ty,
                     int64_t* tx) {
  if (++*tx == t.tiles_w) {
    *tx = 0;
    if (++*ty == t.tiles_h) {
      *ty = 0;
      ++*img;
    }
  }
}

alignas(16) const int8_t kZeroPixel[16] = {0};

// V = B^T d B of 16 channels (int16 lanes), written to v[xi * v_mat].
// load(i, j) gives d at input row i, column j of the tile (16 channels
// widened to int16); |V| <= 512 (winograd.h). Rows are loaded as needed,
// 1 and 2 first, then 0 and 3, so that at most 12 ymm stay live.
template <class Load>
inline void InputTransformStore(const Load& load, int16_t* v, int64_t v_mat) {
  auto row = [&](int i, __m256i h[4]) {
    const __m256i d0 = load(i, 0), d1 = load(i, 1), d2 = load(i, 2), d3 = load(i, 3);
    h[0] = _mm256_sub_epi16(d0, d2);
    h[1] = _mm256_add_epi16(d1, d2);
    h[2] = _mm256_sub_epi16(d2, d1);
    h[3] = _mm256_sub_epi16(d1, d3);
  };
  auto store = [&](int xi, __m256i x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + xi * v_mat), x);
  };
  __m256i h0[4], h1[4], h2[4], h3[4];
  row(1, h1);
  row(2, h2);
  for (int j = 0; j < 4; ++j) {
    store(4 + j, _mm256_add_epi16(h1[j], h2[j]));
    store(8 + j, _mm256_sub_epi16(h2[j], h1[j]));
  }
  row(0, h0);
  for (int j = 0; j < 4; ++j) store(j, _mm256_sub_epi16(h0[j], h2[j]));
  row(3, h3);
  for (int j = 0; j < 4; ++j) store(12 + j, _mm256_sub_epi16(h1[j], h3[j]));
}

inline __m256i Widen(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Transforms input channels [c0, c1) of the item's tiles into t.v (tile r's
// row at r * v_ld, channel c at c - c0; lanes past c1 up to the next
// multiple of 16 are zero).
void InputTransform(const WinogradItemArgs& t, int64_t c0, int64_t c1) {
  const ConvGeometry& g = *t.geo;
  const int64_t ci = g.in_c;
  const int64_t row_bytes = g.in_w * ci;
  const int64_t per_image = t.tiles_h * t.tiles_w;
  const int8_t* input_end = t.input + g.batch * g.in_h * row_bytes;
  const int64_t full_end = c0 + (c1 - c0) / 16 * 16;  // whole channel groups
  const __m128i keep = _mm_cmpgt_epi8(
      _mm_set1_epi8(static_cast<char>((c1 - c0) % 16)),
      _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  // Tile (img, tile row ty, tile column tx), advanced without divisions.
  int64_t img = t.t0 / per_image;
  int64_t ty = (t.t0 % per_image) / t.tiles_w, tx = t.t0 % t.tiles_w;
  for (int64_t r = 0; r < t.tiles; ++r, NextTile(t, &img, &ty, &tx)) {
    const int64_t iy0 = 2 * ty - g.pad_top;
    const int64_t ix0 = 2 * tx - g.pad_left;
    int16_t* dst = t.v + r * t.v_ld;  // channel c at dst + (c - c0)
    // Offset of the tile's first position (negative or past the input for
    // border tiles, only ever added to when the sum is inside).
    const int64_t corner = ((img * g.in_h + iy0) * g.in_w + ix0) * ci;
    if (iy0 >= 0 && iy0 + 4 <= g.in_h && ix0 >= 0 && ix0 + 4 <= g.in_w) {
      // Interior tile: position (i, j) at corner + i * row + j * Ci.
      int64_t c = c0;
      for (; c < full_end; c += 16) {
        const int8_t* p = t.input + corner + c;
        InputTransformStore(
            [&](int i, int j) { return Widen(p + i * row_bytes + j * ci); },
            dst + (c - c0), t.v_mat);
      }
      if (c < c1) {
        // Fewer than 16 channels left (Ci or a chunk ends): a whole vector
        // with the lanes past c1 cleared (those bytes belong to the next
        // pixel), or a zeroed copy at the very end of the input.
        const int8_t* p = t.input + corner + c;
        const int64_t n = c1 - c;
        InputTransformStore(
            [&](int i, int j) {
              const int8_t* src = p + i * row_bytes + j * ci;
              if (src + 16 <= input_end) {
                return _mm256_cvtepi8_epi16(_mm_and_si128(
                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)), keep));
              }
              alignas(16) int8_t tmp[16] = {0};
              std::memcpy(tmp, src, static_cast<size_t>(n));
              return _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
            },
            dst + (c - c0), t.v_mat);
      }
      continue;
    }
    // Border tile: each position's pixel (channel 0), or the zero pixel at
    // channel offset 0 (mask 0) for padding.
    const int8_t* base[16];
    int64_t mask[16];
    for (int i = 0; i < 4; ++i) {
      const int64_t iy = iy0 + i;
      for (int j = 0; j < 4; ++j) {
        const int64_t ix = ix0 + j;
        const bool inside = iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w;
        base[4 * i + j] = inside ? t.input + (corner + i * row_bytes + j * ci) : kZeroPixel;
        mask[4 * i + j] = inside ? -1 : 0;
      }
    }
    for (int64_t c = c0; c < c1; c += 16) {
      if (c < full_end) {
        InputTransformStore(
            [&](int i, int j) { return Widen(base[4 * i + j] + (c & mask[4 * i + j])); },
            dst + (c - c0), t.v_mat);
        continue;
      }
      const int64_t n = c1 - c;
      InputTransformStore(
          [&](int i, int j) {
            const int p = 4 * i + j;
            const int8_t* src = base[p] + (c & mask[p]);
            if (mask[p] == 0 || src + 16 <= input_end) {
              return _mm256_cvtepi8_epi16(_mm_and_si128(
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)), keep));
            }
            alignas(16) int8_t tmp[16] = {0};
            std::memcpy(tmp, src, static_cast<size_t>(n));
            return _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
          },
          dst + (c - c0), t.v_mat);
    }
  }
}

// -------------------------------------------------------------------- GEMM

// M (MR tiles x 16 channels, one position) += V rows x U' panel over
// `pairs` channel pairs. a: the first tile's V row (lda int16 apart); b: the
// panel (64 bytes a pair); m: the first tile's M (kMTile int32 apart).
template <int MR>
inline void MicroTile(const int16_t* a, int64_t lda, const int8_t* b,
                      int64_t pairs, int32_t* m, bool accumulate) {
  __m256i acc[MR][2];
  if (accumulate) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(m + i * kMTile));
      acc[i][1] = _mm256_load_si256(reinterpret_cast<const __m256i*>(m + i * kMTile + 8));
    }
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
  }
  const uint8_t* ap = reinterpret_cast<const uint8_t*>(a);
  const int64_t ldb = lda * 2;  // bytes
  for (int64_t q = 0; q < pairs; ++q) {
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + 32));
    b += kGroupBytes;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256i av = _mm256_set1_epi32(LoadU32(ap + i * ldb));
      acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(av, b0));
      acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(av, b1));
    }
    ap += 4;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(m + i * kMTile), acc[i][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(m + i * kMTile + 8), acc[i][1]);
  }
}

// -------------------------------------------------------- output transform

// Y = A^T M A / 4 of one tile and block: y[2 * a + b] (output row a, column
// b of the tile), two ymm of 8 channels each. Exact: the int32 result is
// 4 * acc (winograd.h), so the arithmetic shift divides exactly.
inline void OutputTransform(const int32_t* m, __m256i y[4][2]) {
  for (int h = 0; h < 2; ++h) {
    __m256i s0[4], s1[4];
    for (int j = 0; j < 4; ++j) {
      auto ld = [&](int i) {
        return _mm256_load_si256(reinterpret_cast<const __m256i*>(m + (4 * i + j) * kBlock + 8 * h));
      };
      const __m256i m0 = ld(0), m1 = ld(1), m2 = ld(2), m3 = ld(3);
      s0[j] = _mm256_add_epi32(_mm256_add_epi32(m0, m1), m2);
      s1[j] = _mm256_sub_epi32(_mm256_sub_epi32(m1, m2), m3);
    }
    y[0][h] = _mm256_srai_epi32(
        _mm256_add_epi32(_mm256_add_epi32(s0[0], s0[1]), s0[2]), 2);
    y[1][h] = _mm256_srai_epi32(
        _mm256_sub_epi32(_mm256_sub_epi32(s0[1], s0[2]), s0[3]), 2);
    y[2][h] = _mm256_srai_epi32(
        _mm256_add_epi32(_mm256_add_epi32(s1[0], s1[1]), s1[2]), 2);
    y[3][h] = _mm256_srai_epi32(
        _mm256_sub_epi32(_mm256_sub_epi32(s1[1], s1[2]), s1[3]), 2);
  }
}

struct alignas(32) BlockConsts {
  float scale[kBlock];
  float bias[kBlock];
};

// Output transform of block b for the item's tiles; chunk sums in y (tiles
// x 4 pixels x 16 int32) when there are several chunks; the epilogue after
// the last chunk.
void OutputBlock(const WinogradItemArgs& t, int64_t b, const int32_t* m,
                 int32_t* y, bool first_chunk, bool last_chunk,
                 const Epilogue256Consts& ec) {
  const ConvGeometry& g = *t.geo;
  const EpilogueArgs& ep = *t.ep;
  const int64_t co = g.out_c;
  const int64_t n0 = b * kBlock;
  const int count = static_cast<int>(Min(kBlock, co - n0));
  BlockConsts bc;
  for (int64_t p = 0; p < kBlock; ++p) {
    const int64_t c = n0 + p;
    const bool in = c < co;
    bc.scale[p] = in ? ep.scale[ep.per_channel_scale ? c : 0] : 0.0f;
    bc.bias[p] = in ? ep.bias[c] : 0.0f;
  }
  const int64_t per_image = t.tiles_h * t.tiles_w;
  int64_t img = t.t0 / per_image;
  int64_t ty = (t.t0 % per_image) / t.tiles_w, tx = t.t0 % t.tiles_w;
  for (int64_t r = 0; r < t.tiles; ++r, NextTile(t, &img, &ty, &tx)) {
    __m256i v[4][2];
    OutputTransform(m + r * kMTile, v);
    int32_t* yr = y == nullptr ? nullptr : y + r * 4 * kBlock;
    if (!first_chunk) {
      for (int p = 0; p < 4; ++p) {
        for (int h = 0; h < 2; ++h) {
          v[p][h] = _mm256_add_epi32(
              v[p][h], _mm256_load_si256(reinterpret_cast<const __m256i*>(yr + p * kBlock + 8 * h)));
        }
      }
    }
    if (!last_chunk) {
      for (int p = 0; p < 4; ++p) {
        for (int h = 0; h < 2; ++h) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(yr + p * kBlock + 8 * h), v[p][h]);
        }
      }
      continue;
    }
    const int64_t oy0 = 2 * ty, ox0 = 2 * tx;
    for (int p = 0; p < 4; ++p) {
      const int64_t oy = oy0 + p / 2, ox = ox0 + p % 2;
      if (oy >= g.out_h || ox >= g.out_w) continue;  // partial tile
      const int64_t o = ((img * g.out_h + oy) * g.out_w + ox) * co + n0;
      Epilogue16(v[p][0], v[p][1], bc.scale, bc.bias,
                 ep.side != nullptr ? ep.side + o : nullptr, ec, count,
                 t.output + o);
    }
  }
}

// -------------------------------------------------------------- work item

bool ItemAvx2(const WinogradItemArgs& t) {
  const ConvGeometry& g = *t.geo;
  const EpilogueArgs& ep = *t.ep;
  const int64_t ci = g.in_c;
  const int64_t cg = PairGroups(ci);
  const int64_t block_groups = t.w->k_groups;
  const Epilogue256Consts ec = MakeEpilogue256Consts(ep.side_scale, ep.lo, ep.hi);
  // Micro-tiles of at most kMr tiles, as even as possible.
  const int64_t mtiles = (t.tiles + kMr - 1) / kMr;
  const int64_t base = t.tiles / mtiles, extra = t.tiles % mtiles;
  bool stale = false;
  const int64_t nblocks = t.block_end - t.block_begin;
  int64_t panels = 0;  // K panels over all chunks (the loops below)
  for (int64_t c0 = 0; c0 < ci; c0 += kWinogradMaxChunk) {
    const int64_t n = Min(ci - c0, kWinogradMaxChunk);
    panels += (n + t.panel_channels - 1) / t.panel_channels;
  }
  const int64_t verify_bytes = t.verify ? t.verify_end - t.verify_begin : 0;
  const int64_t verify_steps = verify_bytes > 0 ? panels * nblocks * 16 : 0;
  int64_t panel_index = 0;
  for (int64_t c0 = 0; c0 < ci; c0 += kWinogradMaxChunk) {
    const int64_t c1 = Min(ci, c0 + kWinogradMaxChunk);
    const bool first_chunk = c0 == 0, last_chunk = c1 == ci;
    for (int64_t p0 = c0; p0 < c1; p0 += t.panel_channels, ++panel_index) {
      const int64_t p1 = Min(c1, p0 + t.panel_channels);
      const bool first_panel = p0 == c0, last_panel = p1 == c1;
      InputTransform(t, p0, p1);
      const int64_t q0 = p0 / 2;  // p0 is even (chunks and panels are)
      const int64_t pairs = (p1 - p0 + 1) / 2;
      for (int64_t b = t.block_begin; b < t.block_end; ++b) {
        const int8_t* block = t.w->data + b * block_groups * kGroupBytes;
        int32_t* m = t.m + (b - t.block_begin) * t.m_block;
        const int64_t step = verify_steps == 0 ? 0 : (panel_index * nblocks + b - t.block_begin) * 16;
        for (int64_t xi = 0; xi < 16; ++xi) {
          if (verify_steps > 0) {
            // The item's share of the filter compare, in equal slices
            // between the position GEMMs.
            const int64_t v0 = t.verify_begin + verify_bytes * (step + xi) / verify_steps;
            const int64_t v1 = t.verify_begin + verify_bytes * (step + xi + 1) / verify_steps;
            stale |= VerifyBytes(t.filter + v0, t.w->filter_copy + v0, v1 - v0);
          }
          const int8_t* panel = block + (xi * cg + q0) * kGroupBytes;
          const int16_t* a = t.v + xi * t.v_mat;
          int64_t r = 0;
          for (int64_t mt = 0; mt < mtiles; ++mt) {
            const int64_t h = base + (mt < extra ? 1 : 0);
            const int16_t* ar = a + r * t.v_ld;
            int32_t* mr = m + r * kMTile + xi * kBlock;
            switch (h) {
              case 6: MicroTile<6>(ar, t.v_ld, panel, pairs, mr, !first_panel); break;
              case 5: MicroTile<5>(ar, t.v_ld, panel, pairs, mr, !first_panel); break;
              case 4: MicroTile<4>(ar, t.v_ld, panel, pairs, mr, !first_panel); break;
              case 3: MicroTile<3>(ar, t.v_ld, panel, pairs, mr, !first_panel); break;
              case 2: MicroTile<2>(ar, t.v_ld, panel, pairs, mr, !first_panel); break;
              default: MicroTile<1>(ar, t.v_ld, panel, pairs, mr, !first_panel); break;
            }
            r += h;
          }
        }
        if (last_panel) {
          int32_t* y = t.y == nullptr
                           ? nullptr
                           : t.y + (b - t.block_begin) * t.tiles * 4 * kBlock;
          OutputBlock(t, b, m, y, first_chunk, last_chunk, ec);
        }
      }
    }
  }
  return stale;
}

}  // namespace

// The packed format as the cache sees it (only format, block, k_per_group,
// u8_activations and panel are used; there is no GEMM tile function).
extern const IsaKernels kWinogradAvx2Packing = {
    "avx2_winograd",
    kFormatWinogradI16,
    /*block=*/kBlock,
    /*k_per_group=*/2,
    /*kc_groups=*/0,
    /*mr=*/kMr,
    /*u8_activations=*/false,
    PanelWinograd,
    nullptr,
};

extern const WinogradKernels kWinogradAvx2 = {
    "avx2_winograd",
    &kWinogradAvx2Packing,
    /*max_tiles=*/kMaxTiles,
    /*panel_channels=*/kPanelChannels,
    ItemAvx2,
};

}  // namespace cpu
}  // namespace tf_fused_int8
