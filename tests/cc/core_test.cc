// Copyright tf-fused-int8 authors. Apache 2.0.
//
// TF-free test of the compute core: every CPU kernel path this machine runs is
// compared bit for bit with the reference kernel over a generated sweep, with
// parallel-fors on a pool of test threads (test_pool.h); geometry validation
// is checked for clean errors.
// Plain main(), no test framework (the build is offline).
//
// Environment (both unset in `bazel test`, which then tests every path this
// build and CPU have at full size):
//  * TF_FUSED_INT8_CPU_KERNEL=<path>: test only that path, run through
//    KernelPath::kAuto so that the variable's resolution is tested too
//    (tools/arm64_check.sh runs the test once per aarch64 path under qemu).
//    A path this build or CPU does not have must be refused with a clean
//    error and no output written; the test then prints the message and
//    exits with kExitRefused.
//  * TF_FUSED_INT8_CORE_TEST_CASES=<n>: random cases of the reference
//    sweep (default 300; the emulated aarch64 runs use fewer).
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cc/core/channel_scale.h"
#include "cc/core/concat.h"
#include "cc/core/depth_to_space.h"
#include "cc/core/pad.h"
#include "cc/core/conv_params.h"
#include "cc/core/cpu/depthwise/depthwise.h"
#include "tests/cc/expect.h"
#include "tests/cc/test_pool.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/gemm/packed_weights.h"
#include "cc/core/cpu/lut/lut.h"
#include "cc/core/cpu/peak/peak.h"
#include "cc/core/cpu/pool/pool_kernels.h"
#include "cc/core/cpu/round_int8.h"
#include "cc/core/cpu/winograd/winograd.h"
#include "cc/core/fused_conv.h"
#include "cc/core/layer_norm.h"
#include "cc/core/pool.h"
#include "cc/core/quantize.h"
#include "cc/core/transposed_conv.h"

