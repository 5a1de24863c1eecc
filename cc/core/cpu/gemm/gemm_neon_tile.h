// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The aarch64 GEMM kernels' shared parts: the tile loop (the loop structure
// of gemm_avx512vnni.cc's GemmTileZmm / gemm_ymm.h's GemmTileYmm: K panels
// outer, 16-channel blocks inner, micro-tiles innermost, A rows gathered
// just before their first use, cached weights verified in slices over the
// first block's micro-tiles or weights packed on the fly per block), the A
// copy policy, the kFormatNeonS8x4 packing and the natural-order
// accumulator load/store with the epilogue fused into the store
// (cc/core/epilogue_neon.h). The micro-kernels come from a policy K:
//
//   kKPerGroup, kGroupBytes   k per group (4 or 8), bytes per block and group
//   kMr                       micro-tile rows
//   bool Panel(const PanelArgs&)      pack / verify (gemm_kernels.h)
//   template <int MR> void MicroTile(const NeonTileContext&)
//
// gemm_neon.cc (SMULL + SADALP), gemm_dotprod.cc (SDOT), gemm_i8mm.cc
// (SMMLA). Every aarch64 operand is signed int8 as it is: A rows are plain
// copies of the input (padding 0), B is the filter, no column offsets.
//
// Include ONLY from those three files: everything is in an anonymous
// namespace, so each includer gets its own copy compiled with its own
// -march flags and the linker can never merge a +dotprod / +i8mm copy into
// another unit (gemm_kernels.h says why that matters).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_NEON_TILE_H_
#define TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_NEON_TILE_H_

#if !defined(__aarch64__)
#error "gemm_neon_tile.h belongs to the aarch64 instruction-set translation units only"
#endif

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "cc/core/cpu/gemm/gemm_isa_common.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/epilogue_neon.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

constexpr int64_t kNeonBlock = 16;  // channels per block (4 int32x4 per row)

// ---------------------------------------------------------------- packing

// 16 filter bytes of row k, channels [n0, n0 + 16) (zeros past Co / K).
inline int8x16_t LoadFilterRow16(const PanelArgs& p, int64_t k, int64_t n0) {
  if (k >= p.k) return vdupq_n_s8(0);
  const int8_t* src = p.filter + k * p.out_c + n0;
  const int64_t valid = p.out_c - n0;
  if (valid >= 16) return vld1q_s8(src);
  int8_t tmp[16] = {0};
  std::memcpy(tmp, src, static_cast<size_t>(valid));
  return vld1q_s8(tmp);
}

// Writes v to dst, or (verify) ORs its difference from dst into *diff.
inline void PutOrCompare(int8_t* dst, int8x16_t v, bool verify,
                         uint8x16_t* diff) {
  if (verify) {
    *diff = vorrq_u8(*diff, vreinterpretq_u8_s8(veorq_s8(v, vld1q_s8(dst))));
  } else {
    vst1q_s8(dst, v);
  }
}

// kFormatNeonS8x4: per group (filter rows 4g .. 4g + 3) 16 channels x 4
// bytes, channel c's four weights at byte 4c. Two zip stages transpose the
// four 16-byte rows: bytes (r0, r1) and (r2, r3) per channel, then the int16
// pairs of both per channel.
inline bool PanelS8x4(const PanelArgs& p) {
  const int64_t n0 = p.block_index * kNeonBlock;
  int8_t* dst = p.panel;
  uint8x16_t diff = vdupq_n_u8(0);
  for (int64_t g = p.g0; g < p.g1; ++g, dst += 4 * kNeonBlock) {
    const int8x16_t r0 = LoadFilterRow16(p, 4 * g, n0);
    const int8x16_t r1 = LoadFilterRow16(p, 4 * g + 1, n0);
    const int8x16_t r2 = LoadFilterRow16(p, 4 * g + 2, n0);
    const int8x16_t r3 = LoadFilterRow16(p, 4 * g + 3, n0);
    const int16x8_t t0 = vreinterpretq_s16_s8(vzip1q_s8(r0, r1));  // ch 0-7
    const int16x8_t t1 = vreinterpretq_s16_s8(vzip2q_s8(r0, r1));  // ch 8-15
    const int16x8_t t2 = vreinterpretq_s16_s8(vzip1q_s8(r2, r3));
    const int16x8_t t3 = vreinterpretq_s16_s8(vzip2q_s8(r2, r3));
    PutOrCompare(dst, vreinterpretq_s8_s16(vzip1q_s16(t0, t2)), p.verify, &diff);
    PutOrCompare(dst + 16, vreinterpretq_s8_s16(vzip2q_s16(t0, t2)), p.verify, &diff);
    PutOrCompare(dst + 32, vreinterpretq_s8_s16(vzip1q_s16(t1, t3)), p.verify, &diff);
    PutOrCompare(dst + 48, vreinterpretq_s8_s16(vzip2q_s16(t1, t3)), p.verify, &diff);
  }
  return vmaxvq_u8(diff) != 0;
}

