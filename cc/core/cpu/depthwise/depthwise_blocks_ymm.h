// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The 3x3 depthwise block kernel on ymm (stride 1 or 2, dilation 1:
// MobileNet's depthwise layers), blocks of 32 channels, and a 5x5 and 7x7
// one (the section "KxK" below): the 256-bit forms of depthwise_avx512vnni.cc's
// full-block kernels (see there for the method),
// shared by depthwise_avxvnni.cc (VEX VPDPBUSD), depthwise_avx2.cc
// (VPMADDUBSW-based dots, below and there) and depthwise_ymm_avx512vnni.cc
// (EVEX VPDPBUSD on ymm), which differ only in the dot of four bytes a lane
// (DotPolicy, below).
//
// A lane (one channel) holds four horizontally adjacent input pixels D =
// (x[q], .., x[q+3]) as u8, built for 32 channels by 8 unpacks
// (Interleave4: ymm j, 128-bit lane L, dword i = channel 16L + 4j + i); per
// filter row the weights are arranged the same way as dwords:
//   stride 1: pixel ox = D . (w0, w1, w2, 0), pixel ox+1 = D . (0, w0, w1, w2)
//   stride 2: pixel ox = D . (w0, w1, w2, 0),
//             pixel ox+1 = D . (0, 0, w0, w1) + E . (w2, 0, 0, 0), E = x[q+4]
//             in each dword's low byte (VPSHUFB)
// so a pair of pixels costs 8 (stride 1) or 12 (stride 2) dots per filter
// row and 32 channels. kFlip: the u8 operand is x ^ 0x80 (any int8 input)
// and the +128 is undone per valid filter row by -128 * (w0 + w1 + w2) (the
// accumulators start there); a column in the padding is the zero
// activation, 0x80 after the flip, whose taps that correction takes off
// again. Without kFlip the operand is x itself, the padding 0 and the
// accumulators start at zero: an input known to be in [0, 127]
// (DepthwiseRowArgs::input_non_negative), valid u8 bytes, or any input for
// a dot that reads its operand as signed bytes (depthwise_avx2.cc's
// SignDot). Weight bytes that are zero make the fourth pixel (or E's zero
// bytes) count nothing. Epilogue32: the
// contract on the four interleaved accumulators, PACKSSDW / PACKSSWB
// putting the bytes back in natural order (as Epilogue64 does per 128-bit
// lane).
//
// DotPolicy: static __m256i Dot(__m256i acc, __m256i u8, __m256i s8), acc
// plus the four products of each dword lane, exactly for every operand it is
// given; kAnyU8: exact for every u8 byte (VPDPBUSD: |4 * 255 * 128| < 2^31;
// depthwise_avx2.cc's WidenedDot), else Interior3x3 refuses kFlip at compile
// time (VPMADDUBSW's int16 pair sums saturate past 32767: exact on bytes in
// [0, 127], 2 * 127 * 128 = 32512, but not on 255).
//
// The channels past the last 32-channel block, and every other geometry,
// run the AVX2 kernel (depthwise_ymm.h: PMADDWD, pair weights): the
// preparation (PrepBytes / PrepFill) holds its pair weights first, then
// the blocks. Include ONLY from depthwise_avxvnni.cc, depthwise_avx2.cc and
// depthwise_ymm_avx512vnni.cc (the avx512vnni path's calls that run these
// blocks, with EVEX VPDPBUSD: needs -mavx2 -mfma at least); everything is a
// template on the policy or lives in an anonymous namespace.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_BLOCKS_YMM_H_
#define TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_BLOCKS_YMM_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/depthwise/depthwise_rows.h"
#include "cc/core/cpu/depthwise/depthwise_ymm.h"
#include "cc/core/dword_spread.h"
#include "cc/core/epilogue.h"
#include "cc/core/epilogue_avx2.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

constexpr int64_t kBlock = 32;
using Rows16 = DepthwiseRowKernel<Ymm2x8>;

// The channel of position p (0..31) of the interleaved order: ymm j = p / 8,
// lane L = (p % 8) / 4, dword i = p % 4.
constexpr int64_t InterleavedChannel(int64_t p) {
  return 16 * ((p % 8) / 4) + 4 * (p / 8) + p % 4;
}

// The four interleaved dword vectors of four 32-channel pixel vectors:
// u[j] lane L dword i = bytes (r0, r1, r2, r3) of channel 16L + 4j + i.
inline void Interleave4(__m256i r0, __m256i r1, __m256i r2, __m256i r3, __m256i u[4]) {
  const __m256i t0 = _mm256_unpacklo_epi8(r0, r1);
  const __m256i t1 = _mm256_unpackhi_epi8(r0, r1);
  const __m256i t2 = _mm256_unpacklo_epi8(r2, r3);
  const __m256i t3 = _mm256_unpackhi_epi8(r2, r3);
  u[0] = _mm256_unpacklo_epi16(t0, t2);
  u[1] = _mm256_unpackhi_epi16(t0, t2);
  u[2] = _mm256_unpacklo_epi16(t1, t3);
  u[3] = _mm256_unpackhi_epi16(t1, t3);
}

