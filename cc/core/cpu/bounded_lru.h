// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The bound and eviction order shared by the weight caches
// (gemm/packed_weights.cc, depthwise/depthwise.cc): entries kept most
// recently used first, at most max_entries of them and max_bytes of their
// declared sizes, least recently used evicted first. Not thread-safe: each
// cache holds its own mutex around every call (with its statistics).
// Pinned entries (InsertPinned) are kept apart, outside both bounds: what the
// caches pack from a buffer that a live model owns (conv_params.h,
// WeightPin) stays as long as that model, however many models or bytes the
// process holds. With a bound, models evicted each other's packings on
// every call: six ResNet50s loaded in one process (318 GEMM layers, 282 MB
// of packings and pinned filters, against 256 entries and 256 MiB) took
// 18-19 ms a call instead of 11-12 (forced avx512vnni, two threads, a Xeon
// with AMX); the benchmark's models suite, which loads each model once per
// row, had timed that. The caches drop pinned entries with DropPinnedIf
// once their owner is gone.
// Lookups go through a hash index, not a walk of the list: a model calls its
// layers in the same order every time, so with a linear search each lookup
// found its entry last (the least recently used), after every other layer's
// (MobileNetV2: 35 GEMM and 18 depthwise entries walked per layer, two
// pointer chases per entry in memory the activations had just evicted).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_BOUNDED_LRU_H_
#define TF_FUSED_INT8_CC_CORE_CPU_BOUNDED_LRU_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <unordered_map>
#include <utility>

namespace tf_fused_int8 {
namespace cpu {

// Mixes v into a running hash h (the caches' key hashes).
inline size_t HashMix(size_t h, uint64_t v) {
  v *= 0x9e3779b97f4a7c15ull;
  v ^= v >> 32;
  return (h ^ static_cast<size_t>(v)) * 0x100000001b3ull;
}

// Key: equality comparable, Hash(key) its hash; Value: copyable or movable.
template <class Key, class Value, class Hash>
class BoundedLru {
 public:
  BoundedLru(int64_t max_entries, int64_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // The value of key (a bounded one made the most recently used); nullptr
  // if absent.
  Value* Find(const Key& key) {
    const auto pinned = pinned_.find(key);
    if (pinned != pinned_.end()) return &pinned->second.value;
    const auto found = index_.find(key);
    if (found == index_.end()) return nullptr;
    // splice keeps the iterator (and the index's copy of it) valid.
    entries_.splice(entries_.begin(), entries_, found->second);
    return &entries_.front().value;
  }

  // Puts value under key (replacing the key's entry, if any) as the most
  // recently used, first evicting the least recently used entries until
  // both bounds hold with it; a value larger than max_bytes alone is not
  // kept (the old entry is still dropped). Returns the number evicted.
  int64_t Insert(const Key& key, Value value, int64_t bytes) {
    Remove(key);
    if (bytes > max_bytes_) return 0;
    int64_t evicted = 0;
    while (!entries_.empty() &&
           (static_cast<int64_t>(entries_.size()) >= max_entries_ ||
            bytes_ + bytes > max_bytes_)) {
      Erase(std::prev(entries_.end()));
      ++evicted;
    }
    entries_.push_front(Entry{key, std::move(value), bytes});
    index_[key] = entries_.begin();
    bytes_ += bytes;
    return evicted;
  }

  // Puts value under key (replacing the key's entry, if any) as a pinned
  // entry: outside the bounds, kept until DropPinnedIf or Clear drops it.
  void InsertPinned(const Key& key, Value value, int64_t bytes) {
    Remove(key);
    pinned_.emplace(key, Pinned{std::move(value), bytes});
    pinned_bytes_ += bytes;
  }

  // Drops the pinned entries whose value drop(value) is true; returns how
  // many.
  template <class Pred>
  int64_t DropPinnedIf(const Pred& drop) {
    int64_t dropped = 0;
    for (auto it = pinned_.begin(); it != pinned_.end();) {
      if (drop(static_cast<const Value&>(it->second.value))) {
        pinned_bytes_ -= it->second.bytes;
        it = pinned_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    return dropped;
  }

  void Clear() {
    index_.clear();
    entries_.clear();
    bytes_ = 0;
    pinned_.clear();
    pinned_bytes_ = 0;
  }
  // Every entry, bounded and pinned, and their declared bytes.
  int64_t size() const {
    return static_cast<int64_t>(entries_.size() + pinned_.size());
  }
  int64_t bytes() const { return bytes_ + pinned_bytes_; }
  int64_t pinned_size() const { return static_cast<int64_t>(pinned_.size()); }

 private:
  struct Entry {
    Key key;
    Value value;
    int64_t bytes;
  };
  struct Pinned {
    Value value;
    int64_t bytes;
  };
  // Drops key's entry, bounded or pinned, if any.
  void Remove(const Key& key) {
    const auto found = index_.find(key);
    if (found != index_.end()) Erase(found->second);
    const auto pinned = pinned_.find(key);
    if (pinned != pinned_.end()) {
      pinned_bytes_ -= pinned->second.bytes;
      pinned_.erase(pinned);
    }
  }
  void Erase(typename std::list<Entry>::iterator it) {
    bytes_ -= it->bytes;
    index_.erase(it->key);
    entries_.erase(it);
  }

  const int64_t max_entries_, max_bytes_;
  std::list<Entry> entries_;  // most recently used first
  // Each entry's key -> its place in entries_.
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash> index_;
  int64_t bytes_ = 0;
  // Pinned entries: no order, no bound (class comment).
  std::unordered_map<Key, Pinned, Hash> pinned_;
  int64_t pinned_bytes_ = 0;
};

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_BOUNDED_LRU_H_
