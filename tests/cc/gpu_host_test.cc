// Copyright tf-fused-int8 authors. Apache 2.0.
//
// TF-free test of the GPU backend's host side, on machines without a GPU:
// options, cache keying, the autotuning cache (once per key, concurrency,
// bounds), the tensor descriptions handed to cuDNN, layout conversions, and
// the whole GPU pipeline emulated on the host with the very code of our device
// kernels (device_kernels.h), bit for bit against the reference kernel.
// Plain main(), no test framework (the build is offline).
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cc/core/conv_params.h"
#include "tests/cc/expect.h"
#include "cc/core/epilogue.h"
#include "cc/core/fused_conv.h"
#include "cc/core/gpu/autotune_cache.h"
#include "cc/core/gpu/device_kernels.h"
#include "cc/core/gpu/fused_conv_gpu.h"
#include "cc/core/gpu/gpu_api.h"
#include "cc/core/gpu/host_emulation.h"
#include "cc/core/layout.h"
#include "cc/core/gpu/plan.h"

namespace tf_fused_int8 {
namespace gpu {
namespace {


// ---------------------------------------------------------------------------
void TestOptions() {
  std::map<std::string, std::string> env;
  auto getenv_fn = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  GpuOptions o = GpuOptions::FromEnvironment(false, getenv_fn);
  EXPECT(o.autotune && !o.deterministic, "defaults");
  EXPECT(o.workspace_limit_bytes == (int64_t{4} << 30), "default limit %lld",
         static_cast<long long>(o.workspace_limit_bytes));
  EXPECT(o.path == PathChoice::kAuto && o.layout == LayoutChoice::kAuto && o.warnings.empty(),
         "defaults");

  env["TF_CUDNN_USE_AUTOTUNE"] = "0";
  EXPECT(!GpuOptions::FromEnvironment(true, getenv_fn).autotune, "TF's switch is honored");
  EXPECT(GpuOptions::FromEnvironment(true, getenv_fn).deterministic, "determinism passes through");
  env["TF_FUSED_INT8_GPU_AUTOTUNE"] = "1";
  EXPECT(GpuOptions::FromEnvironment(false, getenv_fn).autotune, "ours wins over TF's");
  env["TF_FUSED_INT8_GPU_AUTOTUNE"] = "false";
  EXPECT(!GpuOptions::FromEnvironment(false, getenv_fn).autotune, "off");
  env["TF_FUSED_INT8_GPU_AUTOTUNE"] = "maybe";
  o = GpuOptions::FromEnvironment(false, getenv_fn);
  EXPECT(o.autotune && o.warnings.find("TF_FUSED_INT8_GPU_AUTOTUNE") != std::string::npos,
         "bad value warns: %s", o.warnings.c_str());
  env.erase("TF_FUSED_INT8_GPU_AUTOTUNE");
  env.erase("TF_CUDNN_USE_AUTOTUNE");

  env["TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB"] = "16";
  EXPECT(GpuOptions::FromEnvironment(false, getenv_fn).workspace_limit_bytes == (16 << 20), "16 MiB");
  env["TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB"] = "0";
  EXPECT(GpuOptions::FromEnvironment(false, getenv_fn).workspace_limit_bytes == 0, "0 MiB");
  env["TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB"] = "12abc";
  o = GpuOptions::FromEnvironment(false, getenv_fn);
  EXPECT(o.workspace_limit_bytes == (int64_t{4} << 30) && !o.warnings.empty(), "bad limit");
  env["TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB"] = "-5";
  EXPECT(!GpuOptions::FromEnvironment(false, getenv_fn).warnings.empty(), "negative limit");
  env.erase("TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB");

  env["TF_FUSED_INT8_GPU_PATH"] = "legacy";
  EXPECT(GpuOptions::FromEnvironment(false, getenv_fn).path == PathChoice::kLegacy, "legacy");
  env["TF_FUSED_INT8_GPU_PATH"] = "graph";
  EXPECT(GpuOptions::FromEnvironment(false, getenv_fn).path == PathChoice::kGraph, "graph");
  env["TF_FUSED_INT8_GPU_PATH"] = "frontend";
  o = GpuOptions::FromEnvironment(false, getenv_fn);
  EXPECT(o.path == PathChoice::kAuto && !o.warnings.empty(), "bad path");
  env.erase("TF_FUSED_INT8_GPU_PATH");
  env["TF_FUSED_INT8_GPU_LAYOUT"] = "x32";
  EXPECT(GpuOptions::FromEnvironment(false, getenv_fn).layout == LayoutChoice::kX32, "x32");
  env["TF_FUSED_INT8_GPU_LAYOUT"] = "nhwc";
  EXPECT(GpuOptions::FromEnvironment(false, getenv_fn).layout == LayoutChoice::kNhwc, "nhwc");
  env["TF_FUSED_INT8_GPU_LAYOUT"] = "x8";
  o = GpuOptions::FromEnvironment(false, getenv_fn);
  EXPECT(o.layout == LayoutChoice::kAuto && !o.warnings.empty(), "bad layout");
}

// ---------------------------------------------------------------------------
ConvGeometry SampleGeometry() {
  ConvGeometry g;
  g.batch = 2;
  g.in_h = 9;
  g.in_w = 8;
  g.in_c = 32;
  g.out_c = 12;
  g.filter_h = 3;
  g.filter_w = 3;
  g.stride_h = 2;
  g.stride_w = 2;
  const std::string e = ComputeGeometry(Padding::kSame, &g);
  EXPECT(e.empty(), "%s", e.c_str());
  return g;
}

void TestConvKey() {
  const ConvGeometry g = SampleGeometry();
  GpuOptions opt;
  const ConvKey base = MakeConvKey(0, 9, 0, g, 16, opt);
  EXPECT(base == MakeConvKey(0, 9, 0, g, 16, opt), "same inputs, same key");
  EXPECT(base.Hash() == MakeConvKey(0, 9, 0, g, 16, opt).Hash(), "same hash");
  EXPECT(base.ToString().find("in_c=32") != std::string::npos, "%s", base.ToString().c_str());

  // Every plan-changing parameter changes the key.
  std::vector<ConvKey> variants;
  variants.push_back(MakeConvKey(1, 9, 0, g, 16, opt));   // device
  variants.push_back(MakeConvKey(0, 8, 0, g, 16, opt));   // compute capability
  variants.push_back(MakeConvKey(0, 9, 0, g, 4, opt));    // alignment
  auto with = [&](auto mutate) {
    ConvGeometry h = g;
    mutate(&h);
    variants.push_back(MakeConvKey(0, 9, 0, h, 16, opt));
  };
  with([](ConvGeometry* h) { h->batch = 3; });
  with([](ConvGeometry* h) { h->in_h = 10; });
  with([](ConvGeometry* h) { h->in_w = 10; });
  with([](ConvGeometry* h) { h->in_c = 36; });
  with([](ConvGeometry* h) { h->out_c = 16; });
  with([](ConvGeometry* h) { h->filter_h = 5; });
  with([](ConvGeometry* h) { h->filter_w = 1; });
  with([](ConvGeometry* h) { h->stride_h = 1; });
  with([](ConvGeometry* h) { h->stride_w = 1; });
  with([](ConvGeometry* h) { h->dilation_h = 2; });
  with([](ConvGeometry* h) { h->dilation_w = 2; });
  with([](ConvGeometry* h) { h->pad_top += 1; });
  with([](ConvGeometry* h) { h->pad_bottom += 1; });
  with([](ConvGeometry* h) { h->pad_left += 1; });
  with([](ConvGeometry* h) { h->pad_right += 1; });
  auto with_opt = [&](auto mutate) {
    GpuOptions o = opt;
    mutate(&o);
    variants.push_back(MakeConvKey(0, 9, 0, g, 16, o));
  };
  with_opt([](GpuOptions* o) { o->deterministic = true; });
  with_opt([](GpuOptions* o) { o->autotune = false; });
  with_opt([](GpuOptions* o) { o->workspace_limit_bytes = 1 << 20; });
  with_opt([](GpuOptions* o) { o->path = PathChoice::kLegacy; });
  with_opt([](GpuOptions* o) { o->layout = LayoutChoice::kX32; });
  with_opt([](GpuOptions* o) { o->layout = LayoutChoice::kNhwc; });
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT(variants[i] != base, "variant %zu equals the base key", i);
    for (size_t j = 0; j < i; ++j) {
      EXPECT(variants[i] != variants[j], "variants %zu and %zu collide", i, j);
    }
  }
  // Warnings are not part of the key.
  GpuOptions warned = opt;
  warned.warnings = "something";
  EXPECT(MakeConvKey(0, 9, 0, g, 16, warned) == base, "warnings do not change the key");
}

// ---------------------------------------------------------------------------
ConvKey KeyN(int n) {
  ConvGeometry g = SampleGeometry();
  g.batch = n;
  return MakeConvKey(0, 9, 0, g, 16, GpuOptions());
}

void TestCache() {
  using Cache = AutotuneCache<int>;
  {
    Cache cache(8);
    int tunes = 0;
    auto tune = [&]() {
      ++tunes;
      TuneResult<int> r;
      r.value = std::make_shared<const int>(42);
      return r;
    };
    bool tuned = false;
    TuneResult<int> r = cache.GetOrTune(KeyN(1), tune, &tuned);
    EXPECT(r.status.ok() && *r.value == 42 && tuned && tunes == 1, "first call tunes");
    r = cache.GetOrTune(KeyN(1), tune, &tuned);
    EXPECT(r.status.ok() && !tuned && tunes == 1, "second call hits");
    r = cache.GetOrTune(KeyN(2), tune, &tuned);
    EXPECT(tuned && tunes == 2, "another key tunes");
    const AutotuneStats s = cache.stats();
    EXPECT(s.lookups == 3 && s.hits == 1 && s.tunes == 2 && s.size == 2 && s.evictions == 0,
           "stats %lld %lld %lld %lld", static_cast<long long>(s.lookups),
           static_cast<long long>(s.hits), static_cast<long long>(s.tunes),
           static_cast<long long>(s.size));
  }
  {
    // Concurrent first calls with one key: exactly one tune, everyone gets it.
    Cache cache;
    std::atomic<int> tunes{0};
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 50; ++round) {
          TuneResult<int> r = cache.GetOrTune(KeyN(1 + round % 5), [&] {
            tunes.fetch_add(1);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            TuneResult<int> res;
            res.value = std::make_shared<const int>(7);
            return res;
          });
          if (r.status.ok() && r.value && *r.value == 7) ok.fetch_add(1);
        }
        (void)t;
      });
    }
    for (auto& th : threads) th.join();
    EXPECT(tunes.load() == 5, "each of 5 keys tuned once across 8 threads, got %d", tunes.load());
    EXPECT(ok.load() == 400, "every call got the value, got %d", ok.load());
  }
  {
    // Permanent failures are cached; transient ones are retried.
    Cache cache;
    int tunes = 0;
    auto fail = [&](bool transient) {
      return [&tunes, transient]() {
        ++tunes;
        TuneResult<int> r;
        r.status = NotFound("no engine");
        r.transient = transient;
        return r;
      };
    };
    cache.GetOrTune(KeyN(1), fail(false));
    TuneResult<int> r = cache.GetOrTune(KeyN(1), fail(false));
    EXPECT(tunes == 1 && r.status.code() == StatusCode::kNotFound, "permanent failure cached");
    cache.GetOrTune(KeyN(2), fail(true));
    cache.GetOrTune(KeyN(2), fail(true));
    EXPECT(tunes == 3, "transient failure retried (%d)", tunes);
    // A tune that claims success without a value is an error, not a crash.
    r = cache.GetOrTune(KeyN(3), [] { return TuneResult<int>(); });
    EXPECT(!r.status.ok(), "empty result is an error");
  }
  {
    // Bounded: FIFO eviction at capacity.
    Cache cache(3);
    int tunes = 0;
    auto tune = [&]() {
      ++tunes;
      TuneResult<int> r;
      r.value = std::make_shared<const int>(tunes);
      return r;
    };
    for (int n = 1; n <= 5; ++n) cache.GetOrTune(KeyN(n), tune);
    AutotuneStats s = cache.stats();
    EXPECT(s.size == 3 && s.evictions == 2, "size %lld evictions %lld",
           static_cast<long long>(s.size), static_cast<long long>(s.evictions));
    bool tuned = false;
    cache.GetOrTune(KeyN(5), tune, &tuned);
    EXPECT(!tuned, "newest key kept");
    cache.GetOrTune(KeyN(1), tune, &tuned);
    EXPECT(tuned, "oldest key was evicted and tunes again");
    cache.Clear();
    EXPECT(cache.stats().size == 0, "clear");
  }
}

