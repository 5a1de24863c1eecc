// Copyright tf-fused-int8 authors. Apache 2.0.
//
// TF-free test of the compute core: every CPU kernel path this machine runs is
// compared bit for bit with the reference kernel over a generated sweep, with
// std::thread parallelism; geometry validation is checked for clean errors.
// Plain main(), no test framework (the build is offline).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace {

int g_failures = 0;

#define EXPECT(cond, ...)                                   \
  do {                                                      \
    if (!(cond)) {                                          \
      ++g_failures;                                         \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                    \
      std::fprintf(stderr, "\n");                           \
    }                                                       \
  } while (0)

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
  *padding = uni(0, 1) ? Padding::kSame : Padding::kValid;
  g.batch = uni(1, 3);
  g.in_h = (g.filter_h - 1) * g.dilation_h + 1 + uni(0, 10);
  g.in_w = (g.filter_w - 1) * g.dilation_w + 1 + uni(0, 10);
  g.in_c = kChannels[uni(0, 12)];
  g.out_c = kChannels[uni(0, 12)];
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
  return a;
}

void TestPathsMatchReference() {
  std::mt19937 rng(1234);
  const KernelPath paths[] = {KernelPath::kPortable, KernelPath::kAvx2,
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
      for (int threads : {1, 2, 3}) {
        std::vector<int8_t> got(want.size(), 77);
        a.output = got.data();
        const std::string err = RunFusedConv(a, p, ThreadParallelFor(threads));
        EXPECT(err.empty(), "%s", err.c_str());
        size_t bad = 0;
        for (size_t j = 0; j < got.size(); ++j) bad += got[j] != want[j];
        EXPECT(bad == 0, "case %d path %s threads %d: %zu of %zu differ", i,
               KernelPathName(p), threads, bad, got.size());
        ++checked;
      }
    }
  }
  std::printf("paths vs reference: %d runs checked\n", checked);
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
  };
  for (const Bad& b : bad) {
    ConvGeometry g = geo();
    b.mutate(&g);
    const std::string err = ComputeGeometry(b.p, &g);
    EXPECT(err.find(b.needle) != std::string::npos, "%s: got '%s'", b.what, err.c_str());
  }
  g = geo(); g.batch = 0;
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty() && g.OutputElements() == 0, "batch 0");
}

}  // namespace
}  // namespace tf_fused_int8

int main() {
  std::printf("best CPU kernel: %s\n",
              tf_fused_int8::KernelPathName(tf_fused_int8::BestKernelPath()));
  tf_fused_int8::TestGeometryErrors();
  tf_fused_int8::TestPathsMatchReference();
  if (tf_fused_int8::g_failures) {
    std::printf("%d failures\n", tf_fused_int8::g_failures);
    return 1;
  }
  std::printf("core_test: all passed\n");
  return 0;
}
