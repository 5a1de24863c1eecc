// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The depthwise row kernel (depthwise.h) once, over a vector policy V that
// supplies 16 channels' worth of registers and instructions at one width:
// depthwise_avx512vnni.cc (one zmm, VPDPWSSD), depthwise_avx2.cc (two
// ymm, PMADDWD + PADDD) and depthwise_neon.cc (four int32x4, SMLAL).
// Include ONLY from those ISA translation units,
// after defining V: everything here lives in an anonymous namespace, so no
// vector code can be merged by the linker into a baseline symbol (see
// gemm_kernels.h).
//
// Per output row (n, oy) and block of 16 channels, the columns are walked
// left to right:
//  * border columns (window partly outside the input): one pixel over its
//    valid taps, two accumulator chains (alternate filter rows);
//  * interior columns (window inside horizontally), 3- and 5-wide filters
//    with stride 1 or 2 and dilation 1: blocks of V::Pixels<kKw, kSw>()
//    pixels in which each input column of the block's span is loaded once
//    per filter row and multiplied into every pixel whose window covers it
//    (3x3 stride 1, 8 pixels: 10 loads per filter row instead of 24);
//  * other interior columns: four pixels sharing each weight load.
// Filter rows outside the input (top/bottom) are skipped via ky_range.
//
// V's interface (all static):
//   Acc, Tail                      accumulators / valid-lane description
//   Tail MakeTail(count)           count in 1..16 valid channels
//   Acc Zero(); Acc Add(Acc, Acc)
//   X Load<kFull>(p, tail)         16 sign-extended activations (kFull: all
//                                  16 valid, no masking)
//   W LoadW(const int32_t*)        16 widened weights (depthwise.h)
//   void Mac(Acc*, X, W)           acc += x * w, exact
//   Consts MakeConsts(d)           the epilogue's constants from the row
//                                  args (side_scale, lo, hi; clamp_hi
//                                  where the ISA's epilogue uses it)
//   void Store(Acc, scale, bias, side or nullptr, Consts, Tail, out)
//   template <int kKw, int kSw> constexpr int Pixels()   interior block
//   optional: X LoadPair<kFull>(pa, pb, tail)   two rows at once (HasLoadPair)
#ifndef TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_ROWS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_ROWS_H_

#include <cstdint>
#include <vector>

#include "cc/core/cpu/depthwise/depthwise.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// A block kernel's weight blocks: those its DepthwisePrep made once per
// filter (`prepared`, already offset to them), or, for a call made without
// that preparation, `count` blocks made now into *local by fill(blocks).
template <class B, class Fill>
const B* PreparedBlocks(const void* prepared, int64_t count, std::vector<B>* local,
                        Fill fill) {
  if (prepared != nullptr) return static_cast<const B*>(prepared);
  local->resize(static_cast<size_t>(count));
  fill(local->data());
  return local->data();
}

// Whether the policy has Store4(acc[4], scale, bias, side, ld, consts, tail,
// out): four pixels ld bytes apart in one epilogue.
template <class V, class = void>
struct HasStore4 {
  static constexpr bool value = false;
};
template <class V>
struct HasStore4<V, decltype(void(&V::Store4))> {
  static constexpr bool value = true;
};
// Likewise Store2(acc[2], scale, bias, side, ld, consts, tail, out).
template <class V, class = void>
struct HasStore2 {
  static constexpr bool value = false;
};
template <class V>
struct HasStore2<V, decltype(void(&V::Store2))> {
  static constexpr bool value = true;
};

// Whether the policy has LoadPair<kFull>(pa, pb, tail): the activations of
// one column in two adjacent input rows, interleaved so that one Mac with a
// pair weight (V's preparation, DepthwiseRowArgs::prepared: per lane
// w[ky] in the low int16 and w[ky + 1] in the high one, [Kh - 1][Kw]
// [padded_c] int32) adds both rows' taps, exactly (two int8 x int8
// products per int32 lane). Interior then takes the filter rows two at a
// time where `prepared` is set.
template <class V, class = void>
struct HasLoadPair {
  static constexpr bool value = false;
};
template <class V>
struct HasLoadPair<V, decltype(void(&V::template LoadPair<true>))> {
  static constexpr bool value = true;
};