// ---------------------------------------------------------------------------
void TestSpecsAndLayouts() {
  const ConvGeometry g = SampleGeometry();
  EXPECT(g.out_h == 5 && g.out_w == 4 && g.pad_top == 1 && g.pad_bottom == 1 &&
             g.pad_left == 0 && g.pad_right == 1,
         "sample geometry %lld %lld pads %lld %lld %lld %lld", static_cast<long long>(g.out_h),
         static_cast<long long>(g.out_w), static_cast<long long>(g.pad_top),
         static_cast<long long>(g.pad_bottom), static_cast<long long>(g.pad_left),
         static_cast<long long>(g.pad_right));
  EXPECT(!SymmetricPadding(g), "asymmetric");
  ConvSpec s = MakeConvSpec(g, ConvLayout::kVect4, 16);
  const int64_t want_x[4] = {2, 8, 9, 8}, want_xs[4] = {8 * 9 * 8, 9 * 8, 8, 1};
  const int64_t want_w[4] = {12, 8, 3, 3}, want_ws[4] = {72, 9, 3, 1};
  const int64_t want_y[4] = {2, 12, 5, 4}, want_ys[4] = {240, 20, 4, 1};
  for (int i = 0; i < 4; ++i) {
    EXPECT(s.x.dims[i] == want_x[i] && s.x.strides[i] == want_xs[i], "x dim %d", i);
    EXPECT(s.w.dims[i] == want_w[i] && s.w.strides[i] == want_ws[i], "w dim %d", i);
    EXPECT(s.y.dims[i] == want_y[i] && s.y.strides[i] == want_ys[i], "y dim %d", i);
  }
  EXPECT(s.x.vector_count == 4 && s.x.vectorized_dim == 1 && s.x.type == ElementType::kInt8,
         "x vect");
  EXPECT(s.w.vector_count == 4 && s.w.vectorized_dim == 1, "w vect");
  EXPECT(s.y.type == ElementType::kFloat && s.y.vector_count == 1, "y float");
  EXPECT(s.pre_pad[0] == 1 && s.post_pad[0] == 1 && s.pre_pad[1] == 0 && s.post_pad[1] == 1,
         "pads");
  EXPECT(s.x.Bytes() == g.InputElements() && s.w.Bytes() == g.FilterElements() &&
             s.y.Bytes() == 4 * g.OutputElements(),
         "sizes");
  s = MakeConvSpec(g, ConvLayout::kVect32, 16);
  EXPECT(s.x.dims[1] == 1 && s.x.vector_count == 32 && s.padded_in_c == 32, "x32");
  s = MakeConvSpec(g, ConvLayout::kNhwcInt32, 16);
  const int64_t nhwc_x[4] = {9 * 8 * 32, 1, 8 * 32, 32}, krsc_w[4] = {9 * 32, 1, 3 * 32, 32},
                nhwc_y[4] = {5 * 4 * 12, 1, 4 * 12, 12};
  for (int i = 0; i < 4; ++i) {
    EXPECT(s.x.strides[i] == nhwc_x[i] && s.w.strides[i] == krsc_w[i] &&
               s.y.strides[i] == nhwc_y[i],
           "nhwc strides %d", i);
  }
  EXPECT(s.x.dims[1] == 32 && s.x.vector_count == 1 && s.y.type == ElementType::kInt32, "nhwc");
  EXPECT(MakeConvSpec(g, ConvLayout::kNhwcFloat, 16).y.type == ElementType::kFloat, "nhwc-f32");
  const ConvOutput out = s.Output(nullptr);
  EXPECT(out.is_int32 == 1 && out.c_stride == 1 && out.p_stride == 12 && out.n_stride == 240,
         "ConvOutput of nhwc-i32");

  // The spec's addressing is the layout the conversions produce.
  std::mt19937 rng(1);
  auto rnd = [&rng] { return static_cast<int8_t>(std::uniform_int_distribution<int>(-128, 127)(rng)); };
  for (int64_t c : {4, 8, 12, 32, 64}) {
    ConvGeometry h = SampleGeometry();
    h.in_c = c;
    std::vector<int8_t> nhwc(static_cast<size_t>(h.InputElements())), hwio(static_cast<size_t>(h.FilterElements()));
    for (auto& v : nhwc) v = rnd();
    for (auto& v : hwio) v = rnd();
    std::vector<int8_t> vect(nhwc.size()), wvect(hwio.size());
    NhwcToNchwVectC(nhwc.data(), h.batch, h.in_h, h.in_w, c, 4, vect.data());
    HwioToOihwVectI(hwio.data(), h.filter_h, h.filter_w, c, h.out_c, 4, wvect.data());
    const ConvSpec s4 = MakeConvSpec(h, ConvLayout::kVect4, 16);
    bool x_ok = true, w_ok = true;
    for (int64_t n = 0; n < h.batch; ++n)
      for (int64_t y = 0; y < h.in_h; ++y)
        for (int64_t x = 0; x < h.in_w; ++x)
          for (int64_t ch = 0; ch < c; ++ch)
            x_ok &= vect[s4.x.ByteOffset(n, ch, y, x)] == nhwc[((n * h.in_h + y) * h.in_w + x) * c + ch];
    for (int64_t o = 0; o < h.out_c; ++o)
      for (int64_t i = 0; i < c; ++i)
        for (int64_t y = 0; y < h.filter_h; ++y)
          for (int64_t x = 0; x < h.filter_w; ++x)
            w_ok &= wvect[s4.w.ByteOffset(o, i, y, x)] ==
                    hwio[((y * h.filter_w + x) * c + i) * h.out_c + o];
    EXPECT(x_ok && w_ok, "INT8x4 addressing, c=%lld", static_cast<long long>(c));

    std::vector<int8_t> back(nhwc.size()), wback(hwio.size());
    NchwVectCToNhwc(vect.data(), h.batch, c, h.in_h, h.in_w, 4, c, back.data());
    OihwVectIToHwio(wvect.data(), h.out_c, c, h.filter_h, h.filter_w, 4, c, wback.data());
    EXPECT(back == nhwc && wback == hwio, "round trip c=%lld", static_cast<long long>(c));

    if (c % 32 == 0) {
      // int8x4 -> int8x32 with the device kernel's code, then INT8x32 addressing.
      const std::vector<uint32_t> x32 =
          RunWordsOnHost(MakeActivationX32Params(h, vect.data(), nullptr), X4ToX32Word);
      const std::vector<uint32_t> w32 =
          RunWordsOnHost(MakeFilterX32Params(h, wvect.data(), nullptr), X4ToX32Word);
      const int8_t* xb = reinterpret_cast<const int8_t*>(x32.data());
      const int8_t* wb = reinterpret_cast<const int8_t*>(w32.data());
      const ConvSpec s32 = MakeConvSpec(h, ConvLayout::kVect32, 16);
      x_ok = w_ok = true;
      for (int64_t n = 0; n < h.batch; ++n)
        for (int64_t y = 0; y < h.in_h; ++y)
          for (int64_t x = 0; x < h.in_w; ++x)
            for (int64_t ch = 0; ch < c; ++ch)
              x_ok &= xb[s32.x.ByteOffset(n, ch, y, x)] == nhwc[((n * h.in_h + y) * h.in_w + x) * c + ch];
      for (int64_t o = 0; o < h.out_c; ++o)
        for (int64_t i = 0; i < c; ++i)
          for (int64_t y = 0; y < h.filter_h; ++y)
            for (int64_t x = 0; x < h.filter_w; ++x)
              w_ok &= wb[s32.w.ByteOffset(o, i, y, x)] ==
                      hwio[((y * h.filter_w + x) * c + i) * h.out_c + o];
      EXPECT(x_ok && w_ok, "INT8x32 addressing, c=%lld", static_cast<long long>(c));
      EXPECT(static_cast<int64_t>(x32.size()) * 4 == s32.x.Bytes(), "x32 size");
    }
    {
      // int8x4 -> int8 NHWC / KRSC with the device kernel's transpose, then NHWC addressing.
      const std::vector<uint32_t> xn =
          RunWordsOnHost(MakeActivationNhwcParams(h, vect.data(), nullptr), TransposeWord);
      const std::vector<uint32_t> wn =
          RunWordsOnHost(MakeFilterNhwcParams(h, wvect.data(), nullptr), TransposeWord);
      const int8_t* xb = reinterpret_cast<const int8_t*>(xn.data());
      const int8_t* wb = reinterpret_cast<const int8_t*>(wn.data());
      EXPECT(std::memcmp(xb, nhwc.data(), nhwc.size()) == 0, "transposed x is the NHWC input");
      const ConvSpec sn = MakeConvSpec(h, ConvLayout::kNhwcInt32, 16);
      w_ok = true;
      for (int64_t o = 0; o < h.out_c; ++o)
        for (int64_t i = 0; i < c; ++i)
          for (int64_t y = 0; y < h.filter_h; ++y)
            for (int64_t x = 0; x < h.filter_w; ++x)
              w_ok &= wb[sn.w.ByteOffset(o, i, y, x)] ==
                      hwio[((y * h.filter_w + x) * c + i) * h.out_c + o];
      EXPECT(w_ok, "KRSC addressing, c=%lld", static_cast<long long>(c));
      EXPECT(static_cast<int64_t>(wn.size()) * 4 == sn.w.Bytes() &&
                 ConvertedFilterBytes(h, ConvLayout::kNhwcInt32) == sn.w.Bytes() &&
                 ConvertedInputBytes(h, ConvLayout::kNhwcFloat) == sn.x.Bytes(),
             "nhwc sizes");
    }
  }
  // Channel padding of the conversions (5 channels -> 8).
  std::vector<int8_t> five = {1, 2, 3, 4, 5};
  std::vector<int8_t> padded(8, 99);
  NhwcToNchwVectC(five.data(), 1, 1, 1, 5, 4, padded.data());
  EXPECT(padded == std::vector<int8_t>({1, 2, 3, 4, 5, 0, 0, 0}), "zero padding");

  EXPECT(AlignmentOf({reinterpret_cast<void*>(0x1000), reinterpret_cast<void*>(0x2040)}) == 16,
         "aligned");
  EXPECT(AlignmentOf({reinterpret_cast<void*>(0x1004)}) == 4, "4-aligned");
  EXPECT(AlignmentOf({reinterpret_cast<void*>(0x1001), reinterpret_cast<void*>(0x10)}) == 1,
         "unaligned");

  ConvGeometry bad = SampleGeometry();
  bad.out_c = 6;
  Status st = ValidateGpuGeometry(bad);
  EXPECT(st.code() == StatusCode::kInvalidArgument &&
             st.message().find("multiple of 4") != std::string::npos,
         "%s", st.ToString().c_str());
  bad = SampleGeometry();
  bad.in_c = 6;
  EXPECT(ValidateGpuGeometry(bad).code() == StatusCode::kInvalidArgument, "in_c");
  // Grouped calls are accepted (the direct kernel); groups that do not divide
  // the depths, or leave a group a partial int8x4 word, are InvalidArgument
  // naming the depth and groups, never a crash.
  ConvGeometry grouped = SampleGeometry();  // in_c 32, out_c 12
  grouped.groups = 4;
  EXPECT(ValidateGpuGeometry(grouped).ok() && UsesDirectKernel(grouped) &&
             !UsesDirectKernel(SampleGeometry()),
         "grouped GPU call: %s", ValidateGpuGeometry(grouped).ToString().c_str());
  struct BadGroups {
    int64_t in_c, out_c, groups;
    const char* says;
  };
  for (const BadGroups& b : {BadGroups{32, 12, 8, "filter output depth (filter dimension 0, 12)"},
                             BadGroups{32, 12, 3, "conv_input depth (32) must be a multiple"},
                             BadGroups{32, 16, 16, "leaves 2 input channels per group"},
                             BadGroups{32, 12, 0, "must be at least 1"},
                             BadGroups{32, 12, -4, "must be at least 1"}}) {
    bad = SampleGeometry();
    bad.in_c = b.in_c;
    bad.out_c = b.out_c;
    bad.groups = b.groups;
    st = ValidateGpuGeometry(bad);
    EXPECT(st.code() == StatusCode::kInvalidArgument &&
               st.message().find(b.says) != std::string::npos &&
               st.message().find("groups (" + std::to_string(b.groups)) != std::string::npos,
           "groups %lld: %s", static_cast<long long>(b.groups), st.ToString().c_str());
    // The emulated pipeline refuses the same way, before touching any pointer.
    GpuConvArgs args;
    args.geo = bad;
    std::vector<uint32_t> y;
    EXPECT(EmulateConvOutput(args, ConvLayout::kVect4, &y).code() ==
               StatusCode::kInvalidArgument,
           "emulation, groups %lld", static_cast<long long>(b.groups));
    EXPECT(EmulateGpuPipeline(args, ConvLayout::kVect32).code() == StatusCode::kInvalidArgument,
           "pipeline, groups %lld", static_cast<long long>(b.groups));
  }
  // ComputeGeometry (what the op and the harness call first) rejects the
  // ones that do not divide, with the same names.
  for (const BadGroups& b : {BadGroups{32, 12, 8, "filter output depth (12) must be a multiple"},
                             BadGroups{32, 12, 3, "conv_input depth (32) must be a multiple"}}) {
    bad = SampleGeometry();
    bad.in_c = b.in_c;
    bad.out_c = b.out_c;
    bad.groups = b.groups;
    const std::string e = ComputeGeometry(Padding::kSame, &bad);
    EXPECT(e.find(b.says) != std::string::npos, "ComputeGeometry groups %lld: %s",
           static_cast<long long>(b.groups), e.c_str());
  }
  EXPECT(X32Candidate(SampleGeometry(), 9, 0) && !X32Candidate(SampleGeometry(), 7, 0),
         "x32 needs sm_75+");
  ConvGeometry c36 = SampleGeometry();
  c36.in_c = 36;
  EXPECT(!X32Candidate(c36, 9, 0), "x32 needs in_c %% 32 == 0");
  const std::vector<ConvLayout> with_x32 = {ConvLayout::kVect4, ConvLayout::kVect32,
                                            ConvLayout::kNhwcFloat};
  const std::vector<ConvLayout> without_x32 = {ConvLayout::kVect4, ConvLayout::kNhwcFloat};
  EXPECT(AutoLayouts(SampleGeometry(), 9, 0) == with_x32, "auto layouts on sm_90");
  EXPECT(AutoLayouts(SampleGeometry(), 7, 0) == without_x32, "auto layouts on sm_70");
  EXPECT(AutoLayouts(c36, 9, 0) == without_x32, "auto layouts, in_c 36");
}

