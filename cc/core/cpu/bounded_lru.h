// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The bound and eviction order shared by the weight caches
// (gemm/packed_weights.cc, depthwise/depthwise.cc): entries kept most
// recently used first, at most max_entries of them and max_bytes of their
// declared sizes, least recently used evicted first. Not thread-safe: each
// cache holds its own mutex around every call (with its statistics).
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

  // The value of key, made the most recently used; nullptr if absent.
  Value* Find(const Key& key) {
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
    const auto found = index_.find(key);
    if (found != index_.end()) Erase(found->second);
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

  void Clear() {
    index_.clear();
    entries_.clear();
    bytes_ = 0;
  }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    Key key;
    Value value;
    int64_t bytes;
  };
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
};

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_BOUNDED_LRU_H_
