// Copyright tf-fused-int8 authors. Apache 2.0.
//
// TF-free test of the compute core: every CPU kernel path this machine runs is
// compared bit for bit with the reference kernel over a generated sweep, with
// std::thread parallelism; geometry validation is checked for clean errors.
// Plain main(), no test framework (the build is offline).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cc/core/conv_params.h"
#include "tests/cc/expect.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/gemm/packed_weights.h"
#include "cc/core/cpu/winograd/winograd.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace {


// A parallel-for over std::threads, splitting [0, total) into even chunks.
ParallelFor ThreadParallelFor(int threads) {
  ParallelFor pf;
  pf.num_threads = threads;
  pf.run = [threads](int64_t total, int64_t,
                     const std::function<void(int64_t, int64_t)>& fn) {
    std::vector<std::thread> workers;
    const int64_t chunk = (total + threads - 1) / threads;
    for (int64_t b = 0; b < total; b += chunk) {
      const int64_t e = std::min(total, b + chunk);
      workers.emplace_back([&fn, b, e] { fn(b, e); });
    }
    for (auto& w : workers) w.join();
  };
  return pf;
}

struct Buffers {
  std::vector<int8_t> input, filter, side;
  std::vector<float> bias, scale;
};

FusedConvArgs MakeCase(std::mt19937* rng, Padding* padding, Buffers* b) {
  auto uni = [rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(*rng);
  };
  static const int kChannels[] = {1, 3, 4, 5, 8, 15, 16, 17, 31, 32, 33, 64, 65};
  FusedConvArgs a;
  ConvGeometry& g = a.geo;
  g.filter_h = uni(1, 7);
  g.filter_w = uni(0, 4) == 0 ? uni(1, 7) : g.filter_h;
  g.stride_h = uni(1, 3);
  g.stride_w = uni(1, 3);
  g.dilation_h = uni(0, 3) == 0 ? uni(1, 3) : 1;
  g.dilation_w = uni(0, 3) == 0 ? uni(1, 3) : 1;
  const int pad_kind = uni(0, 3);
  *padding = pad_kind == 0 ? Padding::kSame
             : pad_kind == 1 ? Padding::kValid : Padding::kExplicit;
  g.batch = uni(1, 3);
  g.in_h = (g.filter_h - 1) * g.dilation_h + 1 + uni(0, 10);
  g.in_w = (g.filter_w - 1) * g.dilation_w + 1 + uni(0, 10);
  if (*padding == Padding::kExplicit) {
    // Asymmetric, often larger than the filter; the input may then be
    // smaller than the filter.
    g.pad_top = uni(0, 9);
    g.pad_bottom = uni(0, 9);
    g.pad_left = uni(0, 9);
    g.pad_right = uni(0, 9);
    g.in_h = std::max<int64_t>(1, g.in_h - uni(0, 4));
    g.in_w = std::max<int64_t>(1, g.in_w - uni(0, 4));
    const int64_t eh = (g.filter_h - 1) * g.dilation_h + 1;
    const int64_t ew = (g.filter_w - 1) * g.dilation_w + 1;
    if (g.in_h + g.pad_top + g.pad_bottom < eh) g.pad_bottom = eh - g.in_h;
    if (g.in_w + g.pad_left + g.pad_right < ew) g.pad_right = ew - g.in_w;
  }
  g.in_c = kChannels[uni(0, 12)];
  g.out_c = kChannels[uni(0, 12)];
  const int group_kind = uni(0, 5);
  if (group_kind == 0) {
    // Depthwise: groups = in_c, channel multiplier 1 (usually) to 3.
    g.in_c = kChannels[uni(0, 12)];
    g.groups = g.in_c;
    g.out_c = g.in_c * (uni(0, 2) == 0 ? uni(2, 3) : 1);
  } else if (group_kind == 1) {
    // Grouped: 2..4 groups of 2..9 input and 1..9 output channels.
    g.groups = uni(2, 4);
    g.in_c = g.groups * uni(2, 9);
    g.out_c = g.groups * uni(1, 9);
  }
  std::string err = ComputeGeometry(*padding, &g);
  EXPECT(err.empty(), "%s", err.c_str());
  auto fill = [&](std::vector<int8_t>* v, int64_t n) {
    v->resize(static_cast<size_t>(n));
    for (auto& x : *v) x = static_cast<int8_t>(uni(-128, 127));
  };
  fill(&b->input, g.InputElements());
  fill(&b->filter, g.FilterElements());
  const bool side = uni(0, 1);
  if (side) fill(&b->side, g.OutputElements());
  const double base = 40.0 / (std::sqrt(double(g.ReductionDepth())) * 74 * 74);
  a.per_channel_scale = uni(0, 1);
  b->scale.resize(a.per_channel_scale ? g.out_c : 1);
  for (auto& s : b->scale) {
    s = uni(0, 3) == 0 ? std::ldexp(1.0f, int(std::lround(std::log2(base))))
                       : float(base * (0.5 + uni(0, 1000) / 666.0));
  }
  b->bias.resize(g.out_c);
  for (auto& x : b->bias) x = uni(-40, 40) * 0.5f + (uni(0, 1) ? 0.25f : 0.0f);
  a.input = b->input.data();
  a.filter = b->filter.data();
  a.bias = b->bias.data();
  a.conv_input_scale = b->scale.data();
  a.side_input = side ? b->side.data() : nullptr;
  a.side_input_scale = side ? uni(-100, 100) / 64.0f : 0.0f;
  a.activation = uni(0, 1) ? Activation::kRelu : Activation::kNone;
  if (uni(0, 2) == 0) {  // bounded activation (Relu6, clipped ranges)
    a.output_min = uni(-128, 20);
    a.output_max = uni(std::max(a.output_min, 0), 127);
  }
  return a;
}

