// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Self-scheduling, with helpers that stay hot between calls.
//
//  * Self-scheduling: a call's range is cut into units claimed one at a
//    time by the calling thread (from the front) and by helper tasks on
//    TF's pool (from the back; the same split from one layer to the next
//    keeps each thread on the rows it wrote: MobileNetV2 batch 1, 2
//    threads, TF session, Zen 4 VM, five alternated runs: 2.66-3.20 ->
//    2.24-3.00 ms). The caller returns as soon as every unit is done, whether
//    or not a helper ever started (a late helper finds no unit left and only
//    touches the shared, reference-counted state). A pool thread the OS
//    cannot run right now (the other core busy) costs nothing: the caller
//    does the work instead of waiting for it, which the static split of the
//    pool's own ParallelFor cannot do (on a 2-vCPU VM with the other vCPU
//    loaded, MobileNetV2 at batch 1 ran slower on 2 threads than on 1).
//  * Hot helpers: a helper that runs out of units does not return to the
//    pool at once; it spins for kSpinMicros waiting for the next call's
//    range, as XNNPACK's threads do inside TFLite. A model's convolutions
//    follow each other every few microseconds, and waking a sleeping pool
//    thread was measured at about 20 us on this project's VMs (an idle vCPU
//    has to be woken): MobileNetV2's 14x14x64 -> 384 pointwise layer ran in
//    36 us on one thread, 40 us on two with a wake-up per call, 20 us on
//    two with helpers spinning 2 ms. Before helpers yielded (below),
//    spinning long hurt the float ops that follow the int8 region (TF's
//    MatMul of MobileNetV2's head ran 0.25 ms on one thread and 0.88 ms on
//    two beside a 1 ms spin), and 100 us was the best of 0 / 100 / 150 /
//    1000 on whole models (2 threads, Zen 4 VM). With the yields, 1000 us
//    is better: a helper still spinning when the next model call starts
//    keeps its vCPU out of the halt state, whose wake-up (an IPI through
//    the hypervisor) TF pays twice per tf.function call (its inter-op
//    thread, then the caller): an empty tf.function call here took 370-460
//    us, 170-260 with a spinning process beside it. Xeon with AMX (KVM), 2
//    threads, batch 1, medians of 200 calls, 100 us -> 1000 us builds
//    alternated in separate processes: MobileNetV2 tf.function 2.30-2.34
//    -> 1.84-2.30 ms, its concrete function 2.05-2.14 -> 1.75-2.09,
//    InferenceRunner 1.65-1.76 -> 1.49-1.58, eager 2.05-2.25 -> 1.75-2.00;
//    the same model with a float Dense head (TF's MatMul after the int8
//    region) 3.03-3.25 -> 2.71-2.90, 2.85-3.05 -> 2.32-2.65, 2.33-2.40 ->
//    1.87-1.95, 2.82-2.87 -> 2.34-2.40; ResNet50 5.66-5.73 -> 4.73-5.38,
//    4.61 -> 4.40-4.50 through the runner; MobileNetV2 at batch 8 within
//    noise. 3000 us ran as 1000 (within 5%). The cost: after each call a
//    helper keeps a vCPU busy (yielding) for 1 ms.
//  * A spinning helper calls sched_yield every kYieldSpins pauses (about
//    10 us): on 2 vCPUs a thread that becomes runnable behind a spinning
//    helper (the caller back from a wait, TF's own threads) otherwise waits
//    for the helper's time slice. Measured in TF, Zen 4 VM, 2 threads,
//    batch 1, old and new alternated: 20 independent ops per tf.function,
//    28x28x144 -> 32 32-37 -> 21-28 us per op, 14x14x64 -> 384 44 -> 29 us;
//    MobileNetV2 3 of 4 runs faster, ResNet50 batch 8 unchanged. Yielding
//    every 64 pauses did as well on single layers, but MobileNetV2 batch 8
//    ran slower in 5 of 7 runs.
//  * Calls whose whole cost is below kInlineCycles run inline, unless a
//    helper is alive already (spinning after a recent call: nothing to
//    wake) and the cost is at least kHotInlineCycles; such a call splits
//    among the helpers alive and wakes none. MobileNetV2 batch 1, 2
//    threads, Zen 5 VM, the step profiler, old and new builds alternated
//    three times: its inline-sized steps (the 7x7x960 and stride-2
//    depthwise layers, the 7x7 average) went from 7.5-8.5% of the steps'
//    sum to 6.4-6.8% (73-96 -> 61-80 us); bench_core with a hot helper:
//    7x7x960 9.2 -> 6.8 us, 28x28x192 / 2 7.2 -> 4.8 us.
//  * One call at a time runs through a lock-free slot (FastSlot): no
//    allocation, no mutex, one atomic word that helpers spin on; a call that
//    finds it taken (another op on another thread) posts a range of its own as
//    before. Measured in TF before it (MobileNetV2 batch 1, two threads,
//    InferenceRunner, Zen 5 VM, per-call counters): each split call spent
//    0.28 us setting up its range (an allocated one, a mutex to
//    post it), 0.10 us removing it, and the helper took its first unit 0.40
//    us after the post, over 54 split calls a model call. The whole call,
//    medians of 3000, the two builds' .so alternated: InferenceRunner lower
//    in 13 of 14 pairs (616-666 against 646-678 us where both ran in a fast
//    period of the VM; the old build also read 840-1018 in 6 runs, the new
//    one never), a tf.function in 5 of 6 pairs (medians of the pairs 798
//    against 840 us). After it, a split call's setup took 0.05 us and the
//    helper's first unit came 0.16-0.20 us after the post.
#include "cc/tf/pool_parallel_for.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <sched.h>

