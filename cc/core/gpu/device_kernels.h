// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The GPU backend's own device code, written once and compiled twice:
//
//   * by nvcc, through device_kernels.cu, into PTX that is checked in as
//     device_kernels_ptx.inc (regenerate: tools/gpu_harness/gen_ptx.sh) and
//     JIT-compiled by the driver at run time (cuModuleLoadDataEx). Nothing in
//     the build needs nvcc: CI has none, and the nvcc on our dev machines
//     (13.0) cannot compile TF's CUDA 12.5 headers anyway; this file includes
//     neither.
//   * by the host C++ compiler, where each "thread" is a loop iteration. The
//     TF-free tests (tests/cc/gpu_host_test.cc, tests/test_gpu_build.py) run
//     these host copies bit for bit against the reference kernel, so the
//     index arithmetic and the epilogue that the GPU runs are tested in every
//     CI run, without a GPU.
//
// The epilogue is THE contract of cc/core/epilogue.h, with every rounding
// explicit: __fmul_rn / __fadd_rn / __fmaf_rn compile to mul.rn / add.rn /
// fma.rn, which ptxas never contracts or reassociates, and __float2int_rn is
// cvt.rni (round half to even). On the host, the file is compiled with
// -ffp-contract=off and uses the same operations in the same order.
//
// Keep this header free of anything but <cstdint>; it is the PTX's source.
#ifndef TF_FUSED_INT8_CC_CORE_GPU_DEVICE_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_GPU_DEVICE_KERNELS_H_

#include <cstdint>

#if defined(__CUDACC__)
#define TFI_HD __device__ __forceinline__
#define TFI_FMUL(a, b) __fmul_rn((a), (b))
#define TFI_FADD(a, b) __fadd_rn((a), (b))
#define TFI_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#define TFI_RINT(x) __float2int_rn(x)
#define TFI_I2F(x) __int2float_rn(x)
#else
#include <cmath>
#define TFI_HD inline
#define TFI_FMUL(a, b) ((a) * (b))
#define TFI_FADD(a, b) ((a) + (b))
#define TFI_FMA(a, b, c) std::fma((a), (b), (c))
#define TFI_RINT(x) static_cast<int32_t>(std::nearbyint(x))
#define TFI_I2F(x) static_cast<float>(x)
#endif