template <class V>
struct DepthwiseRowKernel {
  using Acc = typename V::Acc;
  using Tail = typename V::Tail;
  using Consts = typename V::Consts;

  // One 16-channel block of one output row.
  struct Block {
    const DepthwiseRowArgs* d;
    const int8_t* image;      // the image of this row's batch element
    int64_t iy0, ky0, ky1;    // first input row, valid filter rows
    int64_t c0;               // first channel
    Tail tail;
    const Consts* k;
    int8_t* out_row;
    const int8_t* side_row;   // or nullptr

    void Store(const Acc& a, int64_t ox) const {
      const int64_t o = ox * d->channels + c0;
      V::Store(a, d->scale + c0, d->bias + c0,
               side_row != nullptr ? side_row + o : nullptr, *k, tail,
               out_row + o);
    }

    // kP consecutive pixels from ox: four at a time through V::Store4
    // where the policy has it (one epilogue for four pixels), then two at a
    // time through V::Store2 where it has that, else one by one.
    template <int kP>
    void StoreRun(const Acc* a, int64_t ox) const {
      int p = 0;
      const int64_t cc = d->channels;
      if constexpr (HasStore4<V>::value) {
        for (; p + 4 <= kP; p += 4) {
          const int64_t o = (ox + p) * cc + c0;
          V::Store4(a + p, d->scale + c0, d->bias + c0,
                    side_row != nullptr ? side_row + o : nullptr, cc, *k, tail,
                    out_row + o);
        }
      }
      if constexpr (HasStore2<V>::value) {
        for (; p + 2 <= kP; p += 2) {
          const int64_t o = (ox + p) * cc + c0;
          V::Store2(a + p, d->scale + c0, d->bias + c0,
                    side_row != nullptr ? side_row + o : nullptr, cc, *k, tail,
                    out_row + o);
        }
      }
      for (; p < kP; ++p) Store(a[p], ox + p);
    }
  };

  // One filter row (kPair: two adjacent ones, V::LoadPair) of kP interior
  // pixels: `row` is the (first) input row at the block's first column, w
  // the row's weights for tap 0 (kx-th at w + kx * ts).
  template <int kKw, int kSw, int kP, bool kFull, bool kPair>
  static void RowPass(const Block& b, const int8_t* row, const int32_t* w,
                      int64_t ts, Acc* acc) {
    const int64_t cc = b.d->channels;
    [[maybe_unused]] const int64_t next_row = b.d->geo->in_w * cc;
    typename V::W wv[kKw];
#pragma GCC unroll 8
    for (int kx = 0; kx < kKw; ++kx) wv[kx] = V::LoadW(w + kx * ts);
    constexpr int kCols = (kP - 1) * kSw + kKw;
    // Fully unrolled, so that every tap test below is decided at compile
    // time and the weights stay in registers (7-wide, 8 pixels: without
    // it GCC kept a loop, tested kx at run time and read the weights from
    // the stack).
#pragma GCC unroll 32
    for (int col = 0; col < kCols; ++col) {
      const int8_t* p0 = row + col * cc;
      typename V::X x;
      if constexpr (kPair) {
        x = V::template LoadPair<kFull>(p0, p0 + next_row, b.tail);
      } else {
        x = V::template Load<kFull>(p0, b.tail);
      }
#pragma GCC unroll 8
      for (int p = 0; p < kP; ++p) {
        const int kx = col - p * kSw;
        if (kx >= 0 && kx < kKw) V::Mac(&acc[p], x, wv[kx]);
      }
    }
  }

