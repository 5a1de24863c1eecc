// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernels, AVX-512 (BW/VL) + VNNI.
//
// 3x3, stride 1 or 2, dilation 1 (MobileNet's depthwise layers), interior
// columns: 64 channels per step with u8 x s8 VPDPBUSD, which sums four
// products per int32 lane. A lane (one channel) holds four horizontally
// adjacent input pixels, D = (x[q], x[q+1], x[q+2], x[q+3]) (bytes, +128 as
// in the GEMM: x ^ 0x80), built for 64 channels by the 8 unpacks of the
// GEMM's packing, which leave the channels in its interleaved lane order
// (gemm_kernels.h kFormatZmmU8: zmm j, 128-bit lane L, dword i = channel
// 16L + 4j + i), so that the GEMM's Epilogue64 stores them. Per filter row
// the weights are pre-arranged in the same order as dwords:
//   stride 1: pixel ox   = D . (w0, w1, w2, 0)
//             pixel ox+1 = D . (0, w0, w1, w2)           one D, two pixels
//   stride 2: pixel ox   = D . (w0, w1, w2, 0)
//             pixel ox+1 = D . (0, 0, w0, w1) + E . (w2, 0, 0, 0),
//             E = x[q+4] zero-extended to dwords (4 VPSHUFB)
// so a pair of pixels costs 8 (stride 1) or 12 (stride 2) VPDPBUSD per
// filter row and 64 channels, against 24 VPDPWSSD of the one-tap-per-lane
// kernel below. Exactness: products of u8 (x + 128) and s8 w are exact,
// four summed in an int32 lane exactly (|4 * 255 * 128| < 2^31), and the
// +128 is undone per valid filter row by adding -128 * (w0 + w1 + w2);
// zero weight bytes make the fourth pixel (or the zero bytes of E) count
// nothing whatever it holds. int32 sums of 9 taps cannot overflow.
// Border columns (window partly outside), and every other geometry, run the
// one-tap-per-lane kernel of depthwise_rows.h: 16 channels in one zmm of
// int32, one VPDPWSSD per tap (sign-extended int8 activations times the
// widened weights of depthwise.h). Epilogues: Epilogue64 / Epilogue16Natural
// (epilogue_avx512.h).
//
// The full 64-channel blocks take this path; channels past the last full
// block, like the borders, the 16-channel one. Measured back to back
// (tools/bench/bench_core, one thread, Zen 4, which runs a zmm instruction
// as two 256-bit halves): 56x56x128 s1 156 -> 124 us, 28x28x128 44 -> 33 us,
// 56x56x192 245 -> 196 us; stride 2 (112x112x96) about 2x. Then blocks
// outer and rows inner (L1 reuse, Rows3x3), the full interior pairs
// specialized and the epilogue inlined by value (no accumulator spills),
// old and new binaries alternated three times, one thread, Zen 4 VM:
// 14x14x576 34-50 -> 28-29 us, 56x56x144 143-160 -> 124-132 us, 28x28x192
// 46-51 -> 39-57 us, 7x7x960 15-19 -> 15 us. The same loop order in the
// 16-channel kernel (depthwise_rows.h) changed nothing on the AVX2 path,
// which is bound by its PMADDWDs there.
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/depthwise/depthwise_rows.h"
#include "cc/core/cpu/gemm/gemm_isa_common.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/epilogue_avx512.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct Zmm16 {
  using Acc = __m512i;
  using X = __m512i;
  using W = __m512i;
  using Tail = __mmask16;
  using Consts = Epilogue512Consts;

  static Tail MakeTail(int64_t count) {
    return count >= 16 ? static_cast<__mmask16>(0xFFFF)
                       : static_cast<__mmask16>((1u << count) - 1);
  }
  static Acc Zero() { return _mm512_setzero_si512(); }
  static Acc Add(Acc a, Acc b) { return _mm512_add_epi32(a, b); }
  template <bool kFull>
  static X Load(const int8_t* p, Tail mask) {
    if (kFull) {
      return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    return _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p));
  }
  static W LoadW(const int32_t* w) { return _mm512_loadu_si512(w); }
  static void Mac(Acc* a, X x, W w) { *a = _mm512_dpwssd_epi32(*a, x, w); }
  static Consts MakeConsts(float side_scale, int8_t lo, int8_t hi) {
    return MakeEpilogue512Consts(side_scale, lo, hi);
  }
  static void Store(Acc a, const float* scale, const float* bias,
                    const int8_t* side, const Consts& k, Tail mask, int8_t* out) {
    Epilogue16Natural(a, scale, bias, side, k, mask, out);
  }
  // Interior block widths: 8 pixels for 3-wide stride 1 (10 loads and 24
  // VPDPWSSD per filter row, 8 chains), else 4.
  template <int kKw, int kSw>
  static constexpr int Pixels() {
    return kKw == 3 && kSw == 1 ? 8 : 4;
  }
};