// One 32-channel block's operands per filter row ky, interleaved: the weight
// dwords of pixel ox (a), of pixel ox + 1 (b), stride 2's E weights (e),
// -128 * (w0 + w1 + w2) (corr) and its sum over the three rows (corr_all);
// scale and bias in the interleaved order.
struct alignas(32) BlockYmm {
  __m256i a[3][4], b[3][4], e[3][4], corr[3][4], corr_all[4];
  float scale[kBlock], bias[kBlock];
  bool min_weight;  // a weight byte of the block is -128 (WeightsHaveMin)
};

// The filter size k of a k x k geometry these blocks run, 3, 5 or 7 with
// stride 1 or 2 across and dilation 1; 0 for any other (channels aside:
// also depthwise_ymm_avx512vnni.cc's rule).
inline int64_t BlocksFilterSize(const ConvGeometry& g) {
  const int64_t k = g.filter_h;
  const bool square = g.filter_w == k && (k == 3 || k == 5 || k == 7);
  return square && g.dilation_h == 1 && g.dilation_w == 1 &&
                 (g.stride_w == 1 || g.stride_w == 2)
             ? k
             : 0;
}

// Whether d is a k x k layer these blocks take: BlocksFilterSize k and at
// least one block of channels.
bool SquareBlocks(const DepthwiseRowArgs& d, int64_t k) {
  return d.channels >= kBlock && BlocksFilterSize(*d.geo) == k;
}

bool Use3x3Blocks(const DepthwiseRowArgs& d) { return SquareBlocks(d, 3); }

// The blocks of cc >= kBlock channels: the full ones, and, unless the
// channels past them are none or 16 (one whole vector of the AVX2 kernel),
// one more over the last kBlock channels [cc - kBlock, cc), which overlaps
// the last full block (its channels there are computed twice from the same
// operands and stored twice with the same bytes, by the same thread: every
// block of a row runs in one ParallelFor unit) instead of the AVX2 kernel
// on the rest. bench_core, one Zen 4 thread, avx2 forced, 3 rounds
// alternated, input told non-negative / signed, against the AVX2 kernel on
// the rest: 56x56x72 (8 more) 0.79 / 0.92 the time, 14x14x200 (8) 0.91 /
// 0.93, 56x56x72 5x5 / 2 0.95 / 1.04, 28x28x120 5x5 (24) 0.75-0.78 / 0.89,
// 14x14x184 (24) 0.68 / 0.81-0.83, 7x7x120 5x5 0.64-0.75; with 16 more
// (28x28x240 5x5, 56x56x144) 1.00-1.06, so those keep the AVX2 kernel.
bool OverlapBlock(int64_t cc) { return cc % kBlock != 0 && cc % kBlock != 16; }
int64_t NumBlocks(int64_t cc) { return cc / kBlock + (OverlapBlock(cc) ? 1 : 0); }
int64_t BlockStart(int64_t bi, int64_t cc) { return std::min(bi * kBlock, cc - kBlock); }
// The first channel past the blocks.
int64_t BlocksEnd(int64_t cc) { return std::min(NumBlocks(cc) * kBlock, cc); }

// Whether any of the `taps` (9: 3x3, 25: 5x5, 49: 7x7) weight bytes of channels
// [c0, c0 + 32) is -128.
inline bool WeightsHaveMin(const int8_t* filter, int64_t cc, int64_t c0, int taps) {
  const __m256i min = _mm256_set1_epi8(static_cast<char>(-128));
  __m256i any = _mm256_setzero_si256();
  for (int t = 0; t < taps; ++t) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(filter + t * cc + c0));
    any = _mm256_or_si256(any, _mm256_cmpeq_epi8(w, min));
  }
  return _mm256_movemask_epi8(any) != 0;
}

template <class DotPolicy>
void PrepareBlocks(const DepthwiseRowArgs& d, BlockYmm* blocks) {
  const int64_t cc = d.channels;
  const bool s2 = d.geo->stride_w == 2;
  const __m256i zero = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t bi = 0; bi < NumBlocks(cc); ++bi) {
    BlockYmm& blk = blocks[bi];
    const int64_t c0 = BlockStart(bi, cc);
    for (int j = 0; j < 4; ++j) blk.corr_all[j] = zero;
    for (int ky = 0; ky < 3; ++ky) {
      const int8_t* w = d.filter + ky * 3 * cc + c0;
      auto load = [](const int8_t* p) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      };
      const __m256i w0 = load(w), w1 = load(w + cc), w2 = load(w + 2 * cc);
      Interleave4(w0, w1, w2, zero, blk.a[ky]);
      if (s2) {
        Interleave4(zero, zero, w0, w1, blk.b[ky]);
      } else {
        Interleave4(zero, w0, w1, w2, blk.b[ky]);
      }
      Interleave4(w2, zero, zero, zero, blk.e[ky]);
      for (int j = 0; j < 4; ++j) {
        // w0 + w1 + w2 per lane (u8 ones times the signed weight bytes).
        const __m256i sum = DotPolicy::Dot(zero, ones, blk.a[ky][j]);
        blk.corr[ky][j] = _mm256_sub_epi32(zero, _mm256_slli_epi32(sum, 7));
        blk.corr_all[j] = _mm256_add_epi32(blk.corr_all[j], blk.corr[ky][j]);
      }
    }
    for (int64_t p = 0; p < kBlock; ++p) {
      blk.scale[p] = d.scale[c0 + InterleavedChannel(p)];
      blk.bias[p] = d.bias[c0 + InterleavedChannel(p)];
    }
    blk.min_weight = WeightsHaveMin(d.filter, cc, c0, 9);
  }
}