// Weight sources of the ISA paths (cpu::SetWeightModeForTesting): automatic,
// always the cached packing (verified), always packed on the fly.
const int kWeightModes[] = {0, 1, 2};

void TestPathsMatchReference() {
  std::mt19937 rng(1234);
  const KernelPath paths[] = {KernelPath::kPortable, KernelPath::kAvx2,
                              KernelPath::kAvx2Direct, KernelPath::kAvx2Winograd,
                              KernelPath::kAvxVnni, KernelPath::kAvx512Vnni};
  int checked = 0;
  for (int i = 0; i < 300; ++i) {
    Padding padding;
    Buffers b;
    FusedConvArgs a = MakeCase(&rng, &padding, &b);
    std::vector<int8_t> want(a.geo.OutputElements());
    a.output = want.data();
    EXPECT(RunFusedConv(a, KernelPath::kReference, ParallelFor()).empty(), "ref");
    for (KernelPath p : paths) {
      if (!KernelPathSupported(p)) continue;
      for (int mode : kWeightModes) {
        if (p == KernelPath::kPortable && mode != 0) continue;
        cpu::SetWeightModeForTesting(mode);
        for (int threads : {1, 2, 3}) {
          std::vector<int8_t> got(want.size(), 77);
          a.output = got.data();
          const std::string err = RunFusedConv(a, p, ThreadParallelFor(threads));
          EXPECT(err.empty(), "%s", err.c_str());
          size_t bad = 0;
          for (size_t j = 0; j < got.size(); ++j) bad += got[j] != want[j];
          EXPECT(bad == 0, "case %d path %s weights %d threads %d: %zu of %zu "
                 "differ", i, KernelPathName(p), mode, threads, bad, got.size());
          ++checked;
        }
      }
      cpu::SetWeightModeForTesting(0);
    }
  }
  std::printf("paths vs reference: %d runs checked\n", checked);
}


// A parallel-for that hands out ranges in an unusual way (uneven pieces, in
// reverse order, on threads), so kernels cannot depend on the partition.
ParallelFor OddParallelFor(int threads) {
  ParallelFor pf;
  pf.num_threads = threads;
  pf.run = [](int64_t total, int64_t,
              const std::function<void(int64_t, int64_t)>& fn) {
    std::vector<std::pair<int64_t, int64_t>> pieces;
    for (int64_t b = 0, step = 1; b < total; b += step, ++step) {
      pieces.emplace_back(b, std::min(total, b + step));
    }
    std::vector<std::thread> workers;
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
      workers.emplace_back([&fn, it] { fn(it->first, it->second); });
    }
    for (auto& w : workers) w.join();
  };
  return pf;
}

const KernelPath kFastPaths[] = {KernelPath::kPortable, KernelPath::kAvx2,
                                 KernelPath::kAvx2Direct, KernelPath::kAvx2Winograd,
                                 KernelPath::kAvxVnni, KernelPath::kAvx512Vnni};

// Runs every supported path (threads 1, 2 and the odd partition) and
// compares with the reference; returns the number of runs.
int CheckAllPaths(FusedConvArgs a, const char* what) {
  std::vector<int8_t> want(a.geo.OutputElements());
  a.output = want.data();
  RunReference(a);
  int runs = 0;
  for (KernelPath p : kFastPaths) {
    if (!KernelPathSupported(p)) continue;
    const ParallelFor pfs[] = {ParallelFor(), ThreadParallelFor(2),
                               OddParallelFor(3)};
    for (int mode : kWeightModes) {
    if (p == KernelPath::kPortable && mode != 0) continue;
    cpu::SetWeightModeForTesting(mode);
    for (const ParallelFor& pf : pfs) {
      std::vector<int8_t> got(want.size(), 77);
      a.output = got.data();
      const std::string err = RunFusedConv(a, p, pf);
      EXPECT(err.empty(), "%s", err.c_str());
      size_t bad = 0, first = 0;
      for (size_t j = 0; j < got.size(); ++j) {
        if (got[j] != want[j] && bad++ == 0) first = j;
      }
      EXPECT(bad == 0, "%s path %s weights %d threads %d: %zu of %zu differ "
             "(first %zu: got %d want %d)", what, KernelPathName(p), mode,
             pf.num_threads, bad, got.size(), first, bad ? got[first] : 0,
             bad ? want[first] : 0);
      ++runs;
    }
    }
    cpu::SetWeightModeForTesting(0);
  }
  return runs;
}