using Rows16 = DepthwiseRowKernel<Zmm16>;

// ------------------------------------------------ 3x3 interior, u8 VPDPBUSD

constexpr int64_t kBlock = 64;

// The four interleaved dword vectors of four 64-channel pixel vectors (x ^
// 0x80 applied): u[j] lane L dword i = bytes (r0, r1, r2, r3) of channel
// 16L + 4j + i.
inline void Interleave4(__m512i r0, __m512i r1, __m512i r2, __m512i r3,
                        __m512i u[4]) {
  const __m512i t0 = _mm512_unpacklo_epi8(r0, r1);
  const __m512i t1 = _mm512_unpackhi_epi8(r0, r1);
  const __m512i t2 = _mm512_unpacklo_epi8(r2, r3);
  const __m512i t3 = _mm512_unpackhi_epi8(r2, r3);
  u[0] = _mm512_unpacklo_epi16(t0, t2);
  u[1] = _mm512_unpackhi_epi16(t0, t2);
  u[2] = _mm512_unpacklo_epi16(t1, t3);
  u[3] = _mm512_unpackhi_epi16(t1, t3);
}

// One 64-channel block's operands in the interleaved lane order, per filter
// row ky: the weight dwords of pixel ox (a), of pixel ox + 1 (b: stride 1
// (0, w0, w1, w2); stride 2 (0, 0, w0, w1)), stride 2's E weights
// (w2, 0, 0, 0) (e), and -128 * (w0 + w1 + w2) (corr), summed over the
// three rows in corr_all (every row inside the image).
struct alignas(64) Block3x3 {
  __m512i a[3][4], b[3][4], e[3][4], corr[3][4], corr_all[4];
  float scale[kBlock], bias[kBlock];
};

// Full 64-channel blocks only (the rest of the channels run the 16-channel
// kernel): vector code, a few hundred instructions a block, once per call
// (kDepthwisePrepAvx512Vnni: not once per ParallelFor unit).
void PrepareBlocks(const DepthwiseRowArgs& d, Block3x3* blocks) {
  const int64_t cc = d.channels;
  const bool s2 = d.geo->stride_w == 2;
  const __m512i zero = _mm512_setzero_si512();
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t bi = 0; bi < cc / kBlock; ++bi) {
    Block3x3& blk = blocks[bi];
    const int64_t c0 = static_cast<int64_t>(bi) * kBlock;
    for (int j = 0; j < 4; ++j) blk.corr_all[j] = zero;
    for (int ky = 0; ky < 3; ++ky) {
      const int8_t* w = d.filter + ky * 3 * cc + c0;
      const __m512i w0 = _mm512_loadu_si512(w);
      const __m512i w1 = _mm512_loadu_si512(w + cc);
      const __m512i w2 = _mm512_loadu_si512(w + 2 * cc);
      Interleave4(w0, w1, w2, zero, blk.a[ky]);
      if (s2) {
        Interleave4(zero, zero, w0, w1, blk.b[ky]);
      } else {
        Interleave4(zero, w0, w1, w2, blk.b[ky]);
      }
      Interleave4(w2, zero, zero, zero, blk.e[ky]);
      for (int j = 0; j < 4; ++j) {
        // w0 + w1 + w2 per lane (u8 ones times the signed weight bytes).
        const __m512i sum = _mm512_dpbusd_epi32(zero, ones, blk.a[ky][j]);
        blk.corr[ky][j] = _mm512_sub_epi32(zero, _mm512_slli_epi32(sum, 7));
        blk.corr_all[j] = _mm512_add_epi32(blk.corr_all[j], blk.corr[ky][j]);
      }
    }
    for (int64_t p = 0; p < kBlock; ++p) {
      const int64_t ch = c0 + ZmmU8LaneChannel(p);
      blk.scale[p] = d.scale[ch];
      blk.bias[p] = d.bias[ch];
    }
  }
}

struct Interior3x3 {
  const DepthwiseRowArgs* d;
  const Block3x3* blk;
  const Epilogue512Consts* k;
  const int8_t* image;   // the row's batch element
  int64_t iy0, ky0, ky1;
  int64_t c0;
  int8_t* out_row;
  const int8_t* side_row;
  __m512i shuffle_e[4];  // byte 4j + i of each lane to dword i's low byte