// The contract on one pixel's 32 channels in the interleaved order (u0..u3),
// stored as 32 bytes in natural order: y per ymm as Epilogue16's
// (EpilogueFloat256), PACKSSDW (u0, u1), (u2, u3) and PACKSSWB leave lane L's
// bytes as [u0.L, u1.L, u2.L, u3.L] = channels 16L .. 16L + 15; then PMAXSB.
// side: the pixel's 32 side bytes in natural order, each moved to its
// interleaved dword (VPSHUFB into the top byte, arithmetic shift), or nullptr.
struct Epilogue32 {
  __m256i side_shuffle[4];

  Epilogue32() {
    for (int j = 0; j < 4; ++j) {
      alignas(32) int8_t idx[32];
      DwordSpreadShuffle(j, /*at=*/3, /*lanes=*/2, idx);
      side_shuffle[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
    }
  }

  template <bool kClampHi, class Block>
  __attribute__((always_inline)) void Store(const __m256i u[4], const Block& blk,
                                            const int8_t* side, const Epilogue256Consts& k,
                                            int8_t* out) const {
    __m256i y[4];
    __m256i s;
    if (side != nullptr) s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(side));
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256 scale = _mm256_load_ps(blk.scale + 8 * j);
      const __m256 bias = _mm256_load_ps(blk.bias + 8 * j);
      __m256 f;
      if (side != nullptr) {
        const __m256i sj = _mm256_srai_epi32(_mm256_shuffle_epi8(s, side_shuffle[j]), 24);
        f = EpilogueFloat256<kClampHi>(u[j], scale, bias, &sj, k.side_scale, k.c127);
      } else {
        f = EpilogueFloat256<kClampHi>(u[j], scale, bias, nullptr, k.side_scale, k.c127);
      }
      y[j] = _mm256_cvtps_epi32(f);
    }
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(y[0], y[1]),
                                         _mm256_packs_epi32(y[2], y[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_max_epi8(b, k.lo2));
  }
};

// x ^ 0x80 where kFlip, else x.
template <bool kFlip>
inline __m256i FlipYmm(__m256i x) {
  return kFlip ? _mm256_xor_si256(x, _mm256_set1_epi8(static_cast<char>(0x80))) : x;
}

// What a block interior (Interior3x3, InteriorKxK) knows of the call, its
// block and its output row (RowsOfBlocks sets them).
template <class Block>
struct BlockRowYmm {
  const DepthwiseRowArgs* d;
  const Block* blk;
  const Epilogue256Consts* k;
  const Epilogue32* ep;
  const int8_t* image;  // the row's batch element
  int64_t iy0, ky0, ky1;
  int64_t c0;
  int8_t* out_row;
  const int8_t* side_row;

  // Output row r of the call (image n = r / out_h, row oy = r % out_h).
  void SetRow(int64_t r) {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int64_t n = r / g.out_h, oy = r % g.out_h;
    image = d->input + n * g.in_h * g.in_w * cc;
    iy0 = oy * g.stride_h - g.pad_top;
    ky0 = d->ky_range[2 * oy];
    ky1 = d->ky_range[2 * oy + 1];
    out_row = d->output + r * g.out_w * cc;
    side_row = d->side != nullptr ? d->side + r * g.out_w * cc : nullptr;
  }
};

// kClampHi: the epilogue's upper clamp (Epilogue256Consts::clamp_hi),
// chosen once per call (Rows3x3). kFlip: the u8 operand is x ^ 0x80 as
// above; without it (an input known to be in [0, 127],
// DepthwiseRowArgs::input_non_negative) it is x itself, the padding 0 and
// the accumulators start at zero (as in depthwise_avx512vnni.cc).
template <class DotPolicy, bool kClampHi, bool kFlip>
struct Interior3x3 : BlockRowYmm<BlockYmm> {
  static_assert(!kFlip || DotPolicy::kAnyU8,
                "x ^ 0x80 reaches 255: only a dot exact on every u8 byte may take it");
  __m256i shuffle_e[4];  // byte 4j + i of each lane to dword i's low byte

