// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The 256-bit kernels shared by gemm_avxvnni.cc (u8 x s8 VPDPBUSD, VEX) and
// gemm_avx2.cc (int16 x int16 VPMADDWD + VPADDD, exact; and, for inputs
// known to be non-negative, VPMADDUBSW + VPMADDWD + VPADDD, exact there
// only: see gemm_avx2.cc): micro-tile 6 pixels x 16 channels (12 ymm
// accumulators, 2 ymm of weights, 1 broadcast), weights in kFormatYmmU8 /
// kFormatYmmI16 (gemm_kernels.h: 16-channel blocks, natural order, one int32 lane
// of 4 bytes per channel and k-group), epilogue cc/core/epilogue_avx2.h.
//
// An operand policy names its A form with two flags: kInt16 (A and B are
// int16 pairs, kFormatYmmI16) and, for the byte forms (kFormatYmmU8),
// kShift: A is x ^ 0x80 = x + 128 and the accumulators start at -128 *
// sum(w) (VPDPBUSD, any int8 input), or, without it, A is the int8 input
// as it is, which the policy may read as u8 only because every byte is in
// [0, 127] (the accumulators start at zero).
//
// Include ONLY from those two files (needs -mavx2 -mfma); everything is a
// template on the operand policy or has internal linkage, so each includer
// gets its own copy compiled with its own flags.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_YMM_H_
#define TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_YMM_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cc/core/cpu/gemm/gemm_isa_common.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/epilogue.h"
#include "cc/core/epilogue_avx2.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

constexpr int64_t kYmmBlock = 16;               // channels per block (2 ymm)
constexpr int64_t kYmmGroupBytes = kYmmBlock * 4;  // one k-group of a block
constexpr int kYmmMr = 6;
// How far ahead (rows) a pointwise layer's output rows are prefetched
// (PrefetchOutputRows). One Zen 5 thread, bench_core, alternated:
// 8x112x112x16 -> 96 avxvnni 1595-1667 -> 1522-1597 us, avx2 2343-2628 ->
// 2264-2542 us; 8x56x56x24 -> 144, 8x56x56x64 -> 256 and batch 1 within
// the noise (the ymm paths are further from the memory limit than
// avx512vnni, which gained 27-30% on the first).
constexpr int64_t kYmmOutAhead = 16;
constexpr int64_t kYmmKcGroups = 256;  // K panel: 256 * 64 B = 16 KiB

// 16 filter bytes of row k, channels [n0, n0 + 16) (zeros past Co / K).
inline __m128i LoadFilterRow16(const PanelArgs& p, int64_t k, int64_t n0) {
  if (k >= p.k) return _mm_setzero_si128();
  const int8_t* src = p.filter + k * p.out_c + n0;
  const int64_t valid = p.out_c - n0;
  return LoadBytes16(src, static_cast<int>(Min(valid, 16)));
}

// Packs / verifies a panel. kInt16: pairs of sign-extended int16 per lane
// (k = 2g, 2g+1); otherwise four int8 per lane (k = 4g .. 4g+3).
template <bool kInt16>
bool PanelYmm(const PanelArgs& p) {
  const int64_t n0 = p.block_index * kYmmBlock;
  int8_t* dst = p.panel;
  __m256i diff = _mm256_setzero_si256();
  for (int64_t g = p.g0; g < p.g1; ++g, dst += kYmmGroupBytes) {
    __m256i v0, v1;
    if (kInt16) {
      const __m128i r0 = LoadFilterRow16(p, 2 * g, n0);
      const __m128i r1 = LoadFilterRow16(p, 2 * g + 1, n0);
      v0 = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(r0, r1));  // channels 0-7
      v1 = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(r0, r1));  // channels 8-15
    } else {
      const __m128i r0 = LoadFilterRow16(p, 4 * g, n0);
      const __m128i r1 = LoadFilterRow16(p, 4 * g + 1, n0);
      const __m128i r2 = LoadFilterRow16(p, 4 * g + 2, n0);
      const __m128i r3 = LoadFilterRow16(p, 4 * g + 3, n0);
      const __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
      const __m128i t2 = _mm_unpacklo_epi8(r2, r3), t3 = _mm_unpackhi_epi8(r2, r3);
      v0 = _mm256_set_m128i(_mm_unpackhi_epi16(t0, t2), _mm_unpacklo_epi16(t0, t2));
      v1 = _mm256_set_m128i(_mm_unpackhi_epi16(t1, t3), _mm_unpacklo_epi16(t1, t3));
    }
    if (p.verify) {
      const __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst));
      const __m256i s1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + 32));
      diff = _mm256_or_si256(diff, _mm256_or_si256(_mm256_xor_si256(v0, s0),
                                                   _mm256_xor_si256(v1, s1)));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), v1);
    }
  }
  return !_mm256_testz_si256(diff, diff);
}