namespace tf_fused_int8 {
namespace gpu {

// Where the convolution left its result: element (n, c, p) of the logical
// [N, out_c, Ho*Wo] accumulator tensor is at ptr[n*n_stride + c*c_stride +
// p*p_stride], either as the exact int32 accumulator or as float32(acc).
struct ConvOutput {
  const void* ptr;
  int64_t n_stride;
  int64_t c_stride;
  int64_t p_stride;
  int32_t is_int32;
  int32_t unused;
};

// float32(acc), rounded to nearest even when |acc| > 2^24 (cvt.rn.f32.s32).
TFI_HD float LoadAcc(const ConvOutput& o, uint32_t n, uint32_t c, uint32_t p) {
  const int64_t i = static_cast<int64_t>(n) * o.n_stride + static_cast<int64_t>(c) * o.c_stride +
                    static_cast<int64_t>(p) * o.p_stride;
  return o.is_int32 ? TFI_I2F(static_cast<const int32_t*>(o.ptr)[i])
                    : static_cast<const float*>(o.ptr)[i];
}

// The contract epilogue, from the convolution's result to NCHW_VECT_C int8x4
// output. One "thread" per output word (4 channels of one pixel). Words are
// numbered in output order: t = (n * c4 + q) * pixels + p, where
// q = channel / 4 and p = oy * out_w + ox. Passed to the kernel by value; the
// layout is plain (pointers and int64 first, then 32-bit fields) and
// identical on host and device.
struct EpilogueParams {
  ConvOutput conv;
  const float* scale;  // [1] or [out_c]
  const float* bias;   // [out_c]
  const int8_t* side;  // [N, out_c/4, Ho, Wo, 4] or nullptr
  int8_t* out;         // [N, out_c/4, Ho, Wo, 4]
  uint32_t words;   // N * out_c/4 * pixels (< 2^29: outputs are < 2^31 bytes)
  uint32_t c4;      // out_c / 4
  uint32_t pixels;  // Ho * Wo
  float side_scale;
  float lo;             // output range [lo, hi] (OutputBounds; by default lo
                        // is 0 for Relu, -128 otherwise, and hi is 127)
  int32_t per_channel;  // scale has out_c entries
  int32_t has_side;     // side != nullptr and side_scale != 0
  float hi;
  int32_t has_lut;      // apply lut (the op's output_lut) after the clip
  int8_t lut[256];      // out = lut[r + 128] (by value: no device memory)
};

// The contract for one output channel c, lane v of its output word, from
// acc = float32 of the exact accumulator: scale, side input (lane v of
// side_word), bias, clip (NaN -> lo), round half to even, output_lut.
// Returns the int8 result in lane v of a word (other lanes zero). The ONE copy
// of the epilogue's float math: EpilogueWord (tfi_epilogue_x4) and the fused
// depthwise kernel (DepthwiseConvWord, tfi_depthwise_conv) both call it.
TFI_HD uint32_t EpilogueLane(const EpilogueParams& a, float acc, uint32_t c, uint32_t v,
                             uint32_t side_word) {
  float y = TFI_FMUL(acc, a.scale[a.per_channel ? c : 0]);
  if (a.has_side) {
    const int8_t s = static_cast<int8_t>((side_word >> (8 * v)) & 0xffu);
    y = TFI_FMA(static_cast<float>(s), a.side_scale, y);
  }
  y = TFI_FADD(y, a.bias[c]);
  y = (y > a.lo) ? y : a.lo;  // NaN -> lo
  y = (y < a.hi) ? y : a.hi;
  int32_t r = TFI_RINT(y);  // half to even, in [lo, hi] within [-128, 127]
  if (a.has_lut) r = a.lut[r + 128];  // the output lookup table (LutScalar)
  return (static_cast<uint32_t>(r) & 0xffu) << (8 * v);
}

// The side input word of output word t (0 without a side input).
TFI_HD uint32_t EpilogueSideWord(const EpilogueParams& a, uint32_t t) {
  return a.has_side ? reinterpret_cast<const uint32_t*>(a.side)[t] : 0u;
}

TFI_HD void EpilogueWord(const EpilogueParams& a, uint32_t t) {
  const uint32_t p = t % a.pixels;
  const uint32_t nq = t / a.pixels;
  const uint32_t q = nq % a.c4;
  const uint32_t n = nq / a.c4;
  const uint32_t side_word = EpilogueSideWord(a, t);
  uint32_t out_word = 0;
  for (uint32_t v = 0; v < 4; ++v) {
    const uint32_t c = q * 4 + v;
    out_word |= EpilogueLane(a, LoadAcc(a.conv, n, c, p), c, v, side_word);
  }
  reinterpret_cast<uint32_t*>(a.out)[t] = out_word;
}

// INT8x4 -> INT8x32: [outer, c4_in, inner, 4] bytes to
// [outer, c32_out, inner, 32] bytes, moving whole 4-byte words; channel words
// beyond c4_in (c32_out * 8 > c4_in) are zero, and zero channels add nothing
// to a convolution. For activations outer = N, inner = H * W; for OIHW_VECT_I
// filters outer = out_c, inner = Kh * Kw. One "thread" per output word.
struct VectParams {
  const uint32_t* in;
  uint32_t* out;
  uint32_t outer;
  uint32_t c4_in;
  uint32_t c32_out;
  uint32_t inner;
  uint32_t words;  // outer * c32_out * inner * 8
  uint32_t unused;
};

TFI_HD void X4ToX32Word(const VectParams& a, uint32_t t) {
  const uint32_t j = t % 8u;
  uint32_t r = t / 8u;
  const uint32_t p = r % a.inner;
  r /= a.inner;
  const uint32_t c32 = r % a.c32_out;
  const uint32_t o = r / a.c32_out;
  const uint32_t c4 = c32 * 8u + j;
  a.out[t] = c4 < a.c4_in
                 ? a.in[(static_cast<uint64_t>(o) * a.c4_in + c4) * a.inner + p]
                 : 0u;
}

// INT8x4 -> plain int8 NHWC: a transpose of 4-byte words,
// [outer, rows, cols] -> [outer, cols, rows]. NCHW_VECT_C [N, C/4, H*W, 4]
// becomes NHWC [N, H*W, C]; OIHW_VECT_I [O, I/4, Kh*Kw, 4] becomes
// [O, Kh, Kw, I] (cuDNN's NHWC filter layout). One "thread" per output word.
struct TransposeParams {
  const uint32_t* in;
  uint32_t* out;
  uint32_t outer;
  uint32_t rows;  // C/4
  uint32_t cols;  // H*W
  uint32_t words;  // outer * rows * cols
};

TFI_HD void TransposeWord(const TransposeParams& a, uint32_t t) {
  const uint32_t row = t % a.rows;
  const uint32_t r = t / a.rows;
  const uint32_t col = r % a.cols;
  const uint32_t o = r / a.cols;
  a.out[t] = a.in[(static_cast<uint64_t>(o) * a.rows + row) * a.cols + col];
}

// Autotuning checks every candidate against the first one that ran: the
// float32(acc) of every element of two convolution results (any layouts) must
// be equal. One "thread" per element t = (n * channels + c) * pixels + p.
struct CompareParams {
  ConvOutput a;
  ConvOutput b;
  uint32_t* mismatches;
  uint32_t channels;
  uint32_t pixels;
  uint32_t elements;
  uint32_t unused;
};

TFI_HD uint32_t ElementsDiffer(const CompareParams& q, uint32_t t) {
  const uint32_t p = t % q.pixels;
  const uint32_t nc = t / q.pixels;
  const uint32_t c = nc % q.channels;
  const uint32_t n = nc / q.channels;
  return LoadAcc(q.a, n, c, p) != LoadAcc(q.b, n, c, p) ? 1u : 0u;
}

// The int8x4 operands of one convolution, exactly as the op receives them,
// and its geometry: everything the exact sum of one output element needs
// (ExactAcc), for the autotuner's sample check and for the direct kernel.
//
// Grouped convolutions (groups = in_c / filter input depth, as
// tf.nn.conv2d): output channel c belongs to group c / group_out_c and reads
// that group's group_c4 words of 4 input channels, x words
// [(c / group_out_c) * group_c4, ... + group_c4); its filter has group_c4
// words per window position (OIHW_VECT_I with the filter input depth
// in_c / groups). In NCHW_VECT_C the filter input depth is 4 * filter
// dimension 1, so every group spans whole words (ValidateGpuGeometry checks
// in_c / groups % 4 == 0). An ordinary convolution is one group:
// group_c4 = in_c4, group_out_c = out_c.
struct ConvOperands {
  const uint32_t* x;  // NCHW_VECT_C: [N, in_c4, H, W] words of 4 channels
  const uint32_t* w;  // OIHW_VECT_I: [out_c, group_c4, Kh, Kw] words
  uint32_t batch;
  uint32_t in_c4;
  uint32_t in_h;
  uint32_t in_w;
  uint32_t out_c;
  uint32_t out_h;
  uint32_t out_w;
  uint32_t filter_h;
  uint32_t filter_w;
  uint32_t stride_h;
  uint32_t stride_w;
  uint32_t dilation_h;
  uint32_t dilation_w;
  int32_t pad_top;
  int32_t pad_left;
  uint32_t group_c4;     // words of input channels per group (in_c / groups / 4)
  uint32_t group_out_c;  // output channels per group (out_c / groups)
  uint32_t unused;
};

// acc + the dot product of the 4 signed bytes of xw and of ww, modulo 2^32.
// On the GPU one dp4a (sm_61+); on the host the same sum byte by byte
// (unsigned: no overflow in C++).
TFI_HD uint32_t Dot4Add(uint32_t xw, uint32_t ww, uint32_t acc) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(
      __dp4a(static_cast<int>(xw), static_cast<int>(ww), static_cast<int>(acc)));
#else
  for (uint32_t v = 0; v < 4; ++v) {
    const int32_t xv = static_cast<int8_t>((xw >> (8 * v)) & 0xffu);
    const int32_t wv = static_cast<int8_t>((ww >> (8 * v)) & 0xffu);
    acc += static_cast<uint32_t>(xv * wv);
  }
  return acc;
#endif
}

// The exact int32 accumulator of output element (n, c, p): the sum of int8
// products over the group's input channels and the filter window, zero
// outside the input (padding). Formed modulo 2^32 (unsigned), which gives the
// true sum because it fits int32: ComputeGeometry bounds the reduction depth
// Kh * Kw * (in_c / groups) to at most (2^31 - 1) / 2^14 = 131071, every
// product is in [-16256, 16384], so |acc| <= 131071 * 16384 < 2^31 (for
// partial sums too). The filter's padded lanes, if any, are zero and add
// nothing.
TFI_HD int32_t ExactAcc(const ConvOperands& a, uint32_t n, uint32_t c, uint32_t p) {
  const int64_t oy = p / a.out_w;
  const int64_t ox = p % a.out_w;
  const int64_t q0 = static_cast<int64_t>(c / a.group_out_c) * a.group_c4;  // group's first word
  uint32_t acc = 0;
  for (uint32_t ky = 0; ky < a.filter_h; ++ky) {
    const int64_t iy = oy * a.stride_h - a.pad_top + static_cast<int64_t>(ky) * a.dilation_h;
    if (iy < 0 || iy >= a.in_h) continue;
    for (uint32_t kx = 0; kx < a.filter_w; ++kx) {
      const int64_t ix = ox * a.stride_w - a.pad_left + static_cast<int64_t>(kx) * a.dilation_w;
      if (ix < 0 || ix >= a.in_w) continue;
      for (uint32_t q = 0; q < a.group_c4; ++q) {
        const uint32_t xw =
            a.x[((static_cast<int64_t>(n) * a.in_c4 + q0 + q) * a.in_h + iy) * a.in_w + ix];
        const uint32_t ww =
            a.w[((static_cast<int64_t>(c) * a.group_c4 + q) * a.filter_h + ky) * a.filter_w + kx];
        acc = Dot4Add(xw, ww, acc);
      }
    }
  }
  return static_cast<int32_t>(acc);
}

// The autotuner's absolute check: the exact accumulator of sampled output
// elements, computed here from the int8x4 operands with plain integer loops
// (no cuDNN, ExactAcc), against what a candidate wrote. A candidate that
// differs at any sampled element is dropped; the first one that passes
// becomes the baseline that every later candidate must equal everywhere
// (CompareParams). Without it, the first candidate that ran was the baseline
// unchecked: on an H200 with cuDNN 9.19, three int32-output NHWC engines
// agreed with each other and not with the true sums, became the baseline, and
// the right candidates were dropped for differing from them.
//
// Sampled: every output channel of `sample_pixels` pixels of the first image
// and (images == 2) of the last one. When sample_pixels equals Ho*Wo every
// pixel is checked; otherwise slots 0-4 are the four corners and the centre
// (padding and partial tiles), later slots spread over the image. One
// "thread" per sampled element: t = (image * sample_pixels + slot) * out_c + c.
struct SampleCheckParams {
  ConvOutput conv;
  ConvOperands ops;
  uint32_t* result;   // [0] mismatches; [1] the first mismatching thread that
                      // reported (~0u: none), [2] its exact acc, [3] the
                      // float bits of what the candidate wrote
  uint32_t images;         // 1 or 2
  uint32_t sample_pixels;  // <= Ho * Wo
  uint32_t samples;        // images * sample_pixels * out_c
  uint32_t unused;
};

// The output pixel (oy * Wo + ox) of a sample slot.
TFI_HD uint32_t SamplePixel(const SampleCheckParams& a, uint32_t slot) {
  const uint32_t out_w = a.ops.out_w;
  const uint32_t pixels = a.ops.out_h * out_w;
  if (a.sample_pixels >= pixels) return slot;
  switch (slot) {
    case 0: return 0;
    case 1: return out_w - 1;
    case 2: return (a.ops.out_h - 1) * out_w;
    case 3: return pixels - 1;
    case 4: return (a.ops.out_h / 2) * out_w + out_w / 2;
    default: break;
  }
  return static_cast<uint32_t>((static_cast<uint64_t>(slot - 5) * 7919u + 13u) % pixels);
}

// The output element (n, c, p) that sampled element t checks (the "thread"
// numbering above); the host names a reported t with it too.
TFI_HD void SampleElement(const SampleCheckParams& a, uint32_t t, uint32_t* n, uint32_t* c,
                          uint32_t* p) {
  *c = t % a.ops.out_c;
  const uint32_t r = t / a.ops.out_c;
  *n = (r / a.sample_pixels) == 0 ? 0u : a.ops.batch - 1;
  *p = SamplePixel(a, r % a.sample_pixels);
}

// Whether sampled element t differs from float32 of its exact accumulator
// (a NaN differs); *want and *got are set either way.
TFI_HD bool SampleDiffers(const SampleCheckParams& a, uint32_t t, int32_t* want, float* got) {
  uint32_t n, c, p;
  SampleElement(a, t, &n, &c, &p);
  *want = ExactAcc(a.ops, n, c, p);
  *got = LoadAcc(a.conv, n, c, p);
  return !(*got == TFI_I2F(*want));
}

// The direct kernel: grouped and depthwise convolutions (groups > 1), which
// the GPU path computes without cuDNN. One "thread" per output element
// t = (n * out_c + c) * Ho*Wo + p writes y[t] = float32(ExactAcc(n, c, p))
// (cvt.rn.f32.s32): float32 NCHW, the y of the x4 cuDNN plan, so the
// epilogue (EpilogueParams, MakeConvSpec(g, kVect4, 16).Output(y)) applies
// the contract to it unchanged. Exact, deterministic, no workspace.
struct DirectConvParams {
  ConvOperands ops;
  float* y;           // [N, out_c, Ho*Wo]
  uint32_t elements;  // N * out_c * Ho * Wo (< 2^31: ComputeGeometry)
  uint32_t unused;
};

TFI_HD void DirectConvElement(const DirectConvParams& a, uint32_t t) {
  const uint32_t pixels = a.ops.out_h * a.ops.out_w;
  const uint32_t p = t % pixels;
  const uint32_t nc = t / pixels;
  a.y[t] = TFI_I2F(ExactAcc(a.ops, nc / a.ops.out_c, nc % a.ops.out_c, p));
}

// The fused fast path for grouped convolutions whose groups are one int8x4
// word of input channels (group_c4 == 1: every depthwise layer in
// NCHW_VECT_C, and groups of 4 channels): one "thread" per OUTPUT WORD t, in
// the epilogue's numbering t = (n * c4 + q) * Ho*Wo + p, computes the exact
// int32 accumulators of its 4 output channels 4q..4q+3 and applies the
// contract epilogue (EpilogueLane) in the same thread, writing the int8x4
// output word: no float32 y in global memory, no second kernel.
//
// Bit-for-bit what DirectConvElement + EpilogueWord give: each lane's
// accumulator is the same sum of int8 products that ExactAcc forms (the same
// x and w words, the same Dot4Add, modulo 2^32 and exact because it fits
// int32, see ExactAcc; integer addition is associative, so the order of taps
// does not matter), converted with the same TFI_I2F (cvt.rn.f32.s32), then
// the same EpilogueLane with the same side word. Channel c reads input word
// c / group_out_c (its group's only word); the 4 lanes of one output word
// share that word when group_out_c % 4 == 0 (depthwise) and may read
// different words otherwise (groups of 4 channels, 1-3 outputs per group).
//
// 32-bit index arithmetic: ComputeGeometry bounds every tensor below 2^31
// elements, so every word index (x, w, output: elements / 4 < 2^29) and every
// partial sum of one fits uint32; the tap coordinates iy, ix (which may be
// negative in the padding) are formed in int64 and only used as a uint32
// index after the bounds check. The int64 divisions of ExactAcc's callers are
// gone: 3 uint32 divisions per thread (pixel, word, column).
struct DepthwiseConvParams {
  ConvOperands ops;    // group_c4 == 1
  EpilogueParams epi;  // epi.conv unused; epi.words output words (< 2^29)
};

TFI_HD void DepthwiseConvWord(const DepthwiseConvParams& a, uint32_t t) {
  const ConvOperands& o = a.ops;
  const uint32_t pixels = a.epi.pixels;
  const uint32_t p = t % pixels;
  const uint32_t nq = t / pixels;
  const uint32_t q = nq % a.epi.c4;
  const uint32_t n = nq / a.epi.c4;
  const uint32_t oy = p / o.out_w;
  const uint32_t ox = p - oy * o.out_w;
  const uint32_t plane = o.in_h * o.in_w;  // words of one input channel word plane
  const uint32_t taps = o.filter_h * o.filter_w;
  uint32_t x_base[4], w_base[4], acc[4];
  for (uint32_t v = 0; v < 4; ++v) {
    const uint32_t c = q * 4 + v;
    x_base[v] = (n * o.in_c4 + c / o.group_out_c) * plane;  // group c / group_out_c's word
    w_base[v] = c * taps;                                     // group_c4 == 1
    acc[v] = 0u;
  }
  const int64_t iy0 = static_cast<int64_t>(oy) * o.stride_h - o.pad_top;
  const int64_t ix0 = static_cast<int64_t>(ox) * o.stride_w - o.pad_left;
  for (uint32_t ky = 0; ky < o.filter_h; ++ky) {
    const int64_t iy = iy0 + static_cast<int64_t>(ky) * o.dilation_h;
    if (iy < 0 || iy >= o.in_h) continue;
    for (uint32_t kx = 0; kx < o.filter_w; ++kx) {
      const int64_t ix = ix0 + static_cast<int64_t>(kx) * o.dilation_w;
      if (ix < 0 || ix >= o.in_w) continue;
      const uint32_t xo = static_cast<uint32_t>(iy) * o.in_w + static_cast<uint32_t>(ix);
      const uint32_t wo = ky * o.filter_w + kx;
      uint32_t xw = o.x[x_base[0] + xo];  // loaded once when the lanes share it
      for (uint32_t v = 0; v < 4; ++v) {
        if (v > 0 && x_base[v] != x_base[v - 1]) xw = o.x[x_base[v] + xo];
        acc[v] = Dot4Add(xw, o.w[w_base[v] + wo], acc[v]);
      }
    }
  }
  const uint32_t side_word = EpilogueSideWord(a.epi, t);
  uint32_t out_word = 0;
  for (uint32_t v = 0; v < 4; ++v) {
    out_word |= EpilogueLane(a.epi, TFI_I2F(static_cast<int32_t>(acc[v])), q * 4 + v, v,
                             side_word);
  }
  reinterpret_cast<uint32_t*>(a.epi.out)[t] = out_word;
}

// Kernel names in the PTX, and the launch shape the host uses.
constexpr const char* kEpilogueKernelName = "tfi_epilogue_x4";
constexpr const char* kX4ToX32KernelName = "tfi_x4_to_x32";
constexpr const char* kTransposeKernelName = "tfi_transpose_words";
constexpr const char* kCountMismatchKernelName = "tfi_count_mismatch";
constexpr const char* kCheckSampleKernelName = "tfi_check_sample";
constexpr const char* kDirectConvKernelName = "tfi_direct_conv";
constexpr const char* kDepthwiseConvKernelName = "tfi_depthwise_conv";
constexpr uint32_t kThreadsPerBlock = 256;

}  // namespace gpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_GPU_DEVICE_KERNELS_H_