  __m256i Load(const int8_t* p) const {
    return Flip(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }

  static __m256i Flip(__m256i x) { return FlipYmm<kFlip>(x); }

  __attribute__((always_inline)) void Store(const __m256i acc[4], int64_t ox) const {
    const int64_t o = ox * d->channels + c0;
    ep->template Store<kClampHi>(acc, *blk, side_row != nullptr ? side_row + o : nullptr,
                                 *k, out_row + o);
  }

  // Both pixels' accumulators start at the +128 correction of the valid
  // filter rows.
  template <bool kFullRows>
  __attribute__((always_inline)) void StartAccumulators(__m256i acc0[4], __m256i acc1[4]) const {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      if (!kFlip) {
        acc0[j] = _mm256_setzero_si256();
      } else if (kFullRows || ky1 - ky0 == 3) {
        acc0[j] = blk->corr_all[j];
      } else {
        acc0[j] = _mm256_setzero_si256();
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          acc0[j] = _mm256_add_epi32(acc0[j], blk->corr[ky][j]);
        }
      }
      acc1[j] = acc0[j];
    }
  }

  // Pixels ox and (if kTwo) ox + 1, stride kS; kChecked: some input column
  // may lie outside the image (then it is the zero activation, 0x80 where
  // kFlip);
  // kFullRows: all three filter rows inside (as depthwise_avx512vnni.cc's
  // Pair).
  template <int kS, bool kChecked, bool kTwo, bool kFullRows>
  __attribute__((always_inline)) void Pair(int64_t ox) const {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int64_t ix0 = ox * kS - g.pad_left;
    const __m256i padding = Flip(_mm256_setzero_si256());
    // An offset, not a pointer: ix0 may be negative, and a column outside
    // the image is neither addressed nor read.
    auto column = [&](int64_t row_off, int64_t c) {
      if (kChecked && (ix0 + c < 0 || ix0 + c >= g.in_w)) return padding;
      return Load(image + (row_off + c * cc));
    };
    __m256i acc0[4], acc1[4];
    const int64_t ky_begin = kFullRows ? 0 : ky0;
    const int64_t ky_end = kFullRows ? 3 : ky1;
    StartAccumulators<kFullRows>(acc0, acc1);
#pragma GCC unroll 3
    for (int64_t ky = ky_begin; ky < ky_end; ++ky) {
      const int64_t row_off = ((iy0 + ky) * g.in_w + ix0) * cc + c0;
      const __m256i x0 = column(row_off, 0), x1 = column(row_off, 1), x2 = column(row_off, 2);
      // The fourth pixel meets zero weights for ox: a single pixel reuses x2
      // instead of reading a column that may lie past the image.
      const __m256i x3 = kTwo ? column(row_off, 3) : x2;
      __m256i u[4];
      Interleave4(x0, x1, x2, x3, u);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc0[j] = DotPolicy::Dot(acc0[j], u[j], blk->a[ky][j]);
      if constexpr (kTwo) {
        __m256i e[4];
        if constexpr (kS == 2) {
          const __m256i x4 = column(row_off, 4);
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) e[j] = _mm256_shuffle_epi8(x4, shuffle_e[j]);
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          acc1[j] = DotPolicy::Dot(acc1[j], u[j], blk->b[ky][j]);
          if constexpr (kS == 2) {
            acc1[j] = DotPolicy::Dot(acc1[j], e[j], blk->e[ky][j]);
          }
        }
      }
    }
    Store(acc0, ox);
    if constexpr (kTwo) Store(acc1, ox + 1);
  }

  // Stride 1, `pairs` full pairs from ox whose columns ix0 .. ix0 + 2 *
  // pairs + 1 all lie inside the image, all three filter rows valid: the
  // next pair's first byte unpacks are this pair's second ones, kept (as
  // depthwise_avx512vnni.cc's PairsS1): two loads and four byte unpacks
  // fewer a filter row.
  __attribute__((always_inline)) void PairsS1(int64_t ox, int64_t pairs) const {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int8_t* base = image + (iy0 * g.in_w + ox - g.pad_left) * cc + c0;
    const int64_t row = g.in_w * cc;
    __m256i lo[3], hi[3];  // per filter row: the pair's first two columns
#pragma GCC unroll 3
    for (int ky = 0; ky < 3; ++ky) {
      const int8_t* p = base + ky * row;
      const __m256i r0 = Load(p), r1 = Load(p + cc);
      lo[ky] = _mm256_unpacklo_epi8(r0, r1);
      hi[ky] = _mm256_unpackhi_epi8(r0, r1);
    }
    for (int64_t i = 0; i < pairs; ++i, ox += 2, base += 2 * cc) {
      __m256i acc0[4], acc1[4];
      StartAccumulators<true>(acc0, acc1);
#pragma GCC unroll 3
      for (int ky = 0; ky < 3; ++ky) {
        const int8_t* p = base + ky * row + 2 * cc;
        const __m256i r2 = Load(p), r3 = Load(p + cc);
        const __m256i t2 = _mm256_unpacklo_epi8(r2, r3);
        const __m256i t3 = _mm256_unpackhi_epi8(r2, r3);
        __m256i u[4];  // as Interleave4(x0, x1, x2, x3)
        u[0] = _mm256_unpacklo_epi16(lo[ky], t2);
        u[1] = _mm256_unpackhi_epi16(lo[ky], t2);
        u[2] = _mm256_unpacklo_epi16(hi[ky], t3);
        u[3] = _mm256_unpackhi_epi16(hi[ky], t3);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          acc0[j] = DotPolicy::Dot(acc0[j], u[j], blk->a[ky][j]);
          acc1[j] = DotPolicy::Dot(acc1[j], u[j], blk->b[ky][j]);
        }
        lo[ky] = t2;
        hi[ky] = t3;
      }
      Store(acc0, ox);
      Store(acc1, ox + 1);
    }
  }

  // Output columns [ox, ox_end) in pairs; a pair whose span (columns ix0 ..
  // ix0 + (two ? kS + 2 : 2)) leaves the image takes the checked loads.
  template <int kS>
  void Run(int64_t ox, int64_t ox_end) const {
    const ConvGeometry& g = *d->geo;
    const bool full_rows = ky0 == 0 && ky1 == 3;
    for (; ox < ox_end; ox += 2) {
      const bool two = ox + 1 < ox_end;
      const int64_t ix0 = ox * kS - g.pad_left;
      const int64_t last = ix0 + (two ? kS + 2 : 2);
      if (kS == 1 && full_rows && ix0 >= 0 && ix0 + 3 < g.in_w) {
        // Full pairs whose columns up to ix0 + 2 * pairs + 1 are in the image.
        const int64_t pairs = std::min((g.in_w - 4 - ix0) / 2 + 1, (ox_end - ox) / 2);
        if (pairs >= 2) {
          PairsS1(ox, pairs);
          ox += 2 * pairs - 2;
          continue;
        }
      }
      if (ix0 >= 0 && last < g.in_w) {
        if (!two) {
          Pair<kS, false, false, false>(ox);
        } else if (full_rows) {
          Pair<kS, false, true, true>(ox);
        } else {
          Pair<kS, false, true, false>(ox);
        }
      } else if (two) {
        Pair<kS, true, true, false>(ox);
      } else {
        Pair<kS, true, false, false>(ox);
      }
    }
  }
};

