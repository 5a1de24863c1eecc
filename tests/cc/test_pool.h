// Copyright tf-fused-int8 authors. Apache 2.0.
//
// A fixed set of worker threads for the C++ tests' parallel-fors
// (core_test's ThreadParallelFor and OddParallelFor). The tests used to start
// a std::thread per piece of every call: about 160,000 threads per native
// core_test run. Under qemu-user (tools/arm64_check.sh) each new guest thread
// costs time in proportion to the threads created before it (QOM lookups over
// every thread's CPU object), so the emulated runs slowed down as they went
// and once took 13 minutes and 8 GB for one path. Workers that are reused,
// as TF's intra-op pool reuses its threads, keep the thread count fixed.
//
// RunAll(tasks) runs every task on the workers and returns when all are
// done. The calling thread runs queued tasks while it waits, so a task may
// itself call RunAll (a nested parallel-for) without deadlock, and several
// threads may call RunAll at once.
#ifndef TF_FUSED_INT8_TESTS_CC_TEST_POOL_H_
#define TF_FUSED_INT8_TESTS_CC_TEST_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tf_fused_int8 {

class TestPool {
 public:
  // The process's pool: kWorkers threads, started on first use and never
  // stopped (they sleep when idle; the process exits with them).
  static TestPool& Get() {
    static TestPool* pool = new TestPool();
    return *pool;
  }

  void RunAll(std::vector<std::function<void()>> tasks) {
    if (tasks.empty()) return;
    auto batch = std::make_shared<Batch>();
    batch->left = tasks.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& t : tasks) {
        queue_.push_back([batch, t = std::move(t)] {
          t();
          std::lock_guard<std::mutex> done(batch->mu);
          if (--batch->left == 0) batch->cv.notify_all();
        });
      }
    }
    cv_.notify_all();
    // Help until the queue is empty, then wait for the batch's last tasks.
    for (;;) {
      std::function<void()> task;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (queue_.empty()) break;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
    std::unique_lock<std::mutex> lock(batch->mu);
    batch->cv.wait(lock, [&] { return batch->left == 0; });
  }

 private:
  static constexpr int kWorkers = 4;

  struct Batch {
    std::mutex mu;
    std::condition_variable cv;
    size_t left = 0;
  };

  TestPool() {
    for (int i = 0; i < kWorkers; ++i) {
      std::thread([this] { Work(); }).detach();
    }
  }

  void Work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_TESTS_CC_TEST_POOL_H_
