// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise convolution (groups == in_c: one input channel per group, channel
// multiplier M = out_c / in_c) as a direct kernel: each output channel is a
// Kh x Kw window of one input channel, so there is no reduction across
// channels to feed a GEMM; instead the kernels vectorize across channels
// (NHWC keeps them contiguous), one int32 accumulator lane per channel.
//
// The driver (depthwise.cc, baseline code) runs the row kernel of the
// chosen instruction set over the output rows (n, oy) with the caller's
// ParallelFor. It prepares per call, for M > 1, an expanded input
// [N, H, W, out_c] whose channel c is input channel c / M, so that the row
// kernels only see M == 1. Once per filter (a process-wide cache, below),
// it prepares:
//  * the weights widened to int32 lanes [Kh * Kw, padded_c] holding the int8
//    weight in the low 16 bits and zero in the high 16 bits: PMADDWD /
//    VPDPWSSD of such a lane with a sign-extended int8 activation (int32
//    lane, high half 0 or -1) is exactly w * x (the high halves multiply
//    zero); NEON picks the low halves (UZP1) and multiplies int16 by int16
//    (SMLAL); one tap of them, [1, padded_c], when every tap of each
//    channel has the same weight (an average pooling's filter:
//    DepthwiseRowArgs::tap_stride 0);
//  * scale (broadcast when scalar) and bias padded to padded_c floats, so
//    vector loads never read past the caller's arrays;
//  * the row kernel's own rearrangement (DepthwisePrep), where it has one.
// Made per call, they cost the small layers of batch 1 up to a fifth of
// their time (bench_core, Zen 5, one thread, 32 rotating filters, best of
// 4 alternated: 14x14x576 stride 2 8.9 -> 7.3 us, 14x14x384 14.9 -> 13.5,
// 7x7x960 11.2 -> 10.1; MobileNetV2's 17 depthwise layers and its 7x7
// global average together 532 -> 519 us).
//
// Prepared-weights cache: keyed by the filter's address and what the
// preparation depends on besides the operands' values (filter size,
// channels, stride, dilation, scalar or per-channel scale, the row kernel).
// An entry keeps copies of the filter, scale and bias it was made from;
// every call that finds it compares them with the call's (memcmp, a few KB
// per layer) and prepares afresh on any difference, so a changed or reused
// buffer is never served stale. At most kDepthwiseCacheMaxEntries entries
// and kDepthwiseCacheMaxBytes bytes (least recently used evicted first,
// cc/core/cpu/bounded_lru.h), pinned entries aside: prepared from pinned
// operands (FusedConvArgs::filter_pin and epilogue_pin), they are outside
// the bounds while both pins are Held() (the model lives) and dropped at
// the next insertion once not (depthwise.cc, PreparedCache).
//
// Like gemm/gemm_kernels.h, this header is included by baseline and ISA translation
// units: declarations and plain structs only, no inline code.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_H_
#define TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_H_

#include <cstdint>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/cpu/lut/lut_kernels.h"
#include "cc/core/cpu/weight_cache_stats.h"

