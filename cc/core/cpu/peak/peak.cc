// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The table of throughput loops and the timing around them (peak.h).
#include "cc/core/cpu/peak/peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

#if defined(__x86_64__)
bool HasAvx2() { return KernelPathSupported(KernelPath::kAvx2); }
bool HasAvx512Vnni() { return KernelPathSupported(KernelPath::kAvx512Vnni); }
#if defined(TF_FUSED_INT8_EMULATED_ISAS)
// core_test_emulated's build emulates the avxvnni and amx paths'
// instructions (BUILD); the loops below time the instructions themselves.
bool HasAvxVnni() { return false; }
bool HasAmx() { return false; }
#else
bool HasAvxVnni() { return KernelPathSupported(KernelPath::kAvxVnni); }
bool HasAmx() { return KernelPathSupported(KernelPath::kAmx); }
#endif

// ops_per_block: instructions per block x MACs (or FMAs) each x 2, or the
// outputs per block for the epilogue loops.
constexpr PeakLoop kLoops[] = {
    {"vpmaddwd_ymm", 12 * 16 * 2, HasAvx2, PeakVpmaddwdYmm},
    {"vpmaddubsw_ymm", 12 * 32 * 2, HasAvx2, PeakVpmaddubswYmm},
    {"vpdpbusd_ymm", 12 * 32 * 2, HasAvxVnni, PeakVpdpbusdYmm},
    {"vpdpbusd_zmm", 16 * 64 * 2, HasAvx512Vnni, PeakVpdpbusdZmm},
    {"vpdpwssd_zmm", 16 * 32 * 2, HasAvx512Vnni, PeakVpdpwssdZmm},
    {"fma_ymm", 12 * 8 * 2, HasAvx2, PeakFmaYmm},
    {"fma_zmm", 16 * 16 * 2, HasAvx512Vnni, PeakFmaZmm},
    {"tdpbssd", 4 * 16 * 16 * 64 * 2, HasAmx, PeakTdpbssd},
    {"tdpbssd_loads", 4 * 16 * 16 * 64 * 2, HasAmx, PeakTdpbssdLoads},
    // Outputs per block (one op each, see peak.h).
    {"epilogue_ymm", 2 * 32, HasAvx2, PeakEpilogueYmm},
    {"epilogue_zmm", 4 * 64, HasAvx512Vnni, PeakEpilogueZmm},
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

// Wall time of `threads` threads each running body(thread index), started
// together (they spin on a flag so that thread creation is not timed).
template <typename Body>
double TimeThreads(int threads, const Body& body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      body(t);
    });
  }
  while (ready.load() != threads - 1) {
  }
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  body(0);
  for (std::thread& th : pool) th.join();
  return Seconds(t0);
}

double TimeThreads(const PeakLoop& loop, int threads, int64_t iters) {
  return TimeThreads(threads, [&](int) { loop.run(iters); });
}

// A count for timed(count) (seconds of a run that repeats its work count
// times), from `count` up, at which one run lasts at least min_seconds / 4.
template <typename Timed>
int64_t Calibrate(int64_t count, double min_seconds, const Timed& timed) {
  for (;;) {
    const double dt = timed(count);
    if (dt >= min_seconds / 4 || count >= (int64_t{1} << 40)) return count;
    count = std::max(count * 2, static_cast<int64_t>(
                                    count * (min_seconds / 3) / std::max(dt, 1e-9)));
  }
}

// The best of five timed runs of rate() (the machines are shared: the best
// run is the one least disturbed).
template <typename Rate>
double BestOfFive(const Rate& rate) {
  double best = 0.0;
  for (int r = 0; r < 5; ++r) best = std::max(best, rate());
  return best;
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
  // Calibrated on one thread.
  const int64_t iters = Calibrate(
      1000, min_seconds, [&](int64_t n) { return TimeThreads(*loop, 1, n); });
  return BestOfFive([&] {
    return loop->ops_per_block * iters * threads / TimeThreads(*loop, threads, iters) / 1e9;
  });
}

double MeasureCopyGBps(int64_t src_bytes, int64_t dst_bytes, int threads,
                       double min_seconds) {
  constexpr int64_t kMaxBytes = int64_t{4} << 30;
  if (src_bytes < 1 || dst_bytes < 1 || src_bytes > kMaxBytes ||
      dst_bytes > kMaxBytes) {
    return -1.0;
  }
#if defined(__x86_64__)
  if (!HasAvx2()) return -2.0;
  threads = std::max(1, std::min(threads, 256));
  min_seconds = std::max(1e-3, std::min(min_seconds, 10.0));
  constexpr int64_t kChunk = 256;
  const int64_t share = kChunk * threads;
  const int64_t src_chunks = (src_bytes + share - 1) / share;  // a thread's
  const int64_t dst_chunks = (dst_bytes + share - 1) / share;
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  const size_t src_size = static_cast<size_t>(src_chunks * share);
  const size_t dst_size = static_cast<size_t>(dst_chunks * share);
  std::unique_ptr<uint8_t, Free> src(
      static_cast<uint8_t*>(std::aligned_alloc(64, src_size)));
  std::unique_ptr<uint8_t, Free> dst(
      static_cast<uint8_t*>(std::aligned_alloc(64, dst_size)));
  if (src == nullptr || dst == nullptr) return -1.0;
  std::memset(src.get(), 1, src_size);
  std::memset(dst.get(), 0, dst_size);
  int64_t reps = 1;
  const auto body = [&](int t) {
    const uint8_t* s = src.get() + t * src_chunks * kChunk;
    uint8_t* d = dst.get() + t * dst_chunks * kChunk;
    for (int64_t r = 0; r < reps; ++r) CopyChunksYmm(s, src_chunks, d, dst_chunks);
  };
  TimeThreads(threads, body);  // untimed: pages touched, caches filled
  reps = Calibrate(reps, min_seconds, [&](int64_t n) {
    reps = n;
    return TimeThreads(threads, body);
  });
  const double bytes = static_cast<double>(src_size + dst_size) * reps;
  return BestOfFive([&] { return bytes / TimeThreads(threads, body) / 1e9; });
#else
  (void)threads;
  (void)min_seconds;
  return -2.0;
#endif
}

}  // namespace cpu
}  // namespace tf_fused_int8