  // kP interior pixels from column ox: compile-time filter width kKw and
  // stride kSw, dilation 1 (see the header comment). With pair weights
  // (HasLoadPair) the filter rows go two at a time, a last odd one alone.
  template <int kKw, int kSw, int kP, bool kFull>
  static void Interior(const Block& b, int64_t ox, Acc* acc) {
    const DepthwiseRowArgs& d = *b.d;
    const ConvGeometry& g = *d.geo;
    const int64_t cc = d.channels, ts = d.tap_stride;
    const int8_t* row0 =
        b.image + ((b.iy0 + b.ky0) * g.in_w + ox * kSw - g.pad_left) * cc + b.c0;
    const int32_t* wide = d.wide + b.ky0 * kKw * ts + b.c0;
    for (int p = 0; p < kP; ++p) acc[p] = V::Zero();
    const int64_t rows = b.ky1 - b.ky0;
    int64_t r = 0;
    if constexpr (HasLoadPair<V>::value) {
      if (d.prepared != nullptr) {
        const int64_t pc = d.padded_c;
        const int32_t* pairs =
            static_cast<const int32_t*>(d.prepared) + b.ky0 * kKw * pc + b.c0;
        for (; r + 2 <= rows; r += 2) {
          RowPass<kKw, kSw, kP, kFull, true>(b, row0 + r * g.in_w * cc,
                                             pairs + r * kKw * pc, pc, acc);
        }
      }
    }
    for (; r < rows; ++r) {
      RowPass<kKw, kSw, kP, kFull, false>(b, row0 + r * g.in_w * cc,
                                          wide + r * kKw * ts, ts, acc);
    }
  }

  // Interior columns [ox, ox_end): blocks of kP, then of 4 when kP > 4,
  // then single pixels.
  template <int kKw, int kSw, bool kFull>
  static void InteriorRun(const Block& b, int64_t ox, int64_t ox_end) {
    constexpr int kP = V::template Pixels<kKw, kSw>();
    constexpr int kHalf = kP > 4 ? 4 : 1;
    Acc acc[kP];
    for (; ox + kP <= ox_end; ox += kP) {
      Interior<kKw, kSw, kP, kFull>(b, ox, acc);
      b.template StoreRun<kP>(acc, ox);
    }
    if (kHalf > 1 && ox + kHalf <= ox_end) {
      Interior<kKw, kSw, kHalf, kFull>(b, ox, acc);
      b.template StoreRun<kHalf>(acc, ox);
      ox += kHalf;
    }
    for (; ox < ox_end; ++ox) {
      Interior<kKw, kSw, 1, kFull>(b, ox, acc);
      b.Store(acc[0], ox);
    }
  }

  using RunFn = void (*)(const Block&, int64_t, int64_t);

  // The specialized interior runners (full / partial channel blocks) for
  // this geometry, or nullptrs.
  static void PickInterior(const ConvGeometry& g, RunFn* full, RunFn* part) {
    *full = *part = nullptr;
    if (g.dilation_w != 1 || g.dilation_h != 1) return;
    if (g.filter_w == 3 && g.stride_w == 1) {
      *full = InteriorRun<3, 1, true>;
      *part = InteriorRun<3, 1, false>;
    } else if (g.filter_w == 3 && g.stride_w == 2) {
      *full = InteriorRun<3, 2, true>;
      *part = InteriorRun<3, 2, false>;
    } else if (g.filter_w == 5 && g.stride_w == 1) {
      *full = InteriorRun<5, 1, true>;
      *part = InteriorRun<5, 1, false>;
    } else if (g.filter_w == 5 && g.stride_w == 2) {
      *full = InteriorRun<5, 2, true>;
      *part = InteriorRun<5, 2, false>;
    } else if (g.filter_w == 7 && g.stride_w == 1) {
      // ConvNeXt's depthwise 7x7 (Generic4 reloaded every input column for
      // each of the 7 taps).
      *full = InteriorRun<7, 1, true>;
      *part = InteriorRun<7, 1, false>;
    }
  }

