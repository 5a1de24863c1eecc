// Copyright tf-fused-int8 authors. Apache 2.0.
//
// TF-free timing of one convolution through the compute core, one thread,
// for profiling a kernel (perf record, valgrind --tool=callgrind) without
// TensorFlow's dispatch around it. Not a benchmark of record: the peers
// comparison is python -m tf_fused_int8.benchmark.
//
//   bazel build //:bench_core && bazel-bin/bench_core N H W Ci K Co stride groups [path] [seconds] [padding]
//   (Relu; path as TF_FUSED_INT8_CPU_KERNEL, default auto; padding same
//   (default) or valid). BENCH_CORE_FILTERS=R cycles through R distinct
//   filters and outputs, as the layers of a model do (weights and outputs
//   not in L2 at each call), instead of one hot filter. BENCH_CORE_THREADS=2
//   runs the core's ParallelFor on a second thread that spins between calls
//   and claims units from the back while the caller claims from the front,
//   like cc/tf/pool_parallel_for.cc with its helpers hot (the whole model
//   case), for plan experiments;
//   BENCH_CORE_INLINE=C moves its inline bound (default 15000 cycles, the
//   pool's kHotInlineCycles, its bound while a helper is alive, as this
//   one always is; 0 splits every call).
//   BENCH_CORE_CHECK=1 compares the last call's output with the reference
//   kernel's after timing (exit 1 if any byte differs).
//   BENCH_CORE_PIN=1 pins the filters (and bias and scale), as the TF
//   resource op does with a Keras layer's variables: the cached packing and
//   the depthwise preparation are used with no check (the time a model's
//   layer takes; unpinned, large filters are checked panel by panel while
//   computing: 7x7x512 3x3 -> 512 on one Zen 5 thread ran 289 us pinned, 389
//   us unpinned).
//   BENCH_CORE_LUT=1 adds an output lookup table (FusedConvArgs::output_lut).
//   BENCH_CORE_SIDE=1 adds a side input of the output's shape (scale 0.5),
//   one per filter (as ResNet's residual adds: each read once per call).
//   BENCH_CORE_DW_CACHE=0 makes depthwise calls prepare their weights on
//   every call instead of once per filter (depthwise.h's cache).
//   BENCH_CORE_INPUT=relu makes the input non-negative (max(x, 0), half
//   zeros, as after a Relu layer; default: uniform int8); =relu_known also
//   tells the kernels so (FusedConvArgs::input_non_negative), as the
//   sequence op does for a Relu step's output.
//   BENCH_CORE_IN_PLACE=1 (2) makes the AVX-512 VNNI GEMM read rows in place
//   wherever it can (gather every row) instead of its per-CPU choice.
//   BENCH_CORE_DW_YMM=1 (2) runs the avx512vnni path's depthwise calls that
//   depthwise_ymm_avx512vnni.cc's rule names on its ymm blocks on any CPU
//   (on the zmm kernels) instead of on Zen 4 only.
//   BENCH_CORE_POOL=avg|max times the core's average or max pooling (window
//   K, the stride and padding, one thread) instead of a convolution.
//   BENCH_CORE_WEIGHTS=identity: see below.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/fused_conv.h"
#include "cc/core/pool.h"
#include "tools/bench/held_pin.h"
#include "tools/bench/spin_pool.h"

