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

#include "cc/core/split_range.h"

namespace tf_fused_int8 {
namespace bench {

// One spinning helper thread: each ParallelFor call publishes [0, total)
// in units of one, the caller claiming from the front and the helper from
// the back through the same lock-free range as cc/tf/pool_parallel_for.cc
// (SplitRange, cc/core/split_range.h), so each thread keeps the rows it
// wrote from one call to the next (with both claiming from the front, the
// padded input's rows, copied by one thread, were read by the other, and
// ResNet-50's 3x3 layers at batch 8 on amx looked 0-5% faster gathered than
// padded on two threads, where TF's pool measured them 6-35% slower
// gathered; claimed from both ends, 13-14% slower, best of 3).
class SpinPool {
 public:
  SpinPool() : helper_([this] { Loop(); }) {}
  ~SpinPool() {
    stop_.store(true);
    helper_.join();
  }
  void Run(int64_t total, const std::function<void(int64_t, int64_t)>& fn) {
    if (total > SplitRange::kMaxChunks) std::abort();
    range_.Publish(total, 1, &fn);
    range_.Work(/*from_front=*/true);
    while (!range_.Done()) {
    }
  }

 private:
  void Loop() {
    while (!stop_.load(std::memory_order_relaxed)) {
      if (range_.HasUnits()) range_.Work(/*from_front=*/false);
    }
  }
  std::atomic<bool> stop_{false};
  SplitRange range_;
  std::thread helper_;
};

}  // namespace bench
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_TOOLS_BENCH_SPIN_POOL_H_