// Im2ColSlice's copy policy (gemm_isa_common.h) for the A operand form:
// int16 (kInt16): 16 inputs a vector sign-extended to 16 int16, padding 0;
// u8 (kShift): 32 inputs a vector, x ^ 0x80, padding 0x80 (a zero
// activation); otherwise the int8 bytes as they are, padding 0. A partial
// load goes through a zeroed copy (AVX2 has no masked byte loads).
template <bool kInt16>
struct YmmCopyInput {
  using Vec = __m256i;
};
template <>
struct YmmCopyInput<true> {
  using Vec = __m128i;
};

template <bool kInt16, bool kShift>
struct YmmCopy {
  using Vec = typename YmmCopyInput<kInt16>::Vec;
  static constexpr int64_t kElemBytes = kInt16 ? 2 : 1;
  static constexpr int64_t kStep = sizeof(Vec);
  static Vec Load(const int8_t* src) {
    Vec v;
    std::memcpy(&v, src, sizeof(v));  // an unaligned vector load
    return v;
  }
  static Vec LoadPartial(const int8_t* src, int64_t n) {
    alignas(sizeof(Vec)) int8_t tmp[sizeof(Vec)] = {0};
    std::memcpy(tmp, src, static_cast<size_t>(n));
    return Load(tmp);
  }
  static void Store(uint8_t* dst, Vec v) {
    __m256i a;
    if constexpr (kInt16) {
      a = _mm256_cvtepi8_epi16(v);
    } else if constexpr (kShift) {
      a = _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
    } else {
      a = v;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), a);
  }
  static void StorePad(uint8_t* dst) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                        kShift ? _mm256_set1_epi8(static_cast<char>(0x80))
                               : _mm256_setzero_si256());
  }
  // 16 inputs (gemm_isa_common.h HasCopy16: the short runs of a stem's
  // windows, CopyWindows): 16 int16 (32 bytes) or 16 u8. bench_core, one
  // Zen 5 thread, 9 rounds alternated, median time ratio: MobileNetV2's
  // 3x3x3 stem avx2 0.94 (batch 8 0.93), avxvnni 0.87 (0.89); ResNet50's
  // 7x7x3 avx2 0.97, avxvnni 0.98; 56x56x64 3x3 unchanged.
  static void Copy16(uint8_t* dst, const int8_t* src) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    if constexpr (kInt16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_cvtepi8_epi16(v));
    } else if constexpr (kShift) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                       _mm_xor_si128(v, _mm_set1_epi8(static_cast<char>(0x80))));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), v);
    }
  }
};

// A block's scales and biases: gemm_isa_common.h's Block16Consts.
static_assert(kYmmBlock == 16, "Block16Consts holds 16 channels");

struct YmmTileContext {
  const uint8_t* a;
  int64_t lda;
  const int8_t* panel;
  int64_t groups;
  const int32_t* init;  // starting accumulators unless from_partial
  bool from_partial;    // partial sums (+ `add` if not null)
  const int32_t* add;
  bool last;
  int32_t* partial;  // this block's first row
  int64_t partial_ld;  // int32 between partial rows
  const Block16Consts* bc;
  const Epilogue256Consts* ec;
  const int8_t* side;
  int8_t* out;
  int64_t ldo;
  int count;  // valid channels in the block
};