#include "cc/core/split_range.h"

namespace tf_fused_int8 {
namespace {

constexpr int64_t kInlineCycles = 60000;
constexpr int64_t kHotInlineCycles = 15000;
constexpr int64_t kSpinMicros = 1000;
constexpr int kYieldSpins = 512;  // a power of two

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// One call's chunks (SplitRange, cc/core/split_range.h: the caller claims
// from the front and helpers from the back, so that from one call to the
// next the caller keeps the first units and the helper the last ones: a
// model's layers split their pixels the same way, so each thread mostly
// reads rows it wrote itself, in its own L2, instead of the other core's),
// and the caller's wait for the last of them.
class CallRange {
 public:
  SplitRange& Range() { return range_; }
  bool HasUnits() const { return range_.HasUnits(); }

  // Claims and runs chunks until none is left, and wakes the caller if it
  // sleeps on the last one (Wait).
  void Work(bool from_front) {
    if (range_.Work(from_front) && sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  }

  // Returns once every chunk of the published call has run (the last ones
  // may still be running on helpers): spins briefly, then sleeps until the
  // thread running the last one wakes it.
  void Wait() {
    for (int spins = 0; !range_.Done() && spins < 20000; ++spins) CpuRelax();
    if (range_.Done()) return;
    std::unique_lock<std::mutex> lock(mu_);
    sleeping_.store(true, std::memory_order_seq_cst);
    cv_.wait(lock, [&] { return range_.Done(); });
    sleeping_.store(false, std::memory_order_relaxed);
  }

 private:
  SplitRange range_;
  std::atomic<bool> sleeping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

// The range of one call at a time, without a lock or an allocation: the
// calls of a model follow each other from one thread, so nearly every call
// finds it free (a call that does not, another op's on another thread,
// posts a CallRange of its own instead).
class FastSlot {
 public:
  bool Acquire() {
    bool expected = false;
    return !busy_.load(std::memory_order_relaxed) &&
           busy_.compare_exchange_strong(expected, true, std::memory_order_acquire);
  }
  void Release() { busy_.store(false, std::memory_order_release); }
  CallRange& Call() { return call_; }

 private:
  std::atomic<bool> busy_{false};
  CallRange call_;
};

// TF_FUSED_INT8_SPLIT_SLOT=0 (read once) posts every call's range instead,
// so that the tests can run that path alone.
bool FastSlotEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("TF_FUSED_INT8_SPLIT_SLOT");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled;
}

// The ranges with units left, and the helpers waiting for one. One per
// process (all pools share it: a helper only ever runs units of ranges
// posted here, on whichever pool thread it is).
class Helpers {
 public:
  static Helpers& Get() {
    static Helpers* h = new Helpers();  // never destroyed: pool threads use it
    return *h;
  }

  void Post(const std::shared_ptr<CallRange>& r) {
    std::lock_guard<std::mutex> lock(mu_);
    open_.push_back(r);
    posted_.fetch_add(1, std::memory_order_release);
  }

  void Remove(const CallRange* r) {
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(std::remove_if(open_.begin(), open_.end(),
                               [r](const std::shared_ptr<CallRange>& o) {
                                 return o.get() == r || !o->HasUnits();
                               }),
                open_.end());
  }

  // Schedules helper tasks on `pool` until `want` helpers are alive
  // (spinning or running units). Counting the running ones matters: a
  // helper that has just finished the previous call's last unit is not
  // spinning yet, and a second helper scheduled then would spin beside it,
  // one thread more than the pool has cores (on 2 vCPUs: the caller and two
  // spinning helpers time-sliced on two cores; batch-1 layers then ran no
  // faster on two threads than on one, measured in TF, Zen 4 VM).
  void Ensure(int want, tensorflow::thread::ThreadPool* pool) {
    for (;;) {
      int alive = alive_.load(std::memory_order_seq_cst);
      if (alive >= want) return;
      if (alive_.compare_exchange_weak(alive, alive + 1,
                                       std::memory_order_seq_cst)) {
        pool->Schedule([] { Helpers::Get().Loop(); });
      }
    }
  }

