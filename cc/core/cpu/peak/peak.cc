// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The table of throughput loops and the timing around them (peak.h).
#include "cc/core/cpu/peak/peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

#if defined(__x86_64__)
bool HasAvx2() { return KernelPathSupported(KernelPath::kAvx2); }
bool HasAvxVnni() { return KernelPathSupported(KernelPath::kAvxVnni); }
bool HasAvx512Vnni() { return KernelPathSupported(KernelPath::kAvx512Vnni); }
bool HasAmx() { return KernelPathSupported(KernelPath::kAmx); }

// ops_per_block: instructions per block x MACs (or FMAs) each x 2.
constexpr PeakLoop kLoops[] = {
    {"vpmaddwd_ymm", 12 * 16 * 2, HasAvx2, PeakVpmaddwdYmm},
    {"vpdpbusd_ymm", 12 * 32 * 2, HasAvxVnni, PeakVpdpbusdYmm},
    {"vpdpbusd_zmm", 16 * 64 * 2, HasAvx512Vnni, PeakVpdpbusdZmm},
    {"vpdpwssd_zmm", 16 * 32 * 2, HasAvx512Vnni, PeakVpdpwssdZmm},
    {"fma_ymm", 12 * 8 * 2, HasAvx2, PeakFmaYmm},
    {"fma_zmm", 16 * 16 * 2, HasAvx512Vnni, PeakFmaZmm},
    {"tdpbssd", 4 * 16 * 16 * 64 * 2, HasAmx, PeakTdpbssd},
    {"tdpbssd_loads", 4 * 16 * 16 * 64 * 2, HasAmx, PeakTdpbssdLoads},
};
constexpr int kNumLoops = sizeof(kLoops) / sizeof(kLoops[0]);
#else
constexpr PeakLoop* kLoops = nullptr;
constexpr int kNumLoops = 0;
#endif

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Wall time of `threads` threads each running loop.run(iters), started
// together (they spin on a flag so that thread creation is not timed).
double TimeThreads(const PeakLoop& loop, int threads, int64_t iters) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back([&] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      loop.run(iters);
    });
  }
  while (ready.load() != threads - 1) {
  }
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  loop.run(iters);
  for (std::thread& th : pool) th.join();
  return Seconds(t0);
}

}  // namespace

const PeakLoop* PeakLoops(int* count) {
  *count = kNumLoops;
  return kLoops;
}

double MeasurePeakGops(const char* name, int threads, double min_seconds) {
  const PeakLoop* loop = nullptr;
  for (int i = 0; i < kNumLoops; ++i) {
    if (std::strcmp(kLoops[i].name, name) == 0) loop = &kLoops[i];
  }
  if (loop == nullptr) return -1.0;
  if (!loop->supported()) return -2.0;
  threads = std::max(1, std::min(threads, 256));
  min_seconds = std::max(1e-3, std::min(min_seconds, 10.0));
  // Calibrate on one thread, then take the best of five timed runs (the
  // machines are shared: the best run is the one least disturbed).
  int64_t iters = 1000;
  for (;;) {
    const double dt = TimeThreads(*loop, 1, iters);
    if (dt >= min_seconds / 4 || iters >= (int64_t{1} << 40)) break;
    iters = std::max(iters * 2, static_cast<int64_t>(
                                    iters * (min_seconds / 3) / std::max(dt, 1e-9)));
  }
  double best = 0.0;
  for (int r = 0; r < 5; ++r) {
    const double dt = TimeThreads(*loop, threads, iters);
    best = std::max(best, loop->ops_per_block * iters * threads / dt / 1e9);
  }
  return best;
}

}  // namespace cpu
}  // namespace tf_fused_int8