// Policy: static __m256i Dot(__m256i acc, __m256i a, __m256i b), kInt16,
// kShift (see the top of this file).
template <class Policy, int MR>
inline void YmmMicroTile(const YmmTileContext& t) {
  __m256i acc[MR][2];
  if (!t.from_partial) {
    const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.init));
    const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.init + 8));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = c0;
      acc[i][1] = c1;
    }
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.partial + i * t.partial_ld));
      acc[i][1] = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.partial + i * t.partial_ld + 8));
    }
    if (t.add != nullptr) {
      const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.add));
      const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.add + 8));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        acc[i][0] = _mm256_add_epi32(acc[i][0], c0);
        acc[i][1] = _mm256_add_epi32(acc[i][1], c1);
      }
    }
  }
  const uint8_t* a = t.a;
  const int8_t* b = t.panel;
  const int64_t lda = t.lda;
  for (int64_t g = 0; g < t.groups; ++g) {
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + 32));
    b += kYmmGroupBytes;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256i av = _mm256_set1_epi32(LoadU32(a + i * lda));
      acc[i][0] = Policy::Dot(acc[i][0], av, b0);
      acc[i][1] = Policy::Dot(acc[i][1], av, b1);
    }
    a += 4;
  }
  if (t.last) {
    // Rows in pairs through one packing chain (Epilogue16x2), an odd last
    // row alone. bench_core, one Zen 5 thread, 15 rounds alternated, median
    // time ratio against one Epilogue16 a row: avx2 112x112x16 -> 96 0.93,
    // 56x56x24 -> 144 0.95, 14x14x384 -> 64 0.98, 56x56x64 -> 256 0.98;
    // avxvnni 112x112x16 -> 96 0.86, 56x56x24 -> 144 0.91. With or without
    // the upper clamp (Epilogue256Consts::clamp_hi), chosen once per
    // micro-tile.
    auto epilogue = [&](auto clamp_hi) {
      constexpr bool kClampHi = decltype(clamp_hi)::value;
#pragma GCC unroll 8
      for (int i = 0; i + 1 < MR; i += 2) {
        Epilogue16x2<kClampHi>(acc[i][0], acc[i][1], acc[i + 1][0], acc[i + 1][1],
                               t.bc->scale, t.bc->bias,
                               t.side ? t.side + i * t.ldo : nullptr,
                               t.side ? t.side + (i + 1) * t.ldo : nullptr, *t.ec,
                               t.count, t.out + i * t.ldo, t.out + (i + 1) * t.ldo);
      }
      if (MR % 2 == 1) {
        Epilogue16<kClampHi>(acc[MR - 1][0], acc[MR - 1][1], t.bc->scale, t.bc->bias,
                             t.side ? t.side + (MR - 1) * t.ldo : nullptr, *t.ec,
                             t.count, t.out + (MR - 1) * t.ldo);
      }
    };
    WithClampHi(t.ec->clamp_hi, epilogue);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(t.partial + i * t.partial_ld), acc[i][0]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(t.partial + i * t.partial_ld + 8), acc[i][1]);
    }
  }
}

// sum_k w[k][c] of a packed byte panel added to sums[16]: u8 ones x the
// panel's bytes (VNNI; only kShift policies need the sums), exact.
template <class Policy>
inline void YmmAddPanelSums(const int8_t* panel, int64_t groups, int32_t* sums) {
  static_assert(Policy::kShift, "only the shifted u8 form has column offsets");
  const __m256i ones = _mm256_set1_epi8(1);
  __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums));
  __m256i s1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + 8));
  for (int64_t g = 0; g < groups; ++g, panel += kYmmGroupBytes) {
    s0 = Policy::Dot(s0, ones, _mm256_load_si256(reinterpret_cast<const __m256i*>(panel)));
    s1 = Policy::Dot(s1, ones, _mm256_load_si256(reinterpret_cast<const __m256i*>(panel + 32)));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums), s0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + 8), s1);
}