// ---------------------------------------------------------------------------
// The epilogue as the GPU computes it equals EpilogueScalar on edge values.
void TestEpilogueEdges() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float scales[] = {1.0f, 0.5f, 0.1f, 1e-7f, 3.0e38f, -2.5f, nan, inf, -inf, 0.0f};
  const float biases[] = {0.0f, 0.5f, -0.5f, 1.5f, -127.5f, 126.5f, nan, inf, -inf, 1e30f};
  const int32_t accs[] = {0, 1, -1, 3, 255, -256, 16777217, -16777219, 2147483647, -2147483647};
  const int8_t sides[] = {0, 1, -1, 127, -128};
  const float side_scales[] = {0.0f, 0.5f, -1.25f, 1e-3f, nan};
  int checked = 0, bad = 0, lut_checked = 0;
  // An output lookup table (every third case): a scrambled one, so that each
  // clipped value maps to a different byte.
  int8_t lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<int8_t>((i * 37 + 11) % 256 - 128);
  const float bounds[][2] = {{0.0f, 127.0f}, {-128.0f, 127.0f}, {0.0f, 6.0f}, {-5.0f, 20.0f}};
  for (const auto& lohi : bounds) {
    const float lo = lohi[0], hi = lohi[1];
    for (float scale : scales) {
      for (float bias : biases) {
        for (int32_t acc : accs) {
          for (int8_t side : sides) {
            for (float ss : side_scales) {
              const bool has_side = ss != 0.0f;
              // One word = 4 channels of one pixel, all with the same inputs.
              const float conv[4] = {static_cast<float>(acc), static_cast<float>(acc),
                                     static_cast<float>(acc), static_cast<float>(acc)};
              const float sc[1] = {scale};
              const float bi[4] = {bias, bias, bias, bias};
              const int8_t sd[4] = {side, side, side, side};
              int8_t out[4] = {0, 0, 0, 0};
              EpilogueParams p{};
              p.conv.ptr = conv;
              p.conv.n_stride = 4;
              p.conv.c_stride = 1;
              p.conv.p_stride = 1;
              p.scale = sc;
              p.bias = bi;
              p.side = has_side ? sd : nullptr;
              p.out = out;
              p.words = 1;
              p.c4 = 1;
              p.pixels = 1;
              p.side_scale = ss;
              p.lo = lo;
              p.hi = hi;
              p.per_channel = 0;
              p.has_side = has_side;
              const bool use_lut = checked % 3 == 1;
              if (use_lut) {
                p.has_lut = 1;
                std::memcpy(p.lut, lut, sizeof(lut));
                ++lut_checked;
              }
              EpilogueWord(p, 0);
              const int8_t want =
                  LutScalar(use_lut ? lut : nullptr,
                            EpilogueScalar(acc, scale, bias, has_side, side, ss, lo, hi));
              ++checked;
              for (int v = 0; v < 4; ++v) {
                if (out[v] != want) ++bad;
              }
            }
          }
        }
      }
    }
  }
  EXPECT(bad == 0, "%d of %d epilogue edge cases differ (%d with a lookup table)", bad, checked,
         lut_checked);

  // One rounding in the side-input step: side = 5, side_scale = 0.3f (= 10066330 * 2^-25), so
  // side * side_scale = 1.5 + 2^-24 exactly; with y = -1, fmaf gives 0.5 + 2^-24 (-> 1), while a
  // separate multiply (1.5, a tie rounded to even) and add gives 0.5 (-> 0).
  const float ss = 0.3f;
  EXPECT(EpilogueScalar(-1, 1.0f, 0.0f, true, 5, ss, -128.0f) == 1, "contract: one rounding");
  const float conv[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
  const float one[1] = {1.0f};
  const float zero[4] = {0, 0, 0, 0};
  const int8_t five[4] = {5, 5, 5, 5};
  int8_t out[4] = {0, 0, 0, 0};
  EpilogueParams p{};
  p.conv.ptr = conv;
  p.conv.c_stride = 1;
  p.scale = one;
  p.bias = zero;
  p.side = five;
  p.out = out;
  p.words = p.c4 = p.pixels = 1;
  p.side_scale = ss;
  p.lo = -128.0f;
  p.hi = 127.0f;
  p.has_side = 1;
  EpilogueWord(p, 0);
  EXPECT(out[0] == 1 && out[3] == 1, "device epilogue fuses the side term: got %d", out[0]);

  // An int32 accumulator is converted to float32 once, rounding to nearest even:
  // 16777219 = 2^24 + 3 -> 16777220.
  const int32_t acc_i[4] = {16777219, -16777219, 16777217, 7};
  const float half[1] = {0.5f};
  int8_t out2[4] = {0, 0, 0, 0};
  EpilogueParams q{};
  q.conv.ptr = acc_i;
  q.conv.c_stride = 1;
  q.conv.is_int32 = 1;
  q.scale = half;
  q.bias = zero;
  q.out = out2;
  q.words = q.c4 = q.pixels = 1;
  q.lo = -128.0f;
  q.hi = 127.0f;
  for (int v = 0; v < 4; ++v) {
    EXPECT(LoadAcc(q.conv, 0, v, 0) == static_cast<float>(acc_i[v]), "LoadAcc int32 %d", v);
  }
  EpilogueWord(q, 0);
  EXPECT(out2[0] == 127 && out2[1] == -128 && out2[3] == 4, "int32 epilogue %d %d %d", out2[0],
         out2[1], out2[3]);
}

