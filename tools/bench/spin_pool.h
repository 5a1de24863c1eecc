// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The TF-free benches' second thread (tools/bench/bench_core.cc,
// tools/bench/bench_sequence.cc): a helper that spins between calls, as
// cc/tf/pool_parallel_for.cc's helpers do while a model runs.
#ifndef TF_FUSED_INT8_TOOLS_BENCH_SPIN_POOL_H_
#define TF_FUSED_INT8_TOOLS_BENCH_SPIN_POOL_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <thread>

namespace tf_fused_int8 {
namespace bench {

// One spinning helper thread: each ParallelFor call publishes [0, total);
// the caller claims units from the front and the helper from the back, as
// cc/tf/pool_parallel_for.cc's caller and helpers do (so each thread keeps
// the rows it wrote from one call to the next: with both claiming from the
// front, the padded input's rows, copied by one thread, were read by the
// other, and ResNet-50's 3x3 layers at batch 8 on amx looked 0-5% faster
// gathered than padded on two threads, where TF's pool measured them 6-35%
// slower gathered; claimed from both ends, 13-14% slower, best of 3).
// One atomic word holds the call number and both ends, so a helper that is
// late from one call can never take or count a unit of the next: with a
// plain counter reset per call, a caller preempted between resetting the
// claim and done counters let a helper's finished unit be zeroed, and the
// caller then waited forever (seen on a 2-vCPU VM, under perf record too).
class SpinPool {
 public:
  SpinPool() : helper_([this] { Loop(); }) {}
  ~SpinPool() {
    stop_.store(true);
    helper_.join();
  }
  void Run(int64_t total, const std::function<void(int64_t, int64_t)>& fn) {
    // No unit of the previous call is running or can be claimed here.
    if (total >= (int64_t{1} << kBits)) std::abort();
    fn_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t call = ((ends_.load(std::memory_order_relaxed) >> (2 * kBits)) + 1) &
                          ((uint64_t{1} << (64 - 2 * kBits)) - 1);
    ends_.store(call << (2 * kBits) | static_cast<uint64_t>(total) << kBits,
                std::memory_order_release);
    Work(call, /*from_front=*/true);
    while (done_.load(std::memory_order_acquire) < total) {
    }
  }

 private:
  // Claims and runs units of call `call`, from the front or the back, until
  // none is left or another call has begun.
  void Work(uint64_t call, bool from_front) {
    const uint64_t mask = (uint64_t{1} << kBits) - 1;
    uint64_t v = ends_.load(std::memory_order_acquire);
    for (;;) {
      if ((v >> (2 * kBits)) != call) return;
      const uint64_t front = v & mask, back = (v >> kBits) & mask;
      if (front >= back) return;
      const uint64_t next = from_front ? v + 1 : v - (uint64_t{1} << kBits);
      if (!ends_.compare_exchange_weak(v, next, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        continue;
      }
      const int64_t b = static_cast<int64_t>(from_front ? front : back - 1);
      (*fn_)(b, b + 1);
      done_.fetch_add(1, std::memory_order_acq_rel);
      v = ends_.load(std::memory_order_acquire);
    }
  }
  void Loop() {
    uint64_t seen = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      const uint64_t call = ends_.load(std::memory_order_acquire) >> (2 * kBits);
      if (call != seen) {
        seen = call;
        Work(call, /*from_front=*/false);
      }
    }
  }
  std::atomic<bool> stop_{false};
  static constexpr int kBits = 24;
  // call << 48 | back << 24 | front: units [front, back) are unclaimed.
  std::atomic<uint64_t> ends_{0};
  std::atomic<int64_t> done_{0};
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  std::thread helper_;
};

}  // namespace bench
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_TOOLS_BENCH_SPIN_POOL_H_