namespace tf_fused_int8 {
namespace {

constexpr int kExitRefused = 3;

// Every fast path; the ones this build and CPU lack are skipped.
const KernelPath kFastPaths[] = {
    KernelPath::kPortable,   KernelPath::kAvx2,    KernelPath::kAvx2Direct,
    KernelPath::kAvx2Winograd, KernelPath::kAvxVnni, KernelPath::kAvx512Vnni,
    KernelPath::kNeon,       KernelPath::kDotprod, KernelPath::kI8mm,
    KernelPath::kAmx};

// The paths under test (main() fills it) and whether they are reached
// through TF_FUSED_INT8_CPU_KERNEL (run as kAuto).
std::vector<KernelPath> g_paths;
bool g_forced = false;

KernelPath RunAs(KernelPath p) { return g_forced ? KernelPath::kAuto : p; }

// A parallel-for on the test pool's threads (test_pool.h), splitting [0,
// total) into even chunks.
ParallelFor ThreadParallelFor(int threads) {
  ParallelFor pf;
  pf.num_threads = threads;
  pf.run = [threads](int64_t total, int64_t,
                     const std::function<void(int64_t, int64_t)>& fn) {
    std::vector<std::function<void()>> tasks;
    const int64_t chunk = (total + threads - 1) / threads;
    for (int64_t b = 0; b < total; b += chunk) {
      const int64_t e = std::min(total, b + chunk);
      tasks.push_back([&fn, b, e] { fn(b, e); });
    }
    TestPool::Get().RunAll(std::move(tasks));
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
// always the cached packing (verified), always packed on the fly. The
// depthwise driver's prepared weights come from its cache in modes 0 and 1
// and are prepared per call in mode 2.
const int kWeightModes[] = {0, 1, 2};

void SetWeightMode(int mode) {
  cpu::SetWeightModeForTesting(mode);
  cpu::SetDepthwiseCacheForTesting(mode != 2);
}

// A random output lookup table (256 int8 entries).
std::vector<int8_t> RandomLut(std::mt19937* rng) {
  std::vector<int8_t> lut(256);
  for (auto& v : lut) v = static_cast<int8_t>((*rng)() % 256 - 128);
  return lut;
}

void TestPathsMatchReference(int cases) {
  std::mt19937 rng(1234);
  std::mt19937 lut_rng(4321);  // its own stream: the cases stay as they were
  int checked = 0;
  for (int i = 0; i < cases; ++i) {
    Padding padding;
    Buffers b;
    FusedConvArgs a = MakeCase(&rng, &padding, &b);
    // Every third case with an output lookup table.
    const std::vector<int8_t> lut = RandomLut(&lut_rng);
    if (i % 3 == 2) a.output_lut = lut.data();
    std::vector<int8_t> want(a.geo.OutputElements());
    a.output = want.data();
    EXPECT(RunFusedConv(a, KernelPath::kReference, ParallelFor()).empty(), "ref");
    for (KernelPath p : g_paths) {
      for (int mode : kWeightModes) {
        if (p == KernelPath::kPortable && mode != 0) continue;
        SetWeightMode(mode);
        for (int threads : {1, 2, 3}) {
          std::vector<int8_t> got(want.size(), 77);
          a.output = got.data();
          const std::string err = RunFusedConv(a, RunAs(p), ThreadParallelFor(threads));
          EXPECT(err.empty(), "%s", err.c_str());
          size_t bad = 0;
          for (size_t j = 0; j < got.size(); ++j) bad += got[j] != want[j];
          const ConvGeometry& g = a.geo;
          EXPECT(bad == 0, "case %d path %s weights %d threads %d: %zu of %zu "
                 "differ (n%ld %ldx%ldx%ld k%ldx%ld co%ld s%ldx%ld d%ldx%ld "
                 "groups %ld pad %ld %ld %ld %ld)", i, KernelPathName(p), mode,
                 threads, bad, got.size(), long(g.batch), long(g.in_h),
                 long(g.in_w), long(g.in_c), long(g.filter_h), long(g.filter_w),
                 long(g.out_c), long(g.stride_h), long(g.stride_w),
                 long(g.dilation_h), long(g.dilation_w), long(g.groups),
                 long(g.pad_top), long(g.pad_bottom), long(g.pad_left),
                 long(g.pad_right));
          ++checked;
        }
      }
      SetWeightMode(0);
    }
  }
  std::printf("paths vs reference: %d runs checked\n", checked);
}


// A parallel-for that hands out ranges in an unusual way (uneven pieces, in
// reverse order, on the test pool's threads), so kernels cannot depend on
// the partition.
ParallelFor OddParallelFor(int threads) {
  ParallelFor pf;
  pf.num_threads = threads;
  pf.run = [](int64_t total, int64_t,
              const std::function<void(int64_t, int64_t)>& fn) {
    std::vector<std::pair<int64_t, int64_t>> pieces;
    for (int64_t b = 0, step = 1; b < total; b += step, ++step) {
      pieces.emplace_back(b, std::min(total, b + step));
    }
    std::vector<std::function<void()>> tasks;
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
      tasks.push_back([&fn, it] { fn(it->first, it->second); });
    }
    TestPool::Get().RunAll(std::move(tasks));
  };
  return pf;
}

// The modes of cpu::SetDepthwiseYmmBlocksForTesting to run path p in on
// geometry g: both routes (1: the ymm blocks, 2: the zmm kernels) where
// the avx512vnni and amx paths may hand a depthwise call to the ymm blocks
// (cpu::DepthwiseYmmBlocksAvx512 under mode 1), so that each is tested on
// every CPU with AVX-512 VNNI, whichever it takes by default; else 0.
std::vector<int> YmmModes(KernelPath p, const ConvGeometry& g) {
#if defined(__x86_64__)
  if (p != KernelPath::kAvx512Vnni && p != KernelPath::kAmx) return {0};
  cpu::SetDepthwiseYmmBlocksForTesting(1);
  const bool ymm = cpu::DepthwiseYmmBlocksAvx512(g);
  cpu::SetDepthwiseYmmBlocksForTesting(0);
  return ymm ? std::vector<int>{1, 2} : std::vector<int>{0};
#else
  (void)p;
  (void)g;
  return {0};
#endif
}

void SetYmmMode(int mode) {
#if defined(__x86_64__)
  cpu::SetDepthwiseYmmBlocksForTesting(mode);
#else
  (void)mode;
#endif
}

// Runs every supported path (threads 1, 2 and the odd partition; both
// depthwise routes of the avx512vnni and amx paths where YmmModes says) and
// compares with the reference; returns the number of runs.
int CheckAllPaths(FusedConvArgs a, const char* what) {
  std::vector<int8_t> want(a.geo.OutputElements());
  a.output = want.data();
  RunReference(a);
  int runs = 0;
  for (KernelPath p : g_paths) {
    const ParallelFor pfs[] = {ParallelFor(), ThreadParallelFor(2),
                               OddParallelFor(3)};
    for (int ymm : YmmModes(p, a.geo)) {
    SetYmmMode(ymm);
    for (int mode : kWeightModes) {
    if (p == KernelPath::kPortable && mode != 0) continue;
    SetWeightMode(mode);
    for (const ParallelFor& pf : pfs) {
      std::vector<int8_t> got(want.size(), 77);
      a.output = got.data();
      const std::string err = RunFusedConv(a, RunAs(p), pf);
      EXPECT(err.empty(), "%s", err.c_str());
      size_t bad = 0, first = 0;
      for (size_t j = 0; j < got.size(); ++j) {
        if (got[j] != want[j] && bad++ == 0) first = j;
      }
      EXPECT(bad == 0, "%s path %s weights %d ymm %d threads %d: %zu of %zu differ "
             "(first %zu: got %d want %d)", what, KernelPathName(p), mode, ymm,
             pf.num_threads, bad, got.size(), first, bad ? got[first] : 0,
             bad ? want[first] : 0);
      ++runs;
    }
    }
    SetWeightMode(0);
    }
    SetYmmMode(0);
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
      // MobileNetV2's stem as it is (SAME pads the bottom and right only),
      // and odd sizes padding all four sides, over two images: interior
      // runs of im2col rows broken by borders and by the image change.
      {1, 224, 224, 3, 3, 32, 2, false},
      {2, 61, 57, 3, 3, 32, 2, true},
      {2, 45, 47, 3, 7, 64, 2, false},
      // Windowed direct rows (micro-tiles inside one output row read their
      // windows in place): ResNet-50's first 3x3 layer as it is, a narrow
      // last block (its micro-tiles differ from the full blocks'), a 5x5
      // stride-2 window with a K panel boundary inside a window row.
      {1, 56, 56, 64, 3, 64, 1, false},
      {2, 30, 31, 128, 3, 96, 1, true},
      {1, 33, 35, 72, 5, 80, 2, false},
      // K beyond the cached weights' K panel on avx512vnni (4096 groups):
      // partial sums between panels with cached weights too.
      {1, 3, 3, 16400, 1, 70, 1, true},
      {1, 4, 5, 2000, 3, 64, 1, false},
      {3, 9, 11, 67, 3, 131, 2, true},    // odd channels, tails
      // MobileNetV2 pointwise layers (narrow last channel blocks).
      {1, 28, 28, 32, 1, 16, 1, false},
      {1, 20, 20, 96, 1, 24, 1, true},
      {1, 14, 14, 24, 1, 144, 1, false},
      {2, 7, 7, 576, 1, 160, 1, true},
      {1, 7, 7, 960, 1, 160, 1, false},
      // Lopsided channel splits on 2 threads (per-block items).
      {1, 14, 14, 576, 1, 96, 1, true},
      {1, 14, 14, 384, 1, 96, 1, false},
      // 3 : 2 and 4 : 3 block splits, per-block items since the 1.125x
      // bound (MobileNetV2's 7x7x960 -> 320; a 7-block layer with a side).
      {1, 7, 7, 960, 1, 320, 1, false},
      {1, 7, 7, 512, 1, 448, 1, true},
      // Split by rows on 2 threads where the filter is no larger than the
      // rows in and out (IsaKernels::rows_first_small_filter): MobileNetV2's
      // 14x14 expansions and projections, ResNet-50's strided 28x28x512 ->
      // 256 (14x14 out).
      {1, 14, 14, 64, 1, 384, 1, false},
      {1, 14, 14, 96, 1, 576, 1, true},
      {1, 14, 14, 384, 1, 64, 1, true},
      {1, 28, 28, 512, 1, 256, 2, false},
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
      {1, 14, 15, 40, 7, 40, 1, 40, true},      // depthwise 7x7 (ConvNeXt), tail lanes
      {2, 17, 16, 96, 7, 96, 1, 96, false},     // depthwise 7x7, 8-pixel blocks + rest
      {1, 12, 12, 64, 7, 64, 2, 64, false},     // depthwise 7x7 / 2 (generic)
      {1, 9, 10, 24, 3, 48, 1, 24, false},      // channel multiplier 2
      {1, 14, 14, 128, 3, 128, 1, 32, false},   // ResNeXt-like 32 x 4
      {2, 12, 13, 48, 3, 96, 2, 3, true},       // 3 groups of 16 -> 32
      {1, 11, 9, 96, 3, 16, 1, 2, false},       // wide groups: span > 32
      {2, 10, 12, 64, 3, 64, 2, 8, true},       // 8 x 8, stride 2
      // Inputs past the 256 KiB row bands (depthwise.cc: bands of rows
      // with every channel block each).
      {2, 56, 56, 144, 3, 144, 1, 144, true},   // 31-row bands
      {1, 112, 112, 96, 3, 96, 2, 96, false},   // stride 2, 12-row bands
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

// A weight pin for these tests (conv_params.h WeightPin): Held() while
// *held is true (null: always); sets *destroyed when its last reference
// goes. The flags are the test's, observed after the pin is gone.
class TestPin : public WeightPin {
 public:
  TestPin(const bool* held, bool* destroyed) : held_(held), destroyed_(destroyed) {}
  ~TestPin() override {
    if (destroyed_ != nullptr) *destroyed_ = true;
  }
  bool Held() const override { return held_ == nullptr || *held_; }

 private:
  const bool* held_;
  bool* destroyed_;
};

std::shared_ptr<const WeightPin> MakeTestPin(const bool* held = nullptr,
                                             bool* destroyed = nullptr) {
  return std::make_shared<const TestPin>(held, destroyed);
}

// The GEMV (gemm_kernels.h: at most kGemvMaxRows output pixels, a filter
// over the copy-check limit): a batch-1 and a batch-2 Dense head, a 3x3
// layer with 2 padded output pixels (the im2col rows), channel tails of 1
// and 8 past whole 256-channel units, K just past the limit and K % 4 of 1,
// 2 and 3, and operands at the extremes (everything -128: |acc| = K * 2^14 >
// 2^24, so float32(acc) rounds; -128 against 127; NaN / Inf scales and
// biases), with side input, Relu and bounded outputs; each also with its
// filter pinned, twice (packed under the pin, then used unchecked), where
// avx512vnni and avxvnni run their packed GEMM instead; pinned without -128
// weights (avx2's GEMV over its byte packing, IsaKernels::gemv_packed); and
// pinned with an input in [0, 127] told so (avx2: the same GEMV without the
// sign step). Counts the GEMV calls and those over a packing, so that a
// change of the rule that routes these shapes elsewhere is noticed.
void TestGemv() {
  std::mt19937 rng(4242);
  struct L { int64_t n, h, w, ci, k, co; bool side; };
  const L layers[] = {
      {1, 1, 1, 1280, 1, 1000, false},  // MobileNetV2's head
      {2, 1, 1, 2048, 1, 257, true},    // 4 blocks + 1 channel, 2 rows
      {1, 1, 2, 64, 3, 1000, true},     // 3x3 SAME, 2 pixels: im2col rows
      {1, 1, 1, 1025, 1, 512, false},   // K x Co just over 512 KiB
      {2, 1, 1, 4100, 1, 136, true},    // long K, 2 blocks + 8 channels
      {2, 1, 1, 1027, 1, 600, true},    // K % 4 == 3, 37 ymm blocks + 8
      {1, 1, 1, 1030, 1, 536, false},   // K % 4 == 2, 33 ymm blocks + 8
      {1, 1, 1, 1041, 1, 520, true},    // K % 4 == 1, 32 ymm blocks + 8
  };
  const int64_t calls_before = cpu::GemvCallsForTesting();
  const int64_t packed_before = cpu::GemvPackedCallsForTesting();
  int runs = 0;
  for (const L& l : layers) {
    for (int operands = 0; operands < 3; ++operands) {
      Buffers b;
      FusedConvArgs a = LayerCase(l.n, l.h, l.w, l.ci, l.k, l.co, 1, l.side,
                                  &rng, &b);
      EXPECT(a.geo.batch * a.geo.out_h * a.geo.out_w <= cpu::kGemvMaxRows &&
                 a.geo.FilterElements() > cpu::PackedWeights::kCopyCheckMaxBytes,
             "GEMV case shape");
      if (operands > 0) {  // 1: everything -128; 2: -128 x 127, alternating
        for (size_t i = 0; i < b.input.size(); ++i) {
          b.input[i] = static_cast<int8_t>(operands == 1 || i % 2 ? -128 : 127);
        }
        for (auto& x : b.filter) x = -128;
        const double max_acc = double(a.geo.ReductionDepth()) * 16384.0;
        for (int64_t c = 0; c < l.co; ++c) {
          b.scale[c] = float(254.0 / max_acc * double(c + 1) / double(l.co));
          if (c % 3 == 1) b.scale[c] = -b.scale[c];
        }
        b.scale[1] = std::numeric_limits<float>::quiet_NaN();
        b.scale[2] = std::numeric_limits<float>::infinity();
        b.bias[3] = -std::numeric_limits<float>::infinity();
        b.bias[4] = 0.5f;
        a.activation = operands == 1 ? Activation::kRelu : Activation::kNone;
        a.output_min = operands == 1 ? -128 : -100;
        a.output_max = operands == 1 ? 127 : 90;
      }
      char what[112];
      std::snprintf(what, sizeof(what), "gemv n%ld %ldx%ldx%ld k%ld co%ld operands %d",
                    long(l.n), long(l.h), long(l.w), long(l.ci), long(l.k),
                    long(l.co), operands);
      runs += CheckAllPaths(a, what);
      // Pinned (as the TF resource ops pin their variables): the first
      // call packs the filter under its pin, the second uses that packing
      // unchecked; avx512vnni runs its packed GEMM on these rows instead of
      // the GEMV (IsaKernels::gemv_unpinned_only), the others the GEMV.
      // Two calls under the pin (packed, then used unchecked), named by
      // what they add to the case.
      auto pinned_twice = [&](const char* variant) {
        for (int call = 0; call < 2; ++call) {
          std::snprintf(what, sizeof(what),
                        "gemv n%ld %ldx%ldx%ld k%ld co%ld operands %d pinned %d%s",
                        long(l.n), long(l.h), long(l.w), long(l.ci), long(l.k),
                        long(l.co), operands, call, variant);
          runs += CheckAllPaths(a, what);
        }
      };
      a.filter_pin = MakeTestPin();
      pinned_twice("");
      // Pinned, the filter without -128 (as quantize_model makes them):
      // avx2's GEMV over the byte packing (IsaKernels::gemv_packed) with the
      // same signed input; the extreme cases keep their magnitudes (-127
      // where the filter was -128: an all -128 input then sums K * 16256 >
      // 2^24) and the alternating one mixes the weights' signs.
      std::vector<int8_t> symmetric(b.filter);
      for (size_t i = 0; i < symmetric.size(); ++i) {
        if (operands == 2) {
          symmetric[i] = static_cast<int8_t>(i % 3 == 0 ? 127 : -127);
        } else if (symmetric[i] == -128) {
          symmetric[i] = -127;
        }
      }
      const int8_t* signed_filter = a.filter;
      a.filter = symmetric.data();
      pinned_twice(", no -128 weight");
      a.filter = signed_filter;
      // Pinned, an input in [0, 127] told so: avx2's GEMV over its byte
      // packing (the VPMADDUBSW kernels' operands; -128 weights too).
      std::vector<int8_t> told(b.input);
      for (auto& x : told) x = static_cast<int8_t>(x & 0x7f);
      a.input = told.data();
      a.input_non_negative = true;
      pinned_twice(", input in [0, 127]");
      a.filter_pin = nullptr;
      cpu::PackedWeightsCache::Global().Clear();  // drops the pinned entries
    }
  }
  const int64_t calls = cpu::GemvCallsForTesting() - calls_before;
  const int64_t packed = cpu::GemvPackedCallsForTesting() - packed_before;
#if defined(__x86_64__)
  // The x86 ISA paths have the GEMV (amx shares avx512vnni's): each case
  // runs it in weight mode 0
  // with three partitions, except the 3x3 case on avx2_winograd (Winograd);
  // pinned, twice more on all of them but avx512vnni and avxvnni (whose
  // byte packings take the packed GEMM then; avx2's int16 one, for these
  // signed inputs, keeps the GEMV); pinned without -128 weights, twice more
  // on the same paths (on avx2 over the byte packing: the packed calls);
  // pinned with an input in [0, 127], twice more on amx and, over the byte
  // packing, on avx2 (-128 weights too).
  const int64_t cases = 3 * int64_t{sizeof(layers) / sizeof(layers[0])};
  int64_t want = 0, want_packed = 0;
  for (KernelPath p : g_paths) {
    if (p == KernelPath::kAvx512Vnni || p == KernelPath::kAvxVnni) {
      want += 3 * cases;
    } else if (p == KernelPath::kAmx) {
      want += 3 * cases * 7;
    } else if (p == KernelPath::kAvx2 || p == KernelPath::kAvx2Direct) {
      want += 3 * cases * 7;
      want_packed += 3 * cases * 4;
    } else if (p == KernelPath::kAvx2Winograd) {
      want += 3 * (cases - 3) * 7;
      want_packed += 3 * (cases - 3) * 4;
    }
  }
  EXPECT(calls == want, "GEMV calls: %ld, want %ld", long(calls), long(want));
  EXPECT(packed == want_packed, "packed GEMV calls: %ld, want %ld", long(packed),
         long(want_packed));
#endif
  std::printf("gemv: %d runs checked (%ld GEMV calls, %ld over a packing)\n", runs,
              long(calls), long(packed));
}

// Every output-channel count around the kernels' channel blocks (16 and 64
// wide, narrow last blocks of 1-48 channels after full ones), for pointwise
// and 3x3 layers, K within one panel and across several, with and without
// side input: MobileNet's 16, 24, 96, 144, 160 channel layers among them.
void TestChannelTails() {
  std::mt19937 rng(7);
  std::vector<int64_t> cos;
  for (int64_t co = 1; co <= 72; ++co) cos.push_back(co);
  for (int64_t co : {80, 96, 112, 127, 144, 160, 176, 208, 240}) cos.push_back(co);
  int runs = 0;
  for (int64_t co : cos) {
    struct S { int64_t n, h, w, ci, k, s; };
    const S shapes[] = {{1, 7, 9, 24, 1, 1}, {2, 5, 6, 13, 3, 1},
                        {1, 6, 5, 400, 1, 1}, {1, 9, 8, 8, 3, 2}};
    const S& l = shapes[co % 4];
    Buffers b;
    FusedConvArgs a = LayerCase(l.n, l.h, l.w, l.ci, l.k, co, l.s, co % 3 == 0,
                                &rng, &b);
    a.per_channel_scale = co % 5 != 0;
    char what[96];
    std::snprintf(what, sizeof(what), "channel tail co%ld n%ld %ldx%ldx%ld k%ld",
                  long(co), long(l.n), long(l.h), long(l.w), long(l.ci),
                  long(l.k));
    runs += CheckAllPaths(a, what);
  }
  std::printf("channel tails: %d runs checked\n", runs);
}

// Points a's operands at b's buffers (per-channel scale; the side input
// when b has one, with side_scale).
void PointAt(const Buffers& b, float side_scale, FusedConvArgs* a) {
  a->input = b.input.data();
  a->filter = b.filter.data();
  a->bias = b.bias.data();
  a->conv_input_scale = b.scale.data();
  a->per_channel_scale = true;
  a->side_input = b.side.empty() ? nullptr : b.side.data();
  a->side_input_scale = b.side.empty() ? 0.0f : side_scale;
}

// b's scale (`scales` values 2^exponent * [1, 1.99] in steps of 0.01: about
// one output level per 2^-exponent of accumulator) and bias (`channels`
// half-integers in [-20, 20]), drawn in that order.
void RandomScaleAndBias(int64_t scales, int exponent, int64_t channels,
                        std::mt19937* rng, Buffers* b) {
  auto uni = [rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(*rng);
  };
  b->scale.resize(static_cast<size_t>(scales));
  for (auto& x : b->scale) x = std::ldexp(1.0f + uni(0, 99) / 100.0f, exponent);
  b->bias.resize(static_cast<size_t>(channels));
  for (auto& x : b->bias) x = uni(-40, 40) * 0.5f;
}

// b's input and filter for g: operands 0 random, 1 every activation and
// weight -128, 2 activations 127 and weights -128, 3 random activations and
// weights alternating 127 and -128 (-128 every mixed_period-th); with
// side, a random side input of g's output shape (else none).
void FillOperands(const ConvGeometry& g, int operands, int mixed_period,
                  bool side, std::mt19937* rng, Buffers* b) {
  auto uni = [rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(*rng);
  };
  b->input.resize(static_cast<size_t>(g.InputElements()));
  b->filter.resize(static_cast<size_t>(g.FilterElements()));
  for (auto& x : b->input) {
    x = static_cast<int8_t>(operands == 1 ? -128 : operands == 2 ? 127 : uni(-128, 127));
  }
  for (size_t i = 0; i < b->filter.size(); ++i) {
    b->filter[i] = static_cast<int8_t>(
        operands == 1 || operands == 2 ? -128
        : operands == 3 ? (i % mixed_period ? 127 : -128)
                        : uni(-128, 127));
  }
  b->side.clear();
  if (side) {
    b->side.resize(static_cast<size_t>(g.OutputElements()));
    for (auto& x : b->side) x = static_cast<int8_t>(uni(-128, 127));
  }
}

// pad_kind 0 SAME, 1 VALID (the image grown to the k x k filter), 2 explicit
// padding of 0 to 4 per side (at least the filter's extent in all): g's
// padding for the depthwise block sweeps below, then its geometry.
Padding SquareFilterPadding(int pad_kind, int64_t k, std::mt19937* rng, ConvGeometry* g) {
  auto uni = [rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(*rng);
  };
  const Padding padding = pad_kind == 0 ? Padding::kSame
                          : pad_kind == 1 ? Padding::kValid : Padding::kExplicit;
  if (padding == Padding::kExplicit) {
    g->pad_top = uni(0, 4); g->pad_bottom = uni(0, 4);
    g->pad_left = uni(0, 4); g->pad_right = uni(0, 4);
    if (g->in_h + g->pad_top + g->pad_bottom < k) g->pad_bottom = k - g->in_h;
    if (g->in_w + g->pad_left + g->pad_right < k) g->pad_right = k - g->in_w;
  }
  if (padding == Padding::kValid) {
    g->in_h = std::max<int64_t>(g->in_h, k);
    g->in_w = std::max<int64_t>(g->in_w, k);
  }
  EXPECT(ComputeGeometry(padding, g).empty(), "depthwise geometry");
  return padding;
}

// The call again on its input's non-negative form (every byte x & 0x7f, or
// max(x, 0): half zeros, as after a Relu), told so
// (FusedConvArgs::input_non_negative): the avx2 path's 3x3 blocks
// (VPMADDUBSW, exact on such bytes only) and the VNNI paths' unflipped
// operands run; b's input is changed in place.
int CheckToldNonNegative(FusedConvArgs a, Buffers* b, bool relu_like, const char* what) {
  for (auto& x : b->input) {
    x = relu_like ? std::max<int8_t>(x, 0) : static_cast<int8_t>(x & 0x7f);
  }
  a.input = b->input.data();
  a.input_non_negative = true;
  char told[192];
  std::snprintf(told, sizeof(told), "%s, input in [0, 127] (%s) told", what,
                relu_like ? "max(x, 0)" : "x & 0x7f");
  return CheckAllPaths(a, told);
}

// CheckAllPaths once more with every -128 weight byte made -127 (a
// signed input, not told): the avx2 depthwise blocks then multiply the
// input's bytes as they are (depthwise_avx2.cc SignDot: VPSIGNB, exact only
// without -128 weights) where a -128 sends them to the flipped form; with
// the extreme operands, -128 x -127 pairs at VPMADDUBSW's bound.
int CheckWithoutMinWeight(FusedConvArgs a, Buffers* b, const char* what) {
  bool any = false;
  for (auto& w : b->filter) {
    any |= w == -128;
    if (w == -128) w = -127;
  }
  if (!any) return 0;  // the call ran so already
  a.filter = b->filter.data();
  char no_min[192];
  std::snprintf(no_min, sizeof(no_min), "%s, no -128 weight", what);
  return CheckAllPaths(a, no_min);
}

// The 3x3 depthwise VPDPBUSD kernel (whole 64-channel blocks, borders run
// with the padding as 0x80 vectors) and its 16-channel tail: channel counts
// of one to fifteen blocks with and without a tail, images from 1x1 up
// (every column a border, or none), stride 1 and 2, SAME / VALID / explicit
// asymmetric padding up to 4 (windows wholly in the padding), batch 2, side
// input, and operands at the extremes (activations -128 or 127 with weights
// -128: the +128 shift and its correction at their limits); each call
// again without -128 weights (CheckWithoutMinWeight) and on a non-negative
// input told so (CheckToldNonNegative).
void TestDepthwise3x3Blocks() {
  std::mt19937 rng(33);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  // 32, 96, 160: a half block (32 channels, two pixel pairs per zmm) after
  // the full 64-channel blocks, alone or with 16 more channels; 16, 80, 144,
  // 240: a quarter block (16 channels, four pixel pairs per zmm) after them;
  // 24, 72, 120: 8 more channels for the 16-channel kernel; 33, 40, 44, 48,
  // 56, 63, and 22, 24, 28 at stride 1: the partial block (the full blocks'
  // code under a channel mask).
  // The ymm blocks (32 channels): 40, 56, 72 and 120 end with a block that
  // overlaps the one before it (depthwise_blocks_ymm.h OverlapBlock), 48,
  // 80, 144 and 240 with 16 channels for the AVX2 kernel.
  const int64_t channel_counts[] = {64, 80, 128, 144, 192, 960, 32, 48, 96, 160,
                                    16, 24, 72, 120, 240, 40, 56, 33, 44, 63, 22, 28};
  constexpr int kCounts = sizeof(channel_counts) / sizeof(channel_counts[0]);
  int runs = 0;
  for (int iter = 0; iter < 12 * kCounts; ++iter) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = 1 + iter % 2;
    g.in_c = g.out_c = g.groups = channel_counts[iter % kCounts];
    g.filter_h = g.filter_w = 3;
    g.stride_h = g.stride_w = 1 + (iter / kCounts) % 2;
    g.in_h = uni(1, 9);
    g.in_w = iter < 2 * kCounts ? 1 + iter % 4 : uni(1, 21);
    const int pad_kind = (iter / (2 * kCounts)) % 3;
    SquareFilterPadding(pad_kind, 3, &rng, &g);
    Buffers b;
    const int operands = iter % 4;
    const bool side = iter % 3 == 0;
    FillOperands(g, operands, /*mixed_period=*/2, side, &rng, &b);
    // About one output level per 2^10 of accumulator: extreme sums saturate,
    // random ones land in range.
    RandomScaleAndBias(g.out_c, -10, g.out_c, &rng, &b);
    PointAt(b, side ? 0.5f : 0.0f, &a);
    a.activation = iter % 2 ? Activation::kRelu : Activation::kNone;
    char what[128];
    std::snprintf(what, sizeof(what),
                  "depthwise 3x3 n%ld %ldx%ldx%ld s%ld pad %d (%ld %ld %ld %ld) operands %d",
                  long(g.batch), long(g.in_h), long(g.in_w), long(g.in_c),
                  long(g.stride_w), pad_kind, long(g.pad_top), long(g.pad_bottom),
                  long(g.pad_left), long(g.pad_right), operands);
    runs += CheckAllPaths(a, what);
    runs += CheckWithoutMinWeight(a, &b, what);
    runs += CheckToldNonNegative(a, &b, iter % 5 < 2, what);
  }
  // Stride 2 on rows wide enough for runs of pairs that carry the next
  // pair's D (Interior3x3::PairsS2: columns up to ix0 + 7 inside the
  // image), with the half and quarter blocks beside them (whose groups of
  // 4 and 8 pixels need such rows too; the quarter block runs on rows of
  // 32 outputs or more at stride 1), then the same at stride 1; every
  // padding, extreme and random operands.
  const int64_t wide_channels[] = {48, 96, 144, 240};
  const int64_t widths[] = {15, 16, 17, 19, 24, 33, 40, 48, 57};
  for (int iter = 0; iter < 4 * 9 * 3 * 2; ++iter) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = 1 + iter % 2;
    g.in_c = g.out_c = g.groups = wide_channels[iter % 4];
    g.filter_h = g.filter_w = 3;
    g.stride_h = g.stride_w = iter < 108 ? 2 : 1;
    g.in_h = uni(3, 6);
    g.in_w = widths[(iter / 4) % 9];
    const int pad_kind = (iter / 36) % 3;
    Padding padding = pad_kind == 0 ? Padding::kSame
                      : pad_kind == 1 ? Padding::kValid : Padding::kExplicit;
    if (padding == Padding::kExplicit) {
      g.pad_top = uni(0, 2); g.pad_bottom = uni(0, 2);
      g.pad_left = uni(0, 3); g.pad_right = uni(0, 3);
    }
    EXPECT(ComputeGeometry(padding, &g).empty(), "depthwise geometry");
    Buffers b;
    const int operands = iter % 3;  // random, -128 x -128, 127 x -128
    const bool side = iter % 5 == 0;
    FillOperands(g, operands, /*mixed_period=*/2, side, &rng, &b);
    b.scale.assign(static_cast<size_t>(g.out_c), std::ldexp(1.3f, -10));
    b.bias.resize(static_cast<size_t>(g.out_c));
    for (auto& x : b.bias) x = uni(-40, 40) * 0.5f;
    PointAt(b, side ? -0.75f : 0.0f, &a);
    a.activation = iter % 2 ? Activation::kRelu : Activation::kNone;
    char what[128];
    std::snprintf(what, sizeof(what),
                  "depthwise 3x3 s%ld runs n%ld %ldx%ldx%ld pad %d (%ld %ld) operands %d",
                  long(g.stride_w), long(g.batch), long(g.in_h), long(g.in_w), long(g.in_c), pad_kind,
                  long(g.pad_left), long(g.pad_right), operands);
    runs += CheckAllPaths(a, what);
    runs += CheckWithoutMinWeight(a, &b, what);
    runs += CheckToldNonNegative(a, &b, iter % 7 < 3, what);
  }
  std::printf("depthwise 3x3 blocks: %d runs checked\n", runs);
}

// The 5x5 and 7x7 depthwise VPDPBUSD kernels (64-channel blocks, groups of
// 4 pixels at stride 1 and 2 at stride 2, borders as padding columns; the
// channels past the blocks run the 16-channel kernel, unless more than 16:
// then one more block over the last 64 channels, overlapping; 17 to 63
// channels one partial block under a channel mask, 5x5 at stride 1 only):
// one to three blocks with and without 8, 16, 24, 48 or 56 more channels,
// 672 (EfficientNet's: 32 more), 11, 17, 22, 44 (NASNet's), rows from 1 to
// 40 columns (no group, one,
// several, with borders of 0 to 4 columns), 1 to 9 rows (filter rows cut by
// the top and bottom), SAME / VALID / explicit asymmetric padding, batch 2,
// side input, Relu or none, operands at the extremes, and inputs in [0, 127]
// told as such (unflipped bytes, no correction) or not. The same calls reach
// the ymm 5x5 and 7x7 blocks (depthwise_blocks_ymm.h: 32 channels, groups of 2
// pixels; one to 21 blocks, 32 / 48 / 56 channels for one block with and
// without the AVX2 kernel's 16 / 24 more), a signed input again without -128
// weights (CheckWithoutMinWeight: the avx2 path's SignDot). 32, 88, 96,
// 160 and 224 channels also run the ymm blocks on the avx512vnni and amx
// paths (YmmModes; at 5x5 only up to 96).
void TestDepthwiseKxKBlocks() {
  std::mt19937 rng(55);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const int64_t channel_counts[] = {64, 80, 128, 176, 192, 240, 672, 32, 48,
                                    56, 72, 88, 120, 11, 17, 22, 44, 96, 160, 224};
  constexpr int kCounts = sizeof(channel_counts) / sizeof(channel_counts[0]);
  int runs = 0;
  for (int iter = 0; iter < 36 * kCounts; ++iter) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = 1 + iter % 2;
    g.in_c = g.out_c = g.groups = channel_counts[iter % kCounts];
    const int kk = iter % 3 == 2 ? 7 : 5;
    g.filter_h = g.filter_w = kk;
    g.stride_h = g.stride_w = 1 + (iter / kCounts) % 2;
    g.in_h = uni(1, 9);
    g.in_w = iter < 2 * kCounts ? 1 + iter % 8 : uni(5, 40);
    if (g.in_c == 672) g.in_h = std::min<int64_t>(g.in_h, 4);
    const int pad_kind = (iter / (2 * kCounts)) % 3;
    SquareFilterPadding(pad_kind, kk, &rng, &g);
    Buffers b;
    const int operands = iter % 4;
    const bool side = iter % 5 == 0;
    FillOperands(g, operands, /*mixed_period=*/3, side, &rng, &b);
    const int told = (iter / 3) % 3;  // 0: signed input; 1, 2: in [0, 127]
    if (told) {
      for (auto& x : b.input) x = static_cast<int8_t>(x & 0x7f);
    }
    RandomScaleAndBias(g.out_c, -11, g.out_c, &rng, &b);
    PointAt(b, side ? 0.5f : 0.0f, &a);
    a.activation = iter % 2 ? Activation::kRelu : Activation::kNone;
    a.input_non_negative = told == 1;
    char what[160];
    std::snprintf(what, sizeof(what),
                  "depthwise %dx%d n%ld %ldx%ldx%ld s%ld pad %d (%ld %ld %ld %ld) operands %d "
                  "told %d",
                  kk, kk, long(g.batch), long(g.in_h), long(g.in_w), long(g.in_c),
                  long(g.stride_w), pad_kind, long(g.pad_top), long(g.pad_bottom),
                  long(g.pad_left), long(g.pad_right), operands, told);
    runs += CheckAllPaths(a, what);
    if (told == 0) runs += CheckWithoutMinWeight(a, &b, what);
  }
  std::printf("depthwise 5x5 and 7x7 blocks: %d runs checked\n", runs);
}

// Which depthwise calls the avx512vnni and amx paths hand to the ymm blocks
// (cpu::DepthwiseYmmBlocksAvx512, depthwise_ymm_avx512vnni.cc), in mode 1
// (any CPU) and 2 (never); mode 0 is mode 1 on Zen 4 and 2 elsewhere. The
// bits of both routes: CheckAllPaths (YmmModes).
void TestDepthwiseYmmBlocksRule() {
#if defined(__x86_64__)
  struct Case {
    int k, channels, stride, dilation;
    bool depthwise, ymm;
  };
  const Case cases[] = {
      {7, 32, 1, 1, true, true},   {7, 32, 2, 1, true, true},   {7, 88, 2, 1, true, true},
      {7, 96, 1, 1, true, true},   {7, 160, 1, 1, true, true},  {7, 224, 1, 1, true, true},
      {7, 352, 1, 1, true, true},  {5, 32, 2, 1, true, true},   {5, 88, 1, 1, true, true},
      {5, 96, 2, 1, true, true},   {3, 32, 1, 1, true, true},   {3, 32, 2, 1, true, true},
      // The zmm blocks fill their lanes as well or better, or no ymm blocks.
      {7, 64, 1, 1, true, false},  {7, 80, 1, 1, true, false},  {7, 176, 2, 1, true, false},
      {7, 48, 1, 1, true, false},  {7, 22, 1, 1, true, false},  {7, 16, 1, 1, true, false},
      {5, 160, 1, 1, true, false}, {5, 44, 1, 1, true, false},  {5, 240, 1, 1, true, false},
      {3, 96, 1, 1, true, false},  {3, 88, 1, 1, true, false},  {3, 144, 1, 1, true, false},
      {7, 32, 3, 1, true, false},  {7, 32, 1, 2, true, false},  {3, 32, 1, 1, false, false},
      {1, 32, 1, 1, true, false},  {9, 32, 1, 1, true, false},
  };
  for (const Case& c : cases) {
    ConvGeometry g;
    g.batch = 1;
    g.in_h = g.in_w = 20;
    g.filter_h = g.filter_w = c.k;
    g.in_c = g.out_c = c.channels;
    g.groups = c.depthwise ? c.channels : 1;
    g.stride_h = g.stride_w = c.stride;
    g.dilation_h = g.dilation_w = c.dilation;
    EXPECT(ComputeGeometry(Padding::kSame, &g).empty(), "ymm rule geometry");
    cpu::SetDepthwiseYmmBlocksForTesting(1);
    EXPECT(cpu::DepthwiseYmmBlocksAvx512(g) == c.ymm,
           "ymm blocks for %dx%d depthwise %d, %d channels, stride %d, dilation %d: %d",
           c.k, c.k, c.depthwise, c.channels, c.stride, c.dilation, int(!c.ymm));
    cpu::SetDepthwiseYmmBlocksForTesting(2);
    EXPECT(!cpu::DepthwiseYmmBlocksAvx512(g), "ymm blocks in mode 2");
  }
  cpu::SetDepthwiseYmmBlocksForTesting(0);
  std::printf("depthwise ymm blocks rule: %zu cases checked\n", sizeof(cases) / sizeof(cases[0]));
#endif
}

// 1x1 depthwise windows (depthwise_rows.h OnePixelRows: no padding, each
// output pixel reads one input pixel; with explicit padding the row walk):
// channel counts from 1 to 1000 with and without a partial 16-channel
// block, multiplier 1 and 2, images from 1x1 to 9x23 (runs of four pixels
// and the rest), strides 1 to 3 across and down independently, SAME / VALID
// / explicit padding up to 2, batch 1 to 3, side input, per-channel or
// scalar scale, Relu or none, operands at the extremes.
void TestDepthwiseOneTap() {
  std::mt19937 rng(11);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const int64_t channel_counts[] = {1, 7, 16, 17, 48, 64, 100, 160, 256, 1000};
  constexpr int kCounts = sizeof(channel_counts) / sizeof(channel_counts[0]);
  int runs = 0;
  for (int iter = 0; iter < 16 * kCounts; ++iter) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = 1 + iter % 3;
    g.in_c = g.groups = channel_counts[iter % kCounts];
    g.out_c = g.in_c * (iter % 5 == 4 ? 2 : 1);
    g.filter_h = g.filter_w = 1;
    g.stride_h = 1 + (iter / kCounts) % 3;
    g.stride_w = 1 + (iter / (3 * kCounts) + iter) % 3;
    if (iter % 2 == 0) g.stride_h = g.stride_w = 1;
    g.in_h = uni(1, 9);
    g.in_w = iter < 2 * kCounts ? 1 + iter % 6 : uni(1, 23);
    if (g.in_c >= 256) g.in_h = std::min<int64_t>(g.in_h, 3);
    const int pad_kind = (iter / 7) % 3;
    const Padding padding = pad_kind == 0   ? Padding::kSame
                            : pad_kind == 1 ? Padding::kValid
                                            : Padding::kExplicit;
    if (padding == Padding::kExplicit) {
      g.pad_top = uni(0, 2); g.pad_bottom = uni(0, 1);
      g.pad_left = uni(0, 2); g.pad_right = uni(0, 1);
    }
    EXPECT(ComputeGeometry(padding, &g).empty(), "one-tap depthwise geometry");
    Buffers b;
    const int operands = iter % 4;
    const bool side = iter % 3 == 0;
    FillOperands(g, operands, /*mixed_period=*/2, side, &rng, &b);
    const bool per_channel = iter % 7 != 3;
    // |acc| <= 2^14: about one output level per 2^7, so the extremes
    // saturate and random products land in range.
    RandomScaleAndBias(per_channel ? g.out_c : 1, -7, g.out_c, &rng, &b);
    PointAt(b, side ? -0.75f : 0.0f, &a);
    a.per_channel_scale = per_channel;
    a.activation = iter % 2 ? Activation::kRelu : Activation::kNone;
    char what[160];
    std::snprintf(what, sizeof(what),
                  "one-tap depthwise n%ld %ldx%ldx%ld m%ld s%ldx%ld pad %d (%ld %ld %ld %ld) "
                  "operands %d",
                  long(g.batch), long(g.in_h), long(g.in_w), long(g.in_c),
                  long(g.out_c / g.in_c), long(g.stride_h), long(g.stride_w), pad_kind,
                  long(g.pad_top), long(g.pad_bottom), long(g.pad_left), long(g.pad_right),
                  operands);
    runs += CheckAllPaths(a, what);
  }
  std::printf("one-tap depthwise: %d runs checked\n", runs);
}

// Identity calls (depthwise_identity.h: an Int8ReLU, a 1x1 average pooling
// of stride 2): a 1x1 depthwise filter of ones, scale 1 (scalar or per
// channel), bias +0 or -0, no side input, no padding, which every path runs
// as a clip of the input; and the calls one step from one (a weight 2, a
// scale 1 + 2^-23, a bias 2^-149, a side input, a pad), which must not be.
// Every call against the reference: channel counts around the vector widths,
// strides 1-3, multipliers 1 and 2, every output range and activation,
// inputs at the extremes, an output table.
void TestDepthwiseIdentity() {
  std::mt19937 rng(23);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const int64_t channel_counts[] = {1, 5, 31, 32, 33, 63, 64, 65, 168, 1000};
  constexpr int kCounts = sizeof(channel_counts) / sizeof(channel_counts[0]);
  std::vector<int8_t> lut(256);
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<int8_t>(127 - i);
  int runs = 0, identity_cases = 0;
  for (int iter = 0; iter < 12 * kCounts; ++iter) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = 1 + iter % 2;
    g.in_c = g.groups = channel_counts[iter % kCounts];
    g.out_c = g.in_c * (iter % 6 == 5 ? 2 : 1);
    g.filter_h = g.filter_w = 1;
    g.stride_h = 1 + uni(0, 2);
    g.stride_w = iter % 3 == 0 ? 1 : 1 + uni(0, 2);
    g.in_h = uni(1, 9);
    g.in_w = uni(1, 19);
    if (g.in_c >= 168) g.in_h = std::min<int64_t>(g.in_h, 3);
    // 0: the identity itself; 1-5: one step from it.
    const int variant = iter % 9 < 4 ? 0 : 1 + iter % 5;
    const bool pad = variant == 5;
    if (pad) {
      g.pad_top = uni(0, 1); g.pad_left = 1 - g.pad_top;
      g.pad_bottom = uni(0, 1); g.pad_right = uni(0, 1);
    }
    EXPECT(ComputeGeometry(pad ? Padding::kExplicit : Padding::kValid, &g).empty(),
           "identity depthwise geometry");
    Buffers b;
    const int operands = iter % 4;
    FillOperands(g, operands, /*mixed_period=*/2, /*side=*/variant == 4, &rng, &b);
    std::fill(b.filter.begin(), b.filter.end(), int8_t{1});
    const bool per_channel = iter % 5 != 2;
    b.scale.assign(per_channel ? g.out_c : 1, 1.0f);
    b.bias.assign(g.out_c, iter % 2 ? -0.0f : 0.0f);
    const int64_t at = uni(0, static_cast<int>(g.out_c) - 1);
    if (variant == 1) b.filter[at] = 2;
    if (variant == 2) b.scale[per_channel ? at : 0] = 1.0f + std::ldexp(1.0f, -23);
    if (variant == 3) b.bias[at] = std::ldexp(1.0f, -149);
    PointAt(b, 0.5f, &a);
    a.per_channel_scale = per_channel;
    a.activation = iter % 3 == 1 ? Activation::kRelu : Activation::kNone;
    if (iter % 4 == 3) {
      a.output_min = uni(-128, 10);
      a.output_max = uni(std::max(a.output_min, 0), 127);
    }
    if (iter % 7 == 6) a.output_lut = lut.data();
    char what[160];
    std::snprintf(what, sizeof(what),
                  "identity depthwise variant %d n%ld %ldx%ldx%ld m%ld s%ldx%ld operands %d "
                  "range [%d, %d]%s",
                  variant, long(g.batch), long(g.in_h), long(g.in_w), long(g.in_c),
                  long(g.out_c / g.in_c), long(g.stride_h), long(g.stride_w), operands,
                  int(a.output_min), int(a.output_max), a.output_lut ? " lut" : "");
    const int64_t before = cpu::DepthwiseIdentityCallsForTesting();
    runs += CheckAllPaths(a, what);
    // Some path took the identity rows (every path but the reference runs
    // RunDepthwise: a depthwise call; one channel is a plain convolution),
    // or none did.
    const int64_t taken = cpu::DepthwiseIdentityCallsForTesting() - before;
    if (variant == 0 && g.IsDepthwise()) {
      EXPECT(taken > 0, what);
      ++identity_cases;
    } else if (variant != 0) {
      EXPECT(taken == 0, what);
    }
  }
  std::printf("identity depthwise: %d runs checked, %d identity calls\n", runs,
              identity_cases);
}