// ----------------------------------------------------------------- im2col

// Im2ColSlice's copy policy (gemm_isa_common.h): signed int8 as it is, 16
// bytes a vector, padding 0 (a zero activation). No masked loads on NEON:
// a partial load goes through a zeroed copy.
struct NeonS8Copy {
  using Vec = int8x16_t;
  static constexpr int64_t kElemBytes = 1;
  static constexpr int64_t kStep = 16;
  static Vec Load(const int8_t* src) { return vld1q_s8(src); }
  static Vec LoadPartial(const int8_t* src, int64_t n) {
    int8_t tmp[16] = {0};
    std::memcpy(tmp, src, static_cast<size_t>(n));
    return vld1q_s8(tmp);
  }
  static void Store(uint8_t* dst, Vec v) {
    vst1q_u8(dst, vreinterpretq_u8_s8(v));
  }
  static void StorePad(uint8_t* dst) { vst1q_u8(dst, vdupq_n_u8(0)); }
};

// ------------------------------------------------------------------- GEMM

struct NeonTileContext {
  const uint8_t* a;  // the micro-tile's first A row
  int64_t lda;
  const int8_t* panel;  // the block's weight panel
  int64_t groups;
  bool from_partial;  // start from the partial sums (else from zero)
  bool last;          // epilogue (else store the partial sums)
  int32_t* partial;   // the micro-tile's first row, this block
  int64_t partial_ld;  // int32 between partial rows
  const float* scale;  // 16 floats, natural order
  const float* bias;
  const EpilogueNeonConsts* ec;
  const int8_t* side;  // first row's side input at the block, or nullptr
  int8_t* out;         // first row's output at the block
  int64_t ldo;         // Co
  int count;           // valid channels in the block
};

// Natural-order accumulators (acc[i][j]: row i, channels 4j .. 4j + 3):
// zero, or the partial sums of the previous K panels.
template <int MR>
inline void LoadNatural(const NeonTileContext& t, int32x4_t (&acc)[MR][4]) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      acc[i][j] = t.from_partial ? vld1q_s32(t.partial + i * t.partial_ld + 4 * j)
                                 : vdupq_n_s32(0);
    }
  }
}

// Row i of natural-order accumulators: the epilogue into the output (last
// panel) or the partial sums.
inline void StoreNaturalRow(const NeonTileContext& t, int i,
                            const int32x4_t (&acc)[4]) {
  if (t.last) {
    EpilogueNeon16(acc, t.scale, t.bias, t.side ? t.side + i * t.ldo : nullptr,
                   *t.ec, t.count, t.out + i * t.ldo);
  } else {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) vst1q_s32(t.partial + i * t.partial_ld + 4 * j, acc[j]);
  }
}

// Runs K's micro-tile of height h (1 .. K::kMr).
template <class K, int MR = K::kMr>
inline void RunMicroTile(int64_t h, const NeonTileContext& tc) {
  if constexpr (MR > 1) {
    if (h < MR) {
      RunMicroTile<K, MR - 1>(h, tc);
      return;
    }
  }
  K::template MicroTile<MR>(tc);
}