// The loop structure of gemm_avx512vnni.cc's GemmTileZmm (see there): K
// panels outer, 16-channel blocks inner, micro-tiles innermost, A rows
// gathered just before first use; cached weights verified in slices over
// the first block's micro-tiles, or weights packed on the fly per block.
template <class Policy>
bool GemmTileYmm(const GemmTileArgs& t) {
  const EpilogueArgs& ep = *t.ep;
  const int64_t co = t.out_c;
  const int64_t groups = t.k_groups;
  const int64_t kc = t.kc_groups;
  const int64_t kpg = Policy::kInt16 ? 2 : 4;  // k per group
  const bool cached = t.w != nullptr;
  const bool verify = cached && t.verify;
  const int64_t nblocks = t.block_end - t.block_begin;
  const int64_t c_begin = t.block_begin * kYmmBlock;
  const int64_t c_end = Min(co, t.block_end * kYmmBlock);
  const int64_t partial_ld = nblocks * kYmmBlock;
  // clamp_hi is set per block below (UpperClampNeeded).
  Epilogue256Consts ec = MakeEpilogue256Consts(ep.side_scale, ep.lo, ep.hi);
  bool stale = false;
  const int64_t tiles = (t.rows + kYmmMr - 1) / kYmmMr;
  const int64_t base = t.rows / tiles, extra = t.rows % tiles;
  Block16Consts bc;
  alignas(32) int32_t offset[kYmmBlock];
  alignas(32) static const int32_t kZeros[kYmmBlock] = {0};
  if (!cached) {
    for (int64_t i = 0; i < nblocks * kYmmBlock; ++i) t.col_sums[i] = 0;
  }
  YmmTileContext tc;
  // A pointwise layer's rows are the input itself where the A form is the
  // input's bytes (no kInt16, no kShift) and the groups of 4 fit its rows
  // exactly (so no read past the input's end): read in place, no copy.
  // bench_core, one thread, avx2 on a non-negative input, copy -> in place,
  // alternated twice (Xeon with AMX, KVM): MobileNetV2's 56x56x144 -> 24
  // at batch 8 1469 -> 1351-1368 us (the copy was 8% of its samples), at
  // batch 1 177 -> 166-178; 28x28x192 -> 32 54-56 -> 52; 14x14x576 -> 96
  // and 56x56x64 -> 256 unchanged.
  const bool in_place = !Policy::kInt16 && !Policy::kShift && t.padded == nullptr &&
                        IsDirectGemm(*t.geo) && t.geo->in_c % 4 == 0;
  const int64_t in_c = t.geo->in_c;
  tc.lda = in_place ? in_c : t.lda;
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
    const int64_t k_begin = kpg * g0, k_end = Min(kpg * g1, t.k);
    const int64_t vrows = k_end - k_begin;
    const int64_t vslice = ((vrows + tiles - 1) / tiles + kpg - 1) / kpg * kpg;
    const int64_t row_lines = (c_end - c_begin + 63) / 64 + 1;
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t nb = t.block_begin + b;
      const int64_t n0 = nb * kYmmBlock;
      const int64_t valid = Min(kYmmBlock, co - n0);
      FillBlock16Consts(ep, n0, co, &bc);
      ec.clamp_hi = BlockUpperClampNeeded(ep, groups * kpg, AbsMax16IgnoringNaN(bc.scale),
                                          AbsMax16IgnoringNaN(bc.bias));
      tc.count = static_cast<int>(valid);
      const int8_t* next = nullptr;
      int64_t next_lines = 0;
      if (cached) {
        const int8_t* data = t.w->data;
        tc.panel = data + (nb * groups + g0) * kYmmGroupBytes;
        tc.init = Policy::kShift ? t.w->col_offset + n0 : kZeros;
        tc.from_partial = !first;
        tc.add = nullptr;
        if (b + 1 < nblocks) {
          next = data + ((nb + 1) * groups + g0) * kYmmGroupBytes;
          next_lines = (g1 - g0) * (kYmmGroupBytes / 64);
        } else if (g1 < groups) {
          next = data + (t.block_begin * groups + g1) * kYmmGroupBytes;
          next_lines = (Min(groups, g1 + kc) - g1) * (kYmmGroupBytes / 64);
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
        PanelYmm<Policy::kInt16>(pa);
        int32_t* sums = t.col_sums + b * kYmmBlock;
        if constexpr (Policy::kShift) {
          YmmAddPanelSums<Policy>(t.panel_buffer, g1 - g0, sums);
        }
        if (tc.last) {
          for (int64_t p = 0; p < kYmmBlock; ++p) {
            offset[p] = !Policy::kShift ? 0 : static_cast<int32_t>(
                0u - (static_cast<uint32_t>(sums[p]) << 7));
          }
        }
        tc.panel = t.panel_buffer;
        tc.init = first && tc.last ? offset : kZeros;
        tc.from_partial = !first;
        tc.add = !first && tc.last ? offset : nullptr;
      }
      const bool verifying = verify_panel && b == 0;
      const bool out_ahead =
          tc.last && b == 0 && HoldsWholeRows(t, kYmmBlock) && IsDirectGemm(*t.geo);
      int64_t r = 0;
      PanelRows<YmmCopy<Policy::kInt16, Policy::kShift>> rows(t, b == 0, nblocks == 1,
                                                              kpg * g0, kpg * g1);
      TileLineShare share(next_lines, tiles);
      for (int64_t mt = 0; mt < tiles; ++mt) {
        if (next != nullptr) {
          int64_t first;
          const int64_t lines = share.Take(mt, &first);
          PrefetchL2(next + 64 * first, lines);
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
        tc.a = in_place ? reinterpret_cast<const uint8_t*>(t.input) +
                              (t.p0 + r) * in_c + kpg * g0
                        : rows.Rows(mt, tiles, base, extra, r);
        if (out_ahead) PrefetchOutputRows(t, r + kYmmOutAhead, r + kYmmOutAhead + h);
        tc.partial = t.partial + r * partial_ld + b * kYmmBlock;
        tc.side = ep.side ? ep.side + pixel * co + n0 : nullptr;
        tc.out = t.output + pixel * co + n0;
        switch (h) {
          case 6: YmmMicroTile<Policy, 6>(tc); break;
          case 5: YmmMicroTile<Policy, 5>(tc); break;
          case 4: YmmMicroTile<Policy, 4>(tc); break;
          case 3: YmmMicroTile<Policy, 3>(tc); break;
          case 2: YmmMicroTile<Policy, 2>(tc); break;
          default: YmmMicroTile<Policy, 1>(tc); break;
        }
        r += h;
        if (verifying && v1 > v0) {
          stale |= VerifyPanelRows<PanelYmm<Policy::kInt16>>(t, v0, v1, kpg,
                                                             kYmmGroupBytes);
        }
      }
    }
  }
  return stale;
}