// The vector epilogues against EpilogueScalar on the values that matter:
// NaN, +-Inf, huge, ties at .5, -0, denormals, in scales and biases.
// Each lookup-table body this CPU runs against the table itself: every
// byte value at every position of a vector and its tail, lengths 0-300 at
// unaligned starts, random, identity, constant and reversed tables.
void TestLutBodies() {
  std::vector<std::pair<const char*, cpu::LutBody>> bodies;
  bodies.emplace_back("portable", cpu::LutBodyFor(KernelPath::kPortable));
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) bodies.emplace_back("avx2", cpu::LutAvx2);
  if (__builtin_cpu_supports("avx512bw")) {
    bodies.emplace_back("avx512bw", cpu::LutAvx512Bw);
  }
  if (cpu::CpuHasAvx512Vbmi()) bodies.emplace_back("avx512vbmi", cpu::LutAvx512Vbmi);
#endif
#if defined(__aarch64__)
  bodies.emplace_back("neon", cpu::LutNeon);
#endif
  std::mt19937 rng(77);
  std::vector<std::vector<int8_t>> tables;
  for (int t = 0; t < 4; ++t) tables.push_back(RandomLut(&rng));
  tables.emplace_back(256);
  for (int i = 0; i < 256; ++i) tables.back()[i] = static_cast<int8_t>(i - 128);
  tables.emplace_back(256, int8_t{-128});
  tables.emplace_back(256);
  for (int i = 0; i < 256; ++i) tables.back()[i] = static_cast<int8_t>(127 - i);
  int runs = 0;
  for (const auto& body : bodies) {
    for (const auto& lut : tables) {
      for (int64_t n = 0; n <= 300; n += (n < 70 ? 1 : 23)) {
        for (int64_t start : {0, 1, 13}) {
          std::vector<int8_t> data(static_cast<size_t>(start + n + 64), 5);
          for (int64_t j = 0; j < n; ++j) {
            data[start + j] = static_cast<int8_t>((j * 37 + n + (rng() % 3)) % 256 - 128);
          }
          std::vector<int8_t> want = data;
          for (int64_t j = 0; j < n; ++j) {
            want[start + j] = lut[static_cast<uint8_t>(data[start + j] ^ 0x80)];
          }
          body.second(lut.data(), data.data() + start, n);
          EXPECT(data == want, "lut body %s n %ld start %ld differs", body.first,
                 long(n), long(start));
          ++runs;
        }
      }
    }
  }
  std::printf("lut bodies: %zu bodies, %d runs checked\n", bodies.size(), runs);
}

// Output lookup tables through every path on the layer kinds that have
// their own kernels (pointwise, 3x3 windows and Winograd, the 3-channel
// stem, depthwise, grouped, few pixels with a large filter, a narrow last
// block, side input), against the reference, which looks the table up per
// element; the reference itself against the table applied to its own output
// without one.
void TestOutputLut() {
  std::mt19937 rng(2024);
  struct L { int64_t n, h, w, ci, k, co, s, groups; bool side; };
  const L layers[] = {
      {1, 9, 11, 64, 1, 80, 1, 1, false},    // pointwise
      {2, 10, 9, 32, 3, 48, 1, 1, true},     // 3x3, Winograd-eligible
      {1, 30, 28, 16, 3, 64, 1, 1, false},   // windowed rows
      {1, 23, 21, 3, 3, 32, 2, 1, false},    // stem
      {2, 12, 13, 96, 3, 96, 1, 96, false},  // depthwise
      {1, 40, 37, 64, 3, 64, 1, 64, true},   // depthwise, rows in slices
      {1, 11, 9, 32, 3, 64, 2, 4, true},     // grouped
      {1, 1, 1, 1280, 1, 200, 1, 1, false},  // GEMV
      {1, 14, 14, 40, 1, 16, 1, 1, false},   // narrow block
  };
  int runs = 0;
  for (const L& l : layers) {
    Buffers b;
    FusedConvArgs a =
        LayerCase(l.n, l.h, l.w, l.ci, l.k, l.co, l.s, l.side, &rng, &b, l.groups);
    // Without the table first: the reference's looked-up output must be
    // exactly the table at its plain output.
    std::vector<int8_t> plain(a.geo.OutputElements());
    a.output = plain.data();
    RunReference(a);
    const std::vector<int8_t> lut = RandomLut(&rng);
    a.output_lut = lut.data();
    std::vector<int8_t> looked(plain.size());
    a.output = looked.data();
    RunReference(a);
    size_t bad = 0;
    for (size_t j = 0; j < plain.size(); ++j) {
      bad += looked[j] != lut[static_cast<uint8_t>(plain[j] ^ 0x80)];
    }
    EXPECT(bad == 0, "reference with a lut: %zu of %zu differ", bad, plain.size());
    runs += CheckAllPaths(a, "output lut");
  }
  std::printf("output lut: %d runs checked\n", runs);
}

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

// The upper clamp that the avx512vnni epilogues leave out where
// UpperClampNeeded (epilogue.h) shows every y below 2^31: operands that put
// y at and around 2^30 and 2^31 through each term of the bound (the
// product at the largest |acc|, the bias, the side input), with the large
// term on every channel or on one channel of a block, for a pointwise GEMM
// (a full 64-channel block and a narrow one), a 3x3 stem-like GEMM
// (gathered windows, K = 27 padded to 28) and a 3x3 depthwise layer (full
// block, then the 16-channel kernel). All activations and weights -128 make
// |acc| exactly the bound's K * 2^14 (the depthwise interior: 9 taps);
// weights 127 make it negative. Without the clamp a y >= 2^31 converts to
// INT32_MIN and ends as lo, where the reference gives 127. Relu and None,
// and output_max 100 (the clamp is needed whatever the bound).
void TestUpperClampBound() {
  struct Layer {
    const char* name;
    int64_t h, w, ci, k, co, stride, groups;
  };
  const Layer layers[] = {{"pointwise", 2, 5, 64, 1, 80, 1, 1},
                          {"stem", 7, 7, 3, 3, 32, 2, 1},
                          {"depthwise", 5, 7, 80, 3, 80, 1, 80}};
  int runs = 0;
  for (const Layer& l : layers) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = 1; g.in_h = l.h; g.in_w = l.w; g.in_c = l.ci;
    g.filter_h = g.filter_w = l.k; g.out_c = l.co;
    g.stride_h = g.stride_w = l.stride;
    g.groups = l.groups;
    EXPECT(ComputeGeometry(Padding::kSame, &g).empty(), "%s geometry", l.name);
    // The largest |acc|: K * 2^14, K the reduction depth (the stem's 27 is
    // packed as 28, whose bound the kernel uses: 2^30 / (28 * 2^14) then
    // leaves room for the true 27; the scales below straddle both).
    const double kmax = static_cast<double>(g.ReductionDepth()) * 16384.0;
    std::vector<int8_t> input(g.InputElements(), -128), filter(g.FilterElements()),
        side_in(g.OutputElements(), -128);
    std::vector<float> scale(g.out_c), bias(g.out_c);
    a.input = input.data();
    a.filter = filter.data();
    a.bias = bias.data();
    a.conv_input_scale = scale.data();
    a.per_channel_scale = true;
    const float p30 = std::ldexp(1.0f, 30), p31 = std::ldexp(1.0f, 31);
    for (int8_t wv : {int8_t{-128}, int8_t{127}}) {
      std::fill(filter.begin(), filter.end(), wv);
      // wv = 127 makes acc negative: a negative scale makes y positive.
      const float sign = wv < 0 ? 1.0f : -1.0f;
      for (float target : {p30 * 0.75f, std::nextafter(p30, 0.0f), p30, p30 * 1.5f,
                           std::nextafter(p31, 0.0f), p31, p31 * 1.5f, p31 * 4.0f}) {
        for (int term = 0; term < 3; ++term) {  // product, bias, side input
          for (int spread = 0; spread < 2; ++spread) {  // every channel / one
            for (int bounds = 0; bounds < 3; ++bounds) {
              const float small = static_cast<float>(1.0 / kmax);
              for (int64_t c = 0; c < g.out_c; ++c) {
                const bool big = spread == 0 || c % 64 == 63 || c == g.out_c - 1;
                scale[c] = sign * (term == 0 && big ? static_cast<float>(target / kmax)
                                                    : small);
                bias[c] = term == 1 && big ? target : 0.5f;
              }
              a.side_input = term == 2 ? side_in.data() : nullptr;
              a.side_input_scale = term == 2 ? -target / 128.0f : 0.0f;
              a.activation = bounds == 1 ? Activation::kRelu : Activation::kNone;
              a.output_min = -128;
              a.output_max = bounds == 2 ? 100 : 127;
              runs += CheckAllPaths(a, l.name);
            }
          }
        }
      }
    }
  }
  std::printf("upper clamp bound: %d runs checked\n", runs);
}

// Operands at the edges of what the kernels must get right, on geometries
// whose K and Co are not multiples of 4, 8 or 16 (the group depths of the
// VNNI / SDOT / SMMLA paths and their 16- and 64-channel blocks): all -128
// activations and weights (|acc| = K * 2^14, beyond 2^24 for K > 1024, and
// the int16 sum -128 * -128 + -128 * -128 = 2^15 that a two-product int16
// shortcut would overflow), large same-sign sums with odd values (float32(acc)
// must round to nearest even), NaN / Inf scales and biases, side input,
// Relu and None, output_min / output_max.
void TestExtremeOperands() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Geo { int64_t h, w, ci, k, co; Padding padding; };
  const Geo geos[] = {
      {3, 4, 1, 1, 1, Padding::kSame},      // K = 1
      {3, 3, 3, 1, 7, Padding::kValid},     // K = 3
      {4, 5, 5, 3, 17, Padding::kSame},     // K = 45: tails of 4, 8, 16
      {3, 4, 7, 3, 33, Padding::kSame},     // K = 63, Co = 2 x 16 + 1
      {2, 3, 13, 1, 15, Padding::kValid},   // K = 13, Co = 16 - 1
      {3, 3, 2, 3, 31, Padding::kSame},     // K = 18
      {4, 4, 9, 3, 65, Padding::kValid},    // K = 81, Co = 64 + 1
      {2, 2, 1100, 1, 20, Padding::kValid},  // K = 1100: two K panels
      {4, 5, 130, 3, 19, Padding::kValid},  // K = 1170: two K panels
  };
  struct Bounds { Activation act; int32_t lo, hi; };
  const Bounds bounds[] = {{Activation::kNone, -128, 127},
                           {Activation::kRelu, -128, 127},
                           {Activation::kNone, -5, 100},
                           {Activation::kRelu, -128, 6},
                           {Activation::kNone, 20, 20},
                           {Activation::kRelu, -128, -3}};  // everything 0
  std::mt19937 rng(2024);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  int runs = 0;
  for (const Geo& geo : geos) {
    for (int operands = 0; operands < 3; ++operands) {
      FusedConvArgs a;
      ConvGeometry& g = a.geo;
      g.batch = 1; g.in_h = geo.h; g.in_w = geo.w; g.in_c = geo.ci;
      g.filter_h = g.filter_w = geo.k; g.out_c = geo.co;
      EXPECT(ComputeGeometry(geo.padding, &g).empty(), "extreme geometry");
      const int64_t depth = g.ReductionDepth();
      std::vector<int8_t> input(g.InputElements()), filter(g.FilterElements()),
          side(g.OutputElements());
      // 0: everything -128; 1: activations in [-128, -120], weights in
      // [-128, -110] (same-sign sums, odd values); 2: full range.
      for (auto& x : input) {
        x = static_cast<int8_t>(operands == 0 ? -128 : operands == 1 ? uni(-128, -120)
                                                                     : uni(-128, 127));
      }
      for (auto& x : filter) {
        x = static_cast<int8_t>(operands == 0 ? -128 : operands == 1 ? uni(-128, -110)
                                                                     : uni(-128, 127));
      }
      for (auto& x : side) x = static_cast<int8_t>(operands == 0 ? -128 : uni(-128, 127));
      // Scales spread the largest |acc| over about [0, 2 * 127], so some
      // outputs clip and the rest round; biases are often ties (x.5).
      const double max_acc = double(depth) * 16384.0;
      std::vector<float> scale(g.out_c), bias(g.out_c);
      for (int64_t c = 0; c < g.out_c; ++c) {
        scale[c] = float(254.0 / max_acc * double(c + 1) / double(g.out_c));
        if (c % 3 == 1) scale[c] = -scale[c];
        bias[c] = float(uni(-20, 20)) + (uni(0, 1) ? 0.5f : 0.0f);
      }
      // NaN / Inf parameters in a few channels (kept off channel 0 so that
      // a one-channel layer stays ordinary).
      if (g.out_c > 4) {
        scale[1] = nan;
        scale[2] = inf;
        bias[3] = -inf;
        bias[4] = nan;
      }
      a.input = input.data();
      a.filter = filter.data();
      a.bias = bias.data();
      a.conv_input_scale = scale.data();
      a.per_channel_scale = true;
      for (const Bounds& bd : bounds) {
        for (int with_side = 0; with_side < 2; ++with_side) {
          a.activation = bd.act;
          a.output_min = bd.lo;
          a.output_max = bd.hi;
          a.side_input = with_side ? side.data() : nullptr;
          // Inexact products (see TestSideInputFma).
          a.side_input_scale = with_side ? (operands == 1 ? 0.3f : -1.2345678f) : 0.0f;
          char what[128];
          std::snprintf(what, sizeof(what),
                        "extreme operands %d K %ld Co %ld act %d [%d, %d] side %d",
                        operands, long(depth), long(g.out_c), int(bd.act), int(bd.lo),
                        int(bd.hi), with_side);
          runs += CheckAllPaths(a, what);
        }
      }
    }
  }

  // float32(acc) rounds to nearest even: a 1x1 convolution with K = 1500,
  // activations -127 and weights -128 except for c + 1 of them at -127 in
  // channel c, so acc = 127 * (192000 - c - 1) in (2^24, 2^25), odd for
  // even c (float32 keeps only even integers there). With scale 2^-18 and a
  // bias chosen so that y = float(acc) * 2^-18 + bias is exactly n + 0.5 for
  // an odd n (RNE gives n + 1), converting acc with any other rounding moves
  // y by 2^-17 off the tie and changes the output.
  {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = 1; g.in_h = 2; g.in_w = 3; g.in_c = 1500;
    g.filter_h = g.filter_w = 1; g.out_c = 21;
    EXPECT(ComputeGeometry(Padding::kValid, &g).empty(), "rounding geometry");
    std::vector<int8_t> input(g.InputElements(), -127);
    std::vector<int8_t> filter(g.FilterElements(), -128);
    std::vector<float> scale(1, std::ldexp(1.0f, -18)), bias(g.out_c);
    int ties = 0;
    for (int64_t c = 0; c < g.out_c; ++c) {
      for (int64_t k = 0; k <= c; ++k) filter[k * g.out_c + c] = -127;
      const int32_t acc = 127 * (192000 - int32_t(c) - 1);
      const float y = static_cast<float>(acc) * scale[0];
      float n = std::floor(y);
      if (std::fmod(n, 2.0f) == 0.0f) n -= 1.0f;  // odd: the tie goes up
      bias[c] = (n + 0.5f) - y;  // exact: both are multiples of 2^-17
      const bool inexact = static_cast<double>(static_cast<float>(acc)) != acc;
      ties += inexact && y + bias[c] == n + 0.5f;
    }
    EXPECT(ties >= 10, "only %d rounding ties constructed", ties);
    std::vector<int8_t> side(g.OutputElements(), 3);
    a.input = input.data();
    a.filter = filter.data();
    a.bias = bias.data();
    a.conv_input_scale = scale.data();
    a.per_channel_scale = false;
    for (int with_side = 0; with_side < 2; ++with_side) {
      for (Activation act : {Activation::kNone, Activation::kRelu}) {
        a.activation = act;
        // With the side input (3 * 0.25 = 0.75 added by the FMA) y is off
        // the tie, still exact; compared all the same.
        a.side_input = with_side ? side.data() : nullptr;
        a.side_input_scale = with_side ? 0.25f : 0.0f;
        runs += CheckAllPaths(a, "float32(acc) rounding ties");
      }
    }
  }
  std::printf("extreme operands: %d runs checked\n", runs);
}

// Inputs in [0, 127], as a Relu layer's output is: the avx2 path multiplies
// them with VPMADDUBSW (gemm_avx2.cc: exact only there) and the avxvnni and
// avx512vnni paths take them unflipped (gemm_avxvnni.cc, gemm_avx512vnni.cc), told so
// (FusedConvArgs::input_non_negative) or by their check of the input.
// Every path against the reference over a random sweep and at the extremes
// (every activation 127 against weights of -128, 127 or both: pair sums of
// -32512 and 32258, the largest VPMADDUBSW meets). Then inputs with one
// negative byte at the edges of that check's 256-byte steps and in its
// tail: a -128 read as u8 128 would change the result, so these pass only
// on the int16 kernels, and must not be counted as non-negative calls.
void TestNonNegativeInputs(int cases) {
  const bool ymm_tested =
      std::find_if(g_paths.begin(), g_paths.end(), [](KernelPath p) {
        return p == KernelPath::kAvx2 || p == KernelPath::kAvx2Direct ||
               p == KernelPath::kAvx2Winograd || p == KernelPath::kAvxVnni;
      }) != g_paths.end();
  int runs = 0;
  const int64_t before = NonNegativeInputCallsForTesting();
  std::mt19937 rng(8128);
  for (int i = 0; i < std::max(8, cases / 4); ++i) {
    Padding padding;
    Buffers b;
    FusedConvArgs a = MakeCase(&rng, &padding, &b);
    for (auto& x : b.input) x = i % 2 ? static_cast<int8_t>(x & 0x7f) : std::max<int8_t>(x, 0);
    a.input_non_negative = i % 3 != 0;
    // avx512vnni reads such rows in place wherever it can; every third case
    // each with rows always in place (1) and always gathered (2).
    const int in_place_mode = (i / 3) % 3;
    cpu::SetInPlaceRowsForTesting(in_place_mode);
    char what[64];
    std::snprintf(what, sizeof(what), "non-negative input case %d in-place mode %d", i,
                  in_place_mode);
    runs += CheckAllPaths(a, what);
    cpu::SetInPlaceRowsForTesting(0);
  }
  struct Geo {
    int64_t h, w, ci, k, co;
    int64_t stride = 1;
    bool depthwise = false;
  };
  const Geo geos[] = {
      {3, 4, 13, 1, 17},   // K = 13: a partial group of 4
      {6, 5, 144, 1, 24},  // pointwise, K = 144: avx2 reads the rows in place
      {4, 5, 5, 3, 33},    // K = 45
      {2, 2, 1100, 1, 20},  // K = 1100: two K panels, in place
      {4, 5, 130, 3, 19},  // K = 1170, gathered windows
      // Depthwise 3x3: the avx512vnni and avxvnni kernels take the bytes
      // unflipped when told (Interior3x3 without kFlip), so these run both
      // told and not told: full 64-channel blocks, a half and a quarter
      // block and the 16-channel rest (115 = 64 + 32 + 16 + 3 channels,
      // rows of 40 and 34 outputs), strides 1 and 2, SAME borders.
      {5, 40, 115, 3, 115, 1, true},
      {6, 9, 96, 3, 96, 2, true},
      {3, 34, 144, 3, 144, 1, true},
      {7, 66, 64, 3, 64, 2, true},
  };
  for (const Geo& geo : geos) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = 2; g.in_h = geo.h; g.in_w = geo.w; g.in_c = geo.ci;
    g.filter_h = g.filter_w = geo.k; g.out_c = geo.co;
    g.stride_h = g.stride_w = geo.stride;
    g.groups = geo.depthwise ? geo.ci : 1;
    EXPECT(ComputeGeometry(Padding::kSame, &g).empty(), "non-negative geometry");
    Buffers b;
    b.input.resize(g.InputElements());
    b.filter.resize(g.FilterElements());
    b.scale.resize(g.out_c);
    b.bias.resize(g.out_c);
    const double max_acc = double(g.ReductionDepth()) * 127.0 * 128.0;
    for (int64_t c = 0; c < g.out_c; ++c) {
      b.scale[c] = float(254.0 / max_acc * double(c + 1) / double(g.out_c));
      if (c % 3 == 1) b.scale[c] = -b.scale[c];
      b.bias[c] = float(c % 7) - 3.0f + (c % 2 ? 0.5f : 0.0f);
    }
    PointAt(b, 0.0f, &a);  // no side input
    // Weights: 0 all -128, 1 all 127, 2 alternating, 3 random.
    for (int weights = 0; weights < 4; ++weights) {
      for (size_t j = 0; j < b.filter.size(); ++j) {
        b.filter[j] = static_cast<int8_t>(
            weights == 0 ? -128 : weights == 1 ? 127
            : weights == 2 ? (j % 2 ? 127 : -128) : int(rng() % 256) - 128);
      }
      // Activations: every one 127, or random in [0, 127].
      for (int acts = 0; acts < 2; ++acts) {
        for (auto& x : b.input) x = static_cast<int8_t>(acts == 0 ? 127 : rng() % 128);
        for (Activation act : {Activation::kNone, Activation::kRelu}) {
          for (bool told : {act == Activation::kRelu, act != Activation::kRelu}) {
            if (!geo.depthwise && told != (act == Activation::kRelu)) continue;
            a.activation = act;
            a.input_non_negative = told;
            char what[112];
            std::snprintf(what, sizeof(what),
                          "non-negative extremes K %ld groups %ld s%ld weights %d acts %d told %d",
                          long(g.ReductionDepth()), long(g.groups), long(geo.stride), weights,
                          acts, int(told));
            runs += CheckAllPaths(a, what);
          }
        }
      }
    }
  }
  const int64_t non_negative_calls = NonNegativeInputCallsForTesting() - before;
  EXPECT(!ymm_tested || non_negative_calls > 0,
         "the avx2 / avxvnni paths never took their non-negative input kernels");
  // One negative byte: a 1x1 convolution over 40 x 21 pixels of 16
  // channels (13440 bytes: 52 steps of 256 and a tail of 128), every other
  // activation 127 and every weight -128.
  {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = 1; g.in_h = 40; g.in_w = 21; g.in_c = 16;
    g.filter_h = g.filter_w = 1; g.out_c = 24;
    EXPECT(ComputeGeometry(Padding::kValid, &g).empty(), "negative byte geometry");
    std::vector<int8_t> filter(g.FilterElements(), -128);
    std::vector<float> scale(1, 1.0f / 4096.0f), bias(g.out_c, 0.5f);
    a.filter = filter.data();
    a.bias = bias.data();
    a.conv_input_scale = scale.data();
    const int64_t n = g.InputElements();
    const int64_t tail_start = n / 256 * 256;  // 13312
    EXPECT(tail_start < n, "the input has a tail after its 256-byte steps");
    for (int64_t pos : {int64_t{0}, int64_t{255}, int64_t{256}, n / 2 + 77,
                        tail_start - 1, tail_start, n - 5, n - 1}) {
      std::vector<int8_t> input(n, 127);
      input[pos] = -128;
      a.input = input.data();
      const int64_t calls = NonNegativeInputCallsForTesting();
      char what[64];
      std::snprintf(what, sizeof(what), "one negative input byte at %ld of %ld",
                    long(pos), long(n));
      runs += CheckAllPaths(a, what);
      EXPECT(NonNegativeInputCallsForTesting() == calls,
             "%s: taken as a non-negative input", what);
    }
  }
  std::printf("non-negative inputs: %d runs checked (%ld calls took their kernels)\n", runs,
              long(non_negative_calls));
}