// The autotuning check compares float32(acc) across layouts.
void TestCompare() {
  const ConvGeometry g = SampleGeometry();  // 2 x 12 x 5 x 4 output
  const ConvSpec nchw = MakeConvSpec(g, ConvLayout::kVect4, 16);
  const ConvSpec nhwc = MakeConvSpec(g, ConvLayout::kNhwcInt32, 16);
  std::vector<float> a(static_cast<size_t>(g.OutputElements()));
  std::vector<int32_t> b(a.size());
  std::mt19937 rng(5);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t c = 0; c < g.out_c; ++c)
      for (int64_t y = 0; y < g.out_h; ++y)
        for (int64_t x = 0; x < g.out_w; ++x) {
          const int32_t acc = std::uniform_int_distribution<int32_t>(-(1 << 26), 1 << 26)(rng);
          a[static_cast<size_t>(nchw.y.ByteOffset(n, c, y, x) / 4)] = static_cast<float>(acc);
          b[static_cast<size_t>(nhwc.y.ByteOffset(n, c, y, x) / 4)] = acc;
        }
  CompareParams q{};
  q.a = nchw.Output(a.data());
  q.b = nhwc.Output(b.data());
  q.channels = static_cast<uint32_t>(g.out_c);
  q.pixels = static_cast<uint32_t>(g.out_h * g.out_w);
  q.elements = static_cast<uint32_t>(g.OutputElements());
  uint32_t differ = 0;
  for (uint32_t t = 0; t < q.elements; ++t) differ += ElementsDiffer(q, t);
  EXPECT(differ == 0, "%u equal elements reported different", differ);
  b[17] += 1 << 10;  // visible after rounding to float32
  differ = 0;
  for (uint32_t t = 0; t < q.elements; ++t) differ += ElementsDiffer(q, t);
  EXPECT(differ == 1, "one changed element, %u reported", differ);
}