namespace {

// Calls call(i) for i = 0, 1, ... until `seconds` have passed (at least
// once); the calls made and the seconds they took.
template <typename Call>
std::pair<int64_t, double> TimeCalls(double seconds, const Call& call) {
  int64_t iters = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double dt = 0;
  do {
    call(iters);
    ++iters;
    dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (dt < seconds);
  return {iters, dt};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tf_fused_int8;  // NOLINT
  if (argc < 9) {
    std::fprintf(stderr,
                 "usage: %s N H W Ci K|KhxKw Co stride groups [path] [seconds] [same|valid]\n",
                 argv[0]);
    return 2;
  }
  ConvGeometry g;
  g.batch = std::atol(argv[1]);
  g.in_h = std::atol(argv[2]);
  g.in_w = std::atol(argv[3]);
  g.in_c = std::atol(argv[4]);
  // K (square) or KhxKw (InceptionV3's 1x7 and 7x1 filters: "1x7").
  char* kw_end = nullptr;
  g.filter_h = g.filter_w = std::strtol(argv[5], &kw_end, 10);
  if (*kw_end == 'x') g.filter_w = std::atol(kw_end + 1);
  g.out_c = std::atol(argv[6]);
  g.stride_h = g.stride_w = std::atol(argv[7]);
  g.groups = std::atol(argv[8]);
  KernelPath path = KernelPath::kAuto;
  if (argc > 9 && !ParseKernelPath(argv[9], &path)) {
    std::fprintf(stderr, "unknown path %s\n", argv[9]);
    return 2;
  }
  const double seconds = argc > 10 ? std::atof(argv[10]) : 1.0;
  const std::string padding = argc > 11 ? argv[11] : "same";
  if (padding != "same" && padding != "valid") {
    std::fprintf(stderr, "padding must be same or valid, got %s\n", padding.c_str());
    return 2;
  }
  std::string err =
      ComputeGeometry(padding == "same" ? Padding::kSame : Padding::kValid, &g);
  if (!err.empty()) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 2;
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> u8(-128, 127);
  // BENCH_CORE_POOL=avg|max: times the core's pooling instead, a window of
  // K (or KhxKw) at the stride over N x H x W x Ci with the padding, on the
  // path, one thread (the layer's other arguments are ignored).
  if (const char* pool_env = std::getenv("BENCH_CORE_POOL")) {
    const std::string kind = pool_env;
    PoolGeometry pg;
    pg.batch = g.batch;
    pg.in_h = g.in_h;
    pg.in_w = g.in_w;
    pg.channels = g.in_c;
    pg.window_h = g.filter_h;
    pg.window_w = g.filter_w;
    pg.stride_h = pg.stride_w = g.stride_h;
    const std::string pool_err =
        ComputePoolGeometry(padding == "same" ? Padding::kSame : Padding::kValid, &pg);
    if (!pool_err.empty() || (kind != "avg" && kind != "max")) {
      std::fprintf(stderr, "pool: %s\n", pool_err.empty() ? "avg or max" : pool_err.c_str());
      return 2;
    }
    std::vector<int8_t> px(static_cast<size_t>(pg.InputElements())),
        pout(static_cast<size_t>(pg.OutputElements()));
    for (auto& v : px) v = static_cast<int8_t>(u8(rng));
    const ParallelFor serial;
    auto call = [&] {
      if (kind == "avg") {
        AvgPoolInt8(px.data(), pg, pout.data(), serial, path);
      } else {
        MaxPoolInt8(px.data(), pg, pout.data(), serial, path);
      }
    };
    call();
    const auto [iters, dt] = TimeCalls(seconds, [&](int64_t) { call(); });
    std::printf("%.3f us/call  %.2f GB/s read  (%lld calls)\n", dt / iters * 1e6,
                pg.InputElements() * static_cast<double>(iters) / dt * 1e-9,
                static_cast<long long>(iters));
    return 0;
  }
  const char* rotate_env = std::getenv("BENCH_CORE_FILTERS");
  const int rotate = rotate_env ? std::max(1, std::atoi(rotate_env)) : 1;
  std::vector<int8_t> x(g.InputElements());
  std::vector<std::vector<int8_t>> ws(rotate, std::vector<int8_t>(g.FilterElements())),
      outs(rotate, std::vector<int8_t>(g.OutputElements()));
  for (auto& v : x) v = static_cast<int8_t>(u8(rng));
  const char* input_env = std::getenv("BENCH_CORE_INPUT");
  const std::string input_kind = input_env != nullptr ? input_env : "";
  if (input_kind == "relu" || input_kind == "relu_known") {
    for (auto& v : x) v = std::max<int8_t>(v, 0);
  }
  // BENCH_CORE_WEIGHTS=symmetric: weights in [-127, 127], as quantize_model
  // and QuantizedFusedConv2D.from_float_weights make them (the avx2
  // depthwise blocks multiply a signed input as it is only without -128
  // weights, depthwise_avx2.cc); default: every int8 value.
  // =uniform: every tap of a channel has the same weight (an average
  // pooling's filter: quantize_model's GlobalAveragePooling2D and
  // squeeze-excite squeezes, which run as a depthwise call whose window is
  // the whole image).
  // =identity: every weight 1, scale 1, bias 0 (with a 1x1 depthwise call:
  // an Int8ReLU, as quantization.py runs it: the output is the input
  // clipped to the output range).
  const char* weights_env = std::getenv("BENCH_CORE_WEIGHTS");
  const std::string weights_kind = weights_env != nullptr ? weights_env : "";
  const bool symmetric = weights_kind == "symmetric";
  for (auto& w : ws) {
    for (auto& v : w) v = static_cast<int8_t>(symmetric ? std::max(u8(rng), -127) : u8(rng));
    if (weights_kind == "uniform") {
      for (size_t i = g.out_c; i < w.size(); ++i) w[i] = w[i % g.out_c];
    }
  }
  std::vector<float> bias(g.out_c, 1.0f), scale(g.out_c);
  for (auto& s : scale) s = 40.0f / (std::sqrt(float(g.ReductionDepth())) * 74 * 74);
  if (weights_kind == "identity") {
    for (auto& w : ws) std::fill(w.begin(), w.end(), int8_t{1});
    std::fill(bias.begin(), bias.end(), 0.0f);
    std::fill(scale.begin(), scale.end(), 1.0f);
  }
  FusedConvArgs a;
  a.geo = g;
  a.input = x.data();
  a.filter = ws[0].data();
  a.bias = bias.data();
  a.conv_input_scale = scale.data();
  a.per_channel_scale = true;
  a.activation = Activation::kRelu;
  a.output = outs[0].data();
  a.input_non_negative = input_kind == "relu_known";
  // BENCH_CORE_LUT=1: an output lookup table (a random one), applied after
  // the kernel as the op does with output_lut.
  std::vector<int8_t> lut(256);
  for (auto& v : lut) v = static_cast<int8_t>(u8(rng));
  const char* lut_env = std::getenv("BENCH_CORE_LUT");
  if (lut_env != nullptr && std::atoi(lut_env) == 1) a.output_lut = lut.data();
  const char* side_env = std::getenv("BENCH_CORE_SIDE");
  const bool side = side_env != nullptr && std::atoi(side_env) == 1;
  std::vector<std::vector<int8_t>> sides(side ? rotate : 0,
                                         std::vector<int8_t>(g.OutputElements()));
  for (auto& sv : sides) {
    for (auto& v : sv) v = static_cast<int8_t>(u8(rng));
  }
  if (side) {
    a.side_input = sides[0].data();
    a.side_input_scale = 0.5f;
  }
  // BENCH_CORE_PIN=1: pin the filters, bias and scale (as the TF resource
  // ops pin their variables' buffers: the cached packing and the depthwise
  // preparation are used with no check).
  const char* pin_env = std::getenv("BENCH_CORE_PIN");
  const bool pin = pin_env != nullptr && std::atoi(pin_env) == 1;
  const std::shared_ptr<const WeightPin> pin_token = bench::MakeHeldPin();
  if (pin) {
    a.filter_pin = pin_token;
    a.epilogue_pin = pin_token;
  }
  // BENCH_CORE_DW_CACHE=0: depthwise calls prepare their weights on every
  // call (as before the prepared-weights cache, depthwise.h).
  const char* dw_cache_env = std::getenv("BENCH_CORE_DW_CACHE");
  if (dw_cache_env != nullptr && std::atoi(dw_cache_env) == 0) {
    cpu::SetDepthwiseCacheForTesting(false);
  }
  // BENCH_CORE_IN_PLACE=1|2: the AVX-512 VNNI GEMM reads A rows in place
  // wherever it can (1) or gathers every row (2), instead of its per-CPU
  // choice (ReadInPlace in gemm_avx512vnni.cc).
  const char* in_place_env = std::getenv("BENCH_CORE_IN_PLACE");
  if (in_place_env != nullptr) cpu::SetInPlaceRowsForTesting(std::atoi(in_place_env));
  // BENCH_CORE_DW_YMM=1|2: the avx512vnni / amx paths run the depthwise
  // calls that the rule of depthwise_ymm_avx512vnni.cc names on the ymm
  // blocks on any CPU (1) or never (2), instead of on Zen 4 only (to
  // measure the rule on another CPU).
#if defined(__x86_64__)
  const char* dw_ymm_env = std::getenv("BENCH_CORE_DW_YMM");
  if (dw_ymm_env != nullptr) cpu::SetDepthwiseYmmBlocksForTesting(std::atoi(dw_ymm_env));
#endif
  ParallelFor pf;
  std::unique_ptr<bench::SpinPool> pool;
  const char* threads_env = std::getenv("BENCH_CORE_THREADS");
  // BENCH_CORE_INLINE=C: the inline bound in cycles (default 15000, as
  // cc/tf/pool_parallel_for.cc's kHotInlineCycles: its helper is always
  // alive; 0: split every call).
  const char* inline_env = std::getenv("BENCH_CORE_INLINE");
  const int64_t inline_cycles = inline_env != nullptr ? std::atoll(inline_env) : 15000;
  if (threads_env != nullptr && std::atoi(threads_env) == 2) {
    pool.reset(new bench::SpinPool());
    pf.num_threads = 2;
    bench::SpinPool* p = pool.get();
    pf.run = [p, inline_cycles](int64_t total, int64_t cost,
                                const std::function<void(int64_t, int64_t)>& fn) {
      // Calls below cc/tf/pool_parallel_for.cc's kHotInlineCycles run inline
      // there too.
      if (total * cost < inline_cycles) {
        fn(0, total);
      } else {
        p->Run(total, fn);
      }
    };
  }
  err = RunFusedConv(a, path, pf);
  if (!err.empty()) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 1;
  }
  const double macs = double(g.OutputElements()) * g.ReductionDepth();
  const auto [iters, dt] = TimeCalls(seconds, [&](int64_t i) {
    a.filter = ws[i % rotate].data();
    a.output = outs[i % rotate].data();
    if (side) a.side_input = sides[i % rotate].data();
    RunFusedConv(a, path, pf);
  });
  std::printf("%.3f us/call  %.1f GOPS  (%lld calls)\n", dt / iters * 1e6,
              2 * macs * iters / dt / 1e9, static_cast<long long>(iters));
  // BENCH_CORE_CHECK=1: the last timed call's output against the reference
  // kernel (a unit the parallel-for skipped or ran twice shows here).
  const char* check_env = std::getenv("BENCH_CORE_CHECK");
  if (check_env != nullptr && std::atoi(check_env) == 1) {
    const int64_t last = (iters - 1) % rotate;
    std::vector<int8_t> want(g.OutputElements());
    a.filter = ws[last].data();
    if (side) a.side_input = sides[last].data();
    a.output = want.data();
    err = RunFusedConv(a, KernelPath::kReference, ParallelFor());
    if (!err.empty()) {
      std::fprintf(stderr, "reference: %s\n", err.c_str());
      return 1;
    }
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += want[i] != outs[last][i];
    if (bad != 0) {
      std::printf("check: %lld of %zu outputs differ from the reference kernel\n",
                  static_cast<long long>(bad), want.size());
      return 1;
    }
    std::printf("check: equal to the reference kernel\n");
  }
  return 0;
}