// The side input is ONE fused multiply-add, fmaf(side, side_scale, y): a
// kernel that rounds side * side_scale first (FMUL + FADD, or a contracted
// mul + add in the other order) differs from it only where the second
// rounding crosses a tie, which random values almost never hit. Built here:
// a 1x1 convolution with K = 1 (activation 1, weight = acc), scale 1, and
// per channel a side value s and acc such that fmaf(s, ss, acc) and
// float(s * ss) + acc differ by one ulp; the bias puts the fused value
// exactly on a tie n + 0.5 that rounds to even away from the unfused one.
void TestSideInputFma() {
  const float ss = 0.1f;  // inexact: s * ss needs more than 24 bits
  FusedConvArgs a;
  ConvGeometry& g = a.geo;
  g.batch = 1; g.in_h = 1; g.in_w = 1; g.in_c = 1;
  g.filter_h = g.filter_w = 1; g.out_c = 37;  // 2 x 16 + 5: blocks and a tail
  EXPECT(ComputeGeometry(Padding::kValid, &g).empty(), "fma geometry");
  std::vector<int8_t> input(1, 1), filter(g.out_c), side(g.out_c);
  std::vector<float> scale(1, 1.0f), bias(g.out_c);
  int64_t c = 0;
  for (int acc = 8; acc <= 127 && c < g.out_c; ++acc) {
    for (int s = -128; s <= 127 && c < g.out_c; ++s) {
      const float y0 = static_cast<float>(acc);
      const float fused = std::fma(static_cast<float>(s), ss, y0);
      const float product = static_cast<float>(s) * ss;
      const float unfused = product + y0;  // -ffp-contract=off: two roundings
      if (fused == unfused) continue;
      // Tie n + 0.5 with n odd when the unfused value is below (the tie goes
      // up to n + 1), n even when it is above.
      float n = std::floor(fused);
      const bool want_odd = unfused < fused;
      if ((std::fmod(n, 2.0f) != 0.0f) != want_odd) n -= 1.0f;
      const float b = (n + 0.5f) - fused;
      if (fused + b != n + 0.5f) continue;  // not exact: skip
      if (std::nearbyint(fused + b) == std::nearbyint(unfused + b)) continue;
      filter[c] = static_cast<int8_t>(acc);
      side[c] = static_cast<int8_t>(s);
      bias[c] = b;
      ++c;
    }
  }
  EXPECT(c == g.out_c, "only %ld fma-sensitive channels found", long(c));
  a.input = input.data();
  a.filter = filter.data();
  a.bias = bias.data();
  a.conv_input_scale = scale.data();
  a.per_channel_scale = false;
  a.side_input = side.data();
  a.side_input_scale = ss;
  a.activation = Activation::kNone;
  const int runs = CheckAllPaths(a, "side input fma");
  std::printf("side input fma: %d runs checked\n", runs);
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
    if (std::find(g_paths.begin(), g_paths.end(), KernelPath::kAvx2Winograd) !=
        g_paths.end()) {
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
  if (std::find(g_paths.begin(), g_paths.end(), KernelPath::kAvx2Winograd) ==
      g_paths.end()) {
    return;
  }
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

// Runs `a` on path p (two threads) into *got and the reference into *want;
// true when they are the same bytes (the cache tests' check after each
// change).
bool RunMatchesReference(const FusedConvArgs& a, KernelPath p, std::vector<int8_t>* got,
                         std::vector<int8_t>* want) {
  FusedConvArgs r = a;
  r.output = got->data();
  EXPECT(RunFusedConv(r, RunAs(p), ThreadParallelFor(2)).empty(), "run");
  r.output = want->data();
  RunReference(r);
  return *got == *want;
}

// A filter changed in place (same pointer, same shape) must never be served
// from the packed-weights cache: every path, shapes with one and many
// verification panels, small filters (checked against their copy) and
// large ones (checked panel by panel), always cached and automatic (where
// the small single-tile calls cache too), a change in one byte anywhere.
void TestChangedFilterIsRepacked() {
  struct L { int64_t n, h, ci, k, co; };
  // The 4th has Winograd verify panels spread over several tile blocks
  // (128 tiles, 2 K panels); the last is at the copy-check size limit.
  const L layers[] = {{1, 6, 8, 3, 20}, {1, 7, 512, 3, 128}, {2, 9, 33, 5, 70},
                      {2, 16, 520, 3, 36}, {1, 1, 1280, 1, 400}};
  // Mode 1 (always cached): every change must be caught as a stale entry.
  // Mode 0 (automatic): some calls pack on the fly and never read the
  // cache, so only the results are checked.
  for (int mode : {1, 0}) {
    cpu::SetWeightModeForTesting(mode);
    const int64_t stale_before = cpu::PackedWeightsCache::Global().Stats().stale;
    int mode_runs = 0;
    std::mt19937 rng(7);
    for (const L& l : layers) {
      Buffers b;
      FusedConvArgs a = LayerCase(l.n, l.h, l.h, l.ci, l.k, l.co, 1, false, &rng, &b);
      for (KernelPath p : g_paths) {
        if (p == KernelPath::kPortable || p == KernelPath::kReference) continue;
        for (int change = 0; change < 4; ++change) {
          std::vector<int8_t> got(a.geo.OutputElements()), want(got.size());
          a.output = got.data();
          EXPECT(RunFusedConv(a, RunAs(p), ThreadParallelFor(2)).empty(), "run");
          // Change one byte: first, last, middle, random.
          const size_t n = b.filter.size();
          const size_t where[] = {0, n - 1, n / 2, rng() % n};
          b.filter[where[change]] ^= static_cast<int8_t>(1 + rng() % 255);
          a.output = got.data();
          EXPECT(RunFusedConv(a, RunAs(p), ThreadParallelFor(2)).empty(), "run");
          a.output = want.data();
          RunReference(a);
          EXPECT(got == want, "changed filter served stale: path %s change %d "
                 "layer co=%ld mode %d", KernelPathName(p), change, long(l.co),
                 mode);
          ++mode_runs;
        }
      }
    }
    const int64_t stale =
        cpu::PackedWeightsCache::Global().Stats().stale - stale_before;
    if (mode == 1) {
      EXPECT(stale >= mode_runs, "always cached: stale repacks %ld < changes %d",
             long(stale), mode_runs);
    }
    std::printf("changed filters, weight mode %d: %d runs checked (%ld stale "
                "repacks)\n", mode, mode_runs, long(stale));
  }
  cpu::SetWeightModeForTesting(0);
}

// The depthwise driver's prepared weights (depthwise.h's cache): a call
// after the filter, the scale or the bias changed in place, or with the
// scale switched from per channel to scalar, gives the reference's answer
// on every path; a repeated call with nothing changed uses the cache.
void TestDepthwiseChangedOperands() {
  struct L { int64_t n, h, c, k, m, stride; };
  // MobileNetV2's shapes (64-channel blocks, a half block, a 16-channel
  // rest, stride 2, the 7x7 global average), a 5x5 and a multiplier of 2.
  const L layers[] = {{1, 14, 144, 3, 1, 1}, {1, 7, 960, 3, 1, 1},
                      {1, 28, 192, 3, 1, 2}, {1, 7, 1280, 7, 1, 1},
                      {2, 9, 32, 3, 1, 1},   {1, 8, 24, 5, 2, 1}};
  SetWeightMode(0);
  const cpu::DepthwiseCacheStats before = cpu::GetDepthwiseCacheStats();
  int changes = 0, repeats = 0;
  std::mt19937 rng(91);
  for (const L& l : layers) {
    Buffers b;
    FusedConvArgs a = LayerCase(l.n, l.h, l.h, l.c, l.k, l.c * l.m, l.stride,
                                l.n == 2, &rng, &b, /*groups=*/l.c);
    for (KernelPath p : g_paths) {
      a.per_channel_scale = true;
      std::vector<int8_t> got(a.geo.OutputElements()), want(got.size());
      for (int change = 0; change < 6; ++change) {
        a.output = got.data();
        EXPECT(RunFusedConv(a, RunAs(p), ThreadParallelFor(2)).empty(), "run");
        const size_t n = b.filter.size();
        const int64_t c = static_cast<int64_t>(rng() % b.bias.size());
        switch (change) {
          case 0: b.filter[0] ^= static_cast<int8_t>(1 + rng() % 255); break;
          case 1: b.filter[n - 1] ^= static_cast<int8_t>(1 + rng() % 255); break;
          case 2: b.scale[c] *= 1.5f; break;
          case 3: b.bias[c] += 7.0f; break;
          case 4: a.per_channel_scale = false; break;
          default: break;  // nothing: the entry is used as it is
        }
        changes += change < 4;
        repeats += change == 5;
        a.output = got.data();
        EXPECT(RunFusedConv(a, RunAs(p), ThreadParallelFor(2)).empty(), "run");
        a.output = want.data();
        RunReference(a);
        EXPECT(got == want, "depthwise %ldx%ldx%ld k%ld m%ld s%ld path %s: "
               "change %d served stale", long(l.n), long(l.h), long(l.c),
               long(l.k), long(l.m), long(l.stride), KernelPathName(p), change);
      }
    }
  }
  // More filters alive than the cache holds: it stays within its bound by
  // evicting, and every call still gives the reference's answer.
  {
    const int64_t filters = cpu::kDepthwiseCacheMaxEntries + 20;
    std::vector<Buffers> bufs(static_cast<size_t>(filters));
    const int64_t evicted_before = cpu::GetDepthwiseCacheStats().evictions;
    for (int64_t i = 0; i < filters; ++i) {
      FusedConvArgs a = LayerCase(1, 4, 4, 16, 3, 16, 1, false, &rng,
                                  &bufs[static_cast<size_t>(i)], /*groups=*/16);
      std::vector<int8_t> got(a.geo.OutputElements()), want(got.size());
      a.output = got.data();
      EXPECT(RunFusedConv(a, RunAs(g_paths.back()), ParallelFor()).empty(), "run");
      a.output = want.data();
      RunReference(a);
      EXPECT(got == want, "depthwise filter %ld of %ld", long(i), long(filters));
    }
    const cpu::DepthwiseCacheStats s = cpu::GetDepthwiseCacheStats();
    EXPECT(s.entries <= cpu::kDepthwiseCacheMaxEntries, "%ld entries", long(s.entries));
    EXPECT(s.evictions - evicted_before >= 20, "%ld evictions",
           long(s.evictions - evicted_before));
  }
  const cpu::DepthwiseCacheStats after = cpu::GetDepthwiseCacheStats();
  EXPECT(after.stale - before.stale >= changes, "stale preparations %ld < "
         "changes %d", long(after.stale - before.stale), changes);
  EXPECT(after.hits - before.hits >= repeats, "cache hits %ld < repeats %d",
         long(after.hits - before.hits), repeats);
  EXPECT(after.entries <= cpu::kDepthwiseCacheMaxEntries &&
         after.bytes <= cpu::kDepthwiseCacheMaxBytes, "cache over its bound");
  std::printf("depthwise changed operands: %d changes, %d repeats (%ld stale, "
              "%ld hits)\n", changes, repeats, long(after.stale - before.stale),
              long(after.hits - before.hits));
}

// Pinned depthwise operands (FusedConvArgs::filter_pin and epilogue_pin): a
// call pinning both on an entry pinned the same way uses it without
// comparing; every other mix compares (a filter pin alone vouches for no
// bias or scale), so a changed operand is never served stale; an unpinned
// entry that a pinned call finds equal takes its pins; the entry keeps its
// pins alive until it is dropped.
void TestDepthwisePinnedOperands() {
  SetWeightMode(0);
  std::mt19937 rng(57);
  int runs = 0;
  for (KernelPath p : g_paths) {
    Buffers b;
    FusedConvArgs a = LayerCase(1, 9, 9, 96, 3, 96, 1, false, &rng, &b, /*groups=*/96);
    a.per_channel_scale = true;
    std::vector<int8_t> got(a.geo.OutputElements()), want(got.size());
    auto check = [&](const char* what) {
      EXPECT(RunMatchesReference(a, p, &got, &want), "pinned depthwise: %s, path %s",
             what, KernelPathName(p));
    };
    auto pinned_hits = [] { return cpu::GetDepthwiseCacheStats().pinned_hits; };
    auto stale = [] { return cpu::GetDepthwiseCacheStats().stale; };
    cpu::ClearDepthwiseCacheForTesting();
    bool* dropped = new bool(false);  // observed below, then leaked (tiny)
    std::shared_ptr<const WeightPin> filter_pin = MakeTestPin(nullptr, dropped);
    const std::shared_ptr<const WeightPin> epilogue_pin = MakeTestPin();
    // 1. Unpinned entry; a pinned call after the bias changed compares.
    check("unpinned first");
    b.bias[3] += 5.0f;
    a.filter_pin = filter_pin;
    a.epilogue_pin = epilogue_pin;
    int64_t s0 = stale();
    check("pinned after unpinned, bias changed");
    const bool uses_cache = stale() > s0;  // the portable path prepares nothing
    // 2. Pinned entry, pinned call: used unchecked.
    int64_t h0 = pinned_hits();
    check("pinned hit");
    EXPECT(!uses_cache || pinned_hits() == h0 + 1,
           "pinned call on a pinned entry not a pinned hit (path %s)", KernelPathName(p));
    // 3. Pinned entry, a call pinning the filter only, after the scale
    // changed (no promise for it): compared, prepared again.
    a.epilogue_pin = nullptr;
    b.scale[7] *= 1.25f;
    s0 = stale();
    h0 = pinned_hits();
    check("filter pinned only, scale changed");
    EXPECT(!uses_cache || (stale() == s0 + 1 && pinned_hits() == h0),
           "a filter pin alone trusted for the scale (path %s)", KernelPathName(p));
    // 4. An unpinned entry found equal by a pinned call takes its pins.
    a.epilogue_pin = epilogue_pin;
    check("pinned, entry unpinned and equal");
    h0 = pinned_hits();
    check("pinned after the entry took the pins");
    EXPECT(!uses_cache || pinned_hits() == h0 + 1,
           "an equal unpinned entry did not take the call's pins (path %s)",
           KernelPathName(p));
    // 5. A pinned call whose bias is another buffer (other bytes): not the
    // one the entry's pins vouch for, so compared and prepared again.
    std::vector<float> other_bias = b.bias;
    other_bias[1] -= 9.0f;
    const float* own_bias = a.bias;
    a.bias = other_bias.data();
    s0 = stale();
    check("pinned, bias moved to another buffer");
    EXPECT(!uses_cache || stale() == s0 + 1,
           "a bias at another address was trusted (path %s)", KernelPathName(p));
    a.bias = own_bias;
    check("pinned, bias back");
    // 6. Pinned entry, unpinned call after the filter changed: compared.
    a.filter_pin = nullptr;
    a.epilogue_pin = nullptr;
    b.filter[b.filter.size() - 1] ^= 0x5a;
    check("unpinned after pinned, filter changed");
    // 7. The entry keeps its pins alive; dropping it releases them.
    a.filter_pin = filter_pin;
    a.epilogue_pin = epilogue_pin;
    check("pinned again");
    a.filter_pin = nullptr;
    a.epilogue_pin = nullptr;
    filter_pin = nullptr;
    EXPECT(!*dropped || !uses_cache, "the depthwise cache dropped a pin it still uses");
    cpu::ClearDepthwiseCacheForTesting();
    EXPECT(*dropped, "the depthwise cache kept a pin after it was cleared");
    ++runs;
  }
  cpu::ClearDepthwiseCacheForTesting();
  std::printf("depthwise pinned operands: %d paths\n", runs);
}

// One-pixel depthwise rows (depthwise_rows.h PixelBlocks: an output column
// whose window lies inside the image across, computed 128 or 64 channels at
// a time): global averages (window = input, 1x1 output) of ResNet-50's and
// MobileNetV2's size and others, one-column outputs over several rows with
// the rows padded, stride 2 and dilation 2 down the column, a channel
// multiplier, channel counts that leave 64-channel groups, 16-channel
// blocks and tail lanes after the 128-channel groups, and operands at the
// extremes; every path, weight mode and partition against the reference.
// A one-column output whose window is padded across (not full) takes the
// per-block kernel, as before.
void TestDepthwiseOnePixel() {
  std::mt19937 rng(57);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const int64_t channel_counts[] = {2048, 1280, 1000, 200, 192, 144, 128,
                                    80, 64, 48, 24, 16};
  constexpr int kCounts = sizeof(channel_counts) / sizeof(channel_counts[0]);
  int runs = 0;
  for (int iter = 0; iter < 4 * kCounts; ++iter) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    const int64_t c = channel_counts[iter % kCounts];
    const int kind = iter / kCounts;  // 0 global, 1 column, 2 dilated, 3 padded across
    const int64_t m = iter % 5 == 4 ? 2 : 1;  // channel multiplier
    g.batch = 1 + iter % 3;
    g.in_c = g.groups = c;
    g.out_c = c * m;
    g.filter_h = kind == 0 ? (iter % 2 ? 7 : 3) : uni(1, 5);
    g.filter_w = kind == 0 ? g.filter_h : uni(2, 7);
    Padding padding = Padding::kValid;
    g.in_h = g.filter_h;
    g.in_w = g.filter_w;
    if (kind == 1) {
      g.stride_h = uni(1, 2);
      g.in_h = g.filter_h + uni(0, 6);
      padding = Padding::kExplicit;
      g.pad_top = uni(0, 3);
      g.pad_bottom = uni(0, 3);
    } else if (kind == 2) {
      g.dilation_h = g.dilation_w = 2;
      g.in_h = 2 * (g.filter_h - 1) + 1 + uni(0, 3);
      g.in_w = 2 * (g.filter_w - 1) + 1;
    } else if (kind == 3) {
      padding = Padding::kExplicit;
      g.in_w = g.filter_w - 1;
      g.pad_left = 1;
    }
    EXPECT(ComputeGeometry(padding, &g).empty(), "one-pixel geometry");
    EXPECT(g.out_w == 1, "one-pixel geometry: out_w %ld", long(g.out_w));
    Buffers b;
    const int operands = iter % 4;
    FillOperands(g, operands, /*mixed_period=*/3, /*side=*/iter % 3 == 1, &rng, &b);
    const bool per_channel = iter % 2 == 0;
    b.scale.resize(per_channel ? g.out_c : 1);
    const double base = 40.0 / (std::sqrt(double(g.ReductionDepth())) * 74 * 74);
    for (auto& x : b.scale) x = float(base * (0.5 + uni(0, 1000) / 666.0));
    b.bias.resize(static_cast<size_t>(g.out_c));
    for (auto& x : b.bias) x = uni(-40, 40) * 0.5f;
    PointAt(b, uni(-100, 100) / 64.0f, &a);
    a.per_channel_scale = per_channel;
    a.activation = iter % 4 < 2 ? Activation::kRelu : Activation::kNone;
    char what[128];
    std::snprintf(what, sizeof(what),
                  "one-pixel depthwise n%ld %ldx%ldx%ld k%ldx%ld m%ld s%ld d%ld "
                  "pad %ld %ld %ld",
                  long(g.batch), long(g.in_h), long(g.in_w), long(c),
                  long(g.filter_h), long(g.filter_w), long(m), long(g.stride_h),
                  long(g.dilation_h), long(g.pad_top), long(g.pad_bottom),
                  long(g.pad_left));
    runs += CheckAllPaths(a, what);
  }
  std::printf("one-pixel depthwise: %d runs checked\n", runs);
}

// Global windows with uniform taps (depthwise.h DepthwiseGlobalRows*: the
// window is the whole image, no padding, every tap of a channel the same
// weight: quantize_model's global average pooling and EfficientNet's
// squeeze): acc = w[c] * the channel's sum. Images from 1x1 to 112x112
// (EfficientNet's largest squeeze), 1 to 1152 channels (counts that give
// the AVX-512 body one to eight 32-channel units a group, the last cut or
// whole, and the AVX2 body one to eight 16-channel units and a tail),
// batch 1 to 3,
// weights random per channel or -128 everywhere, activations random or at
// the extremes (the sum's bound: 12544 * -128 * -128), side input, Relu,
// an output table; and the same windows with one tap changed (not uniform:
// the row kernels). Every path, weight mode and partition.
void TestDepthwiseGlobalUniform() {
  std::mt19937 rng(91);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const int64_t sizes[][2] = {{1, 1}, {1, 5}, {3, 3}, {7, 7}, {14, 14}, {56, 56},
                              {112, 112}, {9, 4}};
  const int64_t channel_counts[] = {1, 3, 16, 32, 96, 200, 1152, 48, 80, 144, 176, 232};
  constexpr int kCounts = sizeof(channel_counts) / sizeof(channel_counts[0]);
  std::vector<int8_t> lut(256);
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<int8_t>(127 - i);
  int runs = 0;
  for (int iter = 0; iter < 8 * kCounts; ++iter) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    const int64_t* hw = sizes[iter % 8];
    g.batch = 1 + iter % 3;
    g.in_c = g.out_c = g.groups = channel_counts[iter / 8];
    if (hw[0] >= 56 && g.in_c > 200) g.in_c = g.out_c = g.groups = 96;
    g.in_h = g.filter_h = hw[0];
    g.in_w = g.filter_w = hw[1];
    EXPECT(ComputeGeometry(Padding::kValid, &g).empty(), "global geometry");
    Buffers b;
    const int operands = iter % 3;  // random, -128 x -128, 127 x -128
    FillOperands(g, operands, /*mixed_period=*/2, /*side=*/iter % 4 == 1, &rng, &b);
    const int64_t cc = g.out_c, taps = g.filter_h * g.filter_w;
    for (int64_t c = 0; c < cc; ++c) {
      const int8_t w = operands ? int8_t{-128} : static_cast<int8_t>(uni(-128, 127));
      for (int64_t t = 0; t < taps; ++t) b.filter[t * cc + c] = w;
    }
    const bool uniform = iter % 7 != 6;
    if (!uniform && taps > 1) b.filter[(taps - 1) * cc] ^= 1;
    const bool per_channel = iter % 2 == 0;
    b.scale.resize(per_channel ? cc : 1);
    for (auto& x : b.scale) x = std::ldexp(1.0f + uni(0, 99) / 100.0f, -16 + uni(0, 8));
    b.bias.resize(static_cast<size_t>(cc));
    for (auto& x : b.bias) x = uni(-40, 40) * 0.5f;
    PointAt(b, uni(-100, 100) / 64.0f, &a);
    a.per_channel_scale = per_channel;
    a.activation = iter % 4 < 2 ? Activation::kRelu : Activation::kNone;
    a.output_lut = iter % 5 == 3 ? lut.data() : nullptr;
    char what[128];
    std::snprintf(what, sizeof(what), "global depthwise n%ld %ldx%ldx%ld operands %d %s",
                  long(g.batch), long(g.in_h), long(g.in_w), long(cc), operands,
                  uniform ? "uniform" : "one tap changed");
    runs += CheckAllPaths(a, what);
  }
  std::printf("global uniform depthwise: %d runs checked\n", runs);
}

// Explicit padding of 0..max_pad per side for g (TestPaddedInput,
// TestInPlaceRows), raised at the bottom and right where the padded input
// would be smaller than the eh x ew window.
void RandomPads(int max_pad, int64_t eh, int64_t ew, std::mt19937* rng, ConvGeometry* g) {
  auto uni = [rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(*rng);
  };
  g->pad_top = uni(0, max_pad);
  g->pad_bottom = uni(0, max_pad);
  g->pad_left = uni(0, max_pad);
  g->pad_right = uni(0, max_pad);
  if (g->in_h + g->pad_top + g->pad_bottom < eh) g->pad_bottom = eh - g->in_h - g->pad_top;
  if (g->in_w + g->pad_left + g->pad_right < ew) g->pad_right = ew - g->in_w - g->pad_left;
}

// A sweep case's epilogue operands for a->geo (FillSweepCase,
// TestDepthwiseUniformTaps): per-channel scales sized for the depth, bias,
// side scale and activation, drawn from rng; a points at them and at b's
// input, filter and side input.
void FillSweepEpilogue(std::mt19937* rng, Buffers* b, FusedConvArgs* a) {
  auto uni = [rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(*rng);
  };
  const ConvGeometry& g = a->geo;
  b->bias.resize(g.out_c);
  for (auto& x : b->bias) x = uni(-40, 40) * 0.5f;
  b->scale.resize(g.out_c);
  const double base = 40.0 / (std::sqrt(double(g.ReductionDepth())) * 74 * 74);
  for (auto& x : b->scale) x = float(base * (0.5 + uni(0, 1000) / 666.0));
  PointAt(*b, uni(-100, 100) / 64.0f, a);
  a->activation = uni(0, 1) ? Activation::kRelu : Activation::kNone;
}

// The operands of sweep case `iter` for a->geo (TestPaddedInput,
// TestInPlaceRows): every fifth case extreme (FillOperands), a side input
// or not, then FillSweepEpilogue's, drawn from rng; a points at them in b.
void FillSweepCase(int iter, std::mt19937* rng, Buffers* b, FusedConvArgs* a) {
  const int operands = iter % 5 == 4 ? 1 + iter % 3 : 0;
  FillOperands(a->geo, operands, 3,
               std::uniform_int_distribution<int>(0, 1)(*rng) == 1, rng, b);
  FillSweepEpilogue(rng, b, a);
}