// ------------------------------------------------------------------- GEMV
//
// Few output pixels (gemm_kernels.h, GemvArgs) on 256-bit vectors: the
// [K, Co] filter read in place, 16 channels of a row sign-extended to int16
// (VPMOVSXBW) per ymm, and two exact VPMADDWDs per row and 16 channels: one
// with the activation x_k in the low int16 of every dword (zero high: lane d
// gains x_k * w[k][c + 2d], the even channels), one with it in the high
// int16 (the odd channels). Signed x signed: no offset. A dword unpack and
// a 128-bit permute put the even / odd sums in natural order for Epilogue16.
// Same operation on the avx2 and avxvnni paths (VPMADDWD is AVX2).

constexpr int64_t kGemvYmmPrefetchRows = 16;

// 16 filter bytes from src sign-extended to int16; reads only `readable`
// (1-15 near the filter's end) of them.
inline __m256i LoadWeights16(const int8_t* src, int64_t readable) {
  return _mm256_cvtepi8_epi16(LoadBytes16(src, static_cast<int>(Min(readable, 16))));
}

// R rows x NG groups of 16 channels from channel c0 (ng_count of them real).
template <int R, int NG>
void GemvYmmPass(const GemvArgs& t, int64_t c0, int64_t ng_count,
                 const Epilogue256Consts& ec) {
  const int64_t co = t.out_c;
  const int8_t* filter_end = t.filter + t.k * co;
  __m256i even[R][NG], odd[R][NG];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g) even[r][g] = odd[r][g] = _mm256_setzero_si256();
  }
  const int64_t strip_lines = (Min(co - c0, NG * 16) + 63) / 64 + 1;
  const int8_t* w = t.filter + c0;
  for (int64_t k = 0; k < t.k; ++k, w += co) {
    if (k + kGemvYmmPrefetchRows < t.k) {
      const int8_t* pf = w + kGemvYmmPrefetchRows * co;
      for (int64_t l = 0; l < strip_lines; ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * l), _MM_HINT_T0);
      }
    }
    __m256i wv[NG];
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g) {
      // Bytes past Co belong to the next row (results never stored) or,
      // on the last row, are not read; groups past Co are not loaded.
      wv[g] = g < ng_count ? LoadWeights16(w + 16 * g, filter_end - (w + 16 * g))
                           : _mm256_setzero_si256();
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const int32_t x = static_cast<uint16_t>(static_cast<int16_t>(t.a[r * t.lda + k]));
      const __m256i lo = _mm256_set1_epi32(x);
      const __m256i hi = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(x) << 16));