FusedConvArgs LayerCase(int64_t batch, int64_t h, int64_t w, int64_t ci,
                        int64_t k, int64_t co, int64_t stride, bool side,
                        std::mt19937* rng, Buffers* b, int64_t groups = 1) {
  FusedConvArgs a;
  ConvGeometry& g = a.geo;
  g.batch = batch; g.in_h = h; g.in_w = w; g.in_c = ci; g.groups = groups;
  g.filter_h = g.filter_w = k; g.out_c = co;
  g.stride_h = g.stride_w = stride;
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty(), "layer geometry");
  auto fill = [&](std::vector<int8_t>* v, int64_t n) {
    v->resize(static_cast<size_t>(n));
    for (auto& x : *v) x = static_cast<int8_t>((*rng)() % 256 - 128);
  };
  fill(&b->input, g.InputElements());
  fill(&b->filter, g.FilterElements());
  if (side) fill(&b->side, g.OutputElements());
  b->scale.resize(co);
  const double base = 40.0 / (std::sqrt(double(g.ReductionDepth())) * 74 * 74);
  for (auto& x : b->scale) x = float(base * (0.5 + ((*rng)() % 1000) / 666.0));
  b->bias.resize(co);
  for (auto& x : b->bias) x = float(int((*rng)() % 81) - 40) * 0.5f;
  a.input = b->input.data();
  a.filter = b->filter.data();
  a.bias = b->bias.data();
  a.conv_input_scale = b->scale.data();
  a.per_channel_scale = true;
  a.side_input = side ? b->side.data() : nullptr;
  a.side_input_scale = side ? 0.75f : 0.0f;
  a.activation = side ? Activation::kNone : Activation::kRelu;
  return a;
}

// ResNet-50-like layers (reduced where the reference would be slow): K split
// into several panels, channel-block splits at batch 1, many M tiles,
// pointwise direct GEMM, the strided 7x7 stem with 3 channels.
void TestLayerShapes() {
  std::mt19937 rng(99);
  struct L { int64_t n, h, w, ci, k, co, s; bool side; };
  const L layers[] = {
      {1, 7, 7, 512, 3, 512, 1, false},   // K = 4608: 12 panels, 8 blocks
      {1, 14, 14, 256, 3, 256, 1, true},  // 2 M tiles x 4 channel groups
      {2, 28, 28, 64, 3, 128, 1, false},
      {1, 56, 56, 64, 1, 256, 1, true},   // pointwise, 14 M tiles
      {1, 30, 30, 256, 1, 64, 1, false},  // pointwise, K = 256
      {1, 40, 40, 3, 7, 64, 2, false},    // stem-like
      {3, 9, 11, 67, 3, 131, 2, true},    // odd channels, tails
  };
  int runs = 0;
  for (const L& l : layers) {
    Buffers b;
    FusedConvArgs a = LayerCase(l.n, l.h, l.w, l.ci, l.k, l.co, l.s, l.side,
                                &rng, &b);
    char what[96];
    std::snprintf(what, sizeof(what), "layer n%ld %ldx%ldx%ld k%ld co%ld s%ld",
                  long(l.n), long(l.h), long(l.w), long(l.ci), long(l.k),
                  long(l.co), long(l.s));
    runs += CheckAllPaths(a, what);
  }
  // MobileNetV2-like depthwise layers (groups = in_c) and grouped layers.
  struct G { int64_t n, h, w, ci, k, co, s, groups; bool side; };
  const G grouped[] = {
      {1, 28, 28, 144, 3, 144, 1, 144, false},  // depthwise 3x3
      {2, 29, 27, 96, 3, 96, 2, 96, true},      // depthwise 3x3 / 2
      {1, 14, 14, 35, 5, 35, 1, 35, true},      // depthwise 5x5, tail lanes
      {1, 9, 10, 24, 3, 48, 1, 24, false},      // channel multiplier 2
      {1, 14, 14, 128, 3, 128, 1, 32, false},   // ResNeXt-like 32 x 4
      {2, 12, 13, 48, 3, 96, 2, 3, true},       // 3 groups of 16 -> 32
      {1, 11, 9, 96, 3, 16, 1, 2, false},       // wide groups: span > 32
      {2, 10, 12, 64, 3, 64, 2, 8, true},       // 8 x 8, stride 2
  };
  for (const G& l : grouped) {
    Buffers b;
    FusedConvArgs a = LayerCase(l.n, l.h, l.w, l.ci, l.k, l.co, l.s, l.side,
                                &rng, &b, l.groups);
    char what[112];
    std::snprintf(what, sizeof(what),
                  "grouped layer n%ld %ldx%ldx%ld k%ld co%ld s%ld groups %ld",
                  long(l.n), long(l.h), long(l.w), long(l.ci), long(l.k),
                  long(l.co), long(l.s), long(l.groups));
    runs += CheckAllPaths(a, what);
  }
  std::printf("layer shapes: %d runs checked\n", runs);
}