// ---------------------------------------------------------------- KxK
//
// 5x5 and 7x7, stride 1 or 2, dilation 1 (EfficientNet's and MobileNetV3's
// 5x5 layers, NASNet's 5x5 and 7x7, ConvNeXt's 7x7), blocks of 32 channels:
// depthwise_avx512vnni.cc's KxK method on ymm, in groups of two output
// pixels (four would need 16 accumulators, the whole ymm register file).
// A group reads kS + K columns per filter row (ix0 = its first); dword q of
// a lane holds columns ix0 + 4q .. ix0 + 4q + 3 of one channel (D_q), and
// pixel p of the group, whose window starts r = kS * p columns in, is the
// sum over q of D_q . (its weights shifted by r): lane i of dword q holds
// tap 4q + i - r, zero where that is outside [0, K) (KxKTap):
//   5x5 r = 0: D0 . (w0, w1, w2, w3) + D1 . (w4, 0, 0, 0)
//   5x5 r = 2: D0 . (0, 0, w0, w1)   + D1 . (w2, w3, w4, 0)
//   7x7 r = 1: D0 . (0, w0, w1, w2)  + D1 . (w3, w4, w5, w6)
//   7x7 r = 2: D0 . (0, 0, w0, w1)   + D1 . (w2, .., w5) + D2 . (w6, 0, 0, 0)
// A dword with no tap of a pixel's window is not dotted for it
// (KxKDwordUsed), and the columns of a dword past the group's kS + K are
// not read (zero: their weights are zero for both pixels). Per filter row
// and 32 channels a group costs: 5x5 6 (stride 1) or 7 (stride 2) loads,
// 16 unpacks, 16 dots; 7x7 8 loads, 16 unpacks, 16 dots at stride 1, 9
// loads, 24 unpacks, 20 dots at stride 2; where the AVX2 kernel takes K
// PMADDWD taps (or pairs of them) per pixel and 8 channels. The columns
// are loaded and unpacked one dword at a time, each dword's dots for both
// pixels before the next is loaded (4 unpacked vectors live beside the 8
// accumulators, not 4 * kDwords). Exactness as the 3x3 blocks' (the top of
// this file): kFlip's correction is -128 * (w0 + ... + w_{K-1}) per valid
// filter row; zero weight bytes make the other columns count nothing; 49
// taps cannot overflow int32 (49 * 255 * 128 < 2^31). A column outside the
// image is the zero activation (0x80 where kFlip). The channels past the
// last block run the AVX2 kernel.
//
// The tap of lane i of dword q for a window starting r columns in, or -1.
constexpr int KxKTap(int k, int q, int i, int r) {
  return 4 * q + i - r >= 0 && 4 * q + i - r < k ? 4 * q + i - r : -1;
}

// Whether dword q holds a tap of a k-wide window starting r columns in.
constexpr bool KxKDwordUsed(int k, int q, int r) { return 4 * q + 3 >= r && 4 * q < r + k; }

template <int K>
struct alignas(32) BlockKxKYmm {
  static constexpr int kDwords = (K + 2 + 3) / 4;  // columns up to r + K - 1, r <= 2
  __m256i w[K][3][kDwords][4];  // [ky][r][q][j]: dword q's weights for a shift of r
  __m256i corr[K][4];           // -128 * (w0 + ... + w_{K-1}) of filter row ky
  float scale[kBlock], bias[kBlock];
  bool min_weight;  // a weight byte of the block is -128 (WeightsHaveMin)
};