#pragma GCC unroll 4
      for (int g = 0; g < NG; ++g) {
        even[r][g] = _mm256_add_epi32(even[r][g], _mm256_madd_epi16(wv[g], lo));
        odd[r][g] = _mm256_add_epi32(odd[r][g], _mm256_madd_epi16(wv[g], hi));
      }
    }
  }
  const EpilogueArgs& ep = *t.ep;
#pragma GCC unroll 4
  for (int g = 0; g < NG; ++g) {
    if (g >= ng_count) break;
    const int64_t n0 = c0 + 16 * g;
    const int count = static_cast<int>(Min(16, co - n0));
    Block16Consts bc;
    FillBlock16Consts(ep, n0, co, &bc);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      // [e0 o0 e1 o1 | e4 o4 e5 o5] = channels [0-3 | 8-11], and [4-7 | 12-15].
      const __m256i t0 = _mm256_unpacklo_epi32(even[r][g], odd[r][g]);
      const __m256i t1 = _mm256_unpackhi_epi32(even[r][g], odd[r][g]);
      Epilogue16(_mm256_permute2x128_si256(t0, t1, 0x20),
                 _mm256_permute2x128_si256(t0, t1, 0x31), bc.scale, bc.bias,
                 ep.side ? ep.side + r * co + n0 : nullptr, ec, count,
                 t.output + r * co + n0);
    }
  }
}

inline void GemvYmm(const GemvArgs& t) {
  const EpilogueArgs& ep = *t.ep;
  const Epilogue256Consts ec = MakeEpilogue256Consts(ep.side_scale, ep.lo, ep.hi);
  const int64_t c_begin = t.block_begin * kGemvBlock;
  const int64_t c_end = Min(t.out_c, t.block_end * kGemvBlock);
  static_assert(kGemvMaxRows == 2, "GemvYmm instantiates 1 and 2 rows");
  const int64_t step = t.rows == 1 ? 64 : 32;
  for (int64_t c = c_begin; c < c_end; c += step) {
    const int64_t groups = (Min(step, c_end - c) + 15) / 16;
    if (t.rows == 1) {
      GemvYmmPass<1, 4>(t, c, groups, ec);
    } else {
      GemvYmmPass<2, 2>(t, c, groups, ec);
    }
  }
}

// An instruction set's table for the ymm kernels with operand policy
// Policy (its panel format follows kInt16). u8_activations names the
// packing's column offsets, -128 * sum(w) for every byte form: the avx2
// and avxvnni kernels for non-negative inputs share kFormatYmmU8 entries
// with avxvnni's shifted form in the cache and read no offsets.
template <class Policy>
constexpr IsaKernels YmmKernels(const char* name) {
  IsaKernels k{name,
               Policy::kInt16 ? kFormatYmmI16 : kFormatYmmU8,
               /*block=*/kYmmBlock,
               /*k_per_group=*/Policy::kInt16 ? 2 : 4,
               /*kc_groups=*/kYmmKcGroups,
               /*mr=*/kYmmMr,
               /*u8_activations=*/!Policy::kInt16,
               PanelYmm<Policy::kInt16>,
               GemmTileYmm<Policy>};
  k.lane_bytes = 4;
  k.gemv = GemvYmm;
  // A pinned filter takes the packed GEMM instead of the GEMV where the
  // packing is bytes (the same bytes as the filter: 4-byte groups), as on
  // avx512vnni. bench_core, one Zen 4 thread, avx2 forced, pinned, an input
  // in [0, 127] (VPMADDUBSW), GEMV -> GEMM: 1x1x960 -> 1280 64.6 -> 23.5 us
  // (16 rotating filters, from L3: 146 -> 48), 1x1x1280 -> 1000 65 -> 26
  // (164 -> 70), batch 2 157 -> 42 (191 -> 82). The int16 packing (twice the
  // filter's bytes) keeps the GEMV: 1x1x960 -> 1280 from L3 121 -> 138 us.
  // avxvnni (VPDPBUSD, fewer instructions than the VPMADDUBSW chain) not
  // measured: no AVX-VNNI CPU at hand. (avx2's two tables now run a GEMV
  // over the byte packing for pinned filters before either: gemm_avx2.cc,
  // IsaKernels::gemv_packed.)
  k.gemv_unpinned_only = !Policy::kInt16;
  k.rows_first_small_filter = true;
  return k;
}

}  // namespace
}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_YMM_H_