// The vector epilogues against EpilogueScalar on the values that matter:
// NaN, +-Inf, huge, ties at .5, -0, denormals, in scales and biases.
void TestEpilogueSpecialValues() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float scales[] = {1.0f, 0.5f, 0.25f, -0.5f, 0.0f, -0.0f, inf, -inf,
                          nan, 1e30f, -1e30f, 1e-40f, 3.0f, 1.0f / 3,
                          std::ldexp(1.0f, -20), 2.5f, -1.5f};
  const float biases[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, -2.5f, 126.5f,
                          127.5f, -128.5f, -127.5f, inf, -inf, nan, 1e-40f,
                          1e20f, -1e20f, 0.49999997f};
  const int64_t co = int64_t(sizeof(scales) / sizeof(scales[0])) *
                     int64_t(sizeof(biases) / sizeof(biases[0]));  // 289
  int runs = 0;
  for (int relu = 0; relu < 2; ++relu) {
    for (int side = 0; side < 2; ++side) {
      FusedConvArgs a;
      ConvGeometry& g = a.geo;
      g.batch = 1; g.in_h = 3; g.in_w = 4; g.in_c = 5;
      g.filter_h = g.filter_w = 1; g.out_c = co;
      EXPECT(ComputeGeometry(Padding::kValid, &g).empty(), "geometry");
      std::vector<int8_t> input(g.InputElements()), filter(g.FilterElements()),
          side_in(g.OutputElements());
      std::mt19937 rng(5);
      for (auto& x : input) x = static_cast<int8_t>(rng() % 256 - 128);
      for (auto& x : filter) x = static_cast<int8_t>(rng() % 7 - 3);
      for (auto& x : side_in) x = static_cast<int8_t>(rng() % 256 - 128);
      std::vector<float> scale(co), bias(co);
      for (int64_t c = 0; c < co; ++c) {
        scale[c] = scales[c % (sizeof(scales) / sizeof(scales[0]))];
        bias[c] = biases[c / (sizeof(scales) / sizeof(scales[0]))];
      }
      a.input = input.data();
      a.filter = filter.data();
      a.bias = bias.data();
      a.conv_input_scale = scale.data();
      a.per_channel_scale = true;
      a.side_input = side ? side_in.data() : nullptr;
      a.side_input_scale = side ? -0.5f : 0.0f;
      a.activation = relu ? Activation::kRelu : Activation::kNone;
      runs += CheckAllPaths(a, "special values");
      // Scalar scale: NaN, Inf, huge.
      for (float s : {nan, inf, -inf, 1e38f, 0.5f}) {
        a.conv_input_scale = &s;
        a.per_channel_scale = false;
        runs += CheckAllPaths(a, "special scalar scale");
      }
      // Side scale Inf / NaN.
      if (side) {
        for (float ss : {inf, nan}) {
          a.conv_input_scale = scale.data();
          a.per_channel_scale = true;
          a.side_input_scale = ss;
          runs += CheckAllPaths(a, "special side scale");
        }
      }
    }
  }
  std::printf("epilogue special values: %d runs checked\n", runs);
}

