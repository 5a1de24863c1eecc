// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Autotuning options, the cache key, and the process-wide autotuning cache.
//
// Like TensorFlow's own conv autotuning, the first call with a new key times
// every candidate (cuDNN engine configurations, legacy algorithms) and keeps
// the fastest; later calls with the same key reuse that choice. Guarantees:
//
//   * the key holds the device and every parameter that can change which
//     plan is valid or fastest (see ConvKey);
//   * one process-wide map, safe for concurrent use; a key is tuned at most
//     once: concurrent first calls with the same key wait for the one that
//     tunes (different keys tune concurrently). Only transient failures (an
//     allocation that failed) are forgotten, so that a later call retries;
//   * bounded: at most `capacity` keys (kDefaultCapacity, 4096: far more
//     distinct convolutions than any model has); beyond that the oldest key
//     is evicted (first in, first out) and would be tuned again if it came
//     back. Each entry holds a few host-side cuDNN descriptors (kilobytes).
#ifndef TF_FUSED_INT8_CC_CORE_GPU_AUTOTUNE_CACHE_H_
#define TF_FUSED_INT8_CC_CORE_GPU_AUTOTUNE_CACHE_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "cc/core/conv_params.h"
#include "cc/core/gpu/status.h"

namespace tf_fused_int8 {
namespace gpu {

enum class PathChoice { kAuto, kGraph, kLegacy };
const char* PathChoiceName(PathChoice p);

// Which ConvLayouts (plan.h) autotuning may try: all, or one family.
enum class LayoutChoice { kAuto, kX4, kX32, kNhwc };
const char* LayoutChoiceName(LayoutChoice l);

// Everything a caller can choose about planning. FromEnvironment() reads:
//
//   TF_FUSED_INT8_GPU_AUTOTUNE=0|1   0: no timing; take the first candidate
//                                    that builds (cuDNN's heuristic first
//                                    choice). Unset: TF's own switch
//                                    TF_CUDNN_USE_AUTOTUNE, else on.
//   TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB=<n>   cuDNN workspace limit per
//                                    call, default 4096 (4 GiB).
//   TF_FUSED_INT8_GPU_PATH=auto|graph|legacy    force one cuDNN API (tests).
//   TF_FUSED_INT8_GPU_LAYOUT=auto|x4|x32|nhwc   force how the operands are
//                                    handed to cuDNN (tests; see ConvLayout).
//
// `deterministic` is the caller's (TF: tensorflow::OpDeterminismRequired()).
// Values that do not parse are ignored (defaults kept) and described in
// `warnings`.
struct GpuOptions {
  bool autotune = true;
  bool deterministic = false;
  int64_t workspace_limit_bytes = int64_t{4} << 30;
  PathChoice path = PathChoice::kAuto;
  LayoutChoice layout = LayoutChoice::kAuto;
  std::string warnings;

  // `getenv` is injectable for tests; nullptr means ::getenv.
  static GpuOptions FromEnvironment(
      bool deterministic,
      const std::function<const char*(const char*)>& getenv_fn = nullptr);
};

// The autotuning key. Every field changes which plans are valid or which is
// fastest: the device, the full geometry (including the exact paddings that
// SAME produced), the address alignment that the tensors were described with,
// and the options that filter candidates. The epilogue (scales, side input,
// activation) is not part of it: it runs in our own kernel, after cuDNN, and
// does not change the convolution plan.
struct ConvKey {
  int device = -1;  // CUDA device ordinal in this process
  int cc_major = 0, cc_minor = 0;
  int64_t batch = 0, in_h = 0, in_w = 0, in_c = 0;
  int64_t out_c = 0, filter_h = 0, filter_w = 0;
  int64_t stride_h = 0, stride_w = 0, dilation_h = 0, dilation_w = 0;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t alignment = 0;
  bool deterministic = false;
  bool autotune = true;
  int64_t workspace_limit_bytes = 0;
  PathChoice path = PathChoice::kAuto;
  LayoutChoice layout = LayoutChoice::kAuto;

  bool operator==(const ConvKey& o) const;
  bool operator!=(const ConvKey& o) const { return !(*this == o); }
  size_t Hash() const;
  std::string ToString() const;
};

ConvKey MakeConvKey(int device, int cc_major, int cc_minor,
                    const ConvGeometry& g, int64_t alignment,
                    const GpuOptions& options);

struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const { return k.Hash(); }
};

struct AutotuneStats {
  int64_t lookups = 0;
  int64_t hits = 0;       // found (possibly waiting for a concurrent tune)
  int64_t tunes = 0;      // tune functions run
  int64_t evictions = 0;
  int64_t size = 0;
};

// What a tune function returns. `transient` failures are not cached.
template <typename Value>
struct TuneResult {
  Status status;
  std::shared_ptr<const Value> value;
  bool transient = false;
};

template <typename Value>
class AutotuneCache {
 public:
  static constexpr size_t kDefaultCapacity = 4096;

  explicit AutotuneCache(size_t capacity = kDefaultCapacity)
      : capacity_(capacity == 0 ? 1 : capacity) {}
  AutotuneCache(const AutotuneCache&) = delete;
  AutotuneCache& operator=(const AutotuneCache&) = delete;

  // The cached result for `key`, running `tune` (outside every lock) if the
  // key is new. *tuned_now says whether this call ran it.
  TuneResult<Value> GetOrTune(const ConvKey& key,
                              const std::function<TuneResult<Value>()>& tune,
                              bool* tuned_now = nullptr) {
    std::shared_ptr<Slot> slot;
    bool tuner = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.lookups;
      auto it = map_.find(key);
      if (it != map_.end()) {
        ++stats_.hits;
        slot = it->second;
      } else {
        slot = std::make_shared<Slot>();
        map_.emplace(key, slot);
        order_.push_back(key);
        tuner = true;
        ++stats_.tunes;
        while (map_.size() > capacity_ && !order_.empty()) {
          const ConvKey oldest = order_.front();
          order_.pop_front();
          if (oldest == key) {  // never evict the entry being created
            order_.push_back(oldest);
            continue;
          }
          if (map_.erase(oldest) > 0) ++stats_.evictions;
        }
      }
    }
    if (tuned_now) *tuned_now = tuner;
    if (!tuner) {
      std::unique_lock<std::mutex> lock(slot->mu);
      slot->cv.wait(lock, [&] { return slot->done; });
      return slot->result;
    }
    TuneResult<Value> result = tune();
    if (result.status.ok() && result.value == nullptr) {
      result.status = Internal("autotuning returned no plan");
    }
    if (!result.status.ok() && result.transient) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end() && it->second == slot) {
        map_.erase(it);
        for (auto o = order_.begin(); o != order_.end(); ++o) {
          if (*o == key) {
            order_.erase(o);
            break;
          }
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->result = result;
      slot->done = true;
    }
    slot->cv.notify_all();
    return result;
  }

  AutotuneStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    AutotuneStats s = stats_;
    s.size = static_cast<int64_t>(map_.size());
    return s;
  }

  size_t capacity() const { return capacity_; }

  // Drops every entry (tests, and the harness between configurations).
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    order_.clear();
  }

 private:
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    TuneResult<Value> result;
  };

  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<ConvKey, std::shared_ptr<Slot>, ConvKeyHash> map_;
  std::deque<ConvKey> order_;
  AutotuneStats stats_;
};

}  // namespace gpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_GPU_AUTOTUNE_CACHE_H_