template <class K>
bool GemmTileNeon(const GemmTileArgs& t) {
  const EpilogueArgs& ep = *t.ep;
  const int64_t co = t.out_c;
  const int64_t groups = t.k_groups;
  const int64_t kc = t.kc_groups;
  constexpr int64_t kpg = K::kKPerGroup;
  const bool cached = t.w != nullptr;
  const bool verify = cached && t.verify;
  const int64_t nblocks = t.block_end - t.block_begin;
  const int64_t c_begin = t.block_begin * kNeonBlock;
  const int64_t c_end = Min(co, t.block_end * kNeonBlock);
  const int64_t partial_ld = nblocks * kNeonBlock;
  const EpilogueNeonConsts ec = MakeEpilogueNeonConsts(ep.side_scale, ep.lo, ep.hi);
  bool stale = false;
  // Micro-tiles of even heights <= kMr.
  const int64_t tiles = (t.rows + K::kMr - 1) / K::kMr;
  const int64_t base = t.rows / tiles, extra = t.rows % tiles;
  float scale[kNeonBlock], bias[kNeonBlock];
  NeonTileContext tc;
  tc.lda = t.lda;
  tc.scale = scale;
  tc.bias = bias;
  tc.ec = &ec;
  tc.ldo = co;
  tc.partial_ld = partial_ld;
  for (int64_t g0 = 0; g0 < groups; g0 += kc) {
    const int64_t g1 = Min(groups, g0 + kc);
    const bool first = g0 == 0;
    tc.groups = g1 - g0;
    tc.last = g1 == groups;
    tc.from_partial = !first;
    const bool verify_panel =
        verify && (g0 / kc) % t.verify_stride == t.verify_phase;
    // Filter rows of this panel, verified over the first block's tiles.
    const int64_t k_begin = kpg * g0, k_end = Min(kpg * g1, t.k);
    const int64_t vrows = k_end - k_begin;
    const int64_t vslice = ((vrows + tiles - 1) / tiles + kpg - 1) / kpg * kpg;
    const int64_t row_lines = (c_end - c_begin + 63) / 64 + 1;
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t nb = t.block_begin + b;
      const int64_t n0 = nb * kNeonBlock;
      for (int64_t p = 0; p < kNeonBlock; ++p) {
        const int64_t c = n0 + p;
        const bool in = c < co;
        scale[p] = in ? ep.scale[ep.per_channel_scale ? c : 0] : 0.0f;
        bias[p] = in ? ep.bias[c] : 0.0f;
      }
      tc.count = static_cast<int>(Min(kNeonBlock, co - n0));
      const int8_t* next = nullptr;
      int64_t next_lines = 0;
      if (cached) {
        const int8_t* data = t.w->data;
        tc.panel = data + (nb * groups + g0) * K::kGroupBytes;
        // The next (panel, block) in loop order, prefetched over the tiles.
        if (b + 1 < nblocks) {
          next = data + ((nb + 1) * groups + g0) * K::kGroupBytes;
          next_lines = (g1 - g0) * (K::kGroupBytes / 64);
        } else if (g1 < groups) {
          next = data + (t.block_begin * groups + g1) * K::kGroupBytes;
          next_lines = (Min(groups, g1 + kc) - g1) * (K::kGroupBytes / 64);
        }
      } else {
        PanelArgs pa;
        pa.filter = t.filter;
        pa.k = t.k;
        pa.out_c = co;
        pa.block_index = nb;
        pa.g0 = g0;
        pa.g1 = g1;
        pa.panel = t.panel_buffer;
        pa.verify = false;
        K::Panel(pa);
        tc.panel = t.panel_buffer;
      }
      const bool verifying = verify_panel && b == 0;
      int64_t r = 0;
      PanelRows<NeonS8Copy> rows(t, b == 0, nblocks == 1, kpg * g0, kpg * g1);
      for (int64_t mt = 0; mt < tiles; ++mt) {
        if (next != nullptr) {
          const int64_t l0 = next_lines * mt / tiles;
          PrefetchL2(next + 64 * l0, next_lines * (mt + 1) / tiles - l0);
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
        tc.a = rows.Rows(mt, tiles, base, extra, r);
        // Partial sums exist only with several K panels (t.partial is null
        // otherwise and is never offset then).
        tc.partial = t.partial != nullptr
                         ? t.partial + r * partial_ld + b * kNeonBlock
                         : nullptr;
        tc.side = ep.side ? ep.side + pixel * co + n0 : nullptr;
        tc.out = t.output + pixel * co + n0;
        RunMicroTile<K>(h, tc);
        r += h;
        if (verifying && v1 > v0) {
          stale |= VerifyPanelRows<K::Panel>(t, v0, v1, kpg, K::kGroupBytes);
        }
      }
    }
  }
  return stale;
}

}  // namespace
}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_NEON_TILE_H_