  // Helper tasks scheduled and not yet ended (spinning or running units).
  int Alive() const { return alive_.load(std::memory_order_relaxed); }

  FastSlot& Fast() { return fast_; }

  // A helper task (alive_ already counts it): runs posted units, spins
  // kSpinMicros after the last.
  void Loop() {
    using Clock = std::chrono::steady_clock;
    for (;;) {
      auto deadline = Clock::now() + std::chrono::microseconds(kSpinMicros);
      uint64_t seen = ~uint64_t{0};
      for (int spins = 0;; ++spins) {
        if (fast_.Call().HasUnits()) {
          fast_.Call().Work(/*from_front=*/false);
          deadline = Clock::now() + std::chrono::microseconds(kSpinMicros);
          continue;
        }
        const uint64_t posted = posted_.load(std::memory_order_acquire);
        if (posted != seen) {
          seen = posted;
          std::shared_ptr<CallRange> r = Take();
          if (r != nullptr) {
            r->Work(/*from_front=*/false);
            deadline = Clock::now() + std::chrono::microseconds(kSpinMicros);
            seen = ~uint64_t{0};  // look again: more may be open
            continue;
          }
        }
        CpuRelax();
        if ((spins & 63) == 0 && Clock::now() > deadline) break;
        // Every few microseconds of spinning, give the core away if another
        // thread is waiting for it (kYieldSpins in the header comment).
        if ((spins & (kYieldSpins - 1)) == kYieldSpins - 1) sched_yield();
      }
      alive_.fetch_sub(1, std::memory_order_seq_cst);
      // A range posted after the last look may have counted this helper as
      // alive and scheduled none: look once more (Post happens before the
      // poster's Ensure reads alive_; this decrement before this Take).
      if (!fast_.Call().HasUnits() && Take() == nullptr) return;
      alive_.fetch_add(1, std::memory_order_seq_cst);
    }
  }

 private:
  std::shared_ptr<CallRange> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& r : open_) {
      if (r->HasUnits()) return r;
    }
    return nullptr;
  }

  FastSlot fast_;
  std::mutex mu_;
  std::vector<std::shared_ptr<CallRange>> open_;
  std::atomic<uint64_t> posted_{0};
  std::atomic<int> alive_{0};  // helper tasks scheduled and not yet ended
};

}  // namespace

void WakeHelpers(tensorflow::thread::ThreadPool* pool) {
  const int threads = pool->NumThreads();
  if (threads > 1) Helpers::Get().Ensure(threads - 1, pool);
}

ParallelFor PoolParallelFor(tensorflow::thread::ThreadPool* pool) {
  ParallelFor pf;
  pf.num_threads = pool->NumThreads();
  pf.run = [pool](int64_t total, int64_t cost_per_unit,
                  const std::function<void(int64_t, int64_t)>& fn) {
    const int threads = pool->NumThreads();
    const double work = static_cast<double>(total) * cost_per_unit;
    Helpers& helpers = Helpers::Get();
    // Small calls: split only among helpers already alive.
    const bool small = work < kInlineCycles;
    if (threads <= 1 || total <= 1 || work < kHotInlineCycles ||
        (small && helpers.Alive() == 0)) {
      fn(0, total);
      return;
    }
    // Units as the caller cut them, or about 8 a thread when there are many.
    const int64_t grain = std::max<int64_t>(1, total / (8 * int64_t{threads}));
    const int64_t chunks = (total + grain - 1) / grain;
    if (chunks > SplitRange::kMaxChunks) {  // beyond any pool's thread count
      fn(0, total);
      return;
    }
    const int want = static_cast<int>(std::min<int64_t>(threads - 1, chunks - 1));
    FastSlot& fast = helpers.Fast();
    const bool slot = FastSlotEnabled() && fast.Acquire();
    std::shared_ptr<CallRange> posted;
    CallRange* call = &fast.Call();
    if (!slot) {
      posted = std::make_shared<CallRange>();
      call = posted.get();
    }
    call->Range().Publish(total, grain, &fn);
    if (!slot) helpers.Post(posted);
    // Spinning helpers take the range at once; wake pool threads for the
    // rest (a helper woken needlessly finds nothing and spins out). A small
    // call wakes none.
    if (!small) helpers.Ensure(want, pool);
    call->Work(/*from_front=*/true);
    if (!slot) helpers.Remove(posted.get());
    call->Wait();
    if (slot) fast.Release();
    // From here on no unit runs: fn (the caller's) is never called again.
  };
  return pf;
}

}  // namespace tf_fused_int8