  // Four interior pixels from ox, any filter width, stride and dilation:
  // each weight load serves the four.
  static void Generic4(const Block& b, int64_t ox, Acc* acc) {
    const DepthwiseRowArgs& d = *b.d;
    const ConvGeometry& g = *d.geo;
    const int64_t cc = d.channels, ts = d.tap_stride;
    const int64_t step = g.stride_w * cc;
    for (int p = 0; p < 4; ++p) acc[p] = V::Zero();
    for (int64_t ky = b.ky0; ky < b.ky1; ++ky) {
      // Whole window inside horizontally: every address is in the image.
      const int8_t* row = b.image +
          ((b.iy0 + ky * g.dilation_h) * g.in_w + ox * g.stride_w - g.pad_left) * cc + b.c0;
      const int32_t* w = d.wide + ky * g.filter_w * ts + b.c0;
      for (int64_t kx = 0; kx < g.filter_w; ++kx) {
        const auto wv = V::LoadW(w + kx * ts);
        const int8_t* p = row + kx * g.dilation_w * cc;
        for (int i = 0; i < 4; ++i) {
          V::Mac(&acc[i], V::template Load<false>(p + i * step, b.tail), wv);
        }
      }
    }
  }

  // One pixel over its valid taps (borders).
  static Acc Single(const Block& b, int64_t ox) {
    const DepthwiseRowArgs& d = *b.d;
    const ConvGeometry& g = *d.geo;
    const int64_t cc = d.channels, ts = d.tap_stride;
    const int64_t ix0 = ox * g.stride_w - g.pad_left;
    const int64_t kx0 = d.kx_range[2 * ox], kx1 = d.kx_range[2 * ox + 1];
    Acc a[2] = {V::Zero(), V::Zero()};
    for (int64_t ky = b.ky0; ky < b.ky1; ++ky) {
      // ix0 may be negative here: form each tap's offset before adding it
      // to the pointer (no out-of-object pointer arithmetic).
      const int64_t row_off = ((b.iy0 + ky * g.dilation_h) * g.in_w + ix0) * cc + b.c0;
      const int32_t* w = d.wide + ky * g.filter_w * ts + b.c0;
      Acc& acc = a[(ky - b.ky0) & 1];
      for (int64_t kx = kx0; kx < kx1; ++kx) {
        V::Mac(&acc, V::template Load<false>(b.image + (row_off + kx * g.dilation_w * cc), b.tail),
               V::LoadW(w + kx * ts));
      }
    }
    return V::Add(a[0], a[1]);
  }

  // One output pixel (column ox) whose window lies inside the image across
  // (a global average: 1x1 output, window = input): kB full 16-channel
  // blocks from b.c0 (b.tail covers 16 lanes), the taps outer and the
  // blocks inner, so that the kB accumulators are independent chains and
  // each tap's input slice (16 * kB contiguous bytes) is read once. Per
  // block and tap the same policy Mac (VPDPWSSD / PMADDWD / SMLAL) as
  // everywhere, so every sum is the same exact int32. The one-pixel
  // interior (Interior<kKw, kSw, 1>) instead runs one block at a time, one
  // chain of Kh * Kw dependent multiply-adds, and with 2048 channels every
  // tap's widened weights lie 8 KiB apart (one L1 set) and its inputs 2 KiB
  // apart (two sets). A 7x7 average over 2048 channels took about 20 cycles
  // a tap and block that way; this way (bench_core, one Zen 5 thread, old
  // and new alternated) 2048 channels 27.3 -> 7.7 us at batch 1 and 226 ->
  // 54 us at batch 8, 1280 channels 5.6 -> 4.5 and 37 -> 29 us.
  template <int kB>
  static void PixelBlocks(const Block& b, int64_t ox, Acc* acc) {
    const DepthwiseRowArgs& d = *b.d;
    const ConvGeometry& g = *d.geo;
    const int64_t cc = d.channels, ts = d.tap_stride;
    for (int j = 0; j < kB; ++j) acc[j] = V::Zero();
    for (int64_t ky = b.ky0; ky < b.ky1; ++ky) {
      const int8_t* row = b.image +
                          ((b.iy0 + ky * g.dilation_h) * g.in_w +
                           ox * g.stride_w - g.pad_left) * cc + b.c0;
      const int32_t* w = d.wide + ky * g.filter_w * ts + b.c0;
      for (int64_t kx = 0; kx < g.filter_w; ++kx) {
        const int8_t* x = row + kx * g.dilation_w * cc;
        const int32_t* wk = w + kx * ts;
#pragma GCC unroll 8
        for (int j = 0; j < kB; ++j) {
          V::Mac(&acc[j], V::template Load<true>(x + 16 * j, b.tail),
                 V::LoadW(wk + 16 * j));
        }
      }
    }
  }