// Depthwise filters whose taps all hold the same weight per channel (an
// average pooling's, quantize_model's global average pooling included):
// the driver keeps one tap of widened weights (DepthwiseRowArgs::tap_stride
// 0). Global averages (one output pixel, 3x3 to 7x7), strided poolings
// (2x2 and 3x3, VALID and SAME) and padded or dilated windows, channel
// counts with and without tails, multipliers 1 and 2, extreme weights;
// each filter checked uniform, then with one tap of one channel changed in
// the same buffer (no longer uniform: the cache must prepare it again, all
// taps), then uniform again; every path, weight mode and partition, against
// the reference.
void TestDepthwiseUniformTaps() {
  std::mt19937 rng(303);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const int64_t channel_counts[] = {2048, 1280, 200, 144, 64, 17, 16, 3};
  constexpr int kCounts = sizeof(channel_counts) / sizeof(channel_counts[0]);
  int runs = 0;
  for (int iter = 0; iter < 3 * kCounts; ++iter) {
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    const int64_t c = channel_counts[iter % kCounts];
    const int kind = iter / kCounts;  // 0 global, 1 strided pooling, 2 padded / dilated
    const int64_t m = iter % 3 == 2 ? 2 : 1;
    g.batch = 1 + iter % 2;
    g.in_c = g.groups = c;
    g.out_c = c * m;
    Padding padding = Padding::kValid;
    if (kind == 0) {
      g.filter_h = g.filter_w = 3 + 2 * (iter % 3);  // 3, 5, 7
      g.in_h = g.filter_h;
      g.in_w = g.filter_w;
    } else if (kind == 1) {
      g.filter_h = g.filter_w = uni(2, 3);
      g.stride_h = g.stride_w = 2;
      g.in_h = uni(3, 12);
      g.in_w = uni(3, 12);
      padding = iter % 2 ? Padding::kSame : Padding::kValid;
    } else {
      g.filter_h = uni(2, 5);
      g.filter_w = uni(2, 5);
      g.dilation_h = g.dilation_w = 1 + iter % 2;
      g.in_h = uni(1, 9);
      g.in_w = uni(1, 9);
      padding = Padding::kSame;
    }
    EXPECT(ComputeGeometry(padding, &g).empty(), "uniform-taps geometry, case %d", iter);
    Buffers b;
    FillOperands(g, iter % 4 == 3 ? 2 : 0, /*mixed_period=*/3, /*side=*/iter % 3 == 1, &rng, &b);
    const int64_t taps = g.filter_h * g.filter_w, co = g.out_c;
    std::vector<int8_t> value(static_cast<size_t>(co));
    for (auto& v : value) {
      v = static_cast<int8_t>(iter % 4 == 3 ? -128 : iter % 4 == 2 ? 127 : uni(-128, 127));
    }
    auto make_uniform = [&] {
      for (int64_t t = 0; t < taps; ++t) {
        for (int64_t j = 0; j < co; ++j) b.filter[t * co + j] = value[j];
      }
    };
    make_uniform();
    FillSweepEpilogue(&rng, &b, &a);
    char what[160];
    for (int round = 0; round < 3; ++round) {
      if (round == 1) {
        // One tap (not the first) of one channel differs from the others.
        const int64_t t = uni(1, static_cast<int>(taps - 1));
        const int64_t j = uni(0, static_cast<int>(co - 1));
        b.filter[t * co + j] = static_cast<int8_t>(value[j] == 127 ? -128 : value[j] + 1);
      } else if (round == 2) {
        make_uniform();
      }
      std::snprintf(what, sizeof(what),
                    "uniform-taps depthwise (%s) n%ld %ldx%ldx%ld k%ldx%ld m%ld s%ld d%ld "
                    "pad %ld %ld %ld %ld",
                    round == 1 ? "one tap changed" : "uniform", long(g.batch), long(g.in_h),
                    long(g.in_w), long(c), long(g.filter_h), long(g.filter_w), long(m),
                    long(g.stride_h), long(g.dilation_h), long(g.pad_top), long(g.pad_bottom),
                    long(g.pad_left), long(g.pad_right));
      runs += CheckAllPaths(a, what);
    }
  }
  std::printf("uniform-taps depthwise: %d runs checked\n", runs);
}

// Pinned filters (FusedConvArgs::filter_pin): a pinned call on a pinned
// entry uses it unchecked; every other mix is checked or repacked, so a
// changed filter is never served stale; the entry keeps the pin alive and
// counts a pinned filter without a copy against the byte bound.
void TestPinnedFilters() {
  cpu::PackedWeightsCache& cache = cpu::PackedWeightsCache::Global();
  struct L { int64_t h, ci, k, co; };
  // A small filter (memcmp-checked), one over the copy-check limit
  // (panel-checked), a Winograd-eligible 3x3.
  const L layers[] = {{6, 16, 3, 24}, {3, 1280, 1, 480}, {16, 64, 3, 64}};
  cpu::SetWeightModeForTesting(1);  // always through the cache
  int runs = 0;
  for (const L& l : layers) {
    for (KernelPath p : g_paths) {
      if (p == KernelPath::kPortable || p == KernelPath::kReference) continue;
      std::mt19937 rng(13 + runs);
      Buffers b;
      FusedConvArgs a = LayerCase(1, l.h, l.h, l.ci, l.k, l.co, 1, false, &rng, &b);
      std::vector<int8_t> got(a.geo.OutputElements()), want(got.size());
      auto check = [&](const char* what) {
        EXPECT(RunMatchesReference(a, p, &got, &want), "pinned filters: %s, path %s co=%ld",
               what, KernelPathName(p), long(l.co));
      };
      cache.Clear();
      // 1. Unpinned entry, then a pinned call after the bytes changed: the
      // pinned call must not trust the unpinned entry.
      check("unpinned first");
      b.filter[b.filter.size() / 2] ^= 0x55;
      bool* deleted = new bool(false);
      a.filter_pin = MakeTestPin(nullptr, deleted);  // deleted: leaked (tiny)
      check("pinned after unpinned, bytes changed");
      // 2. Pinned entry, pinned call: a hit used unchecked.
      const cpu::PackedWeightsCacheStats before = cache.Stats();
      check("pinned hit");
      EXPECT(cache.Stats().pinned_hits == before.pinned_hits + 1,
             "pinned call on pinned entry not a pinned hit (path %s co=%ld)",
             KernelPathName(p), long(l.co));
      // 3. Pinned entry, unpinned call after the bytes changed (the caller
      // broke no promise: it made none): checked, repacked.
      std::shared_ptr<const WeightPin> pin = a.filter_pin;
      a.filter_pin = nullptr;
      b.filter[0] ^= 0x33;
      check("unpinned after pinned, bytes changed");
      // 4. The entry keeps the pin alive while it holds it; Clear drops it.
      a.filter_pin = pin;
      check("pinned again");
      a.filter_pin = nullptr;
      pin = nullptr;
      EXPECT(!*deleted, "the cache dropped a pin it still uses");
      cache.Clear();
      EXPECT(*deleted, "the cache kept a pin after Clear");
      ++runs;
    }
  }
  // 5. A pinned filter without a copy counts against the byte bound.
  {
    std::mt19937 rng(5);
    Buffers b;
    FusedConvArgs a = LayerCase(1, 3, 3, 1280, 1, 480, 1, false, &rng, &b);
    std::vector<int8_t> out(a.geo.OutputElements());
    a.output = out.data();
    cache.Clear();
    RunFusedConv(a, g_paths.back(), ParallelFor());
    const int64_t unpinned = cache.Stats().bytes;
    cache.Clear();
    a.filter_pin = MakeTestPin();
    RunFusedConv(a, g_paths.back(), ParallelFor());
    const int64_t pinned = cache.Stats().bytes;
    if (g_paths.back() != KernelPath::kPortable &&
        g_paths.back() != KernelPath::kReference) {
      EXPECT(pinned == unpinned + int64_t(b.filter.size()),
             "pinned bytes %ld, unpinned %ld, filter %ld", long(pinned),
             long(unpinned), long(b.filter.size()));
    }
    cache.Clear();
  }
  cpu::SetWeightModeForTesting(0);
  std::printf("pinned filters: %d layer/path runs checked\n", runs);
}

// The cache stays within its entry bound and evicts least recently used.
void TestCacheBound() {
  cpu::PackedWeightsCache& cache = cpu::PackedWeightsCache::Global();
  // The fastest path under test (g_paths is in ascending order).
  const KernelPath p = g_paths.back();
  if (p == KernelPath::kPortable || p == KernelPath::kReference) return;
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

// Pinned entries are outside the caches' bounds (bounded_lru.h): more
// pinned filters than kMaxEntries (GEMM) and kDepthwiseCacheMaxEntries
// (depthwise) stay cached while their pins are Held(), so a second round is
// all pinned hits with no packing; once half the owners are gone, the next
// insertion drops exactly their entries and releases their pins.
void TestPinnedEntriesOutsideBounds() {
  const KernelPath p = g_paths.back();
  if (p == KernelPath::kPortable || p == KernelPath::kReference) return;
  SetWeightMode(1);  // GEMM: always through the cache
  struct Kind {
    const char* name;
    int64_t bound;
    bool depthwise;
  };
  const Kind kinds[] = {{"gemm", cpu::PackedWeightsCache::kMaxEntries, false},
                        {"depthwise", cpu::kDepthwiseCacheMaxEntries, true}};
  for (const Kind& kind : kinds) {
    auto stats = [&] {
      return kind.depthwise ? cpu::GetDepthwiseCacheStats()
                            : cpu::PackedWeightsCache::Global().Stats();
    };
    cpu::PackedWeightsCache::Global().Clear();
    cpu::ClearDepthwiseCacheForTesting();
    const int64_t n = kind.bound + 10, half = n / 2;
    std::mt19937 rng(23);
    std::vector<Buffers> bufs(static_cast<size_t>(n));
    std::vector<FusedConvArgs> args;
    std::unique_ptr<bool[]> held(new bool[n]), destroyed(new bool[n]);
    for (int64_t i = 0; i < n; ++i) {
      held[i] = true;
      destroyed[i] = false;
      args.push_back(kind.depthwise
                         ? LayerCase(1, 4, 4, 16, 3, 16, 1, false, &rng, &bufs[i], 16)
                         : LayerCase(1, 4, 4, 8, 1, 16, 1, false, &rng, &bufs[i]));
      args[i].filter_pin = MakeTestPin(&held[i], &destroyed[i]);
      args[i].epilogue_pin = MakeTestPin();
    }
    std::vector<int8_t> got, want;
    auto run_all = [&](const char* round) {
      for (int64_t i = 0; i < n; ++i) {
        got.resize(args[i].geo.OutputElements());
        want.resize(got.size());
        EXPECT(RunMatchesReference(args[i], p, &got, &want), "%s pinned bound, %s, filter %ld",
               kind.name, round, long(i));
      }
    };
    const cpu::WeightCacheStats s0 = stats();
    run_all("first round");
    const cpu::WeightCacheStats s1 = stats();
    EXPECT(s1.pinned_entries == n && s1.evictions == s0.evictions,
           "%s: %ld pinned entries of %ld, %ld evictions", kind.name,
           long(s1.pinned_entries), long(n), long(s1.evictions - s0.evictions));
    run_all("second round");
    const cpu::WeightCacheStats s2 = stats();
    EXPECT(s2.pinned_hits == s1.pinned_hits + n && s2.misses == s1.misses,
           "%s: second round %ld pinned hits, %ld misses (of %ld)", kind.name,
           long(s2.pinned_hits - s1.pinned_hits), long(s2.misses - s1.misses), long(n));
    // The owners of the first half go; the tests' own references too.
    for (int64_t i = 0; i < n; ++i) {
      if (i < half) held[i] = false;
      args[i].filter_pin = nullptr;
      args[i].epilogue_pin = nullptr;
    }
    EXPECT(!destroyed[0], "%s: a pin was released before its entry", kind.name);
    // One insertion (an unpinned filter) drops exactly their entries.
    Buffers extra_buf;
    FusedConvArgs extra =
        kind.depthwise ? LayerCase(1, 4, 4, 16, 3, 16, 1, false, &rng, &extra_buf, 16)
                       : LayerCase(1, 4, 4, 8, 1, 16, 1, false, &rng, &extra_buf);
    got.resize(extra.geo.OutputElements());
    want.resize(got.size());
    EXPECT(RunMatchesReference(extra, p, &got, &want), "%s: extra filter", kind.name);
    const cpu::WeightCacheStats s3 = stats();
    EXPECT(s3.released == s2.released + half && s3.pinned_entries == n - half &&
               s3.entries == n - half + 1,
           "%s: %ld released (want %ld), %ld pinned entries, %ld entries", kind.name,
           long(s3.released - s2.released), long(half), long(s3.pinned_entries),
           long(s3.entries));
    bool released_match = true;  // exactly the first half's pins destroyed
    for (int64_t i = 0; i < n; ++i) released_match &= destroyed[i] == (i < half);
    EXPECT(released_match, "%s: released pins do not match the owners gone", kind.name);
    cpu::PackedWeightsCache::Global().Clear();
    cpu::ClearDepthwiseCacheForTesting();
    bool all_gone = true;
    for (int64_t i = 0; i < n; ++i) all_gone &= destroyed[i];
    EXPECT(all_gone, "%s: Clear kept pins", kind.name);
  }
  SetWeightMode(0);
  std::printf("pinned entries outside the bounds: %ld gemm, %ld depthwise filters\n",
              long(cpu::PackedWeightsCache::kMaxEntries + 10),
              long(cpu::kDepthwiseCacheMaxEntries + 10));
}

// Convolutions on a padded input (gemm_kernels.h, GemmTileArgs::padded: the
// amx path's stride-1 convolutions whose K steps each lie in one window
// row), forced on and off (SetPaddedInputForTesting): window rows of 64 to
// 192 bytes (Ci 64-192 with any Kw and dilation, Ci 32 with Kw 2, Ci 16
// with Kw 4), 1x3 to 7x7 filters, dilation 1 and 2 either way, SAME, VALID
// and explicit asymmetric padding (windows wholly in the padding), images
// from 1x1 (output rows shorter than 16 pixels, several per tile; the
// images' extra virtual rows), batch 1-3, output channels with and without
// a tail, side input, Relu bounds and extreme operands; every weight mode
// and partition, against the reference. Only the paths with a padded input
// (amx) run them: the others' stride-1 convolutions are the other sweeps'
// (and under qemu the thousand extra threads of these partitions cost the
// aarch64 runs minutes each).
void TestPaddedInput() {
  std::mt19937 rng(2024);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  struct Window {
    int64_t ci, kh, kw, dh, dw;
  };
  const Window windows[] = {{64, 3, 3, 1, 1}, {128, 3, 3, 1, 1}, {64, 1, 3, 1, 1},
                            {64, 3, 1, 1, 1}, {192, 2, 2, 1, 1}, {64, 5, 5, 1, 1},
                            {64, 7, 7, 1, 1}, {32, 2, 2, 1, 1},  {16, 4, 4, 1, 1},
                            {64, 3, 3, 2, 2}, {64, 3, 3, 1, 2},  {128, 3, 3, 2, 1},
                            {32, 3, 2, 2, 1}};
  const int64_t out_channels[] = {1, 16, 17, 40, 64, 100};
  const bool has_padded_path =
      std::find(g_paths.begin(), g_paths.end(), KernelPath::kAmx) != g_paths.end();
  int runs = 0, fits = 0;
  for (int iter = 0; iter < 3 * 13; ++iter) {
    const Window& w = windows[iter % 13];
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = uni(1, 3);
    g.in_c = w.ci;
    g.filter_h = w.kh;
    g.filter_w = w.kw;
    g.dilation_h = w.dh;
    g.dilation_w = w.dw;
    g.out_c = out_channels[uni(0, 5)];
    const int64_t eh = (w.kh - 1) * w.dh + 1, ew = (w.kw - 1) * w.dw + 1;
    const int kind = iter % 3;
    Padding padding = kind == 0 ? Padding::kSame : kind == 1 ? Padding::kValid : Padding::kExplicit;
    g.in_h = (kind == 1 ? eh : 1) + uni(0, 17);
    g.in_w = (kind == 1 ? ew : 1) + uni(0, 17);
    if (kind == 2) RandomPads(4, eh, ew, &rng, &g);
    EXPECT(ComputeGeometry(padding, &g).empty(), "geometry");
    fits += cpu::PaddedInputFits(g);
    EXPECT(cpu::PaddedInputFits(g), "padded sweep case %d does not fit a padded input", iter);
    Buffers b;
    FillSweepCase(iter, &rng, &b, &a);
    if (!has_padded_path) continue;
    std::vector<int8_t> want(g.OutputElements());
    a.output = want.data();
    RunReference(a);
    for (KernelPath p : g_paths) {
      if (p != KernelPath::kAmx) continue;
      for (int padded : {1, 2}) {
        cpu::SetPaddedInputForTesting(padded);
        for (int mode : kWeightModes) {
          if (p == KernelPath::kPortable && mode != 0) continue;
          SetWeightMode(mode);
          const ParallelFor pfs[] = {ParallelFor(), ThreadParallelFor(2), OddParallelFor(3)};
          for (const ParallelFor& pf : pfs) {
            // 256 guard bytes after the output: a store past it shows.
            std::vector<int8_t> got(want.size() + 256, 77);
            a.output = got.data();
            const std::string err = RunFusedConv(a, RunAs(p), pf);
            EXPECT(err.empty(), "%s", err.c_str());
            size_t bad = 0, first = 0;
            for (size_t j = 0; j < got.size(); ++j) {
              const int8_t expected = j < want.size() ? want[j] : int8_t{77};
              if (got[j] != expected && bad++ == 0) first = j;
            }
            if (first >= want.size()) first = 0;
            EXPECT(bad == 0, "padded input %d, case %d path %s weights %d threads %d: %zu of %zu "
                   "differ (first %zu: got %d want %d; n%ld %ldx%ldx%ld k%ldx%ld d%ldx%ld co%ld "
                   "pad %ld %ld %ld %ld)", padded, iter, KernelPathName(p), mode, pf.num_threads,
                   bad, got.size(), first, got[first], want[first], long(g.batch), long(g.in_h),
                   long(g.in_w), long(g.in_c), long(g.filter_h), long(g.filter_w),
                   long(g.dilation_h), long(g.dilation_w), long(g.out_c), long(g.pad_top),
                   long(g.pad_bottom), long(g.pad_left), long(g.pad_right));
            ++runs;
          }
        }
        SetWeightMode(0);
      }
    }
    cpu::SetPaddedInputForTesting(0);
  }
  std::printf("padded input: %d runs checked (%d cases fit%s)\n", runs, fits,
              runs == 0 ? "; no path under test has a padded input" : "");
}

// Rows read in place against gathered rows (cpu::SetInPlaceRowsForTesting:
// the avx512vnni micro-tiles read a pointwise layer's input, or windows of
// it, in place wherever they can, or gather every row), both forced on
// every machine, since the automatic choice depends on the CPU's vendor
// (gemm_avx512vnni.cc, ReadInPlace: Intel CPUs gather all but pointwise
// rows shorter than 64 bytes): pointwise depths below and above 64 and not
// a multiple of 4, 1x1 convolutions that are not direct (stride 2,
// padding), 3x3 windows on rows wide enough to be read in place (out_w >=
// 24) and narrower, strides 1 and 2, dilated rows, SAME, VALID and explicit
// padding, channel tails, side input, Relu bounds and extreme operands;
// every path, weight mode and partition, against the reference. Only
// machines with the avx512vnni path run them. It found a gathered row that
// another block's gather had overrun being used as whole (windows, a narrow
// last block, weights packed on the fly).
void TestInPlaceRows() {
  const bool has_path = std::find(g_paths.begin(), g_paths.end(),
                                  KernelPath::kAvx512Vnni) != g_paths.end();
  if (!has_path) {
    std::printf("in-place rows: no path under test reads rows in place\n");
    return;
  }
  std::mt19937 rng(77);
  auto uni = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  struct Shape {
    int64_t ci, k, stride, dilation;
  };
  const Shape shapes[] = {{16, 1, 1, 1},  {48, 1, 1, 1},  {60, 1, 1, 1},  {64, 1, 1, 1},
                          {68, 1, 1, 1},  {144, 1, 1, 1}, {30, 1, 1, 1},  {66, 1, 1, 1},
                          {64, 1, 2, 1},  {96, 3, 1, 1},  {32, 3, 1, 1},  {8, 3, 1, 1},
                          {64, 3, 2, 1},  {36, 3, 1, 2},  {64, 5, 1, 1},  {20, 3, 1, 1}};
  const int64_t out_channels[] = {1, 16, 24, 40, 64, 100, 144};
  int runs = 0;
  for (int iter = 0; iter < 2 * 16; ++iter) {
    const Shape& sh = shapes[iter % 16];
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = uni(1, 2);
    g.in_c = sh.ci;
    g.filter_h = g.filter_w = sh.k;
    g.stride_h = g.stride_w = sh.stride;
    g.dilation_h = sh.dilation;
    g.out_c = out_channels[uni(0, 6)];
    // Wide rows (read in place where the windows fit) in the first round,
    // any width in the second.
    g.in_h = uni(1, 9);
    g.in_w = iter < 16 ? uni(24, 40) * sh.stride : uni(1, 30);
    const int kind = uni(0, 2);
    Padding padding = kind == 0 ? Padding::kSame : kind == 1 ? Padding::kValid : Padding::kExplicit;
    const int64_t eh = (sh.k - 1) * sh.dilation + 1;
    if (kind == 1) {
      g.in_h += eh - 1;
      g.in_w += sh.k - 1;
    }
    if (kind == 2) RandomPads(2, eh, sh.k, &rng, &g);
    EXPECT(ComputeGeometry(padding, &g).empty(), "in-place rows case %d geometry", iter);
    Buffers b;
    FillSweepCase(iter, &rng, &b, &a);
    char what[160];
    for (int mode : {1, 2}) {
      cpu::SetInPlaceRowsForTesting(mode);
      std::snprintf(what, sizeof(what),
                    "in-place rows %d, case %d (n%ld %ldx%ldx%ld k%ld s%ld d%ld co%ld "
                    "pad %ld %ld %ld %ld)",
                    mode, iter, long(g.batch), long(g.in_h), long(g.in_w), long(g.in_c),
                    long(g.filter_h), long(g.stride_h), long(g.dilation_h), long(g.out_c),
                    long(g.pad_top), long(g.pad_bottom), long(g.pad_left), long(g.pad_right));
      runs += CheckAllPaths(a, what);
    }
    cpu::SetInPlaceRowsForTesting(0);
  }
  std::printf("in-place rows: %d runs checked\n", runs);
}

// Eight threads run different convolutions at once on every path, each
// with its own single-threaded calls, in both weight sources: no path may
// keep per-call state anywhere but the calling thread (the amx path loads
// its tile configuration per call and releases the tiles after; the
// scratch buffers are per thread). Four random sweep cases and four layer
// shapes whose GEMMs are wide and deep (several micro-tiles, and with
// weights packed on the fly several K panels, so tiles travel through the
// partial sums).
void TestConcurrentCalls() {
  constexpr int kThreads = 8, kRepeats = 6;
  std::mt19937 rng(777);
  std::vector<Buffers> bufs(kThreads);
  std::vector<FusedConvArgs> args(kThreads);
  std::vector<std::vector<int8_t>> want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    Padding padding = Padding::kSame;
    if (t < 4) {
      args[t] = MakeCase(&rng, &padding, &bufs[t]);
    } else {
      // MakeCase's operands for a fixed geometry: draw one, then refit it.
      FusedConvArgs a = MakeCase(&rng, &padding, &bufs[t]);
      static const int64_t kShapes[4][6] = {  // n, h, w, ci, k, co
          {1, 14, 14, 96, 3, 80}, {2, 9, 9, 160, 1, 112},
          {1, 7, 7, 256, 3, 48}, {3, 6, 6, 40, 5, 36}};
      const int64_t* sh = kShapes[t - 4];
      ConvGeometry g;
      g.batch = sh[0];
      g.in_h = sh[1];
      g.in_w = sh[2];
      g.in_c = sh[3];
      g.filter_h = g.filter_w = sh[4];
      g.out_c = sh[5];
      EXPECT(ComputeGeometry(Padding::kSame, &g).empty(), "geometry");
      std::mt19937 fill(100 + t);
      auto bytes = [&fill](std::vector<int8_t>* v, int64_t n) {
        v->resize(static_cast<size_t>(n));
        for (auto& x : *v) x = static_cast<int8_t>(fill() % 256 - 128);
      };
      bytes(&bufs[t].input, g.InputElements());
      bytes(&bufs[t].filter, g.FilterElements());
      bytes(&bufs[t].side, g.OutputElements());
      bufs[t].bias.assign(g.out_c, 0.75f);
      bufs[t].scale.assign(g.out_c, 1.0f / 2048);
      a.geo = g;
      a.input = bufs[t].input.data();
      a.filter = bufs[t].filter.data();
      a.bias = bufs[t].bias.data();
      a.conv_input_scale = bufs[t].scale.data();
      a.per_channel_scale = true;
      a.side_input = t % 2 ? bufs[t].side.data() : nullptr;
      a.side_input_scale = t % 2 ? 0.5f : 0.0f;
      a.output_lut = nullptr;
      args[t] = a;
    }
    want[t].resize(args[t].geo.OutputElements());
    args[t].output = want[t].data();
    EXPECT(RunFusedConv(args[t], KernelPath::kReference, ParallelFor()).empty(), "ref");
  }
  int runs = 0;
  for (KernelPath p : g_paths) {
    for (int mode : {0, 2}) {
      SetWeightMode(mode);
      std::vector<std::string> errors(kThreads);
      std::vector<std::thread> workers;
      for (int t = 0; t < kThreads; ++t) {
        workers.emplace_back([&, t] {
          for (int r = 0; r < kRepeats; ++r) {
            // Thread t runs case (t + r) % 8: every case on several threads.
            const int c = (t + r) % kThreads;
            FusedConvArgs a = args[c];
            std::vector<int8_t> got(want[c].size(), 77);
            a.output = got.data();
            const std::string err = RunFusedConv(a, RunAs(p), ParallelFor());
            if (!err.empty() || got != want[c]) {
              errors[t] = "case " + std::to_string(c) + " repeat " +
                          std::to_string(r) + (err.empty() ? ": wrong bits" : ": " + err);
              return;
            }
          }
        });
      }
      for (auto& w : workers) w.join();
      for (int t = 0; t < kThreads; ++t) {
        EXPECT(errors[t].empty(), "concurrent calls, path %s weights %d, thread %d: %s",
               KernelPathName(p), mode, t, errors[t].c_str());
      }
      runs += kThreads * kRepeats;
    }
    SetWeightMode(0);
  }
  std::printf("concurrent calls: %d runs on %d threads checked\n", runs, kThreads);
}