bool Use5x5Blocks(const DepthwiseRowArgs& d) { return SquareBlocks(d, 5); }
bool Use7x7Blocks(const DepthwiseRowArgs& d) { return SquareBlocks(d, 7); }

template <class DotPolicy, int K>
void PrepareKxK(const DepthwiseRowArgs& d, BlockKxKYmm<K>* blocks) {
  constexpr int kDwords = BlockKxKYmm<K>::kDwords;
  const int64_t cc = d.channels;
  const __m256i zero = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t bi = 0; bi < NumBlocks(cc); ++bi) {
    BlockKxKYmm<K>& blk = blocks[bi];
    const int64_t c0 = BlockStart(bi, cc);
    for (int ky = 0; ky < K; ++ky) {
      __m256i w[K];
      for (int kx = 0; kx < K; ++kx) {
        w[kx] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(d.filter + (ky * K + kx) * cc + c0));
      }
      for (int r = 0; r < 3; ++r) {
        for (int q = 0; q < kDwords; ++q) {
          __m256i b[4];
          for (int i = 0; i < 4; ++i) {
            const int t = KxKTap(K, q, i, r);
            b[i] = t >= 0 ? w[t] : zero;
          }
          Interleave4(b[0], b[1], b[2], b[3], blk.w[ky][r][q]);
        }
      }
      for (int j = 0; j < 4; ++j) {
        // w0 + ... + w_{K-1} per lane (u8 ones times the signed weight bytes).
        __m256i sum = zero;
        for (int q = 0; q < kDwords; ++q) sum = DotPolicy::Dot(sum, ones, blk.w[ky][0][q][j]);
        blk.corr[ky][j] = _mm256_sub_epi32(zero, _mm256_slli_epi32(sum, 7));
      }
    }
    for (int64_t p = 0; p < kBlock; ++p) {
      blk.scale[p] = d.scale[c0 + InterleavedChannel(p)];
      blk.bias[p] = d.bias[c0 + InterleavedChannel(p)];
    }
    blk.min_weight = WeightsHaveMin(d.filter, cc, c0, K * K);
  }
}

// One 32-channel block of one output row, in groups of two pixels, borders
// included (kChecked: a column outside the image is the zero activation), a
// group past the row's end storing only its first pixel.
template <class DotPolicy, bool kClampHi, bool kFlip, int K, int kS>
struct InteriorKxK : BlockRowYmm<BlockKxKYmm<K>> {
  static_assert(!kFlip || DotPolicy::kAnyU8,
                "x ^ 0x80 reaches 255: only a dot exact on every u8 byte may take it");
  using Row = BlockRowYmm<BlockKxKYmm<K>>;
  using Row::blk;
  using Row::c0;
  using Row::d;
  using Row::ep;
  using Row::image;
  using Row::iy0;
  using Row::k;
  using Row::ky0;
  using Row::ky1;
  using Row::out_row;
  using Row::side_row;
  static constexpr int kCols = kS + K;  // the columns a group reads per filter row
  static constexpr int kUsedDwords = (kCols + 3) / 4;

  __m256i start[4];  // the accumulators' start: the valid rows' corrections

  static __m256i Flip(__m256i x) { return FlipYmm<kFlip>(x); }

  // The accumulators' start for the row set last (BlockRowYmm::SetRow).
  void SetStart() {
    for (int j = 0; j < 4; ++j) {
      start[j] = _mm256_setzero_si256();
      if (kFlip) {
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          start[j] = _mm256_add_epi32(start[j], blk->corr[ky][j]);
        }
      }
    }
  }

  template <bool kFullRows, bool kChecked>
  __attribute__((always_inline)) void Group(int64_t ox, bool two) const {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int64_t ix0 = ox * kS - g.pad_left;
    __m256i acc[2][4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[0][j] = acc[1][j] = start[j];
    const int64_t ky_begin = kFullRows ? 0 : ky0;
    const int64_t ky_end = kFullRows ? K : ky1;
#pragma GCC unroll 7
    for (int64_t ky = ky_begin; ky < ky_end; ++ky) {
      // An offset, not a pointer: ix0 may be negative, and a column outside
      // the image is neither addressed nor read.
      const int64_t row_off = ((iy0 + ky) * g.in_w + ix0) * cc + c0;
#pragma GCC unroll 3
      for (int q = 0; q < kUsedDwords; ++q) {
        __m256i x[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const int c = 4 * q + i;
          if (c >= kCols) {
            x[i] = _mm256_setzero_si256();  // no tap of either pixel
          } else if (kChecked && (ix0 + c < 0 || ix0 + c >= g.in_w)) {
            x[i] = Flip(_mm256_setzero_si256());
          } else {
            x[i] = Flip(_mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(image + row_off + c * cc)));
          }
        }
        __m256i u[4];
        Interleave4(x[0], x[1], x[2], x[3], u);
#pragma GCC unroll 2
        for (int p = 0; p < 2; ++p) {
          if (KxKDwordUsed(K, q, kS * p)) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
              acc[p][j] = DotPolicy::Dot(acc[p][j], u[j], blk->w[ky][kS * p][q][j]);
            }
          }
        }
      }
    }
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      if (p == 1 && !two) break;
      const int64_t o = (ox + p) * cc + c0;
      ep->template Store<kClampHi>(acc[p], *blk, side_row != nullptr ? side_row + o : nullptr,
                                   *k, out_row + o);
    }
  }

  template <bool kFullRows>
  void RunRow(int64_t out_w) const {
    const ConvGeometry& g = *d->geo;
    for (int64_t ox = 0; ox < out_w; ox += 2) {
      const int64_t ix0 = ox * kS - g.pad_left;
      const bool two = ox + 1 < out_w;
      if (ix0 >= 0 && ix0 + kCols - 1 < g.in_w) {
        Group<kFullRows, false>(ox, two);
      } else {
        Group<kFullRows, true>(ox, two);
      }
    }
  }

  // On a local copy of *this (as depthwise_avx512vnni.cc's Interior3x3::Run:
  // the int8 stores may alias the members, which GCC then reloads).
  void Run(int64_t out_w) const {
    const InteriorKxK self = *this;
    if (ky1 - ky0 == K) {
      self.template RunRow<true>(out_w);
    } else {
      self.template RunRow<false>(out_w);
    }
  }
};