  template <int kB>
  static void PixelRun(const Block& b, int64_t ox) {
    Acc acc[kB];
    PixelBlocks<kB>(b, ox, acc);
    Block bj = b;
    for (int j = 0; j < kB; ++j, bj.c0 += 16) bj.Store(acc[j], ox);
  }

  // Output row r, columns [col_begin, col_end), the 16-channel blocks of
  // channels [c_begin, c_end) (c_begin a multiple of 16; c_end < 0: all
  // channels from c_begin on).
  // Channels [c_begin, channels) of every row of the call, all columns:
  // what the block kernels of the ISA files leave to this one.
  static void RestChannels(const DepthwiseRowArgs& d, const Consts& k, int64_t c_begin) {
    RunFn run_full, run_part;
    PickInterior(*d.geo, &run_full, &run_part);
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      Row(d, k, run_full, run_part, r, 0, d.geo->out_w, c_begin);
    }
  }

  static void Row(const DepthwiseRowArgs& d, const Consts& k, RunFn run_full,
                  RunFn run_part, int64_t r, int64_t col_begin,
                  int64_t col_end, int64_t c_begin, int64_t c_end = -1) {
    const ConvGeometry& g = *d.geo;
    const int64_t cc = d.channels;
    Block b;
    b.d = &d;
    const int64_t n = r / g.out_h, oy = r % g.out_h;
    b.image = d.input + n * g.in_h * g.in_w * cc;
    b.iy0 = oy * g.stride_h - g.pad_top;
    b.ky0 = d.ky_range[2 * oy];
    b.ky1 = d.ky_range[2 * oy + 1];
    b.k = &k;
    b.out_row = d.output + r * g.out_w * cc;
    b.side_row = d.side != nullptr ? d.side + r * g.out_w * cc : nullptr;
    const int64_t ce = c_end < 0 ? cc : c_end;
    if (col_end - col_begin == 1 && col_begin >= d.full_begin &&
        col_begin < d.full_end) {
      // A single pixel with its whole window across: eight full blocks at
      // a time (PixelBlocks), then four, the rest below. Eight against
      // four (bench_core, one Zen 5 thread, 7x7 global averages): 2048
      // channels 9.4 -> 8.0 us at batch 1, 67.6 -> 56.4 us at batch 8;
      // 1280 channels unchanged. On the AVX2 path too (16 ymm registers):
      // eight against the two pixels its policy keeps for 7-wide filters,
      // 2048 channels 7.4 against 12.7 us at batch 1 and 50 against 92 at
      // batch 8. NEON (32 registers, four per accumulator) is unmeasured
      // here (qemu); arm64_check runs it for exactness.
      b.tail = V::MakeTail(16);
      b.c0 = c_begin;
      for (; b.c0 + 128 <= ce; b.c0 += 128) PixelRun<8>(b, col_begin);
      if (b.c0 + 64 <= ce) {
        PixelRun<4>(b, col_begin);
        b.c0 += 64;
      }
      c_begin = b.c0;
    }
    for (b.c0 = c_begin; b.c0 < ce; b.c0 += 16) {
      const int64_t count = ce - b.c0 < 16 ? ce - b.c0 : 16;
      b.tail = V::MakeTail(count);
      int64_t ox = col_begin;
      while (ox < col_end) {
        const int64_t full_end = d.full_end < col_end ? d.full_end : col_end;
        if (ox == d.full_begin && run_full != nullptr && ox < full_end) {
          (count == 16 ? run_full : run_part)(b, ox, full_end);
          ox = full_end;
        } else if (ox >= d.full_begin && ox + 4 <= full_end) {
          Acc acc[4];
          Generic4(b, ox, acc);
          b.template StoreRun<4>(acc, ox);
          ox += 4;
        } else {
          b.Store(Single(b, ox), ox);
          ++ox;
        }
      }
    }
  }

  // A 1x1 window without padding: each output pixel reads one input pixel,
  // so the call is a per-channel affine map of the input (quantize_model's
  // BatchNormalization + ReLU that follows no conv: DenseNet's 58 and
  // ResNetV2's pre-activations, run on the whole concatenated or summed
  // tensor). Row walked the pixels a 16-channel block at a time, each
  // block's row through Generic4 and Single with their tap loops: about 45
  // cycles per 16 outputs on 7x7x768 (bench_core, one Zen 4 thread,
  // avx512vnni). Here the pixels are one run (a run per output row at
  // stride > 1; rows are contiguous at stride 1), four at a time, every
  // channel block of the four (one load, one Mac, their epilogue through
  // StoreRun) before the next four: the weights, scale and bias stay in L1.
  static bool OnePixelWindow(const ConvGeometry& g) {
    return g.filter_h == 1 && g.filter_w == 1 && g.pad_top == 0 &&
           g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0;
  }

  // `count` output pixels from b.out_row (and b.side_row), every channel;
  // their input pixels from x, x_step bytes apart.
  static void PixelRunOneTap(Block& b, const int8_t* x, int64_t x_step,
                             int64_t count) {
    const DepthwiseRowArgs& d = *b.d;
    const int64_t cc = d.channels;
    const Tail full = V::MakeTail(16);
    const Tail part = V::MakeTail(cc % 16 == 0 ? 16 : cc % 16);
    const int64_t c_full = cc / 16 * 16;
    int64_t p = 0;
    for (; p + 4 <= count; p += 4) {
      const int8_t* xp = x + p * x_step;
      Acc acc[4];
      b.tail = full;
      for (b.c0 = 0; b.c0 < c_full; b.c0 += 16) {
        const auto w = V::LoadW(d.wide + b.c0);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          acc[i] = V::Zero();
          V::Mac(&acc[i], V::template Load<true>(xp + i * x_step + b.c0, full), w);
        }
        b.template StoreRun<4>(acc, p);
      }
      if (c_full < cc) {
        b.tail = part;
        const auto w = V::LoadW(d.wide + b.c0);
        for (int i = 0; i < 4; ++i) {
          acc[i] = V::Zero();
          V::Mac(&acc[i], V::template Load<false>(xp + i * x_step + b.c0, part), w);
        }
        b.template StoreRun<4>(acc, p);
      }
    }
    for (; p < count; ++p) {
      const int8_t* xp = x + p * x_step;
      for (b.c0 = 0; b.c0 < cc; b.c0 += 16) {
        b.tail = b.c0 < c_full ? full : part;
        Acc acc = V::Zero();
        V::Mac(&acc, V::template Load<false>(xp + b.c0, b.tail), V::LoadW(d.wide + b.c0));
        b.Store(acc, p);
      }
    }
  }

  static void OnePixelRows(const DepthwiseRowArgs& d, const Consts& k) {
    const ConvGeometry& g = *d.geo;
    const int64_t cc = d.channels;
    Block b;
    b.d = &d;
    b.k = &k;
    if (g.stride_h == 1 && g.stride_w == 1) {
      // Output and input pixels correspond one to one, in the same order.
      const int64_t first = d.row_begin * g.out_w;
      b.out_row = d.output + first * cc;
      b.side_row = d.side != nullptr ? d.side + first * cc : nullptr;
      PixelRunOneTap(b, d.input + first * cc, cc,
                     (d.row_end - d.row_begin) * g.out_w);
      return;
    }
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      const int64_t n = r / g.out_h, oy = r % g.out_h;
      b.out_row = d.output + r * g.out_w * cc;
      b.side_row = d.side != nullptr ? d.side + r * g.out_w * cc : nullptr;
      PixelRunOneTap(b, d.input + ((n * g.in_h + oy * g.stride_h) * g.in_w) * cc,
                     g.stride_w * cc, g.out_w);
    }
  }

  static void Rows(const DepthwiseRowArgs& d) {
    const Consts k = V::MakeConsts(d);
    if (OnePixelWindow(*d.geo)) {
      OnePixelRows(d, k);
      return;
    }
    RunFn run_full, run_part;
    PickInterior(*d.geo, &run_full, &run_part);
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      Row(d, k, run_full, run_part, r, 0, d.geo->out_w, 0);
    }
  }
};

}  // namespace
}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_ROWS_H_