// Every forcing name parses back to its path, and an unknown one is an
// error that lists them all (the avx2 variants included).
void TestKernelPathNames() {
  for (KernelPath p : {KernelPath::kAuto, KernelPath::kReference, KernelPath::kPortable,
                       KernelPath::kAvx2, KernelPath::kAvx2Direct, KernelPath::kAvx2Winograd,
                       KernelPath::kAvxVnni, KernelPath::kAvx512Vnni, KernelPath::kAmx}) {
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
                           "avx2_winograd", "avxvnni", "avx512vnni", "amx"}) {
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

// Fills g_paths: every supported fast path, or the one TF_FUSED_INT8_CPU_KERNEL
// forces. Returns false (after checking that the refusal is clean) when
// the forced path is refused.
bool SelectPaths() {
  const char* env = std::getenv("TF_FUSED_INT8_CPU_KERNEL");
#if defined(TF_FUSED_INT8_EMULATED_ISAS)
  // core_test_emulated (BUILD): the avxvnni and amx paths alone, their
  // VPDPBUSD and tile instructions emulated (cc/core/cpu/avxvnni_dot.h,
  // amx_tiles.h) where the CPU has AVX2 and AVX-512 VNNI; core_test runs
  // the other paths. None off x86-64.
  if (env == nullptr || env[0] == '\0') {
    for (KernelPath p : {KernelPath::kAvxVnni, KernelPath::kAmx}) {
      if (KernelPathSupported(p)) g_paths.push_back(p);
    }
    return true;
  }
#endif
  if (env == nullptr || env[0] == '\0') {
    for (KernelPath p : kFastPaths) {
      if (KernelPathSupported(p)) g_paths.push_back(p);
    }
    return true;
  }
  g_forced = true;
  KernelPath resolved;
  const std::string err = ResolveKernelPath(KernelPath::kAuto, &resolved);
  if (err.empty()) {
    g_paths.push_back(resolved);
    std::printf("forced CPU kernel: %s (TF_FUSED_INT8_CPU_KERNEL=%s)\n",
                KernelPathName(resolved), env);
    return true;
  }
  // Refused: a call must return the same message and write nothing.
  FusedConvArgs a;
  ConvGeometry& g = a.geo;
  g.batch = 1; g.in_h = 3; g.in_w = 3; g.in_c = 4;
  g.filter_h = g.filter_w = 3; g.out_c = 8;
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty(), "geometry");
  std::vector<int8_t> input(g.InputElements(), 1), filter(g.FilterElements(), 1);
  std::vector<int8_t> out(g.OutputElements(), 77);
  std::vector<float> bias(g.out_c, 0.0f), scale(1, 1.0f);
  a.input = input.data();
  a.filter = filter.data();
  a.bias = bias.data();
  a.conv_input_scale = scale.data();
  a.output = out.data();
  const std::string run_err = RunFusedConv(a, KernelPath::kAuto, ParallelFor());
  EXPECT(run_err == err, "RunFusedConv said '%s', ResolveKernelPath '%s'",
         run_err.c_str(), err.c_str());
  EXPECT(std::all_of(out.begin(), out.end(), [](int8_t v) { return v == 77; }),
         "a refused call wrote output");
  std::printf("forced CPU kernel refused: %s\n", err.c_str());
  return false;
}

int CasesFromEnv() {
  const char* env = std::getenv("TF_FUSED_INT8_CORE_TEST_CASES");
  if (env == nullptr || env[0] == '\0') return 300;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || n < 1 || n > 100000) {
    std::fprintf(stderr, "TF_FUSED_INT8_CORE_TEST_CASES=%s is not a count in [1, 100000]\n",
                 env);
    std::exit(2);
  }
  return static_cast<int>(n);
}

}  // namespace
}  // namespace tf_fused_int8

namespace tf_fused_int8 {
namespace {

// FusedInt8Quantize's core against the one-element reference (std::nearbyint,
// an independent rounding) and against hand-derived values: exact ties
// (power-of-two scales make x / scale exact), the clip edges, NaN / Inf /
// signed zeros / denormals / FLT_MAX, non-power-of-two scales, and lengths
// around the 8192-element work unit under three partitions; on each CPU
// path's vector body (cc/core/cpu/quantize/) and through the default entry.
void TestQuantizeOn(const KernelPath* path) {
  auto quantize = [path](const float* x, int64_t n, float scale, int8_t* q,
                         const ParallelFor& pf) {
    if (path == nullptr) {
      QuantizeFloatToInt8(x, n, scale, q, pf);
    } else {
      QuantizeFloatToInt8(x, n, scale, q, pf, *path);
    }
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Fixed { float x, scale; int want; };
  const Fixed fixed[] = {
      {0.5f, 1.0f, 0},     {1.5f, 1.0f, 2},     {2.5f, 1.0f, 2},
      {-0.5f, 1.0f, 0},    {-1.5f, 1.0f, -2},   {-2.5f, 1.0f, -2},
      {126.5f, 1.0f, 126}, {127.5f, 1.0f, 127}, {-127.5f, 1.0f, -128},
      {-128.5f, 1.0f, -128}, {1000.0f, 1.0f, 127}, {-1000.0f, 1.0f, -128},
      {0.375f, 0.25f, 2},  {0.625f, 0.25f, 2},  {-0.125f, 0.25f, 0},
      {inf, 1.0f, 127},    {-inf, 1.0f, -128},  {nan, 1.0f, 0},
      {-nan, 0.5f, 0},     {0.0f, 1.0f, 0},     {-0.0f, 1.0f, 0},
      {1e-45f, 1.0f, 0},   {-1e-45f, 1e-30f, 0}, {3.4e38f, 1e-3f, 127},
      {-3.4e38f, 1e-3f, -128}, {1e-38f, 1e-40f, 100},
  };
  for (const Fixed& f : fixed) {
    int8_t q = 99;
    quantize(&f.x, 1, f.scale, &q, ParallelFor());
    EXPECT(q == f.want, "quantize(%g / %g) = %d, want %d", f.x, f.scale, q, f.want);
    EXPECT(QuantizeOneReference(f.x, f.scale) == f.want, "reference(%g / %g)", f.x,
           f.scale);
  }
  // Every tie k + 0.5 for k in [-140, 140] at scale 2^-3.
  for (int k = -140; k <= 140; ++k) {
    const float x = (static_cast<float>(k) + 0.5f) * 0.125f;
    int8_t q = 99;
    quantize(&x, 1, 0.125f, &q, ParallelFor());
    const int even = (k % 2 == 0) ? k : k + 1;
    const int want = std::max(-128, std::min(127, even));
    EXPECT(q == want, "tie %d + 0.5: got %d, want %d", k, q, want);
  }
  // The same fixed values and ties in one array, so that the vector bodies
  // (not only the one-element tail) meet each of them.
  {
    std::vector<float> xs;
    std::vector<int> want;
    for (int rep = 0; rep < 3; ++rep) {
      for (const Fixed& f : fixed) {
        if (f.scale != 1.0f) continue;  // one scale per call
        xs.push_back(f.x);
        want.push_back(f.want);
      }
      for (int k = -140; k <= 140; ++k) {
        xs.push_back(static_cast<float>(k) + 0.5f);
        const int even = (k % 2 == 0) ? k : k + 1;
        want.push_back(std::max(-128, std::min(127, even)));
      }
    }
    std::vector<int8_t> q(xs.size(), 99);
    quantize(xs.data(), static_cast<int64_t>(xs.size()), 1.0f, q.data(), ParallelFor());
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT(q[i] == want[i], "vector quantize(%g) = %d, want %d", xs[i], q[i], want[i]);
    }
  }
  std::mt19937 rng(7);
  // 2e38: its reciprocal is below FLT_MIN (the bodies divide throughout).
  const float scales[] = {1.0f / 127.5f, 0.0078125f, 0.0123456f, 3.0f, 1e-20f,
                          0.0312891f, 2e38f};
  const int64_t lengths[] = {0, 1, 7, 15, 31, 33, 63, 64, 65, 127, 8191, 8192, 8193, 3 * 8192 + 5, 100003};
  const ParallelFor pfs[] = {ParallelFor(), ThreadParallelFor(2), OddParallelFor(3)};
  for (float scale : scales) {
    for (int64_t n : lengths) {
      std::vector<float> x(static_cast<size_t>(n));
      std::uniform_real_distribution<float> wide(-140.0f * scale, 140.0f * scale);
      std::uniform_int_distribution<int> pick(0, 15);
      for (int64_t i = 0; i < n; ++i) {
        const int kind = pick(rng);
        // Mostly in range, some exact multiples and ties of the scale, a few
        // specials.
        float v = wide(rng);
        if (kind == 0) v = static_cast<float>(static_cast<int>(v / scale)) * scale;
        if (kind == 1) v = (std::floor(v / scale) + 0.5f) * scale;
        if (kind == 2) v = (i % 3 == 0) ? nan : (i % 3 == 1 ? inf : -inf);
        // Within a few ulps of a tie: where x times the reciprocal and x /
        // scale can round apart (the bodies must divide those).
        if (kind == 3 || kind == 4) {
          v = (std::floor(v / scale) + 0.5f) * scale;
          for (int u = static_cast<int>(i % 4); u >= 0; --u) {
            v = std::nextafter(v, kind == 3 ? inf : -inf);
          }
        }
        x[static_cast<size_t>(i)] = v;
      }
      for (const ParallelFor& pf : pfs) {
        std::vector<int8_t> q(static_cast<size_t>(n) + 1, 99);
        quantize(x.data(), n, scale, q.data(), pf);
        int bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          const size_t u = static_cast<size_t>(i);
          if (q[u] != QuantizeOneReference(x[u], scale) && bad++ < 3) {
            EXPECT(false, "n=%lld scale=%g x[%lld]=%.9g: got %d want %d",
                   static_cast<long long>(n), scale, static_cast<long long>(i), x[u],
                   q[u], QuantizeOneReference(x[u], scale));
          }
        }
        EXPECT(q[static_cast<size_t>(n)] == 99, "wrote past the end (n=%lld)",
               static_cast<long long>(n));
      }
    }
  }
  // Values a few ulps from every tie k + 0.5 (k in [-130, 130]) at 64
  // scales: x times fl(1 / scale) rounds to another integer than x / scale
  // for some of them (counted: the sweep must contain such values, or it
  // could not catch a body that skipped the division), and every one must
  // come out as the division's.
  // k * scale (k in [k0, k1], plus `shift`) and `ulps` float32 values on
  // each side of it, the center itself too where with_center.
  auto around = [&](int k0, int k1, float shift, float scale, int ulps, bool with_center) {
    std::vector<float> x;
    for (int k = k0; k <= k1; ++k) {
      const float center = (static_cast<float>(k) + shift) * scale;
      float up = center, down = center;
      if (with_center) x.push_back(center);
      for (int u = 0; u < ulps; ++u) {
        up = std::nextafter(up, inf);
        down = std::nextafter(down, -inf);
        x.push_back(up);
        x.push_back(down);
      }
    }
    return x;
  };
  // Quantizes x on one thread; every value must come out as the reference's.
  auto expect_reference = [&](const std::vector<float>& x, float scale, const char* what) {
    std::vector<int8_t> q(x.size(), 99);
    quantize(x.data(), static_cast<int64_t>(x.size()), scale, q.data(), ParallelFor());
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const int8_t want = QuantizeOneReference(x[i], scale);
      if (q[i] != want && bad++ < 3) {
        EXPECT(false, "%s: scale=%.9g x=%.9g: got %d want %d", what, scale, x[i], q[i],
               want);
      }
    }
  };
  {
    std::uniform_real_distribution<float> log_scale(-12.0f, 4.0f);
    int64_t apart = 0, checked = 0;
    for (int si = 0; si < 64; ++si) {
      const float scale = std::exp2(log_scale(rng));
      const float recip = 1.0f / scale;
      const std::vector<float> x = around(-130, 130, 0.5f, scale, 6, true);
      expect_reference(x, scale, "near tie");
      for (float v : x) {
        apart += cpu::RoundClipToInt8(v * recip) != QuantizeOneReference(v, scale);
        ++checked;
      }
    }
    EXPECT(apart > 0, "near ties: no value where the product rounds apart (%lld checked)",
           static_cast<long long>(checked));
  }
  // In the directed rounding modes the op still gives the division's result
  // in that mode (the reference rounds with nearbyint in it): the boundaries
  // are then the integers, and values a few ulps from k * scale. The bodies
  // divide there (QuantizeReciprocal returns 0 outside round-to-nearest,
  // where quantize_kernels.h's proof holds); with that guard removed this
  // sweep still passed (a stand-alone run: 3-6% of its products round apart,
  // and the near-boundary compare sends every one of them to the division),
  // so the guard rests on the proof, not on this test. 2048 values a call:
  // whole vectors only (the scalar tail's magic-number rounding,
  // round_int8.h, assumes to-nearest). x86 only: elsewhere (aarch64) every
  // element takes that scalar loop.
#if defined(__SSE2__)
  for (const int mode : {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}) {
    const int saved = std::fegetround();
    std::fesetround(mode);
    std::uniform_real_distribution<float> log_scale(-10.0f, 3.0f);
    for (int si = 0; si < 16; ++si) {
      const float scale = std::exp2(log_scale(rng));
      expect_reference(around(-128, 127, 0.0f, scale, 4, false), scale,
                       mode == FE_UPWARD ? "upward" : mode == FE_DOWNWARD ? "downward"
                                                                          : "toward zero");
    }
    std::fesetround(saved);
  }
#endif
  EXPECT(ValidQuantizeScale(1e-30f) && ValidQuantizeScale(3.0f), "valid scales");
  EXPECT(!ValidQuantizeScale(0.0f) && !ValidQuantizeScale(-1.0f) &&
             !ValidQuantizeScale(inf) && !ValidQuantizeScale(nan),
         "invalid scales");
}

void TestQuantize() {
  TestQuantizeOn(nullptr);
  int paths = 1;
  for (KernelPath p : {KernelPath::kPortable, KernelPath::kAvx2, KernelPath::kAvxVnni,
                       KernelPath::kAvx512Vnni, KernelPath::kNeon}) {
    if (!KernelPathSupported(p)) continue;
    TestQuantizeOn(&p);
    ++paths;
  }
  std::printf("quantize: checked on %d entries\n", paths);
}

// FusedInt8Quantize's preprocessing steps (PreprocessQuantizeFloatToInt8)
// against the one-element reference, which applies each step with plain
// float operations: channel counts 1, 3, 16, 17 and 1000 (blocks of about
// 1024 elements, whole channels), lengths across blocks and work units,
// scalar and per-channel steps of every kind, special values; every path.
void TestPreprocessQuantize() {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> pixel(-20.0f, 280.0f), unit(0.05f, 3.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 0.0f, -0.0f,
                            3.4e38f, -3.4e38f, 255.0f};
  int checked = 0;
  for (int64_t channels : {1, 3, 16, 17, 1000}) {
    std::vector<float> scale_c(channels), mean_c(channels), div_c(channels);
    for (int64_t c = 0; c < channels; ++c) {
      scale_c[c] = unit(rng);
      mean_c[c] = pixel(rng) / 255.0f;
      div_c[c] = unit(rng);
    }
    const float inv255 = 1.0f / 255.0f, zero = 0.0f, half = 0.5f;
    const PreprocessStep steps[] = {
        {PreprocessOp::kMul, &inv255, 1}, {PreprocessOp::kAdd, &zero, 1},
        {PreprocessOp::kSub, mean_c.data(), channels},
        {PreprocessOp::kDiv, div_c.data(), channels},
        {PreprocessOp::kMul, scale_c.data(), channels}, {PreprocessOp::kSub, &half, 1},
        {PreprocessOp::kDiv, &half, 1}, {PreprocessOp::kAdd, mean_c.data(), channels}};
    for (int64_t pixels : {int64_t{1}, int64_t{5}, int64_t{342}, int64_t{3001}}) {
      const int64_t n = pixels * channels;
      std::vector<float> x(n);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = (i % 23 == 0) ? specials[(i / 23) % 8] : pixel(rng);
      }
      for (int64_t num_steps : {1, 4, 8}) {
        std::vector<int8_t> want(n);
        for (int64_t i = 0; i < n; ++i) {
          want[i] = PreprocessQuantizeOneReference(x[i], i % channels, steps, num_steps,
                                                   0.02f);
        }
        for (KernelPath p : {KernelPath::kPortable, KernelPath::kAvx2,
                             KernelPath::kAvxVnni, KernelPath::kAvx512Vnni,
                             KernelPath::kNeon}) {
          if (!KernelPathSupported(p)) continue;
          for (int part = 0; part < 2; ++part) {
            std::vector<int8_t> q(n, 99);
            PreprocessQuantizeFloatToInt8(x.data(), n, channels, steps, num_steps, 0.02f,
                                          q.data(),
                                          part ? OddParallelFor(3) : ParallelFor(), p);
            for (int64_t i = 0; i < n; ++i) {
              if (q[i] != want[i]) {
                EXPECT(false, "preprocess %s C=%lld n=%lld steps=%lld [%lld]: %d, want %d",
                       KernelPathName(p), static_cast<long long>(channels),
                       static_cast<long long>(n), static_cast<long long>(num_steps),
                       static_cast<long long>(i), q[i], want[i]);
                break;
              }
            }
            ++checked;
          }
        }
      }
    }
  }
  std::printf("preprocess quantize: %d runs checked\n", checked);
}

// int8 max pooling: every path (and the default) against the reference
// over a generated sweep of windows, strides, SAME / VALID, zero padding and
// channel counts around the vector widths (16, 32, 64 and tails), inputs
// random or all -128 (so a zero pad cell, 0, must win); plus the geometry
// errors.
// FusedInt8ChannelScale on every path that this CPU runs: fixed cases (ties
// to even, the clip, NaN / Inf multipliers, the plain bound 2^24) and random
// shapes whose channel counts cover the vector tails, with and without
// plain multipliers, against ChannelScaleOneReference; the reference itself
// against the fixed answers.
void TestChannelScale() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Fixed { int x; float m; int want; };
  const Fixed fixed[] = {
      // First, so that every path's vector steps (not its scalar tail)
      // take them: the largest plain multipliers and the smallest that are
      // not.
      {127, 16777215.0f, 127}, {-128, 16777215.0f, -128}, {-128, -16777215.0f, 127},
      {1, 16777216.0f, 127}, {-128, -16777216.0f, 127}, {127, -16777216.0f, -128},
      {1, 0.5f, 0},      {3, 0.5f, 2},      {5, 0.5f, 2},     {-1, 0.5f, 0},
      {-3, 0.5f, -2},    {-5, 0.5f, -2},    {127, 1.0f, 127}, {-128, 1.0f, -128},
      {100, 2.0f, 127},  {-100, 2.0f, -128}, {127, -1.0f, -127}, {-128, -1.0f, 127},
      {7, inf, 127},     {-7, inf, -128},   {0, inf, 0},      {5, nan, 0},
      {0, 0.0f, 0},      {-128, 1e-30f, 0}, {33, 0.25f, 8},   {34, 0.25f, 8},
      {38, 0.25f, 10},   {-127, 3.4e38f, -128},
  };
  std::vector<KernelPath> paths = {KernelPath::kPortable};
  for (KernelPath p : {KernelPath::kAvx2, KernelPath::kAvxVnni,
                       KernelPath::kAvx512Vnni, KernelPath::kNeon}) {
    if (KernelPathSupported(p)) paths.push_back(p);
  }
  int runs = 0;
  for (const Fixed& f : fixed) {
    EXPECT(ChannelScaleOneReference(static_cast<int8_t>(f.x), f.m) == f.want,
           "reference %d * %g", f.x, f.m);
  }
  std::mt19937 rng(31);
  for (KernelPath path : paths) {
    // The fixed cases as one pixel of that many channels (vector lanes);
    // then those with a multiplier of at most 2^24 in magnitude (+-2^24, the
    // first not plain, among them: the only ones of the pixel that are
    // not), then those with a plain one (finite, under 2^24) alone, which
    // the bodies take without their NaN mask and float clip.
    for (const int mode : {0, 1, 2}) {
      std::vector<Fixed> cases;
      for (const Fixed& f : fixed) {
        if (mode == 0 || (mode == 1 && std::fabs(f.m) <= 16777216.0f) ||
            (mode == 2 && std::fabs(f.m) < 16777216.0f)) {
          cases.push_back(f);
        }
      }
      const int64_t c = static_cast<int64_t>(cases.size());
      std::vector<int8_t> x(c), out(c, 99);
      std::vector<float> m(c);
      for (int64_t i = 0; i < c; ++i) {
        x[i] = static_cast<int8_t>(cases[i].x);
        m[i] = cases[i].m;
      }
      ChannelScaleArgs a;
      a.x = x.data(); a.m = m.data(); a.out = out.data();
      a.batch = 1; a.pixels = 1; a.channels = c;
      RunChannelScale(a, ParallelFor(), path);
      for (int64_t i = 0; i < c; ++i) {
        EXPECT(out[i] == cases[i].want, "%s: %d * %g = %d, want %d",
               KernelPathName(path), cases[i].x, cases[i].m, out[i], cases[i].want);
      }
    }
    for (int t = 0; t < 60; ++t) {
      ChannelScaleArgs a;
      a.batch = 1 + rng() % 3;
      a.pixels = 1 + rng() % 9;
      a.channels = 1 + rng() % 200;  // 64- and 32-channel steps, 16 and 8, tails
      std::vector<int8_t> x(a.batch * a.pixels * a.channels);
      std::vector<int8_t> out(x.size(), 99);
      std::vector<float> m(a.batch * a.channels);
      for (auto& v : x) v = static_cast<int8_t>(rng() % 256 - 128);
      // Two of three runs give only finite multipliers under 2^24 in
      // magnitude (the bodies' plain case, channel_scale_kernels.h; their
      // largest, 2^24 - 1, saturates); the others NaN, -Inf and the first
      // magnitude that is not plain (2^24) among them.
      const bool plain = t % 3 != 0;
      for (auto& v : m) {
        const int kind = rng() % 20;
        const float sign = rng() % 2 ? 1.0f : -1.0f;
        if (plain) {
          v = kind == 0 ? sign * 16777215.0f : kind == 1 ? sign * 3e6f
              : kind == 2 ? 0.5f : kind == 3 ? sign * 1.5f
              : static_cast<float>(std::ldexp(double(rng() % 2001) - 1000.0, -9));
        } else {
          v = kind == 0 ? nan : kind == 1 ? -inf : kind == 2 ? 0.5f
              : kind == 3 ? sign * 16777216.0f
              : static_cast<float>(std::ldexp(double(rng() % 2001) - 1000.0, -9));
        }
      }
      a.x = x.data(); a.m = m.data(); a.out = out.data();
      RunChannelScale(a, t % 2 ? ThreadParallelFor(2) : ParallelFor(), path);
      size_t bad = 0;
      for (int64_t n = 0; n < a.batch; ++n) {
        for (int64_t i = 0; i < a.pixels * a.channels; ++i) {
          const int64_t o = n * a.pixels * a.channels + i;
          bad += out[o] != ChannelScaleOneReference(x[o], m[n * a.channels + i % a.channels]);
        }
      }
      EXPECT(bad == 0, "channel scale %s: %zu of %zu differ (n%ld p%ld c%ld)",
             KernelPathName(path), bad, out.size(), long(a.batch), long(a.pixels),
             long(a.channels));
      ++runs;
    }
  }
  std::printf("channel scale: %zu paths, %d runs checked\n", paths.size(), runs);
}