// The exact Winograd F(2x2, 3x3) (cpu/winograd/winograd.h) at the edges of
// its bounds, on every fast path (CheckAllPaths; the direct kernels see the
// same cases): input depth at the chunk limit 3640 (4 * acc reaches
// 2146959360, just below 2^31), one past it (a single chunk of 3641 would
// wrap: 2147549184), several chunks up to the largest depth ComputeGeometry
// allows (9 * 14563); every input and weight -128 (the largest acc and
// |V| = 512, |U'| = 1152), -128 against 127 (the most negative acc),
// alternating signs (extremes of both signs in V and U'); SAME, VALID and
// EXPLICIT (pads larger than the filter, windows wholly in padding), odd
// output sizes (partial tiles), several K panels, batch > 1, side input,
// Relu / None, bounded outputs, per-tensor and per-channel scales.
void TestWinogradEdges() {
  enum Pattern { kAllMin, kMinTimesMax, kAlternating, kRandom };
  struct W {
    int64_t n, h, w, ci, co;
    Padding padding;
    int64_t pt, pb, pl, pr;  // EXPLICIT only
    Pattern pattern;
    bool side, relu, per_channel, bounded;
  };
  const W cases[] = {
      {2, 5, 5, 3640, 17, Padding::kSame, 0, 0, 0, 0, kAllMin, false, false, true, false},
      {1, 5, 4, 3641, 17, Padding::kSame, 0, 0, 0, 0, kAllMin, true, false, false, false},
      {1, 4, 5, 3640, 5, Padding::kValid, 0, 0, 0, 0, kMinTimesMax, false, false, true, true},
      {1, 5, 5, 3641, 5, Padding::kValid, 0, 0, 0, 0, kMinTimesMax, false, true, true, false},
      {1, 3, 3, 3641, 5, Padding::kExplicit, 2, 0, 1, 3, kAlternating, true, false, true, false},
      {1, 3, 4, 7281, 5, Padding::kSame, 0, 0, 0, 0, kAllMin, false, false, true, false},
      {1, 3, 3, 14563, 3, Padding::kSame, 0, 0, 0, 0, kAllMin, false, false, false, false},
      {2, 4, 3, 10921, 4, Padding::kExplicit, 1, 0, 0, 1, kRandom, true, true, true, true},
      {3, 7, 9, 64, 33, Padding::kSame, 0, 0, 0, 0, kAlternating, true, true, true, false},
      {2, 9, 7, 515, 20, Padding::kExplicit, 1, 2, 0, 3, kRandom, false, false, true, false},
      {1, 8, 8, 1030, 16, Padding::kValid, 0, 0, 0, 0, kAlternating, false, false, false, true},
      {1, 1, 1, 8, 16, Padding::kExplicit, 1, 1, 1, 1, kRandom, true, false, true, false},
      {1, 2, 2, 16, 16, Padding::kExplicit, 5, 0, 0, 6, kRandom, false, false, true, false},
      {4, 11, 13, 31, 47, Padding::kSame, 0, 0, 0, 0, kRandom, true, false, true, true},
      {1, 28, 28, 128, 128, Padding::kSame, 0, 0, 0, 0, kRandom, false, true, true, false},
  };
  const cpu::PackedWeightsCacheStats before = cpu::PackedWeightsCache::Global().Stats();
  int runs = 0;
  std::mt19937 rng(17);
  // All buffers stay alive: a freed filter's address reused by the next
  // case's filter of the same shape would be a (correctly) stale entry.
  std::vector<std::unique_ptr<Buffers>> buffers;
  for (const W& c : cases) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = c.n; g.in_h = c.h; g.in_w = c.w; g.in_c = c.ci;
    g.filter_h = g.filter_w = 3; g.out_c = c.co;
    g.pad_top = c.pt; g.pad_bottom = c.pb; g.pad_left = c.pl; g.pad_right = c.pr;
    const std::string err = ComputeGeometry(c.padding, &g);
    EXPECT(err.empty(), "winograd geometry: %s", err.c_str());
    if (!err.empty()) continue;
    buffers.push_back(std::make_unique<Buffers>());
    Buffers& b = *buffers.back();
    b.input.resize(g.InputElements());
    b.filter.resize(g.FilterElements());
    for (int64_t i = 0; i < g.InputElements(); ++i) {
      const int64_t ch = i % g.in_c, px = i / g.in_c;
      const int64_t x = px % g.in_w, y = (px / g.in_w) % g.in_h;
      int v = int(rng() % 256) - 128;
      if (c.pattern == kAllMin || c.pattern == kMinTimesMax) v = -128;
      if (c.pattern == kAlternating) v = ((x + y + ch) & 1) ? 127 : -128;
      b.input[i] = static_cast<int8_t>(v);
    }
    for (int64_t i = 0; i < g.FilterElements(); ++i) {
      const int64_t o = i % g.out_c, ch = (i / g.out_c) % g.in_c, tap = i / (g.out_c * g.in_c);
      int v = int(rng() % 256) - 128;
      if (c.pattern == kAllMin) v = -128;
      if (c.pattern == kMinTimesMax) v = 127;
      if (c.pattern == kAlternating) v = ((tap / 3 + tap % 3 + ch + o) & 1) ? 127 : -128;
      b.filter[i] = static_cast<int8_t>(v);
    }
    if (c.side) {
      b.side.resize(g.OutputElements());
      for (auto& x : b.side) x = static_cast<int8_t>(rng() % 256 - 128);
    }
    // Scales that put the largest |acc| near 100 (extreme patterns) or
    // spread random accumulators over the int8 range.
    const double depth = double(g.ReductionDepth());
    const double base = c.pattern == kRandom ? 40.0 / (std::sqrt(depth) * 74 * 74)
                                             : 100.0 / (depth * 16384.0);
    b.scale.resize(c.per_channel ? g.out_c : 1);
    for (size_t i = 0; i < b.scale.size(); ++i) b.scale[i] = float(base * (1.0 + 0.37 * i));
    b.bias.resize(g.out_c);
    for (auto& x : b.bias) x = float(int(rng() % 41) - 20) * 0.5f;
    a.input = b.input.data();
    a.filter = b.filter.data();
    a.bias = b.bias.data();
    a.conv_input_scale = b.scale.data();
    a.per_channel_scale = c.per_channel;
    a.side_input = c.side ? b.side.data() : nullptr;
    a.side_input_scale = c.side ? -0.75f : 0.0f;
    a.activation = c.relu ? Activation::kRelu : Activation::kNone;
    if (c.bounded) {
      a.output_min = -20;
      a.output_max = 90;
    }
    const int64_t calls = cpu::WinogradCallsForTesting();
    char what[128];
    std::snprintf(what, sizeof(what), "winograd n%ld %ldx%ldx%ld co%ld pattern %d",
                  long(c.n), long(c.h), long(c.w), long(c.ci), long(c.co), int(c.pattern));
    runs += CheckAllPaths(a, what);
    if (KernelPathSupported(KernelPath::kAvx2Winograd)) {
      EXPECT(cpu::WinogradCallsForTesting() > calls, "%s: Winograd never ran", what);
    }
  }
  // Unchanged filters: every cache hit verified clean (no spurious repack).
  const cpu::PackedWeightsCacheStats after = cpu::PackedWeightsCache::Global().Stats();
  EXPECT(after.stale == before.stale, "%ld spurious stale repacks",
         long(after.stale - before.stale));
  std::printf("winograd edges: %d runs checked\n", runs);
}