// The autotuner's absolute check (SampleCheckParams), run on the host over
// emulated right answers in every layout (no mismatch may be reported) and
// over wrong ones: one changed element at the last image's last pixel, an
// int32 result read as float bits (what cuDNN 9.19's int32 NHWC engines did
// on an H200 looks like to the check), channel and pixel strides swapped, a
// NaN. Returns the mismatch count and the first reporting thread.
uint32_t RunSampleCheckOnHost(const SampleCheckParams& q, uint32_t* first, int32_t* first_want,
                              float* first_got) {
  uint32_t mismatches = 0;
  *first = ~0u;
  for (uint32_t t = 0; t < q.samples; ++t) {
    int32_t want = 0;
    float got = 0;
    if (SampleDiffers(q, t, &want, &got)) {
      if (mismatches++ == 0) {
        *first = t;
        *first_want = want;
        *first_got = got;
      }
    }
  }
  return mismatches;
}

void TestSampleCheck() {
  std::mt19937 rng(77);
  auto uni = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static const int kChannels[] = {4, 8, 12, 32, 36, 64};
  int checked = 0, all_pixels = 0;
  for (int iter = 0; iter < 40; ++iter) {
    ConvGeometry g;
    g.filter_h = std::vector<int>{1, 3, 5}[uni(0, 2)];
    g.filter_w = uni(0, 3) == 0 ? uni(1, 4) : g.filter_h;
    g.stride_h = uni(1, 2);
    g.stride_w = uni(1, 2);
    g.dilation_h = uni(0, 4) == 0 ? 2 : 1;
    g.dilation_w = uni(0, 4) == 0 ? 2 : 1;
    const Padding padding = uni(0, 1) ? Padding::kSame : Padding::kValid;
    g.batch = uni(1, 3);
    // Every pixel is checked up to 64 output pixels; larger outputs are sampled.
    const int extra = iter % 3 == 0 ? uni(10, 16) : uni(0, 6);
    g.in_h = (g.filter_h - 1) * g.dilation_h + 1 + extra;
    g.in_w = (g.filter_w - 1) * g.dilation_w + 1 + uni(0, 6) + (iter % 3 == 0 ? 9 : 0);
    g.in_c = kChannels[uni(0, 5)];
    g.out_c = kChannels[uni(0, 5)];
    const std::string e = ComputeGeometry(padding, &g);
    EXPECT(e.empty(), "%s", e.c_str());
    if (!e.empty()) continue;
    const bool extreme = iter % 7 == 2;  // all -128: |acc| > 2^24 where K is large
    std::vector<int8_t> x(static_cast<size_t>(g.InputElements())),
        w(static_cast<size_t>(g.FilterElements()));
    for (auto& v : x) v = extreme ? int8_t{-128} : static_cast<int8_t>(uni(-128, 127));
    for (auto& v : w) v = extreme ? int8_t{-128} : static_cast<int8_t>(uni(-128, 127));
    std::vector<int8_t> xv(x.size()), wv(w.size());
    NhwcToNchwVectC(x.data(), g.batch, g.in_h, g.in_w, g.in_c, 4, xv.data());
    HwioToOihwVectI(w.data(), g.filter_h, g.filter_w, g.in_c, g.out_c, 4, wv.data());
    GpuConvArgs a;
    a.geo = g;
    a.input = xv.data();
    a.filter = wv.data();
    const int64_t pixels = g.out_h * g.out_w;
    for (ConvLayout layout : {ConvLayout::kVect4, ConvLayout::kVect32, ConvLayout::kNhwcInt32,
                              ConvLayout::kNhwcFloat}) {
      if (layout == ConvLayout::kVect32 && g.in_c % 32 != 0) continue;
      std::vector<uint32_t> y;
      const Status s = EmulateConvOutput(a, layout, &y);
      EXPECT(s.ok(), "%s", s.ToString().c_str());
      if (y.empty()) continue;
      const ConvSpec spec = MakeConvSpec(g, layout, 16);
      SampleCheckParams q =
          MakeSampleCheckParams(g, spec.Output(y.data()), xv.data(), wv.data(), nullptr);
      EXPECT(q.images == (g.batch > 1 ? 2u : 1u), "images %u", q.images);
      EXPECT(q.sample_pixels == std::min<int64_t>(pixels, kSampleCheckMaxPixels),
             "sample_pixels %u of %lld", q.sample_pixels, static_cast<long long>(pixels));
      EXPECT(q.samples == q.images * q.sample_pixels * q.ops.out_c, "samples %u", q.samples);
      all_pixels += q.sample_pixels == pixels;
      uint32_t first = 0;
      int32_t want = 0;
      float got = 0;
      uint32_t m = RunSampleCheckOnHost(q, &first, &want, &got);
      EXPECT(m == 0, "iter %d %s: %u of %u right values reported (first t %u: %f vs %d)", iter,
             ConvLayoutName(layout), m, q.samples, first, got, want);

      // One wrong element, at the last channel of the last pixel of the last
      // image (slot 3 or the last slot): found, and named.
      const int64_t n_last = g.batch - 1;
      const size_t i_last = static_cast<size_t>(
          spec.y.ByteOffset(n_last, g.out_c - 1, g.out_h - 1, g.out_w - 1) / 4);
      std::vector<uint32_t> bad = y;
      if (layout == ConvLayout::kNhwcInt32) {
        bad[i_last] += 1u << 26;  // visible after rounding to float32
      } else {
        float f;
        std::memcpy(&f, &bad[i_last], 4);
        f = f + 67108864.0f;
        std::memcpy(&bad[i_last], &f, 4);
      }
      q.conv = spec.Output(bad.data());
      m = RunSampleCheckOnHost(q, &first, &want, &got);
      const uint32_t slot_last = q.sample_pixels == pixels ? static_cast<uint32_t>(pixels - 1) : 3u;
      const uint32_t t_last =
          ((q.images - 1) * q.sample_pixels + slot_last) * q.ops.out_c + q.ops.out_c - 1;
      // Later slots may sample a corner pixel again.
      auto samples_of = [&q](uint32_t image, uint32_t pixel, uint32_t c, uint32_t* first_t) {
        uint32_t k = 0;
        for (uint32_t slot = q.sample_pixels; slot-- > 0;) {
          if (SamplePixel(q, slot) == pixel) {
            *first_t = (image * q.sample_pixels + slot) * q.ops.out_c + c;
            ++k;
          }
        }
        return k;
      };
      uint32_t first_want = 0;
      uint32_t k = samples_of(q.images - 1, static_cast<uint32_t>(pixels - 1), q.ops.out_c - 1,
                              &first_want);
      EXPECT(k >= 1 && first_want <= t_last, "slot %u -> pixel %u", slot_last,
             SamplePixel(q, slot_last));
      EXPECT(m == k && first == first_want,
             "iter %d %s: one wrong element: %u reported (want %u), first t %u (want %u)", iter,
             ConvLayoutName(layout), m, k, first, first_want);

      // A NaN at the first element (float layouts).
      if (layout != ConvLayout::kNhwcInt32) {
        bad = y;
        bad[static_cast<size_t>(spec.y.ByteOffset(0, 0, 0, 0) / 4)] = 0x7fc00000u;
        q.conv = spec.Output(bad.data());
        m = RunSampleCheckOnHost(q, &first, &want, &got);
        k = samples_of(0, 0, 0, &first_want);
        EXPECT(m == k && first == 0 && std::isnan(got), "iter %d %s: NaN: %u reported (want %u), first %u",
               iter, ConvLayoutName(layout), m, k, first);
      }

      // The exact int32 sums read as float bits (or float bits as int32).
      q.conv = spec.Output(y.data());
      q.conv.is_int32 = 1 - q.conv.is_int32;
      m = RunSampleCheckOnHost(q, &first, &want, &got);
      uint32_t nonzero = 0;
      for (uint32_t t = 0; t < q.samples; ++t) {
        int32_t wt = 0;
        float gt = 0;
        SampleDiffers(q, t, &wt, &gt);
        nonzero += wt != 0;
      }
      EXPECT(m == nonzero && (nonzero > 0 || extreme), "iter %d %s: misread type: %u of %u nonzero",
             iter, ConvLayoutName(layout), m, nonzero);

      // Channel and pixel strides swapped (a layout read the wrong way round).
      if (g.out_c > 1 && pixels > 1) {
        q.conv = spec.Output(y.data());
        std::swap(q.conv.c_stride, q.conv.p_stride);
        const bool in_bounds = (g.out_c - 1) * q.conv.c_stride + (pixels - 1) * q.conv.p_stride +
                                   n_last * q.conv.n_stride < static_cast<int64_t>(y.size());
        if (in_bounds && !extreme) {
          m = RunSampleCheckOnHost(q, &first, &want, &got);
          EXPECT(m > 0, "iter %d %s: swapped strides not found", iter, ConvLayoutName(layout));
        }
      }
      ++checked;
    }
  }
  EXPECT(checked >= 80 && all_pixels > 0 && all_pixels < checked,
         "sample check: %d cases, %d with every pixel", checked, all_pixels);

  // Large outputs: the corners and the centre are always among the samples,
  // and the budget bounds the work.
  ConvGeometry g;
  g.batch = 8;
  g.in_h = g.in_w = 56;
  g.in_c = 2048;
  g.out_c = 2048;
  g.filter_h = g.filter_w = 3;
  EXPECT(ComputeGeometry(Padding::kSame, &g).empty(), "geometry");
  const SampleCheckParams q = MakeSampleCheckParams(g, ConvOutput{}, nullptr, nullptr, nullptr);
  const int64_t work = static_cast<int64_t>(q.samples) * q.ops.in_c4 * 9;
  EXPECT(q.sample_pixels >= kSampleCheckMinPixels && q.sample_pixels < kSampleCheckMaxPixels &&
             q.images == 2,
         "big: %u pixels", q.sample_pixels);
  EXPECT(work <= kSampleCheckWordProducts, "big: %lld word products",
         static_cast<long long>(work));
  const uint32_t want_pixels[] = {0, 55, 55 * 56, 56 * 56 - 1, 28 * 56 + 28};
  for (uint32_t slot = 0; slot < 5; ++slot) {
    EXPECT(SamplePixel(q, slot) == want_pixels[slot], "slot %u -> %u", slot, SamplePixel(q, slot));
  }
  std::printf("sample check: %d cases (%d with every pixel), wrong answers found\n", checked,
              all_pixels);
}