  __m512i Load(const int8_t* p) const {
    return _mm512_xor_si512(_mm512_loadu_si512(p),
                            _mm512_set1_epi8(static_cast<char>(0x80)));
  }

  // By value and inlined: GCC 12 made it a call taking the accumulators
  // through the stack (with a vzeroupper per pixel).
  __attribute__((always_inline)) void Store(__m512i a0, __m512i a1, __m512i a2,
                                            __m512i a3, int64_t ox) const {
    const int64_t o = ox * d->channels + c0;
    Epilogue64(a0, a1, a2, a3, blk->scale, blk->bias,
               side_row != nullptr ? side_row + o : nullptr, *k,
               ~__mmask64{0}, out_row + o);
  }

  // Pixels ox and (if kTwo) ox + 1, stride kS. kChecked: some input column
  // of the pair may lie outside the image (a border pixel, its window partly
  // in the padding): such a column is the vector of zero activations, which
  // after the +128 is 0x80 in every byte, so that its taps add 128 * w and
  // the row's correction -128 * (w0 + w1 + w2) takes them off again: the
  // padding counts exactly zero, as in the reference. Unchecked pairs read
  // every column from the image.
  // kTwo: the pair has both pixels; kFullRows: all three filter rows lie
  // inside the image (ky0 = 0, ky1 = 3). With both known at compile time
  // the filter-row loop unrolls and the eight accumulators stay in
  // registers; the general form spilled them to the stack (GCC 12), and
  // the full interior pairs are nearly all of a layer's work.
  template <int kS, bool kChecked, bool kTwo, bool kFullRows>
  __attribute__((always_inline)) void Pair(int64_t ox) const {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int64_t ix0 = ox * kS - g.pad_left;
    const __m512i padding = _mm512_set1_epi8(static_cast<char>(0x80));
    // Column c of the pair's span: from the image, or the zero activations.
    auto column = [&](int64_t row_off, int64_t c) {
      if (kChecked && (ix0 + c < 0 || ix0 + c >= g.in_w)) return padding;
      return Load(image + (row_off + c * cc));
    };
    // The +128 undone for the valid filter rows.
    __m512i acc0[4], acc1[4];
    const int64_t ky_begin = kFullRows ? 0 : ky0;
    const int64_t ky_end = kFullRows ? 3 : ky1;
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      if (kFullRows || ky1 - ky0 == 3) {
        acc0[j] = blk->corr_all[j];
      } else {
        acc0[j] = _mm512_setzero_si512();
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          acc0[j] = _mm512_add_epi32(acc0[j], blk->corr[ky][j]);
        }
      }
      acc1[j] = acc0[j];
    }