// Non-eligible convolutions on avx2_winograd fall back to the direct
// kernels (same bits, no Winograd call); eligible grouped ones run it per
// group.
void TestWinogradEligibility() {
  if (!KernelPathSupported(KernelPath::kAvx2Winograd)) return;
  std::mt19937 rng(23);
  struct E { int64_t k, s, d, groups, ci, co; bool winograd; };
  const E cases[] = {
      {3, 1, 1, 1, 16, 16, true},  {3, 2, 1, 1, 16, 16, false},
      {3, 1, 2, 1, 16, 16, false}, {1, 1, 1, 1, 16, 16, false},
      {5, 1, 1, 1, 16, 16, false}, {3, 1, 1, 2, 32, 48, true},
      {3, 1, 1, 16, 16, 16, false},  // depthwise: its own kernel
  };
  for (const E& e : cases) {
    Buffers b;
    FusedConvArgs a = LayerCase(2, 9, 8, e.ci, e.k, e.co, e.s, true, &rng, &b, e.groups);
    if (e.d != 1) {
      a.geo.dilation_h = a.geo.dilation_w = e.d;
      EXPECT(ComputeGeometry(Padding::kSame, &a.geo).empty(), "dilated geometry");
      b.side.resize(a.geo.OutputElements());
      a.side_input = b.side.data();
    }
    std::vector<int8_t> want(a.geo.OutputElements()), got(want.size());
    a.output = want.data();
    RunReference(a);
    a.output = got.data();
    const int64_t calls = cpu::WinogradCallsForTesting();
    EXPECT(RunFusedConv(a, KernelPath::kAvx2Winograd, ThreadParallelFor(2)).empty(), "run");
    EXPECT(got == want, "avx2_winograd k%ld s%ld d%ld groups %ld", long(e.k), long(e.s),
           long(e.d), long(e.groups));
    const int64_t ran = cpu::WinogradCallsForTesting() - calls;
    EXPECT(e.winograd ? ran == e.groups : ran == 0, "k%ld s%ld d%ld groups %ld: %ld "
           "Winograd calls", long(e.k), long(e.s), long(e.d), long(e.groups), long(ran));
    const int64_t direct_calls = cpu::WinogradCallsForTesting();
    EXPECT(RunFusedConv(a, KernelPath::kAvx2Direct, ThreadParallelFor(2)).empty(), "run");
    EXPECT(got == want, "avx2_direct");
    EXPECT(cpu::WinogradCallsForTesting() == direct_calls, "avx2_direct ran Winograd");
  }
  std::printf("winograd eligibility: checked\n");
}

// A filter changed in place (same pointer, same shape) must never be served
// from the packed-weights cache: every path, shapes with one and many
// verification panels, a change in one byte anywhere.
void TestChangedFilterIsRepacked() {
  cpu::SetWeightModeForTesting(1);  // the cache is what is under test
  std::mt19937 rng(7);
  struct L { int64_t n, h, ci, k, co; };
  // The last one has Winograd verify panels spread over several tile blocks
  // (128 tiles, 2 K panels).
  const L layers[] = {{1, 6, 8, 3, 20}, {1, 7, 512, 3, 128}, {2, 9, 33, 5, 70},
                      {2, 16, 520, 3, 36}};
  int runs = 0;
  for (const L& l : layers) {
    Buffers b;
    FusedConvArgs a = LayerCase(l.n, l.h, l.h, l.ci, l.k, l.co, 1, false, &rng, &b);
    for (KernelPath p : kFastPaths) {
      if (!KernelPathSupported(p) || p == KernelPath::kPortable) continue;
      for (int change = 0; change < 4; ++change) {
        std::vector<int8_t> got(a.geo.OutputElements()), want(got.size());
        a.output = got.data();
        EXPECT(RunFusedConv(a, p, ThreadParallelFor(2)).empty(), "run");
        // Change one byte: first, last, middle, random.
        const size_t n = b.filter.size();
        const size_t where[] = {0, n - 1, n / 2, rng() % n};
        b.filter[where[change]] ^= static_cast<int8_t>(1 + rng() % 255);
        a.output = got.data();
        EXPECT(RunFusedConv(a, p, ThreadParallelFor(2)).empty(), "run");
        a.output = want.data();
        RunReference(a);
        EXPECT(got == want, "changed filter served stale: path %s change %d "
               "layer co=%ld", KernelPathName(p), change, long(l.co));
        ++runs;
      }
    }
  }
  cpu::SetWeightModeForTesting(0);
  const cpu::PackedWeightsCacheStats st =
      cpu::PackedWeightsCache::Global().Stats();
  EXPECT(st.stale >= runs, "stale repacks %ld < changes %d", long(st.stale), runs);
  std::printf("changed filters: %d runs checked (%ld stale repacks)\n", runs,
              long(st.stale));
}