// ---------------------------------------------------------------------------
// The whole GPU pipeline (host emulation) vs the reference kernel.
void TestPipelineSweep() {
  std::mt19937 rng(2024);
  auto uni = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static const int kChannels[] = {4, 8, 12, 32, 36, 64};
  int cases = 0;
  for (int iter = 0; iter < 90; ++iter) {
    ConvGeometry g;
    g.filter_h = std::vector<int>{1, 3, 5, 7}[uni(0, 3)];
    g.filter_w = uni(0, 3) == 0 ? uni(1, 4) : g.filter_h;
    g.stride_h = uni(1, 2);
    g.stride_w = uni(0, 3) == 0 ? uni(1, 3) : g.stride_h;
    g.dilation_h = uni(0, 4) == 0 ? 2 : 1;
    g.dilation_w = uni(0, 4) == 0 ? 2 : 1;
    const Padding padding = uni(0, 1) ? Padding::kSame : Padding::kValid;
    g.batch = uni(1, 2);
    g.in_h = (g.filter_h - 1) * g.dilation_h + 1 + uni(0, 6);
    g.in_w = (g.filter_w - 1) * g.dilation_w + 1 + uni(0, 6);
    g.in_c = kChannels[uni(0, 5)];
    g.out_c = kChannels[uni(0, 5)];
    const std::string e = ComputeGeometry(padding, &g);
    EXPECT(e.empty(), "%s", e.c_str());
    if (!e.empty()) continue;

    std::vector<int8_t> x(static_cast<size_t>(g.InputElements())), w(static_cast<size_t>(g.FilterElements())),
        side(static_cast<size_t>(g.OutputElements()));
    const bool extreme = iter % 9 == 4;  // all -128: |acc| > 2^24 for big reductions
    for (auto& v : x) v = extreme ? int8_t{-128} : static_cast<int8_t>(uni(-128, 127));
    for (auto& v : w) v = extreme ? int8_t{-128} : static_cast<int8_t>(uni(-128, 127));
    for (auto& v : side) v = static_cast<int8_t>(uni(-128, 127));
    const bool per_channel = uni(0, 1);
    std::vector<float> scale(per_channel ? g.out_c : 1), bias(static_cast<size_t>(g.out_c));
    for (auto& s : scale) s = std::ldexp(static_cast<float>(uni(1, 1 << 20)), -uni(18, 30));
    for (auto& b : bias) b = static_cast<float>(uni(-200, 200)) * 0.25f;
    if (iter % 11 == 3) scale[0] = std::numeric_limits<float>::quiet_NaN();
    if (iter % 13 == 5) bias[0] = std::numeric_limits<float>::infinity();
    const bool with_side = uni(0, 1);
    const float side_scale = with_side ? static_cast<float>(uni(-8, 8)) * 0.37f : 0.0f;
    const Activation act = uni(0, 1) ? Activation::kRelu : Activation::kNone;
    const bool bounded = uni(0, 2) == 0;
    const int32_t out_min = bounded ? uni(-128, 20) : -128;
    const int32_t out_max = bounded ? uni(out_min < 0 ? 0 : out_min, 127) : 127;

    FusedConvArgs ref;
    ref.geo = g;
    ref.input = x.data();
    ref.filter = w.data();
    ref.bias = bias.data();
    ref.side_input = with_side ? side.data() : nullptr;
    ref.conv_input_scale = scale.data();
    ref.per_channel_scale = per_channel;
    ref.side_input_scale = side_scale;
    ref.activation = act;
    ref.output_min = out_min;
    ref.output_max = out_max;
    std::vector<int8_t> want(side.size());
    ref.output = want.data();
    RunReference(ref);

    std::vector<int8_t> xv(x.size()), wv(w.size()), sv(side.size()), outv(side.size());
    NhwcToNchwVectC(x.data(), g.batch, g.in_h, g.in_w, g.in_c, 4, xv.data());
    HwioToOihwVectI(w.data(), g.filter_h, g.filter_w, g.in_c, g.out_c, 4, wv.data());
    NhwcToNchwVectC(side.data(), g.batch, g.out_h, g.out_w, g.out_c, 4, sv.data());
    for (ConvLayout layout : {ConvLayout::kVect4, ConvLayout::kVect32, ConvLayout::kNhwcInt32,
                              ConvLayout::kNhwcFloat}) {
      if (layout == ConvLayout::kVect32 && g.in_c % 32 != 0) continue;
      GpuConvArgs a;
      a.geo = g;
      a.input = xv.data();
      a.filter = wv.data();
      a.bias = bias.data();
      a.side_input = with_side ? sv.data() : nullptr;
      a.conv_input_scale = scale.data();
      a.per_channel_scale = per_channel;
      a.side_input_scale = side_scale;
      a.activation = act;
      a.output_min = out_min;
      a.output_max = out_max;
      std::fill(outv.begin(), outv.end(), int8_t{77});
      a.output = outv.data();
      const Status s = EmulateGpuPipeline(a, layout);
      EXPECT(s.ok(), "%s", s.ToString().c_str());
      std::vector<int8_t> got(outv.size());
      NchwVectCToNhwc(outv.data(), g.batch, g.out_c, g.out_h, g.out_w, 4, g.out_c, got.data());
      int64_t mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
      EXPECT(mismatches == 0,
             "iter %d %s: %lld of %zu differ (k %lldx%lld s %lldx%lld d %lldx%lld c %lld->%lld)",
             iter, ConvLayoutName(layout), static_cast<long long>(mismatches), got.size(),
             static_cast<long long>(g.filter_h), static_cast<long long>(g.filter_w),
             static_cast<long long>(g.stride_h), static_cast<long long>(g.stride_w),
             static_cast<long long>(g.dilation_h), static_cast<long long>(g.dilation_w),
             static_cast<long long>(g.in_c), static_cast<long long>(g.out_c));
      ++cases;
    }
  }
  EXPECT(cases >= 270, "ran %d pipeline cases", cases);
  std::printf("pipeline emulation: %d cases bit-exact vs reference\n", cases);
}