// The prepared bytes: the AVX2 kernel's pair weights (for the channels past
// the blocks), then the blocks, from this offset (64-byte aligned).
int64_t BlocksOffset(const DepthwiseRowArgs& d) { return (PairBytes(d) + 63) / 64 * 64; }

int64_t PrepBytes(const DepthwiseRowArgs& d) {
  const int64_t blocks = NumBlocks(d.channels);
  const int64_t bytes =
      Use3x3Blocks(d)   ? blocks * static_cast<int64_t>(sizeof(BlockYmm))
      : Use5x5Blocks(d) ? blocks * static_cast<int64_t>(sizeof(BlockKxKYmm<5>))
      : Use7x7Blocks(d) ? blocks * static_cast<int64_t>(sizeof(BlockKxKYmm<7>))
                        : 0;
  return BlocksOffset(d) + bytes;
}

template <class DotPolicy>
void PrepFill(const DepthwiseRowArgs& d, void* p) {
  if (PairBytes(d) > 0) PairFill(d, p);
  char* blocks = static_cast<char*>(p) + BlocksOffset(d);
  if (Use3x3Blocks(d)) PrepareBlocks<DotPolicy>(d, reinterpret_cast<BlockYmm*>(blocks));
  if (Use5x5Blocks(d)) PrepareKxK<DotPolicy>(d, reinterpret_cast<BlockKxKYmm<5>*>(blocks));
  if (Use7x7Blocks(d)) PrepareKxK<DotPolicy>(d, reinterpret_cast<BlockKxKYmm<7>*>(blocks));
}

// The blocks of `in`'s kind (Block: prepared, or made here by prepare) on
// rows [row_begin, row_end): the channels past them through the AVX2 kernel
// (rest: d for its pair weights), then blocks outer, rows inner (a block's
// weights and its channels' input rows stay in L1 from one output row to
// the next), run_row(*in) for each row after in->SetRow.
template <class Block, class Interior, class Prepare, class RunRow>
void RowsOfBlocks(const DepthwiseRowArgs& d, const DepthwiseRowArgs& rest, Interior* in,
                  Prepare prepare, RunRow run_row) {
  const int64_t cc = d.channels;
  const int64_t nblocks = NumBlocks(cc);
  std::vector<Block> local;
  const Block* blocks = PreparedBlocks(
      d.prepared != nullptr ? static_cast<const char*>(d.prepared) + BlocksOffset(d)
                            : nullptr,
      nblocks, &local, prepare);
  const Epilogue256Consts k = Ymm2x8::MakeConsts(d);
  const int64_t c_rest = BlocksEnd(cc);
  if (c_rest < cc) Rows16::RestChannels(rest, k, c_rest);
  const Epilogue32 ep;
  in->d = &d;
  in->k = &k;
  in->ep = &ep;
  for (int64_t bi = 0; bi < nblocks; ++bi) {
    in->blk = &blocks[bi];
    in->c0 = BlockStart(bi, cc);
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      in->SetRow(r);
      run_row(*in);
    }
  }
}