// The cache stays within its entry bound and evicts least recently used.
void TestCacheBound() {
  cpu::PackedWeightsCache& cache = cpu::PackedWeightsCache::Global();
  const KernelPath p = BestKernelPath();
  if (p == KernelPath::kPortable) return;
  cpu::SetWeightModeForTesting(1);  // single-tile cases would bypass it
  std::mt19937 rng(11);
  const int filters = int(cpu::PackedWeightsCache::kMaxEntries) + 10;
  std::vector<Buffers> bufs(filters);
  std::vector<FusedConvArgs> args;
  for (int i = 0; i < filters; ++i) {
    args.push_back(LayerCase(1, 4, 4, 8, 1, 16, 1, false, &rng, &bufs[i]));
  }
  std::vector<int8_t> out(args[0].geo.OutputElements()), want(out.size());
  const cpu::PackedWeightsCacheStats before = cache.Stats();
  for (int i = 0; i < filters; ++i) {
    args[i].output = out.data();
    EXPECT(RunFusedConv(args[i], p, ParallelFor()).empty(), "run");
    args[i].output = want.data();
    RunReference(args[i]);
    EXPECT(out == want, "cache bound run %d", i);
  }
  const cpu::PackedWeightsCacheStats after = cache.Stats();
  EXPECT(after.entries <= cpu::PackedWeightsCache::kMaxEntries,
         "%ld entries", long(after.entries));
  EXPECT(after.bytes <= cpu::PackedWeightsCache::kMaxBytes, "%ld bytes",
         long(after.bytes));
  EXPECT(after.evictions > before.evictions, "no eviction");
  // The most recent filter is a hit, the first one was evicted (a miss).
  args[filters - 1].output = out.data();
  RunFusedConv(args[filters - 1], p, ParallelFor());
  EXPECT(cache.Stats().hits == after.hits + 1, "recent filter not cached");
  RunFusedConv(args[0], p, ParallelFor());
  EXPECT(cache.Stats().misses == after.misses + 1, "oldest filter not evicted");
  cpu::SetWeightModeForTesting(0);
  std::printf("cache bound: %ld entries, %ld bytes, %ld evictions\n",
              long(after.entries), long(after.bytes), long(after.evictions));
}

// Every forcing name parses back to its path, and an unknown one is an
// error that lists them all (the avx2 variants included).
void TestKernelPathNames() {
  for (KernelPath p : {KernelPath::kAuto, KernelPath::kReference, KernelPath::kPortable,
                       KernelPath::kAvx2, KernelPath::kAvx2Direct, KernelPath::kAvx2Winograd,
                       KernelPath::kAvxVnni, KernelPath::kAvx512Vnni}) {
    KernelPath parsed;
    EXPECT(ParseKernelPath(KernelPathName(p), &parsed) && parsed == p, "name %s",
           KernelPathName(p));
  }
  const char* old = std::getenv("TF_FUSED_INT8_CPU_KERNEL");
  const std::string saved = old ? old : "";
  setenv("TF_FUSED_INT8_CPU_KERNEL", "avx3", 1);
  KernelPath resolved;
  const std::string err = ResolveKernelPath(KernelPath::kAuto, &resolved);
  for (const char* name : {"auto", "reference", "portable", "avx2", "avx2_direct",
                           "avx2_winograd", "avxvnni", "avx512vnni"}) {
    EXPECT(err.find(std::string(" ") + name) != std::string::npos, "'%s' not in '%s'", name,
           err.c_str());
  }
  if (old) {
    setenv("TF_FUSED_INT8_CPU_KERNEL", saved.c_str(), 1);
  } else {
    unsetenv("TF_FUSED_INT8_CPU_KERNEL");
  }
}