// ---------------------------------------------------------------------------
// Grouped and depthwise convolutions: the direct kernel's own code
// (DirectConvElement) + the epilogue, emulated, vs the reference kernel on
// the layer as given. A depthwise layer (groups = in_c, filter input depth 1)
// reaches the GPU in the only form NCHW_VECT_C has for it (the filter input
// depth is 4 * filter dimension 1): groups = in_c / 4 with a filter whose
// lane c % 4 holds channel c's weights, zeros elsewhere.
void TestGroupedSweep() {
  std::mt19937 rng(4242);
  auto uni = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  // kind: 0 depthwise, 1 depthwise with channel multiplier 2, 2 groups of 4
  // channels, 3 groups of 8, 4 groups of 16.
  int cases = 0, per_kind[5] = {0, 0, 0, 0, 0}, explicit_asym = 0, extremes = 0, dilated = 0,
      strided = 0, k5 = 0, batched = 0;
  // Which path each case takes on the GPU (and so in EmulateGpuPipeline):
  // the fused depthwise kernel (groups of one input word), the direct kernel
  // + epilogue (wider groups), or cuDNN (a depthwise layer of 4 channels is
  // one group on the GPU).
  int fast_cases = 0, direct_cases = 0, cudnn_cases = 0, fast_vs_old = 0, lut_cases = 0,
      mixed_words = 0;  // fast cases whose output words span several groups
  const EmulatedPathCounts before = GetEmulatedPathCounts();
  // The old path for a grouped call: DirectConvElement's float32 y, then
  // EpilogueWord (what the GPU ran before the fast path, and still runs for
  // wider groups).
  auto old_direct_pipeline = [](const GpuConvArgs& a, std::vector<int8_t>* out) {
    const ConvGeometry& g = a.geo;
    std::vector<uint32_t> yd;
    const Status st = EmulateConvOutput(a, ConvLayout::kVect4, &yd);
    EXPECT(st.ok() && yd.size() == static_cast<size_t>(g.OutputElements()), "old direct y");
    out->assign(static_cast<size_t>(g.OutputElements()), int8_t{55});
    const EpilogueParams p = MakeEpilogueParams(
        g, MakeConvSpec(g, ConvLayout::kVect4, 16).Output(yd.data()), a.conv_input_scale,
        a.per_channel_scale, a.bias, a.side_input, a.side_input_scale, a.activation,
        out->data(), a.output_min, a.output_max, a.output_lut);
    for (uint32_t t = 0; t < p.words; ++t) EpilogueWord(p, t);
  };
  // The fused kernel's code alone (DepthwiseConvWord), into a fresh buffer.
  auto fast_pipeline = [](GpuConvArgs a, std::vector<int8_t>* out) {
    out->assign(static_cast<size_t>(a.geo.OutputElements()), int8_t{33});
    a.output = out->data();
    const DepthwiseConvParams d = MakeDepthwiseConvParams(a);
    EXPECT(d.ops.group_c4 == 1 && d.epi.words * 4 == out->size(), "depthwise params");
    for (uint32_t t = 0; t < d.epi.words; ++t) DepthwiseConvWord(d, t);
  };
  for (int iter = 0; iter < 150; ++iter) {
    const int kind = iter % 5;
    const bool depthwise = kind <= 1;
    ConvGeometry ref;  // the layer as given (reference kernel, NHWC)
    static const int kKernel[][2] = {{3, 3}, {3, 3}, {5, 5}, {1, 1}, {3, 1}, {7, 7}};
    const int k = uni(0, 5);
    ref.filter_h = kKernel[k][0];
    ref.filter_w = kKernel[k][1];
    ref.stride_h = uni(1, 2);
    ref.stride_w = uni(0, 3) == 0 ? uni(1, 2) : ref.stride_h;
    ref.dilation_h = uni(0, 3) == 0 ? 2 : 1;
    ref.dilation_w = uni(0, 3) == 0 ? 2 : 1;
    ref.batch = uni(1, 3);
    ref.in_h = (ref.filter_h - 1) * ref.dilation_h + 1 + uni(0, 7);
    ref.in_w = (ref.filter_w - 1) * ref.dilation_w + 1 + uni(0, 7);
    int64_t group_in = 0;
    if (depthwise) {
      ref.in_c = 4 * uni(1, 8);
      ref.groups = ref.in_c;
      ref.out_c = ref.in_c * (kind == 1 ? 2 : 1);
      group_in = 1;
    } else {
      group_in = int64_t{4} << (kind - 2);  // 4, 8, 16
      ref.groups = uni(2, 5);
      ref.in_c = group_in * ref.groups;
      do {
        ref.out_c = ref.groups * std::vector<int>{1, 2, 4, 8}[uni(0, 3)];
      } while (ref.out_c % 4 != 0);
    }
    const int pad_kind = uni(0, 2);
    Padding padding = pad_kind == 0 ? Padding::kSame : pad_kind == 1 ? Padding::kValid
                                                                     : Padding::kExplicit;
    if (padding == Padding::kExplicit) {
      ref.pad_top = uni(0, 3);
      ref.pad_bottom = uni(0, 3);
      ref.pad_left = uni(0, 3);
      ref.pad_right = uni(0, 3);
      explicit_asym += ref.pad_top != ref.pad_bottom || ref.pad_left != ref.pad_right;
    }
    std::string e = ComputeGeometry(padding, &ref);
    EXPECT(e.empty(), "%s", e.c_str());
    if (!e.empty()) continue;
    // The NCHW_VECT_C call: the same geometry, groups of whole int8x4 words.
    ConvGeometry g = ref;
    g.groups = depthwise ? ref.in_c / 4 : ref.groups;
    e = ComputeGeometry(padding, &g);
    EXPECT(e.empty() && g.out_h == ref.out_h && g.out_w == ref.out_w && g.GroupInC() % 4 == 0,
           "%s", e.c_str());
    if (!e.empty()) continue;

    const bool extreme = iter % 11 == 6;  // all -128: the largest |acc| of the shape
    std::vector<int8_t> x(static_cast<size_t>(ref.InputElements())),
        w(static_cast<size_t>(ref.FilterElements())),
        side(static_cast<size_t>(ref.OutputElements()));
    for (auto& v : x) v = extreme ? int8_t{-128} : static_cast<int8_t>(uni(-128, 127));
    for (auto& v : w) v = extreme ? int8_t{-128} : static_cast<int8_t>(uni(-128, 127));
    for (auto& v : side) v = static_cast<int8_t>(uni(-128, 127));
    // The GPU's HWIO filter before OIHW_VECT_I: w itself, or the depthwise
    // filter spread over the 4 lanes of each group.
    std::vector<int8_t> wg = w;
    if (depthwise) {
      const int64_t m = ref.out_c / ref.in_c;
      wg.assign(static_cast<size_t>(g.FilterElements()), 0);
      for (int64_t ky = 0; ky < ref.filter_h; ++ky)
        for (int64_t kx = 0; kx < ref.filter_w; ++kx)
          for (int64_t o = 0; o < ref.out_c; ++o) {
            const int64_t lane = (o / m) % 4;
            wg[static_cast<size_t>(((ky * ref.filter_w + kx) * 4 + lane) * ref.out_c + o)] =
                w[static_cast<size_t>((ky * ref.filter_w + kx) * ref.out_c + o)];
          }
    }
    const bool per_channel = uni(0, 1);
    std::vector<float> scale(per_channel ? ref.out_c : 1), bias(static_cast<size_t>(ref.out_c));
    for (auto& sc : scale) sc = std::ldexp(static_cast<float>(uni(1, 1 << 20)), -uni(16, 28));
    for (auto& b : bias) b = static_cast<float>(uni(-200, 200)) * 0.25f;
    const bool with_side = uni(0, 1);
    const float side_scale = with_side ? static_cast<float>(uni(-8, 8)) * 0.37f : 0.0f;
    const Activation act = uni(0, 1) ? Activation::kRelu : Activation::kNone;

    FusedConvArgs r;
    r.geo = ref;
    r.input = x.data();
    r.filter = w.data();
    r.bias = bias.data();
    r.side_input = with_side ? side.data() : nullptr;
    r.conv_input_scale = scale.data();
    r.per_channel_scale = per_channel;
    r.side_input_scale = side_scale;
    r.activation = act;
    std::vector<int8_t> want(side.size());
    r.output = want.data();
    RunReference(r);

    std::vector<int8_t> xv(x.size()), wv(wg.size()), sv(side.size()), outv(side.size());
    NhwcToNchwVectC(x.data(), g.batch, g.in_h, g.in_w, g.in_c, 4, xv.data());
    HwioToOihwVectI(wg.data(), g.filter_h, g.filter_w, g.GroupInC(), g.out_c, 4, wv.data());
    NhwcToNchwVectC(side.data(), g.batch, g.out_h, g.out_w, g.out_c, 4, sv.data());
    GpuConvArgs a;
    a.geo = g;
    a.input = xv.data();
    a.filter = wv.data();
    a.bias = bias.data();
    a.side_input = with_side ? sv.data() : nullptr;
    a.conv_input_scale = scale.data();
    a.per_channel_scale = per_channel;
    a.side_input_scale = side_scale;
    a.activation = act;
    a.output = outv.data();
    // The layout is ignored for grouped calls (no cuDNN), x32 included. (A
    // depthwise layer of 4 channels is one group of 4 on the GPU: cuDNN's.)
    ConvLayout other = static_cast<ConvLayout>(uni(1, 3));
    if (!UsesDirectKernel(g) && other == ConvLayout::kVect32 && g.in_c % 32 != 0) {
      other = ConvLayout::kNhwcFloat;
    }
    std::vector<int8_t> first;
    for (ConvLayout layout : {ConvLayout::kVect4, other}) {
      std::fill(outv.begin(), outv.end(), int8_t{77});
      const Status st = EmulateGpuPipeline(a, layout);
      EXPECT(st.ok(), "%s", st.ToString().c_str());
      std::vector<int8_t> got(outv.size());
      NchwVectCToNhwc(outv.data(), g.batch, g.out_c, g.out_h, g.out_w, 4, g.out_c, got.data());
      int64_t mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
      EXPECT(mismatches == 0,
             "iter %d kind %d %s: %lld of %zu differ (k %lldx%lld s %lldx%lld d %lldx%lld "
             "c %lld->%lld groups %lld, GPU groups %lld)",
             iter, kind, ConvLayoutName(layout), static_cast<long long>(mismatches), got.size(),
             static_cast<long long>(g.filter_h), static_cast<long long>(g.filter_w),
             static_cast<long long>(g.stride_h), static_cast<long long>(g.stride_w),
             static_cast<long long>(g.dilation_h), static_cast<long long>(g.dilation_w),
             static_cast<long long>(g.in_c), static_cast<long long>(g.out_c),
             static_cast<long long>(ref.groups), static_cast<long long>(g.groups));
      if (first.empty()) {
        first = got;
      } else {
        EXPECT(got == first, "iter %d: layout %s changed a grouped result", iter,
               ConvLayoutName(layout));
      }
    }
    // The fast path against the old direct kernel + epilogue on the same
    // inputs: the same bytes (also with an output_lut and narrowed bounds,
    // which the reference comparison above does not exercise).
    if (UsesDepthwiseKernel(g)) {
      ++fast_cases;
      mixed_words += g.GroupOutC() % 4 != 0;
      std::vector<int8_t> fast, old;
      fast_pipeline(a, &fast);
      old_direct_pipeline(a, &old);
      EXPECT(fast == old && fast == outv, "iter %d: fast path differs from the direct kernel",
             iter);
      fast_vs_old += fast == old;
      if (iter % 3 == 0) {
        std::mt19937 lut_rng(static_cast<uint32_t>(iter));  // leaves the sweep's draws alone
        auto lut_uni = [&lut_rng](int lo, int hi) {
          return std::uniform_int_distribution<int>(lo, hi)(lut_rng);
        };
        std::vector<int8_t> lut(256);
        for (auto& v : lut) v = static_cast<int8_t>(lut_uni(-128, 127));
        GpuConvArgs b = a;
        b.output_lut = lut.data();
        b.output_min = lut_uni(-128, 0);
        b.output_max = lut_uni(1, 127);
        fast_pipeline(b, &fast);
        old_direct_pipeline(b, &old);
        EXPECT(fast == old, "iter %d: fast path with a LUT differs from the direct kernel",
               iter);
        lut_cases += fast == old;
      }
    } else if (UsesDirectKernel(g)) {
      ++direct_cases;
    } else {
      ++cudnn_cases;
    }
    // The direct kernel's y passes the autotuner's sample check, whose exact
    // sums (ExactAcc) read the same grouped operands.
    std::vector<uint32_t> y;
    EXPECT(EmulateConvOutput(a, ConvLayout::kVect4, &y).ok() &&
               y.size() == static_cast<size_t>(g.OutputElements()),
           "direct y");
    if (!y.empty()) {
      const SampleCheckParams q = MakeSampleCheckParams(
          g, MakeConvSpec(g, ConvLayout::kVect4, 16).Output(y.data()), xv.data(), wv.data(),
          nullptr);
      EXPECT(q.ops.group_c4 == static_cast<uint32_t>(g.GroupInC() / 4) &&
                 q.ops.group_out_c == static_cast<uint32_t>(g.GroupOutC()),
             "group words");
      uint32_t t = 0;
      int32_t want_acc = 0;
      float got_acc = 0;
      EXPECT(RunSampleCheckOnHost(q, &t, &want_acc, &got_acc) == 0, "iter %d: sample check",
             iter);
    }
    ++cases;
    ++per_kind[kind];
    extremes += extreme;
    dilated += g.dilation_h > 1 || g.dilation_w > 1;
    strided += g.stride_h > 1;
    k5 += g.filter_h == 5;
    batched += g.batch > 1;
  }
  EXPECT(cases == 150 && explicit_asym > 5 && extremes > 5 && dilated > 5 && strided > 5 &&
             k5 > 5 && batched > 5,
         "grouped sweep: %d cases, %d asymmetric explicit, %d extreme, %d dilated, %d strided, "
         "%d 5x5, %d batched",
         cases, explicit_asym, extremes, dilated, strided, k5, batched);
  for (int kind = 0; kind < 5; ++kind) EXPECT(per_kind[kind] == 30, "kind %d", kind);
  // Every depthwise case but the 4-channel ones, and every groups-of-4 case,
  // took the fast path; groups of 8 and 16 the direct kernel. Each case ran
  // EmulateGpuPipeline twice (two layouts).
  const EmulatedPathCounts after = GetEmulatedPathCounts();
  EXPECT(fast_cases >= 60 && direct_cases == 60 && fast_cases + direct_cases + cudnn_cases == cases,
         "grouped sweep paths: %d fast, %d direct, %d cuDNN", fast_cases, direct_cases,
         cudnn_cases);
  EXPECT(after.depthwise - before.depthwise == 2 * fast_cases &&
             after.direct - before.direct == 2 * direct_cases &&
             after.cudnn - before.cudnn == 2 * cudnn_cases,
         "emulated path counts: depthwise %lld direct %lld cudnn %lld",
         static_cast<long long>(after.depthwise - before.depthwise),
         static_cast<long long>(after.direct - before.direct),
         static_cast<long long>(after.cudnn - before.cudnn));
  EXPECT(fast_vs_old == fast_cases && lut_cases > 10 && mixed_words > 3,
         "fast vs old: %d of %d, %d with a LUT, %d with words spanning groups", fast_vs_old,
         fast_cases, lut_cases, mixed_words);
  std::printf("grouped/depthwise emulation: %d cases bit-exact vs reference (%d on the fused "
              "depthwise kernel, all equal to the direct kernel + epilogue, %d of them also "
              "with a LUT, %d with words spanning groups; %d on the direct kernel; %d on "
              "cuDNN)\n",
              cases, fast_cases, lut_cases, mixed_words, direct_cases, cudnn_cases);
}

