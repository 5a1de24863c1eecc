// Copyright tf-fused-int8 authors. Apache 2.0.
//
// One parallel call's chunks, claimed without a lock or an allocation: the
// caller claims from the front and helpers from the back (from one layer to
// the next each thread then keeps the rows it wrote, in its own core), one
// atomic word holding the call's number and both ends of the unclaimed
// chunks. So a helper late from one call can never claim or count a chunk
// of the next: with a plain counter reset per call, a caller preempted
// between resetting the claim and done counters let a helper's finished
// unit be zeroed, and the caller then waited forever (seen on a 2-vCPU VM).
// The fields beside the word are written before it is published and read
// only after a successful claim; the caller publishes again only once every
// chunk has run (Done), so they cannot change under a running chunk.
//
// Used by the TF pool's parallel-for (cc/tf/pool_parallel_for.cc) and by
// the TF-free benches' spinning helper (tools/bench/spin_pool.h), so the
// benches time the same protocol the op runs.
#ifndef TF_FUSED_INT8_CC_CORE_SPLIT_RANGE_H_
#define TF_FUSED_INT8_CC_CORE_SPLIT_RANGE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>

namespace tf_fused_int8 {

class SplitRange {
 public:
  static constexpr int kBits = 24;
  static constexpr int64_t kMaxChunks = (int64_t{1} << kBits) - 1;

  // Publishes [0, total) in chunks of `grain` (at most kMaxChunks chunks):
  // fn(begin, end) per chunk. Only once the previous call is Done().
  void Publish(int64_t total, int64_t grain,
               const std::function<void(int64_t, int64_t)>* fn) {
    total_ = total;
    grain_ = grain;
    fn_ = fn;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t chunks = static_cast<uint64_t>((total + grain - 1) / grain);
    const uint64_t call = ((word_.load(std::memory_order_relaxed) >> (2 * kBits)) + 1) &
                          ((uint64_t{1} << (64 - 2 * kBits)) - 1);
    // seq_cst, as HasUnits' load: a helper that stops looking (a counter of
    // live helpers decremented, then HasUnits) while a caller publishes
    // (this store, then that counter read) sees the chunks, or the caller
    // sees it gone (cc/tf/pool_parallel_for.cc).
    word_.store(call << (2 * kBits) | chunks << kBits, std::memory_order_seq_cst);
  }

  // Whether chunks are left to claim.
  bool HasUnits() const {
    const uint64_t v = word_.load(std::memory_order_seq_cst);
    return (v & kMask) < ((v >> kBits) & kMask);
  }

  // Claims and runs chunks until none is left. Returns true when this
  // thread finished the call's last chunk (Done() became true here).
  bool Work(bool from_front) {
    bool last = false;
    uint64_t v = word_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t front = v & kMask, back = (v >> kBits) & kMask;
      if (front >= back) return last;
      const uint64_t next = from_front ? v + 1 : v - (uint64_t{1} << kBits);
      if (!word_.compare_exchange_weak(v, next, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        continue;
      }
      const int64_t c = static_cast<int64_t>(from_front ? front : back - 1);
      const int64_t b = c * grain_;
      const int64_t e = std::min(total_, b + grain_);
      (*fn_)(b, e);
      if (done_.fetch_add(e - b, std::memory_order_seq_cst) + (e - b) == total_) last = true;
      v = word_.load(std::memory_order_acquire);
    }
  }

  // Every chunk of the published call has run.
  bool Done() const { return done_.load(std::memory_order_seq_cst) == total_; }

 private:
  static constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  // call << 2 kBits | back << kBits | front: chunks [front, back) unclaimed.
  std::atomic<uint64_t> word_{0};
  std::atomic<int64_t> done_{0};
  int64_t total_ = 0, grain_ = 1;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
};

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_SPLIT_RANGE_H_