void TestGeometryErrors() {
  auto geo = [] {
    ConvGeometry g;
    g.batch = 1; g.in_h = 5; g.in_w = 5; g.in_c = 3;
    g.filter_h = 3; g.filter_w = 3; g.out_c = 4;
    return g;
  };
  ConvGeometry g = geo();
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty(), "valid geometry");
  EXPECT(g.out_h == 5 && g.pad_top == 1 && g.pad_bottom == 1, "SAME 3x3");
  g = geo(); g.stride_h = 2; g.in_h = 6;
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty() && g.out_h == 3 &&
         g.pad_top == 0 && g.pad_bottom == 1, "SAME odd total padding goes after");
  struct Bad { const char* what; void (*mutate)(ConvGeometry*); Padding p; const char* needle; };
  const Bad bad[] = {
      {"zero stride", [](ConvGeometry* g) { g->stride_w = 0; }, Padding::kSame, "strides width"},
      {"negative dilation", [](ConvGeometry* g) { g->dilation_h = -1; }, Padding::kSame, "dilations height"},
      {"zero filter", [](ConvGeometry* g) { g->filter_h = 0; }, Padding::kSame, "filter spatial"},
      {"negative dim", [](ConvGeometry* g) { g->in_w = -3; }, Padding::kSame, "conv_input width"},
      {"VALID too small", [](ConvGeometry* g) { g->in_h = 2; }, Padding::kValid, "smaller than the effective filter"},
      {"input overflow", [](ConvGeometry* g) { g->batch = 1 << 20; g->in_h = 1 << 10; }, Padding::kSame, "conv_input has more than"},
      {"accumulator overflow", [](ConvGeometry* g) { g->in_c = 20000; g->filter_h = 7; g->in_h = 7; }, Padding::kSame, "int32 accumulator"},
      {"huge dim", [](ConvGeometry* g) { g->out_c = int64_t{1} << 40; }, Padding::kSame, "filter output depth"},
      {"zero groups", [](ConvGeometry* g) { g->groups = 0; }, Padding::kSame, "groups must be in"},
      {"groups not dividing input", [](ConvGeometry* g) { g->groups = 2; }, Padding::kSame, "conv_input depth (3) must be a multiple of groups (2"},
      {"groups not dividing output", [](ConvGeometry* g) { g->groups = 3; g->out_c = 4; }, Padding::kSame, "filter output depth (4) must be a multiple of groups (3"},
  };
  for (const Bad& b : bad) {
    ConvGeometry g = geo();
    b.mutate(&g);
    const std::string err = ComputeGeometry(b.p, &g);
    EXPECT(err.find(b.needle) != std::string::npos, "%s: got '%s'", b.what, err.c_str());
  }
  // Grouped: the reduction and the filter cover in_c / groups channels.
  g = geo(); g.in_c = 6; g.groups = 3; g.out_c = 9;
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty() && g.GroupInC() == 2 &&
         g.GroupOutC() == 3 && g.ReductionDepth() == 18 &&
         g.FilterElements() == 3 * 3 * 2 * 9 && !g.IsDepthwise(), "grouped geometry");
  g = geo(); g.groups = 3; g.out_c = 6;
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty() && g.IsDepthwise(), "depthwise");
  g = geo(); g.in_c = 20000 * 4; g.groups = 4; g.filter_h = 7; g.in_h = 7;
  EXPECT(ComputeGeometry(Padding::kSame, &g).find("int32 accumulator") != std::string::npos,
         "grouped accumulator bound uses in_c / groups");
  g = geo(); g.in_c = 18000 * 8; g.groups = 8; g.filter_h = 7; g.in_h = 7;
  g.batch = 1; g.in_w = 1; g.filter_w = 1; g.out_c = 8;
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty(),
         "grouped depth 7 * 18000 within the accumulator bound");
  g = geo(); g.batch = 0;
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty() && g.OutputElements() == 0, "batch 0");
  // Explicit padding: pads kept, out = (in + before + after - eff) / stride + 1.
  g = geo(); g.pad_top = 0; g.pad_bottom = 7; g.pad_left = 4; g.pad_right = 1;
  g.stride_w = 2;
  EXPECT(ComputeGeometry(Padding::kExplicit, &g).empty() && g.out_h == 10 &&
         g.out_w == 4 && g.pad_top == 0 && g.pad_bottom == 7 &&
         g.pad_left == 4 && g.pad_right == 1, "explicit geometry");
  g = geo(); g.in_h = 1; g.pad_top = 1; g.pad_bottom = 1;
  EXPECT(ComputeGeometry(Padding::kExplicit, &g).empty() && g.out_h == 1,
         "explicit pads make a small input fit");
  const Bad bad_explicit[] = {
      {"explicit too small", [](ConvGeometry* g) { g->in_h = 1; g->pad_top = 1; }, Padding::kExplicit, "plus explicit padding"},
      {"negative pad", [](ConvGeometry* g) { g->pad_left = -1; }, Padding::kExplicit, "explicit padding left"},
      {"huge pad", [](ConvGeometry* g) { g->pad_right = int64_t{1} << 31; }, Padding::kExplicit, "explicit padding right"},
      {"huge output", [](ConvGeometry* g) { g->pad_top = g->pad_bottom = (int64_t{1} << 31) - 1; }, Padding::kExplicit, "output height/width"},
      {"huge output elements", [](ConvGeometry* g) { g->pad_top = g->pad_bottom = 1 << 20; g->pad_left = 1 << 10; }, Padding::kExplicit, "output has more than"},
  };
  for (const Bad& b : bad_explicit) {
    ConvGeometry g = geo();
    b.mutate(&g);
    const std::string err = ComputeGeometry(b.p, &g);
    EXPECT(err.find(b.needle) != std::string::npos, "%s: got '%s'", b.what, err.c_str());
  }
}

}  // namespace
}  // namespace tf_fused_int8

int main() {
  std::printf("best CPU kernel: %s\n",
              tf_fused_int8::KernelPathName(tf_fused_int8::BestKernelPath()));
  tf_fused_int8::TestGeometryErrors();
  tf_fused_int8::TestKernelPathNames();
  tf_fused_int8::TestPathsMatchReference();
  tf_fused_int8::TestEpilogueSpecialValues();
  tf_fused_int8::TestLayerShapes();
  tf_fused_int8::TestWinogradEdges();
  tf_fused_int8::TestWinogradEligibility();
  tf_fused_int8::TestChangedFilterIsRepacked();
  tf_fused_int8::TestCacheBound();
  if (tf_fused_int8::testing::ExpectFailures()) {
    std::printf("%d failures\n", tf_fused_int8::testing::ExpectFailures());
    return 1;
  }
  std::printf("core_test: all passed\n");
  return 0;
}