// ---------------------------------------------------------------------------
void TestNoGpu() {
  GpuApi api;
  std::string missing;
  EXPECT(!api.Complete(&missing) && missing.find("cudnnBackendExecute") != std::string::npos &&
             missing.find("cuLaunchKernel") != std::string::npos,
         "%s", missing.c_str());
  Status s = LoadGpuApi("/nonexistent/libcudnn.so.9", "/nonexistent/libcuda.so.1", &api);
  EXPECT(s.code() == StatusCode::kUnavailable &&
             s.message().find("/nonexistent/libcuda.so.1") != std::string::npos,
         "%s", s.ToString().c_str());
  EXPECT(api.cuInit == nullptr, "table stays empty on failure");

  // The backend refuses cleanly with an incomplete table.
  GpuConvArgs args;
  args.geo = SampleGeometry();
  GpuRunInfo info;
  s = RunFusedConvGpu(GpuApi(), nullptr, args, GpuOptions(), nullptr, &info);
  EXPECT(s.code() == StatusCode::kUnavailable, "%s", s.ToString().c_str());

  const std::string ptx = EmbeddedPtx();
  for (const char* k : {kEpilogueKernelName, kX4ToX32KernelName, kTransposeKernelName,
                        kCountMismatchKernelName, kCheckSampleKernelName,
                        kDirectConvKernelName}) {
    EXPECT(ptx.find(std::string(".entry ") + k + "(") != std::string::npos, "PTX has %s", k);
  }
  EXPECT(ptx.find(".target sm_61") != std::string::npos && ptx.find(".version 6.0") != std::string::npos,
         "PTX header");
  EXPECT(ptx.find("fma.rn.f32") != std::string::npos && ptx.find("cvt.rni.s32.f32") != std::string::npos &&
             ptx.find("mul.rn.f32") != std::string::npos && ptx.find("add.rn.f32") != std::string::npos,
         "explicit rounding in the PTX");
  EXPECT(std::string(StatusCodeName(StatusCode::kUnimplemented)) == "UNIMPLEMENTED", "names");
}

}  // namespace
}  // namespace gpu
}  // namespace tf_fused_int8

int main() {
  using namespace tf_fused_int8::gpu;  // NOLINT
  TestOptions();
  TestConvKey();
  TestCache();
  TestSpecsAndLayouts();
  TestEpilogueEdges();
  TestCompare();
  TestSampleCheck();
  TestPipelineSweep();
  TestGroupedSweep();
  TestNoGpu();
  if (::tf_fused_int8::testing::ExpectFailures()) {
    std::fprintf(stderr, "gpu_host_test: %d failure(s)\n", ::tf_fused_int8::testing::ExpectFailures());
    return 1;
  }
  std::printf("gpu_host_test: all passed\n");
  return 0;
}