// FusedInt8LayerNorm: every path against LayerNormRowReference, and the
// reference against the real-valued layer norm (within half a step plus
// float32's error). Rows: random, constant (D == 0), extremes, few
// distinct values (exact halves), channel counts around the vector widths
// and up to kLayerNormMaxChannels; gamma / beta with NaN and Inf.
void TestLayerNorm() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<KernelPath> paths = {KernelPath::kPortable};
  for (KernelPath p : {KernelPath::kAvx2, KernelPath::kAvxVnni,
                       KernelPath::kAvx512Vnni, KernelPath::kNeon}) {
    if (KernelPathSupported(p)) paths.push_back(p);
  }
  // Fixed: C = 2, q = (1, -1): D = 2 * 2 - 0 = 4, r = 1 / sqrt(4) = 0.5 with
  // epsilon 0; t = (2, -2), t r = (1, -1).
  {
    const int8_t x[2] = {1, -1};
    const float g[2] = {2.5f, 3.5f}, b[2] = {0.0f, 0.0f};
    int8_t o[2];
    LayerNormRowReference(x, 2, g, b, 0.0f, o);
    EXPECT(o[0] == 2 && o[1] == -4, "layer norm reference (1, -1): %d %d", o[0], o[1]);
    // D == 0: r = 0, so beta rounded; an Inf gamma then gives 0 * Inf = NaN,
    // which is 0.
    const int8_t k[3] = {-7, -7, -7};
    const float g3[3] = {100.0f, nan, inf}, b3[3] = {2.5f, -3.5f, 200.0f};
    int8_t o3[3];
    LayerNormRowReference(k, 3, g3, b3, 0.0f, o3);
    EXPECT(o3[0] == 2 && o3[1] == 0 && o3[2] == 0,
           "layer norm reference constant row: %d %d %d", o3[0], o3[1], o3[2]);
  }
  std::mt19937 rng(37);
  const int64_t counts[] = {1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65,
                            96, 100, 127, 128, 129, 192, 384, 768, 1000};
  int runs = 0;
  double worst = 0.0;
  for (int t = 0; t < 160; ++t) {
    LayerNormArgs a;
    a.rows = 1 + rng() % 7;
    a.channels = t == 0 ? kLayerNormMaxChannels : t == 1 ? 4099 : counts[rng() % 24];
    const int kind = t % 6;
    std::vector<int8_t> x(a.rows * a.channels);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = kind == 1 ? static_cast<int8_t>(rng() % 3 - 1)         // few values
             : kind == 2 ? static_cast<int8_t>(i % 2 ? 127 : -128)  // extremes
             : kind == 3 ? static_cast<int8_t>(-128)                 // D == 0
             : static_cast<int8_t>(rng() % 256 - 128);
    }
    if (kind == 4) {  // one constant row among random ones
      for (int64_t c = 0; c < a.channels; ++c) x[c] = 55;
    }
    std::vector<float> g(a.channels), b(a.channels);
    const bool special = t % 7 == 5;
    for (int64_t c = 0; c < a.channels; ++c) {
      g[c] = static_cast<float>(std::ldexp(double(rng() % 4001) - 2000.0, -6));
      b[c] = static_cast<float>(std::ldexp(double(rng() % 4001) - 2000.0, -5));
      if (special && c % 5 == 0) g[c] = c % 3 ? nan : -inf;
      if (special && c % 5 == 1) b[c] = c % 3 ? inf : nan;
    }
    const float eps[] = {0.0f, 1e-6f, 0.25f, 3.0f, 1e6f};
    a.epsilon = eps[t % 5];
    a.x = x.data(); a.gamma = g.data(); a.beta = b.data();
    std::vector<int8_t> want(x.size());
    for (int64_t row = 0; row < a.rows; ++row) {
      LayerNormRowReference(x.data() + row * a.channels, a.channels, g.data(), b.data(),
                            a.epsilon, want.data() + row * a.channels);
      if (special) continue;
      // The reference against the layer norm in long double.
      long double mean = 0, var = 0;
      for (int64_t c = 0; c < a.channels; ++c) mean += x[row * a.channels + c];
      mean /= a.channels;
      for (int64_t c = 0; c < a.channels; ++c) {
        const long double d = x[row * a.channels + c] - mean;
        var += d * d;
      }
      var /= a.channels;
      for (int64_t c = 0; c < a.channels; ++c) {
        const long double d = x[row * a.channels + c] - mean;
        long double y = var == 0 ? (long double)b[c]
                        : d / std::sqrt(var + (long double)a.epsilon) * g[c] + b[c];
        y = std::max<long double>(-128, std::min<long double>(127, y));
        const double err = std::fabs(double(want[row * a.channels + c] - y)) -
                           0.5 - 1e-5 * (std::fabs(double(y)) + std::fabs(g[c]) * 256);
        worst = std::max(worst, err);
      }
    }
    for (KernelPath path : paths) {
      std::vector<int8_t> out(x.size(), 99);
      a.out = out.data();
      RunLayerNorm(a, t % 2 ? ThreadParallelFor(2) : ParallelFor(), path);
      size_t bad = 0, first = out.size();
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i] != want[i]) {
          ++bad;
          first = std::min(first, i);
        }
      }
      EXPECT(bad == 0, "layer norm %s: %zu of %zu differ (rows %ld, C %ld, eps %g; "
             "first at %zu: %d, want %d)", KernelPathName(path), bad, out.size(),
             long(a.rows), long(a.channels), a.epsilon, first,
             bad ? out[first] : 0, bad ? want[first] : 0);
      ++runs;
    }
  }
  EXPECT(worst <= 0.0, "layer norm reference is %g past half a step of the real value", worst);
  std::printf("layer norm: %zu paths, %d runs checked\n", paths.size(), runs);
}

// The two poolings' test harness (TestMaxPool, TestAvgPool).
using PoolDefaultFn = void (*)(const int8_t*, const PoolGeometry&, int8_t*,
                               const ParallelFor&);
using PoolOnPathFn = void (*)(const int8_t*, const PoolGeometry&, int8_t*,
                              const ParallelFor&, KernelPath);

// Sweep iteration `it`'s random geometry (batch 1-2, 1-9 x 1-9, a channel
// count from the list, windows 1-4, strides 1-3, zero padding every third
// iteration, SAME on odd iterations). False when VALID's window does not fit.
template <size_t kCounts>
bool RandomPoolGeometry(std::mt19937& rng, int it, const int64_t (&channel_counts)[kCounts],
                        PoolGeometry* g, Padding* padding) {
  *g = PoolGeometry();
  g->batch = 1 + it % 2;
  g->in_h = 1 + rng() % 9;
  g->in_w = 1 + rng() % 9;
  g->channels = channel_counts[rng() % kCounts];
  g->window_h = 1 + rng() % 4;
  g->window_w = 1 + rng() % 4;
  g->stride_h = 1 + rng() % 3;
  g->stride_w = 1 + rng() % 3;
  if (it % 3 == 0) {
    g->zero_top = rng() % 3; g->zero_bottom = rng() % 3;
    g->zero_left = rng() % 3; g->zero_right = rng() % 3;
  }
  *padding = it % 2 ? Padding::kSame : Padding::kValid;
  return ComputePoolGeometry(*padding, g).empty();
}

// Runs a pooling on the default path, every fast path this CPU has and the
// first it lacks (the portable loop), on 1 and 3 threads, each against
// `want`; returns the number of runs.
int CheckPoolOnEveryPath(const char* pooling, PoolDefaultFn pool, PoolOnPathFn pool_on_path,
                         const PoolGeometry& g, const std::vector<int8_t>& x,
                         const std::vector<int8_t>& want, const char* what) {
  int runs = 0;
  auto check = [&](const KernelPath* path, const char* name) {
    for (int threads : {1, 3}) {
      // 64 guard bytes past the output: a store past the last pixel's
      // channels (a vector tail one byte too wide) changes them.
      constexpr size_t kGuard = 64;
      std::vector<int8_t> got(want.size() + kGuard, 55);
      if (path == nullptr) {
        pool(x.data(), g, got.data(), ThreadParallelFor(threads));
      } else {
        pool_on_path(x.data(), g, got.data(), ThreadParallelFor(threads), *path);
      }
      size_t guard_bad = 0;
      for (size_t i = want.size(); i < got.size(); ++i) guard_bad += got[i] != 55;
      EXPECT(guard_bad == 0, "%s pool %s (%s), %d threads: %zu bytes past the output written",
             pooling, name, what, threads, guard_bad);
      got.resize(want.size());
      size_t bad = 0;
      while (bad < got.size() && got[bad] == want[bad]) ++bad;
      EXPECT(bad == got.size(),
             "%s pool %s (%s), %d threads: %lldx%lldx%lldx%lld window %lldx%lld stride "
             "%lldx%lld zeros %lld,%lld,%lld,%lld: byte %zu got %d want %d",
             pooling, name, what, threads, (long long)g.batch, (long long)g.in_h,
             (long long)g.in_w, (long long)g.channels, (long long)g.window_h,
             (long long)g.window_w, (long long)g.stride_h, (long long)g.stride_w,
             (long long)g.zero_top, (long long)g.zero_bottom, (long long)g.zero_left,
             (long long)g.zero_right, bad, bad < got.size() ? got[bad] : 0,
             bad < got.size() ? want[bad] : 0);
      ++runs;
    }
  };
  check(nullptr, "default");
  for (KernelPath p : kFastPaths) {
    if (KernelPathSupported(p)) check(&p, KernelPathName(p));
  }
  for (KernelPath p : kFastPaths) {
    if (!KernelPathSupported(p)) { check(&p, KernelPathName(p)); break; }
  }
  return runs;
}

void TestMaxPool() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> u8(-128, 127);
  int runs = 0;
  const int64_t channel_counts[] = {1, 3, 16, 31, 32, 33, 64, 65, 100, 128, 130};
  for (int it = 0; it < 400; ++it) {
    PoolGeometry g;
    Padding padding;
    if (!RandomPoolGeometry(rng, it, channel_counts, &g, &padding)) continue;
    std::vector<int8_t> x(static_cast<size_t>(g.InputElements()));
    const bool lowest = it % 5 == 0;
    for (auto& v : x) v = static_cast<int8_t>(lowest ? -128 : u8(rng));
    std::vector<int8_t> want(static_cast<size_t>(g.OutputElements()));
    MaxPoolInt8Reference(x.data(), g, want.data());
    runs += CheckPoolOnEveryPath("max", MaxPoolInt8, MaxPoolInt8, g, x, want,
                                 padding == Padding::kSame ? "SAME" : "VALID");
  }
  // ResNet50's stem pool, zero padding 1 then VALID 3x3 / 2, all -128: the
  // windows of the first output row and column hold a zero cell; those of
  // the last ones (X' cells 110..112 of 0..113) do not.
  {
    PoolGeometry g;
    g.batch = 1; g.in_h = g.in_w = 112; g.channels = 64;
    g.window_h = g.window_w = 3; g.stride_h = g.stride_w = 2;
    g.zero_top = g.zero_bottom = g.zero_left = g.zero_right = 1;
    EXPECT(ComputePoolGeometry(Padding::kValid, &g).empty(), "stem geometry");
    EXPECT(g.out_h == 56 && g.out_w == 56, "stem output %lldx%lld",
           (long long)g.out_h, (long long)g.out_w);
    std::vector<int8_t> x(static_cast<size_t>(g.InputElements()), -128);
    std::vector<int8_t> got(static_cast<size_t>(g.OutputElements()), 1);
    MaxPoolInt8(x.data(), g, got.data(), ThreadParallelFor(2));
    EXPECT(got[0] == 0 && got[30 * 64] == 0 && got[30 * 56 * 64 + 63] == 0 &&
               got[(55 * 56 + 55) * 64] == -128 && got[(1 * 56 + 1) * 64] == -128,
           "stem borders: %d %d %d %d %d", got[0], got[30 * 64], got[30 * 56 * 64 + 63],
           got[(55 * 56 + 55) * 64], got[(1 * 56 + 1) * 64]);
    ++runs;
  }
  // SAME ignores its padding cells: all -128 stays -128 everywhere.
  {
    PoolGeometry g;
    g.batch = 1; g.in_h = g.in_w = 5; g.channels = 8;
    g.window_h = g.window_w = 3; g.stride_h = g.stride_w = 2;
    EXPECT(ComputePoolGeometry(Padding::kSame, &g).empty(), "same geometry");
    std::vector<int8_t> x(static_cast<size_t>(g.InputElements()), -128);
    std::vector<int8_t> got(static_cast<size_t>(g.OutputElements()), 1);
    MaxPoolInt8(x.data(), g, got.data(), ThreadParallelFor(1));
    EXPECT(std::all_of(got.begin(), got.end(), [](int8_t v) { return v == -128; }),
           "SAME pads are ignored, not zeros");
  }
  // Geometry errors name the argument.
  auto error = [](PoolGeometry g, Padding p) { return ComputePoolGeometry(p, &g); };
  PoolGeometry ok;
  ok.batch = 1; ok.in_h = ok.in_w = 4; ok.channels = 2; ok.window_h = ok.window_w = 2;
  EXPECT(error(ok, Padding::kValid).empty(), "valid geometry");
  PoolGeometry bad = ok; bad.window_h = 0;
  EXPECT(error(bad, Padding::kValid).find("window height") != std::string::npos, "window 0");
  bad = ok; bad.stride_w = 0;
  EXPECT(error(bad, Padding::kSame).find("stride width") != std::string::npos, "stride 0");
  bad = ok; bad.zero_left = -1;
  EXPECT(error(bad, Padding::kSame).find("zero padding left") != std::string::npos, "negative pad");
  bad = ok; bad.window_w = 5;
  EXPECT(error(bad, Padding::kValid).find("smaller than the window width") != std::string::npos,
         "VALID window too large");
  bad.zero_right = 1;
  EXPECT(error(bad, Padding::kValid).empty(), "zero padding makes the window fit");
  bad = ok; bad.channels = -3;
  EXPECT(error(bad, Padding::kValid).find("channels") != std::string::npos, "negative channels");
  bad = ok; bad.batch = int64_t{1} << 31;
  EXPECT(error(bad, Padding::kValid).find("batch") != std::string::npos, "huge batch");
  bad = ok; bad.in_h = bad.in_w = bad.channels = bad.batch = (int64_t{1} << 31) - 1;
  EXPECT(error(bad, Padding::kValid).find("2^62") != std::string::npos, "element count overflow");
  EXPECT(error(ok, Padding::kExplicit).find("SAME or VALID") != std::string::npos, "explicit");
  std::printf("max pool: %d runs checked\n", runs);
}

// Each average body this CPU runs against the exact rational rounding
// (RoundedQuotient) for every divisor 1-255 (the vector bodies' range;
// AvgPoolReciprocalExact's multiply where D is odd or a power of two, the
// division elsewhere): 8 cells or fewer (the rest of D as zero padding),
// 80 channels (a whole vector and a tail), channel sums on every tie k * D
// + D / 2 in range and one either side, the extremes and random sums.
void TestAvgPoolBodies() {
  std::vector<std::pair<const char*, cpu::AvgPoolBody>> bodies;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) bodies.emplace_back("avx2", cpu::AvgPoolAvx2);
  if (__builtin_cpu_supports("avx512bw")) bodies.emplace_back("avx512", cpu::AvgPoolAvx512);
#endif
  std::mt19937 rng(91);
  constexpr int64_t kChannels = 80;
  int runs = 0;
  for (const auto& body : bodies) {
    for (int64_t d = 1; d <= cpu::kAvgPoolVectorMaxCells; ++d) {
      const int64_t count = std::min<int64_t>(d, 8);
      const int64_t lo = -128 * count, hi = 127 * count;
      // Target sums: ties and their neighbours, then the extremes and
      // random ones, kChannels per call.
      std::vector<int64_t> sums;
      for (int64_t k = lo / d - 1; k <= hi / d + 1; ++k) {
        for (int64_t t : {k * d + d / 2 - 1, k * d + d / 2, k * d + d / 2 + 1, k * d}) {
          if (t >= lo && t <= hi) sums.push_back(t);
        }
      }
      sums.push_back(lo);
      sums.push_back(hi);
      while (sums.size() % kChannels != 0) {
        sums.push_back(std::uniform_int_distribution<int64_t>(lo, hi)(rng));
      }
      for (size_t first = 0; first < sums.size(); first += kChannels) {
        std::vector<std::vector<int8_t>> cells(static_cast<size_t>(count),
                                               std::vector<int8_t>(kChannels));
        std::vector<int8_t> want(kChannels), got(kChannels, 99);
        for (int64_t c = 0; c < kChannels; ++c) {
          // Cells summing to the target: each within [-128, 127].
          int64_t left = sums[first + c];
          // left / (cells left), truncated, keeps the rest within the
          // remaining cells' range.
          for (int64_t j = 0; j < count; ++j) {
            const int64_t cell = left / (count - j);
            cells[j][c] = static_cast<int8_t>(cell);
            left -= cell;
          }
          EXPECT(left == 0, "avg body test: sum %ld not made of %ld cells",
                 long(sums[first + c]), long(count));
          want[c] = static_cast<int8_t>(cpu::RoundedQuotient(sums[first + c], d));
        }
        std::vector<const int8_t*> rows;
        for (const auto& r : cells) rows.push_back(r.data());
        body.second(rows.data(), count, d, kChannels, got.data());
        EXPECT(got == want, "avg body %s divisor %ld cells %ld: differs", body.first, long(d),
               long(count));
        ++runs;
      }
    }
  }
  std::printf("average pooling bodies: %d runs checked\n", runs);
}

void TestAvgPool() {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> u8(-128, 127);
  int runs = 0;
  const int64_t channel_counts[] = {1, 3, 16, 31, 32, 33, 63, 64, 65, 100, 128, 130, 192};
  auto check_all = [&](const PoolGeometry& g, const std::vector<int8_t>& x, const char* what) {
    std::vector<int8_t> want(static_cast<size_t>(g.OutputElements()));
    AvgPoolInt8Reference(x.data(), g, want.data());
    runs += CheckPoolOnEveryPath("avg", AvgPoolInt8, AvgPoolInt8, g, x, want, what);
  };
  for (int it = 0; it < 400; ++it) {
    PoolGeometry g;
    Padding padding;
    if (!RandomPoolGeometry(rng, it, channel_counts, &g, &padding)) continue;
    std::vector<int8_t> x(static_cast<size_t>(g.InputElements()));
    // Extremes (every window's sum at its bound), small values (many ties:
    // halves and quarters of odd sums), full range.
    const int kind = it % 5;
    std::uniform_int_distribution<int> small(-3, 3);
    for (auto& v : x) {
      v = static_cast<int8_t>(kind == 0 ? -128 : kind == 1 ? 127 : kind == 2 ? small(rng) : u8(rng));
    }
    check_all(g, x, "sweep");
  }
  // Ties both ways, against hand-computed values (the sweep's small values
  // make ties of every even divisor; the reference is checked here).
  {
    PoolGeometry g;
    g.batch = 1; g.in_h = 1; g.in_w = 2; g.channels = 8;
    g.window_h = 1; g.window_w = 2; g.stride_h = g.stride_w = 1;
    EXPECT(ComputePoolGeometry(Padding::kValid, &g).empty(), "pair geometry");
    // Channel c: cells (a, b) with a + b = 1, 3, -1, -3, 5, -5, 254, -255:
    // halves 0.5, 1.5, -0.5, -1.5, 2.5, -2.5 to even, 127, -127.5 to -128.
    const int a[8] = {0, 1, 0, -1, 2, -2, 127, -128};
    const int b[8] = {1, 2, -1, -2, 3, -3, 127, -127};
    const int8_t want[8] = {0, 2, 0, -2, 2, -2, 127, -128};
    std::vector<int8_t> x(16);
    for (int c = 0; c < 8; ++c) { x[c] = static_cast<int8_t>(a[c]); x[8 + c] = static_cast<int8_t>(b[c]); }
    std::vector<int8_t> ref(8);
    AvgPoolInt8Reference(x.data(), g, ref.data());
    for (int c = 0; c < 8; ++c) {
      EXPECT(ref[c] == want[c], "reference tie channel %d: got %d want %d", c, ref[c], want[c]);
    }
    check_all(g, x, "ties");
  }
  // InceptionV3's pooling branch: 3x3 / 1 SAME over 35x35x192 and 17x17x768
  // (border windows of 4 and 6 cells), two images.
  for (int64_t size : {35, 17, 8}) {
    PoolGeometry g;
    g.batch = 2; g.in_h = g.in_w = size; g.channels = size == 35 ? 192 : size == 17 ? 768 : 1280;
    g.window_h = g.window_w = 3; g.stride_h = g.stride_w = 1;
    EXPECT(ComputePoolGeometry(Padding::kSame, &g).empty(), "inception geometry");
    std::vector<int8_t> x(static_cast<size_t>(g.InputElements()));
    for (auto& v : x) v = static_cast<int8_t>(u8(rng));
    check_all(g, x, "inception");
  }
  // NASNet's pooling branches, 3x3 / 1 SAME over 11 to 88 channels: the
  // interior of each row in one body call (pool.cc PoolRows' flat), its
  // borders pixel by pixel; two images, rows 1 to 3 pixels wide too.
  for (int64_t ch : {11, 22, 44, 88}) {
    for (int64_t w : {1, 2, 3, 28}) {
      PoolGeometry g;
      g.batch = 2; g.in_h = 5; g.in_w = w; g.channels = ch;
      g.window_h = g.window_w = 3; g.stride_h = g.stride_w = 1;
      EXPECT(ComputePoolGeometry(Padding::kSame, &g).empty(), "nasnet geometry");
      std::vector<int8_t> x(static_cast<size_t>(g.InputElements()));
      for (auto& v : x) v = static_cast<int8_t>(u8(rng));
      check_all(g, x, "nasnet");
    }
  }
  // Windows past kAvgPoolVectorMaxCells (the exact int64 loop on every
  // path): 16x17 = 272 cells, all 127 and all -128 (sums past int16); at
  // stride 3 across, and at stride 1 (the exact loop over a row's interior
  // as one call).
  for (int v : {127, -128, 0, 1}) {
    PoolGeometry g;
    g.batch = 1; g.in_h = 18; g.in_w = 20; g.channels = 70;
    g.window_h = 16; g.window_w = 17; g.stride_h = 2; g.stride_w = v == 1 ? 1 : 3;
    if (v == 1) g.channels = 13;
    EXPECT(ComputePoolGeometry(Padding::kSame, &g).empty(), "large window geometry");
    std::vector<int8_t> x(static_cast<size_t>(g.InputElements()), static_cast<int8_t>(v));
    if (v == 0 || v == 1) for (auto& e : x) e = static_cast<int8_t>(u8(rng));
    check_all(g, x, "large window");
    if (v != 0 && v != 1) {
      std::vector<int8_t> got(static_cast<size_t>(g.OutputElements()), 1);
      AvgPoolInt8(x.data(), g, got.data(), ThreadParallelFor(1));
      EXPECT(std::all_of(got.begin(), got.end(), [v](int8_t e) { return e == v; }),
             "constant %d averages to itself", v);
    }
  }
  // Zero padding counts as zeros, SAME's padding does not: a 1x1 input of
  // 100 with one zero on each side, VALID 3x3 -> 100 / 9 = 11.1 -> 11; the
  // same without zeros, SAME 3x3 -> 100.
  {
    PoolGeometry g;
    g.batch = 1; g.in_h = g.in_w = 1; g.channels = 1;
    g.window_h = g.window_w = 3;
    g.zero_top = g.zero_bottom = g.zero_left = g.zero_right = 1;
    EXPECT(ComputePoolGeometry(Padding::kValid, &g).empty(), "zeros geometry");
    const int8_t x = 100;
    int8_t got = 0;
    AvgPoolInt8(&x, g, &got, ThreadParallelFor(1));
    EXPECT(got == 11, "zero padding cells count: got %d", got);
    PoolGeometry s;
    s.batch = 1; s.in_h = s.in_w = 1; s.channels = 1; s.window_h = s.window_w = 3;
    EXPECT(ComputePoolGeometry(Padding::kSame, &s).empty(), "same geometry");
    AvgPoolInt8(&x, s, &got, ThreadParallelFor(1));
    EXPECT(got == 100, "SAME padding cells do not count: got %d", got);
  }
  std::printf("avg pool: %d runs checked\n", runs);
}

}  // namespace
}  // namespace tf_fused_int8