namespace tf_fused_int8 {
namespace cpu {

// Channel padding of the widened weights, scale and bias (one zmm of int32).
constexpr int64_t kDepthwiseChannelAlign = 16;

// Valid filter taps per output row and column, shared by the direct
// (depthwise and narrow-group) kernels: [begin, end) of ky for output row oy
// at ky[2 * oy], of kx for column ox at kx[2 * ox]; columns [full_begin,
// full_end) have every kx valid (full_begin == full_end == Wo if none).
struct WindowRanges {
  std::vector<int64_t> ky, kx;
  int64_t full_begin = 0, full_end = 0;
};
void ComputeWindowRanges(const ConvGeometry& g, WindowRanges* r);

// What the row arguments of every direct kernel share: the epilogue's
// operands besides scale and bias, the output, the window ranges and the
// rows to compute.
struct DirectRowArgs {
  const int8_t* side;       // [N, Ho, Wo, Co] or nullptr
  float side_scale;
  int8_t lo, hi;            // output range (OutputBounds)
  int8_t* output;           // [N, Ho, Wo, Co]
  // WindowRanges::ky / kx: [begin, end) of ky for output row oy at
  // ky_range[2 * oy], of kx for column ox at kx_range[2 * ox] (taps
  // outside are padding).
  const int64_t* ky_range;  // [Ho * 2]
  const int64_t* kx_range;  // [Wo * 2]
  // Output columns whose whole window is inside the input horizontally
  // (kx_range is [0, Kw) for every ox in [full_begin, full_end)).
  int64_t full_begin, full_end;
  int64_t row_begin, row_end;  // output rows r = n * Ho + oy
  // Whether the epilogue must clamp y to hi before converting it; false
  // only where UpperClampNeeded (epilogue.h) is false for the call
  // (RunDepthwise). The x86 kernels read it; the NEON one clamps always.
  bool clamp_hi = true;
  // Every input byte is in [0, 127] (FusedConvArgs::input_non_negative, a
  // ReLU layer's output): the avx512vnni and avxvnni 3x3 kernels then take
  // the bytes as VPDPBUSD's u8 operand as they are, without their +128
  // (Interior3x3).
  bool input_non_negative = false;
};

// Fills d's fields from the call and its window ranges (rows left empty).
void FillDirectRowArgs(const FusedConvArgs& a, const WindowRanges& r,
                       DirectRowArgs* d);

struct DepthwiseRowArgs : DirectRowArgs {
  const ConvGeometry* geo;  // the call's geometry (fields only in ISA code)
  const int8_t* input;      // [N, H, W, channels] (expanded when M > 1)
  const int8_t* filter;     // [Kh * Kw, channels] (the HWIO filter itself)
  const int32_t* wide;      // [Kh * Kw, padded_c] widened weights, or
                            // [1, padded_c] (tap_stride 0)
  // int32 elements from one tap's widened weights to the next's: padded_c,
  // or 0 when every tap of each channel has the same weight (an average
  // pooling's filter, quantize_model's global average pooling included):
  // `wide` then holds one tap, which stays in L1 where Kh * Kw copies were
  // streamed from L3 on every call (bench_core, avx512vnni, a 7x7 average
  // over 1280 channels: 14.2 us with 16 filters cycled, 5.4 with one hot).
  // In the step profiler (Xeon with AMX, KVM, batch 1, two runs each, old
  // and new alternated): ResNet50's 7x7x2048 global average 28-31 -> 18-19
  // us, MobileNetV2's 7x7x1280 16.6-17.1 -> 11.2-12.3 on one thread.
  int64_t tap_stride = 0;
  const float* scale;       // [padded_c]
  const float* bias;        // [padded_c]
  int64_t channels;         // out_c
  int64_t padded_c;         // channels rounded up to kDepthwiseChannelAlign
  // What the row kernel's DepthwisePrep made from the filter (64-byte
  // aligned), or nullptr.
  const void* prepared = nullptr;
};
using DepthwiseRowsFn = void (*)(const DepthwiseRowArgs&);

// A row kernel's preparation of the weights (rearranged once per filter,
// kept in the prepared-weights cache, instead of once per ParallelFor unit):
// bytes(d) says how much it needs (0: nothing), fill(d, p) writes it to p
// (64-byte aligned) from d's filter, scale, bias and geometry;
// wide_from(d) is the first channel whose widened weights (d.wide) the row
// kernel reads (the driver fills only those; channels below it come from
// the preparation).
struct DepthwisePrep {
  int64_t (*bytes)(const DepthwiseRowArgs& d);
  void (*fill)(const DepthwiseRowArgs& d, void* p);
  int64_t (*wide_from)(const DepthwiseRowArgs& d);
};

// Row kernels, one per instruction set (depthwise_<isa>.cc); the portable
// one lives in depthwise.cc.
void DepthwiseRowsPortable(const DepthwiseRowArgs& d);
void DepthwiseRowsAvx2(const DepthwiseRowArgs& d);
extern const DepthwisePrep kDepthwisePrepAvx2;
// Whether DepthwiseRowsAvx2 runs a faster kernel on g for an input known to
// be in [0, 127] (its 3x3 blocks' MaddubsDot): the dispatcher then scans an
// input it was not told about (dispatch.cc).
bool DepthwiseAvx2TakesNonNegative(const ConvGeometry& g);
void DepthwiseRowsAvxVnni(const DepthwiseRowArgs& d);
extern const DepthwisePrep kDepthwisePrepAvxVnni;
void DepthwiseRowsAvx512Vnni(const DepthwiseRowArgs& d);
extern const DepthwisePrep kDepthwisePrepAvx512Vnni;
// The avx512vnni and amx paths' calls that run depthwise_blocks_ymm.h's
// 32-channel blocks instead (depthwise_ymm_avx512vnni.cc: where the zmm
// blocks leave many lanes idle, on Zen 4), their row kernel and their
// preparation (dispatch.cc picks them per call); the testing mode: 0 as
// measured, 1 those calls on any CPU, 2 never.
bool DepthwiseYmmBlocksAvx512(const ConvGeometry& g);
void DepthwiseRowsYmmAvx512Vnni(const DepthwiseRowArgs& d);
extern const DepthwisePrep kDepthwisePrepYmmAvx512Vnni;
void SetDepthwiseYmmBlocksForTesting(int mode);
void DepthwiseRowsNeon(const DepthwiseRowArgs& d);  // aarch64 builds only

// Row kernels of a global average pooling: a call whose one output pixel's
// window is the whole image (no padding) and whose filter weighs every tap
// of a channel the same (tap_stride 0; quantize_model's
// GlobalAveragePooling2D and squeeze-excite squeezes). Its rows are images:
// acc[c] = filter[c] * (the sum of channel c over the image), exactly the
// sum of the products (integers: |filter[c] * sum| <= taps * 2^14, which the
// geometry's validation keeps in int32), then the contract's epilogue. The
// channel sums run in int16 lanes over runs of kChannelSumsRun pixels
// (|256 * -128| = 2^15 fits, 256 * 127 too), added into int32. RunDepthwise
// runs the path's instead of its row kernel on such calls (the row kernels
// took each tap as one vector step with the accumulator through memory:
// EfficientNetB0's 112x112x32 squeeze ~90 us a call in TF, one Zen 4
// thread). Portable (depthwise.cc; the NEON path runs it too), AVX2
// (depthwise_avx2.cc: the avx2 and avxvnni paths) and AVX-512BW
// (depthwise_avx512vnni.cc: avx512vnni and amx).
constexpr int64_t kChannelSumsRun = 256;
void DepthwiseGlobalRowsPortable(const DepthwiseRowArgs& d);
void DepthwiseGlobalRowsAvx2(const DepthwiseRowArgs& d);
void DepthwiseGlobalRowsAvx512(const DepthwiseRowArgs& d);

// Row kernels of an identity call (depthwise_identity.h: a 1x1 depthwise
// convolution, no padding, every weight 1, scale 1 and bias 0, no side
// input: out = clip(x, lo, hi) at the stride). RunDepthwise runs
// the path's instead of its row kernel on such calls (the row kernels ran
// NASNetMobile's Int8ReLUs at about 9 GB/s of input, bench_core, one Zen 4
// thread). Portable (depthwise.cc; the NEON path too), AVX2
// (depthwise_avx2.cc: avx2 and avxvnni) and AVX-512BW
// (depthwise_avx512vnni.cc: avx512vnni and amx).
void DepthwiseIdentityRowsPortable(const DepthwiseRowArgs& d);
void DepthwiseIdentityRowsAvx2(const DepthwiseRowArgs& d);
void DepthwiseIdentityRowsAvx512(const DepthwiseRowArgs& d);
// Tests only: the calls RunDepthwise ran as identity calls so far.
int64_t DepthwiseIdentityCallsForTesting();

constexpr int64_t kDepthwiseCacheMaxEntries = 256;
constexpr int64_t kDepthwiseCacheMaxBytes = int64_t{64} << 20;

// pinned_hits: the hits used without comparing the operands (a pinned call
// on a pinned entry: FusedConvArgs::epilogue_pin).
using DepthwiseCacheStats = WeightCacheStats;
DepthwiseCacheStats GetDepthwiseCacheStats();
// Tests only: drops every entry (and the pins they hold).
void ClearDepthwiseCacheForTesting();
// Tests only: false prepares the weights on every call (no cache).
void SetDepthwiseCacheForTesting(bool enabled);

// Runs a depthwise call (args.geo.IsDepthwise()) with `rows`, or, when it
// is a global average pooling, with `global_rows` (nullptr:
// DepthwiseGlobalRowsPortable). lut: when given, args.output_lut is applied
// with it to slices of output rows right after they are written; nullptr:
// the caller applies it.
// identity_rows likewise for an identity call (nullptr:
// DepthwiseIdentityRowsPortable).
void RunDepthwise(const FusedConvArgs& args, DepthwiseRowsFn rows,
                  const ParallelFor& parallel_for,
                  const DepthwisePrep* prep = nullptr, LutBody lut = nullptr,
                  DepthwiseRowsFn global_rows = nullptr,
                  DepthwiseRowsFn identity_rows = nullptr);

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_H_