// The 3x3 blocks (Use3x3Blocks), with or without the epilogue's upper clamp
// (DirectRowArgs::clamp_hi).
template <class DotPolicy, bool kClampHi, bool kFlip>
void Rows3x3(const DepthwiseRowArgs& d, const DepthwiseRowArgs& rest) {
  const ConvGeometry& g = *d.geo;
  Interior3x3<DotPolicy, kClampHi, kFlip> in;
  for (int j = 0; j < 4; ++j) {
    alignas(32) int8_t idx[32];
    DwordSpreadShuffle(j, /*at=*/0, /*lanes=*/2, idx);
    in.shuffle_e[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
  }
  RowsOfBlocks<BlockYmm>(
      d, rest, &in, [&](BlockYmm* b) { PrepareBlocks<DotPolicy>(d, b); },
      [&](const Interior3x3<DotPolicy, kClampHi, kFlip>& row) {
        if (g.stride_w == 1) {
          row.template Run<1>(0, g.out_w);
        } else {
          row.template Run<2>(0, g.out_w);
        }
      });
}

// The K x K blocks (Use5x5Blocks, Use7x7Blocks), as Rows3x3.
template <class DotPolicy, bool kClampHi, bool kFlip, int K>
void RowsKxK(const DepthwiseRowArgs& d, const DepthwiseRowArgs& rest) {
  const ConvGeometry& g = *d.geo;
  auto run = [&](auto stride) {
    using Interior = InteriorKxK<DotPolicy, kClampHi, kFlip, K, decltype(stride)::value>;
    Interior in;
    RowsOfBlocks<BlockKxKYmm<K>>(
        d, rest, &in, [&](BlockKxKYmm<K>* b) { PrepareKxK<DotPolicy>(d, b); },
        [&](Interior& row) {
          row.SetStart();
          row.Run(g.out_w);
        });
  };
  if (g.stride_w == 1) {
    run(std::integral_constant<int, 1>());
  } else {
    run(std::integral_constant<int, 2>());
  }
}

// Whether the geometry has blocks (3x3, 5x5 or 7x7).
bool UseBlocks(const DepthwiseRowArgs& d) {
  return Use3x3Blocks(d) || Use5x5Blocks(d) || Use7x7Blocks(d);
}

// DepthwisePrep::wide_from: the AVX2 kernel reads widened weights only for
// the channels past the blocks (every input runs the blocks).
int64_t BlocksWideFrom(const DepthwiseRowArgs& d) {
  return UseBlocks(d) ? BlocksEnd(d.channels) : 0;
}

// The blocks of the geometry (UseBlocks) with DotPolicy, kFlip.
template <class DotPolicy, bool kClampHi, bool kFlip>
void RowsBlocks(const DepthwiseRowArgs& d, const DepthwiseRowArgs& rest) {
  if (Use3x3Blocks(d)) {
    Rows3x3<DotPolicy, kClampHi, kFlip>(d, rest);
  } else if (Use5x5Blocks(d)) {
    RowsKxK<DotPolicy, kClampHi, kFlip, 5>(d, rest);
  } else {
    RowsKxK<DotPolicy, kClampHi, kFlip, 7>(d, rest);
  }
}

// Whether a weight byte of the prepared blocks (of type Block) is -128.
template <class Block>
bool PreparedHaveMinWeight(const DepthwiseRowArgs& d) {
  const Block* blocks =
      reinterpret_cast<const Block*>(static_cast<const char*>(d.prepared) + BlocksOffset(d));
  for (int64_t bi = 0; bi < NumBlocks(d.channels); ++bi) {
    if (blocks[bi].min_weight) return true;
  }
  return false;
}

// Whether a weight byte of the blocks' channels is -128: from the
// preparation, or from the filter where there is none.
inline bool BlocksHaveMinWeight(const DepthwiseRowArgs& d) {
  if (d.prepared != nullptr) {
    return Use3x3Blocks(d)   ? PreparedHaveMinWeight<BlockYmm>(d)
           : Use5x5Blocks(d) ? PreparedHaveMinWeight<BlockKxKYmm<5>>(d)
                             : PreparedHaveMinWeight<BlockKxKYmm<7>>(d);
  }
  const int taps = static_cast<int>(d.geo->filter_h * d.geo->filter_w);
  for (int64_t bi = 0; bi < NumBlocks(d.channels); ++bi) {
    if (WeightsHaveMin(d.filter, d.channels, BlockStart(bi, d.channels), taps)) return true;
  }
  return false;
}

// The blocks on an input not told to be in [0, 127], flipped (x ^ 0x80)
// into Dot, exact on every u8 byte (kAnyU8).
template <class Dot>
struct FlippedBlocks {
  template <bool kClampHi>
  static void Rows(const DepthwiseRowArgs& d, const DepthwiseRowArgs& rest) {
    RowsBlocks<Dot, kClampHi, true>(d, rest);
  }
};

// The row kernel of a file using these blocks: the blocks where the
// geometry has them, with DotPolicy (no flip) on an input told to be in
// [0, 127] and as Signed::Rows runs them on any other (FlippedBlocks, or
// depthwise_avx2.cc's choice); the channels past them and everything else
// through the AVX2 kernel, which reads its pair weights at the start of the
// preparation (PrepFill; the blocks' preparation is the same for every dot).
template <class DotPolicy, class Signed>
void RowsWithBlocks(const DepthwiseRowArgs& d) {
  DepthwiseRowArgs rest = d;
  rest.prepared = d.prepared != nullptr && PairBytes(d) > 0 ? d.prepared : nullptr;
  if (!UseBlocks(d)) {
    Rows16::Rows(rest);
    return;
  }
  WithClampHi(d.clamp_hi, [&](auto clamp) {
    constexpr bool kClampHi = decltype(clamp)::value;
    if (d.input_non_negative) {
      RowsBlocks<DotPolicy, kClampHi, false>(d, rest);
    } else {
      Signed::template Rows<kClampHi>(d, rest);
    }
  });
}

}  // namespace
}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_BLOCKS_YMM_H_