#pragma GCC unroll 3
    for (int64_t ky = ky_begin; ky < ky_end; ++ky) {
      // An offset, not a pointer: ix0 may be negative, and a column outside
      // the image is neither addressed nor read.
      const int64_t row_off = ((iy0 + ky) * g.in_w + ix0) * cc + c0;
      const __m512i x0 = column(row_off, 0), x1 = column(row_off, 1),
                    x2 = column(row_off, 2);
      // The fourth pixel meets zero weights for ox: a single pixel reuses x2
      // instead of reading a column that may lie past the image.
      const __m512i x3 = kTwo ? column(row_off, 3) : x2;
      __m512i u[4];
      Interleave4(x0, x1, x2, x3, u);
      for (int j = 0; j < 4; ++j) {
        acc0[j] = _mm512_dpbusd_epi32(acc0[j], u[j], blk->a[ky][j]);
      }
      if constexpr (kTwo) {
        __m512i e[4];
        if (kS == 2) {
          const __m512i x4 = column(row_off, 4);
          for (int j = 0; j < 4; ++j) e[j] = _mm512_shuffle_epi8(x4, shuffle_e[j]);
        }
        for (int j = 0; j < 4; ++j) {
          acc1[j] = _mm512_dpbusd_epi32(acc1[j], u[j], blk->b[ky][j]);
          if (kS == 2) acc1[j] = _mm512_dpbusd_epi32(acc1[j], e[j], blk->e[ky][j]);
        }
      }
    }
    Store(acc0[0], acc0[1], acc0[2], acc0[3], ox);
    if constexpr (kTwo) Store(acc1[0], acc1[1], acc1[2], acc1[3], ox + 1);
  }

  // Output columns [ox, ox_end) in pairs; a pair whose span (columns ix0 ..
  // ix0 + (two ? kS + 2 : 2)) leaves the image takes the checked loads.
  template <int kS>
  void Run(int64_t ox, int64_t ox_end) const {
    const ConvGeometry& g = *d->geo;
    for (; ox < ox_end; ox += 2) {
      const bool two = ox + 1 < ox_end;
      const int64_t ix0 = ox * kS - g.pad_left;
      const int64_t last = ix0 + (two ? kS + 2 : 2);
      if (ix0 >= 0 && last < g.in_w) {
        if (!two) {
          Pair<kS, false, false, false>(ox);
        } else if (ky0 == 0 && ky1 == 3) {
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

bool Use3x3Interior(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  return d.channels >= kBlock && g.filter_h == 3 && g.filter_w == 3 &&
         g.dilation_h == 1 && g.dilation_w == 1 &&
         (g.stride_w == 1 || g.stride_w == 2);
}

void Rows3x3(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels;
  const int64_t nblocks = cc / kBlock;
  std::vector<Block3x3> local;
  const Block3x3* blocks = static_cast<const Block3x3*>(d.prepared);
  if (blocks == nullptr) {  // called without the per-call preparation
    local.resize(static_cast<size_t>(nblocks));
    PrepareBlocks(d, local.data());
    blocks = local.data();
  }
  const Epilogue512Consts k = MakeEpilogue512Consts(d.side_scale, d.lo, d.hi);
  Rows16::RunFn run_full, run_part;
  Rows16::PickInterior(g, &run_full, &run_part);
  Interior3x3 in;
  in.d = &d;
  in.k = &k;
  for (int j = 0; j < 4; ++j) {
    alignas(64) int8_t idx[64];
    for (int lane = 0; lane < 4; ++lane) {
      for (int i = 0; i < 4; ++i) {
        int8_t* t = idx + 16 * lane + 4 * i;
        t[0] = static_cast<int8_t>(4 * j + i);
        t[1] = t[2] = t[3] = static_cast<int8_t>(0x80);  // zero bytes
      }
    }
    in.shuffle_e[j] = _mm512_load_si512(idx);
  }
  const int64_t c_split = nblocks * kBlock;
  // The channels past the last full 64-channel block: the one-tap-per-lane
  // kernel, borders included.
  if (c_split < cc) {
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      Rows16::Row(d, k, run_full, run_part, r, 0, g.out_w, c_split);
    }
  }
  // Blocks outer, rows inner: a block's weights (2-4 KiB) and the three
  // input rows of its 64 channels stay in L1 from one output row to the
  // next. Rows outer cycled every block's weights (3.8 KiB each; 34 KiB for
  // 576 channels) and 3 full input rows through the 32 KiB L1 per row.
  for (int64_t bi = 0; bi < nblocks; ++bi) {
    in.blk = &blocks[bi];
    in.c0 = bi * kBlock;
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      const int64_t n = r / g.out_h, oy = r % g.out_h;
      in.image = d.input + n * g.in_h * g.in_w * cc;
      in.iy0 = oy * g.stride_h - g.pad_top;
      in.ky0 = d.ky_range[2 * oy];
      in.ky1 = d.ky_range[2 * oy + 1];
      in.out_row = d.output + r * g.out_w * cc;
      in.side_row = d.side != nullptr ? d.side + r * g.out_w * cc : nullptr;
      // Every column, borders too (checked loads there).
      if (g.stride_w == 1) {
        in.Run<1>(0, g.out_w);
      } else {
        in.Run<2>(0, g.out_w);
      }
    }
  }
}

int64_t PrepBytes(const DepthwiseRowArgs& d) {
  return Use3x3Interior(d)
             ? static_cast<int64_t>(sizeof(Block3x3)) * (d.channels / kBlock)
             : 0;
}

void PrepFill(const DepthwiseRowArgs& d, void* p) {
  PrepareBlocks(d, static_cast<Block3x3*>(p));
}

// Rows3x3 runs the one-tap-per-lane kernel (widened weights) only on the
// channels past the last full 64-channel block.
int64_t PrepWideFrom(const DepthwiseRowArgs& d) {
  return Use3x3Interior(d) ? d.channels / kBlock * kBlock : 0;
}

}  // namespace

extern const DepthwisePrep kDepthwisePrepAvx512Vnni = {PrepBytes, PrepFill,
                                                       PrepWideFrom};

void DepthwiseRowsAvx512Vnni(const DepthwiseRowArgs& d) {
  if (Use3x3Interior(d)) {
    Rows3x3(d);
  } else {
    Rows16::Rows(d);
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