// The benchmark's memory limit (peak.h): the copy loop reads every source
// chunk in proportion to the destination chunks and stores what it read (a
// scalar model of its four XOR accumulators), and MeasureCopyGBps turns bad
// sizes away.
void TestCopyLoop() {
  using namespace tf_fused_int8;  // NOLINT
  EXPECT(cpu::MeasureCopyGBps(0, 256, 1, 0.001) == -1.0, "empty source");
  EXPECT(cpu::MeasureCopyGBps(256, (int64_t{4} << 30) + 1, 1, 0.001) == -1.0,
         "huge destination");
#if defined(__x86_64__)
  if (!KernelPathSupported(KernelPath::kAvx2)) {
    EXPECT(cpu::MeasureCopyGBps(256, 256, 1, 0.001) == -2.0, "no AVX2");
    return;
  }
  std::mt19937 rng(5);
  const int64_t shapes[][2] = {{4, 2}, {2, 4}, {3, 3}, {7, 3}, {1, 5}, {9, 1}};
  for (const auto& sh : shapes) {
    const int64_t ns = sh[0], nd = sh[1];
    std::unique_ptr<uint8_t, decltype(&std::free)> src(
        static_cast<uint8_t*>(std::aligned_alloc(64, 256 * ns)), &std::free);
    std::unique_ptr<uint8_t, decltype(&std::free)> dst(
        static_cast<uint8_t*>(std::aligned_alloc(64, 256 * nd)), &std::free);
    for (int64_t i = 0; i < 256 * ns; ++i) src.get()[i] = static_cast<uint8_t>(rng());
    cpu::CopyChunksYmm(src.get(), ns, dst.get(), nd);
    uint8_t acc[4][32] = {};
    int64_t read = 0;
    bool ok = true;
    for (int64_t j = 0; j < nd; ++j) {
      for (; read < (j + 1) * ns / nd; ++read) {
        for (int v = 0; v < 8; ++v) {
          for (int b = 0; b < 32; ++b) acc[v % 4][b] ^= src.get()[256 * read + 32 * v + b];
        }
      }
      for (int v = 0; v < 8; ++v) {
        ok &= std::memcmp(dst.get() + 256 * j + 32 * v, acc[v % 4], 32) == 0;
      }
    }
    EXPECT(ok && read == ns, "copy loop %lld -> %lld chunks", static_cast<long long>(ns),
           static_cast<long long>(nd));
  }
  for (int threads : {1, 2}) {
    const double gbps = cpu::MeasureCopyGBps(100000, 25000, threads, 0.002);
    EXPECT(gbps > 0.1 && gbps < 1e5, "copy GB/s %g on %d threads", gbps, threads);
  }
#endif
}

// ConcatLastDim against a plain per-byte copy: piece widths around the
// copy's size classes (0, 1-3 bytes, the 4- and 8-byte pairs, 16-byte
// chunks with an overlapping last one, memcpy past 256), one to five
// pieces, one row and many, each parallel-for; guard bytes around the
// output catch a write outside it.
void TestConcat() {
  using namespace tf_fused_int8;  // NOLINT
  std::mt19937 rng(11);
  const int64_t kWidths[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 44, 64, 100,
                             255, 256, 257, 300};
  const int64_t kRows[] = {1, 2, 5, 37, 300};
  const ParallelFor pfs[] = {ParallelFor(), ThreadParallelFor(2), OddParallelFor(3)};
  constexpr int64_t kGuard = 64;
  int failures = 0, cases = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t count = 1 + trial % 5;
    const int64_t rows = kRows[(trial / 5) % 5];
    std::vector<int64_t> widths(count);
    int64_t total = 0;
    for (auto& w : widths) {
      w = kWidths[rng() % (sizeof(kWidths) / sizeof(kWidths[0]))];
      total += w;
    }
    std::vector<std::vector<int8_t>> in(count);
    std::vector<const int8_t*> ptrs(count);
    for (int64_t i = 0; i < count; ++i) {
      in[i].resize(static_cast<size_t>(rows * widths[i]));
      for (auto& b : in[i]) b = static_cast<int8_t>(rng());
      ptrs[i] = in[i].data();
    }
    std::vector<int8_t> want(static_cast<size_t>(rows * total));
    for (int64_t r = 0, off = 0; r < rows; ++r) {
      for (int64_t i = 0; i < count; ++i) {
        for (int64_t j = 0; j < widths[i]; ++j) want[off++] = in[i][r * widths[i] + j];
      }
    }
    const ParallelFor& pf = pfs[trial % 3];
    std::vector<int8_t> got(static_cast<size_t>(rows * total + 2 * kGuard), int8_t{0x5a});
    ConcatLastDim(ptrs.data(), widths.data(), count, rows, got.data() + kGuard, pf);
    // (want.data() may be null when empty: memcmp's pointers must not be.)
    bool ok = want.empty() || std::memcmp(got.data() + kGuard, want.data(), want.size()) == 0;
    for (int64_t g = 0; g < kGuard; ++g) {
      ok &= got[g] == 0x5a && got[got.size() - 1 - g] == 0x5a;
    }
    ++cases;
    if (!ok) ++failures;
    EXPECT(ok, "concat of %lld pieces (first width %lld, total %lld) over %lld rows",
           static_cast<long long>(count), static_cast<long long>(widths[0]),
           static_cast<long long>(total), static_cast<long long>(rows));
  }
  std::printf("concat: %d cases, %d failures\n", cases, failures);
}

// DepthToSpaceNhwc against TF's definition (with bh x bw blocks) as a
// per-element loop: blocks 1-4 each way, pieces (bw * c bytes) across the
// copy's size classes (a few bytes, 16-byte chunks, memcpy past 256), one
// to three images, each parallel-for; guard bytes around the output catch
// a write outside it.
void TestDepthToSpace() {
  using namespace tf_fused_int8;  // NOLINT
  std::mt19937 rng(17);
  const int64_t kChannels[] = {1, 2, 3, 5, 8, 16, 33, 64, 100, 129};
  const ParallelFor pfs[] = {ParallelFor(), ThreadParallelFor(2), OddParallelFor(3)};
  constexpr int64_t kGuard = 64;
  int cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t batch = 1 + trial % 3, bh = 1 + (trial / 3) % 4, bw = 1 + (trial / 12) % 4;
    const int64_t h = 1 + rng() % 6, w = 1 + rng() % 7;
    const int64_t c = kChannels[rng() % (sizeof(kChannels) / sizeof(kChannels[0]))];
    const int64_t depth = bh * bw * c;
    std::vector<int8_t> in(static_cast<size_t>(batch * h * w * depth));
    for (auto& b : in) b = static_cast<int8_t>(rng());
    std::vector<int8_t> want(in.size());
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t y = 0; y < h * bh; ++y) {
        for (int64_t x = 0; x < w * bw; ++x) {
          for (int64_t k = 0; k < c; ++k) {
            const int64_t src = ((n * h + y / bh) * w + x / bw) * depth +
                                ((y % bh) * bw + x % bw) * c + k;
            want[((n * h * bh + y) * w * bw + x) * c + k] = in[src];
          }
        }
      }
    }
    std::vector<int8_t> got(in.size() + 2 * kGuard, int8_t{0x5a});
    DepthToSpaceNhwc(in.data(), batch, h, w, c, bh, bw, got.data() + kGuard, pfs[trial % 3]);
    bool ok = std::memcmp(got.data() + kGuard, want.data(), want.size()) == 0;
    for (int64_t g = 0; g < kGuard; ++g) {
      ok &= got[g] == 0x5a && got[got.size() - 1 - g] == 0x5a;
    }
    ++cases;
    EXPECT(ok, "depth_to_space %lldx%lldx%lldx%lld block %lldx%lld",
           static_cast<long long>(batch), static_cast<long long>(h), static_cast<long long>(w),
           static_cast<long long>(depth), static_cast<long long>(bh), static_cast<long long>(bw));
  }
  std::printf("depth_to_space: %d cases\n", cases);
}

// PadCropNhwc against a plain per-element loop: pads and crops of each side
// (negative pads crop), crops past the whole input (an all-zero output of
// its own size), 1-37 channels, each parallel-for; guard bytes around the
// output catch a write outside it.
void TestPadCrop() {
  using namespace tf_fused_int8;  // NOLINT
  std::mt19937 rng(13);
  const ParallelFor pfs[] = {ParallelFor(), ThreadParallelFor(2), OddParallelFor(3)};
  constexpr int64_t kGuard = 64;
  int cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t batch = 1 + trial % 3, h = 1 + rng() % 9, w = 1 + rng() % 9;
    const int64_t c = 1 + rng() % 37;
    int64_t pads[4];
    for (auto& p : pads) p = static_cast<int64_t>(rng() % 7) - 3;
    if (trial % 10 == 0) pads[2] = -static_cast<int64_t>(w) - 2;  // left crop past the input
    if (trial % 10 == 1) pads[0] = static_cast<int64_t>(h) + 1;   // all the rows padding
    const int64_t oh = h + pads[0] + pads[1], ow = w + pads[2] + pads[3];
    if (oh < 0 || ow < 0) continue;
    std::vector<int8_t> in(static_cast<size_t>(batch * h * w * c));
    for (auto& b : in) b = static_cast<int8_t>(rng());
    std::vector<int8_t> want(static_cast<size_t>(batch * oh * ow * c), 0);
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          const int64_t iy = y - pads[0], ix = x - pads[2];
          if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
          for (int64_t k = 0; k < c; ++k) {
            want[((n * oh + y) * ow + x) * c + k] = in[((n * h + iy) * w + ix) * c + k];
          }
        }
      }
    }
    std::vector<int8_t> got(want.size() + 2 * kGuard, int8_t{0x5a});
    PadCropNhwc(in.data(), batch, h, w, c, pads, got.data() + kGuard, pfs[trial % 3]);
    bool ok = want.empty() || std::memcmp(got.data() + kGuard, want.data(), want.size()) == 0;
    for (int64_t g = 0; g < kGuard; ++g) ok &= got[g] == 0x5a && got[got.size() - 1 - g] == 0x5a;
    ++cases;
    EXPECT(ok, "pad/crop %lldx%lldx%lldx%lld by (%lld, %lld, %lld, %lld)",
           static_cast<long long>(batch), static_cast<long long>(h), static_cast<long long>(w),
           static_cast<long long>(c), static_cast<long long>(pads[0]),
           static_cast<long long>(pads[1]), static_cast<long long>(pads[2]),
           static_cast<long long>(pads[3]));
  }
  EXPECT(cases > 200, "pad/crop cases %d", cases);
  std::printf("pad/crop: %d cases\n", cases);
}

// RunTransposedConv against the sub-pixel convolution it replaces: the
// reference kernel on the whole sub-pixel filter (zeros outside each
// phase's box), then TF's depth-to-space and the crop as per-element
// loops. Blocks 1-3 each way, 1-3 filter taps, boxes anywhere inside the
// filter that the padding allows (the plans quantize_model makes, and
// others), every crop size, scalar and per-channel scales, Relu and bounds,
// every path under test with three parallel-fors; guard bytes around the
// output. Then its errors.
void TestTransposedConv() {
  using namespace tf_fused_int8;  // NOLINT
  std::mt19937 rng(31);
  auto uni = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t kChannels[] = {1, 2, 3, 8, 16, 17, 32, 64};
  const ParallelFor pfs[] = {ParallelFor(), ThreadParallelFor(2), OddParallelFor(3)};
  constexpr int64_t kGuard = 64;
  int cases = 0;
  for (int trial = 0; trial < 120; ++trial) {
    TransposedConvPhases p;
    p.block_h = uni(1, 3);
    p.block_w = uni(1, 3);
    FusedConvArgs a;
    ConvGeometry& g = a.geo;
    g.batch = uni(1, 2);
    g.in_h = uni(1, 7);
    g.in_w = uni(1, 7);
    g.in_c = kChannels[uni(0, 7)];
    g.filter_h = uni(1, 3);
    g.filter_w = uni(1, 3);
    g.out_c = p.Phases() * kChannels[uni(0, 5)];
    g.pad_top = g.filter_h - 1 + uni(0, 1);
    g.pad_bottom = g.filter_h - 1 + uni(0, 2);
    g.pad_left = g.filter_w - 1 + uni(0, 1);
    g.pad_right = g.filter_w - 1 + uni(0, 2);
    std::string err = ComputeGeometry(Padding::kExplicit, &g);
    EXPECT(err.empty(), "%s", err.c_str());
    // Boxes: a suffix of the taps (quantize_model's plans) or any box.
    for (int64_t r = 0; r < p.block_h; ++r) {
      const int64_t n = uni(1, g.filter_h);
      p.row_taps.push_back(n);
      p.row_start.push_back(trial % 2 ? g.filter_h - n : uni(0, g.filter_h - n));
    }
    for (int64_t r = 0; r < p.block_w; ++r) {
      const int64_t n = uni(1, g.filter_w);
      p.col_taps.push_back(n);
      p.col_start.push_back(trial % 2 ? g.filter_w - n : uni(0, g.filter_w - n));
    }
    const int64_t full_h = g.out_h * p.block_h, full_w = g.out_w * p.block_w;
    p.crop_top = uni(0, std::min<int64_t>(2, full_h));
    p.crop_bottom = uni(0, std::min<int64_t>(2, full_h - p.crop_top));
    p.crop_left = uni(0, std::min<int64_t>(2, full_w));
    p.crop_right = uni(0, std::min<int64_t>(2, full_w - p.crop_left));
    err = CheckTransposedConvPhases(g, p);
    EXPECT(err.empty(), "%s", err.c_str());
    const int64_t co = g.out_c / p.Phases();
    // The sub-pixel filter (zeros outside the boxes) and the phase filters.
    std::vector<int8_t> full(static_cast<size_t>(g.FilterElements()), 0);
    std::vector<int8_t> phases(static_cast<size_t>(TransposedConvFilterBytes(g.in_c, g.out_c, p)),
                               0);
    int64_t offset = 0;
    for (int64_t rh = 0; rh < p.block_h; ++rh) {
      for (int64_t rw = 0; rw < p.block_w; ++rw) {
        offset = (offset + 63) / 64 * 64;
        for (int64_t u = 0; u < p.row_taps[rh]; ++u) {
          for (int64_t v = 0; v < p.col_taps[rw]; ++v) {
            for (int64_t i = 0; i < g.in_c; ++i) {
              for (int64_t k = 0; k < co; ++k) {
                const int8_t x = static_cast<int8_t>(trial % 7 == 3 ? -128 : uni(-128, 127));
                phases[offset++] = x;
                full[(((p.row_start[rh] + u) * g.filter_w + p.col_start[rw] + v) * g.in_c + i) *
                         g.out_c +
                     (rh * p.block_w + rw) * co + k] = x;
              }
            }
          }
        }
      }
    }
    EXPECT(offset == static_cast<int64_t>(phases.size()), "phase filter bytes %lld of %zu",
           static_cast<long long>(offset), phases.size());
    std::vector<int8_t> input(static_cast<size_t>(g.InputElements()));
    for (auto& x : input) x = static_cast<int8_t>(trial % 7 == 3 ? -128 : uni(-128, 127));
    std::vector<float> bias(static_cast<size_t>(g.out_c)), scale;
    for (auto& b : bias) b = uni(-40, 40) * 0.5f;
    a.per_channel_scale = trial % 3 != 0;
    scale.resize(a.per_channel_scale ? g.out_c : 1);
    for (auto& s : scale) s = 0.002f + uni(0, 100) * 0.0003f;
    a.input = input.data();
    a.bias = bias.data();
    a.conv_input_scale = scale.data();
    a.activation = trial % 2 ? Activation::kRelu : Activation::kNone;
    if (trial % 5 == 4) {
      a.output_min = -20;
      a.output_max = 90;
    }
    // The sub-pixel convolution, depth-to-space and crop.
    std::vector<int8_t> sub(static_cast<size_t>(g.OutputElements()));
    a.filter = full.data();
    a.output = sub.data();
    RunReference(a);
    int64_t oh, ow, oc;
    TransposedConvOutputShape(g, p, &oh, &ow, &oc);
    std::vector<int8_t> want(static_cast<size_t>(g.batch * oh * ow * oc));
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          const int64_t yy = y + p.crop_top, xx = x + p.crop_left;
          for (int64_t k = 0; k < oc; ++k) {
            want[((n * oh + y) * ow + x) * oc + k] =
                sub[((n * g.out_h + yy / p.block_h) * g.out_w + xx / p.block_w) * g.out_c +
                    ((yy % p.block_h) * p.block_w + xx % p.block_w) * oc + k];
          }
        }
      }
    }
    a.filter = phases.data();
    std::vector<int8_t> scratch(static_cast<size_t>(TransposedConvScratchBytes(g)));
    for (KernelPath path : g_paths) {
      std::vector<int8_t> got(want.size() + 2 * kGuard, int8_t{0x5a});
      a.output = got.data() + kGuard;
      err = RunTransposedConv(a, p, scratch.data(), RunAs(path), pfs[trial % 3]);
      EXPECT(err.empty(), "%s", err.c_str());
      bool ok = want.empty() || std::memcmp(got.data() + kGuard, want.data(), want.size()) == 0;
      for (int64_t i = 0; i < kGuard; ++i) {
        ok &= got[i] == 0x5a && got[got.size() - 1 - i] == 0x5a;
      }
      ++cases;
      EXPECT(ok, "transposed conv path %s: %lldx%lldx%lldx%lld filter %lldx%lld -> %lld "
             "blocks %lldx%lld crop %lld %lld %lld %lld", KernelPathName(path),
             static_cast<long long>(g.batch), static_cast<long long>(g.in_h),
             static_cast<long long>(g.in_w), static_cast<long long>(g.in_c),
             static_cast<long long>(g.filter_h), static_cast<long long>(g.filter_w),
             static_cast<long long>(g.out_c), static_cast<long long>(p.block_h),
             static_cast<long long>(p.block_w), static_cast<long long>(p.crop_top),
             static_cast<long long>(p.crop_bottom), static_cast<long long>(p.crop_left),
             static_cast<long long>(p.crop_right));
    }
  }
  // Errors: each names what is wrong, nothing aborts.
  ConvGeometry g;
  g.batch = 1;
  g.in_h = g.in_w = 5;
  g.in_c = 4;
  g.filter_h = g.filter_w = 2;
  g.out_c = 8;
  g.pad_top = g.pad_left = 1;
  g.pad_bottom = g.pad_right = 1;
  EXPECT(ComputeGeometry(Padding::kExplicit, &g).empty(), "geometry");
  TransposedConvPhases good;
  good.block_h = good.block_w = 2;
  good.row_start = {0, 1};
  good.row_taps = {2, 1};
  good.col_start = {0, 1};
  good.col_taps = {2, 1};
  EXPECT(CheckTransposedConvPhases(g, good).empty(), "good phases refused");
  EXPECT(TransposedConvFilterBytes(4, 8, good) == 64 + 64 + 64 + 4 * 2, "filter bytes %lld",
         static_cast<long long>(TransposedConvFilterBytes(4, 8, good)));
  struct Bad {
    const char* want;
    std::function<void(ConvGeometry*, TransposedConvPhases*)> change;
  };
  const Bad bad[] = {
      {"at least one tap", [](ConvGeometry*, TransposedConvPhases* p) { p->row_taps[1] = 0; }},
      {"all inside", [](ConvGeometry*, TransposedConvPhases* p) { p->col_start[1] = 2; }},
      {"all inside", [](ConvGeometry*, TransposedConvPhases* p) { p->row_taps[0] = 3; }},
      {"negative padding", [](ConvGeometry* g, TransposedConvPhases*) { g->pad_top = 0; }},
      {"negative padding", [](ConvGeometry* g, TransposedConvPhases* p) { g->pad_right = 0; p->col_taps[0] = 1; }},
      {"multiple of the 4 phases", [](ConvGeometry* g, TransposedConvPhases*) { g->out_c = 6; }},
      {"one (start, taps)", [](ConvGeometry*, TransposedConvPhases* p) { p->col_taps.pop_back(); }},
      {"in [1, 65536]", [](ConvGeometry*, TransposedConvPhases* p) { p->block_w = 0; }},
      {"strides, dilations and groups", [](ConvGeometry* g, TransposedConvPhases*) { g->stride_h = 2; }},
      {"strides, dilations and groups", [](ConvGeometry* g, TransposedConvPhases*) { g->groups = 2; }},
      {"crop", [](ConvGeometry*, TransposedConvPhases* p) { p->crop_left = -1; }},
      {"crop", [](ConvGeometry*, TransposedConvPhases* p) { p->crop_top = 7; p->crop_bottom = 6; }},
  };
  for (const Bad& b : bad) {
    ConvGeometry gb = g;
    TransposedConvPhases pb = good;
    b.change(&gb, &pb);
    const std::string err = CheckTransposedConvPhases(gb, pb);
    EXPECT(err.find(b.want) != std::string::npos, "want '%s' in '%s'", b.want, err.c_str());
  }
  TransposedConvPhases odd = good;
  odd.col_taps.pop_back();
  EXPECT(TransposedConvFilterBytes(4, 8, odd) == -1, "filter bytes of mismatched boxes");
  EXPECT(TransposedConvFilterBytes(4, 6, good) == -1, "filter bytes of 6 channels / 4 phases");
  std::printf("transposed conv: %d runs checked\n", cases);
}

int main() {
  using namespace tf_fused_int8;  // NOLINT
  std::printf("best CPU kernel: %s\n", KernelPathName(BestKernelPath()));
  const int cases = CasesFromEnv();
  TestGeometryErrors();
  TestKernelPathNames();
  TestQuantize();
  TestPreprocessQuantize();
  TestChannelScale();
  TestLayerNorm();
  TestMaxPool();
  TestAvgPoolBodies();
  TestAvgPool();
  TestCopyLoop();
  TestConcat();
  TestDepthToSpace();
  TestPadCrop();
  if (!SelectPaths()) {
    if (testing::ExpectFailures()) {
      std::printf("%d failures\n", testing::ExpectFailures());
      return 1;
    }
    return kExitRefused;
  }
  std::string names;
  for (KernelPath p : g_paths) names += std::string(names.empty() ? "" : ", ") + KernelPathName(p);
  std::printf("paths under test: %s\n", names.c_str());
  TestPathsMatchReference(cases);
  TestLutBodies();
  TestOutputLut();
  TestEpilogueSpecialValues();
  TestUpperClampBound();
  TestExtremeOperands();
  TestNonNegativeInputs(cases);
  TestSideInputFma();
  TestLayerShapes();
  TestGemv();
  TestChannelTails();
  TestDepthwise3x3Blocks();
  TestDepthwiseKxKBlocks();
  TestDepthwiseYmmBlocksRule();
  TestDepthwiseOneTap();
  TestDepthwiseIdentity();
  TestDepthwiseOnePixel();
  TestDepthwiseGlobalUniform();
  TestDepthwiseUniformTaps();
  TestWinogradEdges();
  TestWinogradEligibility();
  TestChangedFilterIsRepacked();
  TestDepthwiseChangedOperands();
  TestDepthwisePinnedOperands();
  TestCacheBound();
  TestPinnedFilters();
  TestPinnedEntriesOutsideBounds();
  TestPaddedInput();
  TestInPlaceRows();
  TestTransposedConv();
  TestConcurrentCalls();
  if (testing::ExpectFailures()) {
    std::printf("%d failures\n", testing::ExpectFailures());
    return 1;
  }
  std::printf("core_test: all passed\n");
  return 0;
}
